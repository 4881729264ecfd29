/** Organizations and their API keys. Keys are stored as sha256 hashes only. */
import { createHash, randomBytes } from 'node:crypto';
import type { Db } from './db.ts';
import { newId, nowIso } from '../domain/ids.ts';

export interface Organization {
  id: string;
  name: string;
  created_at: string;
}

const KEY_PREFIX = 'cbk_';
/**
 * Known keys are remembered for a short while: hashing the key and querying SQLite on every
 * request was a sixth of an agent GET's CPU (bench/api). Only hits are cached, so a key created
 * by the CLI in another process works at once; a revoked key stops working within the TTL.
 */
const KEY_CACHE_TTL_MS = 30_000;
const KEY_CACHE_MAX = 10_000;
const hashKey = (key: string) => createHash('sha256').update(key).digest('hex');

export class OrganizationRepo {
  readonly #byId;
  readonly #byKeyHash;
  readonly #insertOrg;
  readonly #insertKey;
  readonly #count;
  readonly #keyCache = new Map<string, { org: Organization; until: number }>();

  constructor(private readonly db: Db) {
    this.#byId = db.prepare('SELECT id, name, created_at FROM organizations WHERE id = ?');
    this.#byKeyHash = db.prepare(
      'SELECT o.id, o.name, o.created_at FROM api_keys k JOIN organizations o ON o.id = k.org_id WHERE k.key_hash = ? AND k.revoked_at IS NULL',
    );
    this.#insertOrg = db.prepare('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?)');
    this.#insertKey = db.prepare('INSERT INTO api_keys (id, org_id, key_hash, prefix, created_at) VALUES (?, ?, ?, ?, ?)');
    this.#count = db.prepare('SELECT COUNT(*) AS n FROM api_keys WHERE revoked_at IS NULL');
  }

  get(id: string): Organization | undefined {
    return this.#byId.get(id) as Organization | undefined;
  }

  /** The organization a bearer key belongs to, or undefined for an unknown or revoked key. */
  byApiKey(key: string): Organization | undefined {
    if (!key.startsWith(KEY_PREFIX)) return undefined;
    const now = Date.now();
    const hit = this.#keyCache.get(key);
    if (hit && hit.until > now) return hit.org;
    const org = this.#byKeyHash.get(hashKey(key)) as Organization | undefined;
    if (!org) {
      this.#keyCache.delete(key);
      return undefined;
    }
    if (this.#keyCache.size >= KEY_CACHE_MAX) this.#keyCache.clear();
    this.#keyCache.set(key, { org, until: now + KEY_CACHE_TTL_MS });
    return org;
  }

  activeKeyCount(): number {
    return (this.#count.get() as { n: number }).n;
  }

  /** The oldest organization of that name (names are not unique; `keys create --org` reuses the oldest). */
  byName(name: string): Organization | undefined {
    return this.db.prepare('SELECT id, name, created_at FROM organizations WHERE name = ? ORDER BY created_at LIMIT 1').get(name) as Organization | undefined;
  }

  /** Creates an organization (or reuses the one of that name) and a new key; returns the key once. */
  createKey(orgName: string): { org: Organization; key: string } {
    return this.db.transaction(() => {
      let org = this.db.prepare('SELECT id, name, created_at FROM organizations WHERE name = ? ORDER BY created_at LIMIT 1').get(orgName) as
        | Organization
        | undefined;
      if (!org) {
        org = { id: newId(), name: orgName, created_at: nowIso() };
        this.#insertOrg.run(org.id, org.name, org.created_at);
      }
      const key = KEY_PREFIX + randomBytes(24).toString('base64url');
      this.#insertKey.run(newId(), org.id, hashKey(key), key.slice(0, 10), nowIso());
      return { org, key };
    })();
  }
}
