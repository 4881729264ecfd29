/**
 * What an API key is made of (docs/api-keys.md): `cbk_` + 24 random bytes in base64url, stored as
 * its sha256 with its first characters in clear; and what the key repositories remember of keys.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { SqlClient } from './sql-client.ts';
import { newId, nowIso } from '../domain/ids.ts';

export const KEY_PREFIX = 'cbk_';
/** Characters of the key kept in clear (the prefix, to tell keys apart in lists and logs). */
const SHOWN_CHARACTERS = 10;

export const hashKey = (key: string): string => createHash('sha256').update(key).digest('hex');

/** A new random key. */
export const newApiKey = (): string => KEY_PREFIX + randomBytes(24).toString('base64url');

/** The organization a cached key belongs to (the fields of organizations.ts's Organization). */
interface KeyOrganization {
  id: string;
  name: string;
  created_at: string;
}

/**
 * What the repositories of one store remember about keys, shared with the repositories bound to
 * a transaction: `hits`, known keys (SQLite only, see OrganizationRepo.authenticate); `touched`,
 * when this process last wrote a key's last_used_at.
 */
export interface KeyCache {
  hits: Map<string, { org: KeyOrganization; keyId: string; until: number }>;
  touched: Map<string, number>;
}

export const newKeyCache = (): KeyCache => ({ hits: new Map(), touched: new Map() });

/** An API key as listed: never the key, nor its hash. */
export interface ApiKeyRecord {
  id: string;
  name: string;
  prefix: string;
  created_at: string;
  last_used_at: string | null;
}

/** Inserts a key of the organization; returns its record and the key (the only time it exists in clear). */
export async function insertApiKey(db: SqlClient, orgId: string, name: string): Promise<{ record: ApiKeyRecord; key: string }> {
  const key = newApiKey();
  const record: ApiKeyRecord = { id: newId(), name, prefix: key.slice(0, SHOWN_CHARACTERS), created_at: nowIso(), last_used_at: null };
  await db.run('INSERT INTO api_keys (id, org_id, key_hash, prefix, name, created_at) VALUES (?, ?, ?, ?, ?, ?)', [
    record.id,
    orgId,
    hashKey(key),
    record.prefix,
    record.name,
    record.created_at,
  ]);
  return { record, key };
}
