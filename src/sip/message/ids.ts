/**
 * Identifiers a UA generates: Via branches (RFC 3261 8.1.1.7), tags (19.3) and Call-IDs
 * (8.1.1.4). All come from crypto.randomBytes, drawn from a pool refilled 4 KiB at a time so a
 * busy UA does not pay a syscall per identifier, and are written in base64url, whose alphabet
 * (A-Z a-z 0-9 - _) is all token characters: they need no quoting or escaping anywhere.
 */
import { randomBytes } from 'node:crypto';
import { BRANCH_COOKIE } from './headers.ts';

let pool = Buffer.alloc(0);
let offset = 0;

function random(n: number): string {
  if (offset + n > pool.length) {
    pool = randomBytes(4096);
    offset = 0;
  }
  const s = pool.toString('base64url', offset, offset + n);
  offset += n;
  return s;
}

/**
 * A branch: the magic cookie "z9hG4bK" and 96 random bits. RFC 3261 8.1.1.7 asks for a value
 * unique across space and time for every request a UA sends; 96 bits make a collision negligible.
 */
export function generateBranch(): string {
  return BRANCH_COOKIE + random(12);
}

/** A From/To tag: 72 random bits ("at least 32 bits of randomness", RFC 3261 19.3). */
export function generateTag(): string {
  return random(9);
}

/**
 * A Call-ID: 120 random bits, optionally "@host" (RFC 3261 8.1.1.4 recommends
 * cryptographically random identifiers; the host part is optional and leaks nothing when
 * omitted).
 */
export function generateCallId(host?: string): string {
  const id = random(15);
  return host ? `${id}@${host}` : id;
}
