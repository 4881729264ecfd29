/** Organizations, and which one a bearer key belongs to. Keys are stored as sha256 hashes only (src/store/api-key-material.ts). */
import type { SqlClient } from './sql-client.ts';
import { newId, nowIso } from '../domain/ids.ts';
import { hashKey, insertApiKey, KEY_PREFIX, newKeyCache, type KeyCache } from './api-key-material.ts';

export type { KeyCache } from './api-key-material.ts';

export interface Organization {
  id: string;
  name: string;
  created_at: string;
}

/** The organization of a bearer key, and which of its keys it is. */
export interface KeyOwner {
  org: Organization;
  keyId: string;
}

/**
 * Known keys are remembered for a short while on SQLite: hashing the key and querying the
 * database on every request was a sixth of an agent GET's CPU (bench/api). Only hits are cached,
 * so a key created by the CLI in another process works at once; a key revoked through
 * ApiKeyRepo leaves the cache in the same call, and on SQLite only this process revokes. On
 * PostgreSQL another node may revoke, so nothing is cached: every request asks the database,
 * which decides (docs/api-keys.md).
 */
const KEY_CACHE_TTL_MS = 30_000;
const KEY_CACHE_MAX = 10_000;
/** last_used_at is written at most this often per key and process: a write per request would cost more than the request. */
export const LAST_USED_INTERVAL_MS = 60_000;

export class OrganizationRepo {
  readonly #db: SqlClient;
  readonly #keyCache: KeyCache;

  constructor(db: SqlClient, keyCache: KeyCache = newKeyCache()) {
    this.#db = db;
    this.#keyCache = keyCache;
  }

  get(id: string): Promise<Organization | undefined> {
    return this.#db.get<Organization>('SELECT id, name, created_at FROM organizations WHERE id = ?', [id]);
  }

  /** The organization a bearer key belongs to, or undefined for an unknown or revoked key. */
  async byApiKey(key: string): Promise<Organization | undefined> {
    return (await this.authenticate(key))?.org;
  }

  /** The organization and key id of a bearer key, or undefined for an unknown or revoked key; notes the key's use. */
  async authenticate(key: string): Promise<KeyOwner | undefined> {
    if (!key.startsWith(KEY_PREFIX)) return undefined;
    const now = Date.now();
    const cacheable = this.#db.dialect === 'sqlite';
    const hit = cacheable ? this.#keyCache.hits.get(key) : undefined;
    if (hit && hit.until > now) {
      this.#touch(hit.keyId, now);
      return { org: hit.org, keyId: hit.keyId };
    }
    const row = await this.#db.get<Organization & { key_id: string }>(
      'SELECT o.id, o.name, o.created_at, k.id AS key_id FROM api_keys k JOIN organizations o ON o.id = k.org_id WHERE k.key_hash = ? AND k.revoked_at IS NULL',
      [hashKey(key)],
    );
    if (!row) {
      this.#keyCache.hits.delete(key);
      return undefined;
    }
    const owner: KeyOwner = { org: { id: row.id, name: row.name, created_at: row.created_at }, keyId: row.key_id };
    if (cacheable) {
      if (this.#keyCache.hits.size >= KEY_CACHE_MAX) this.#keyCache.hits.clear();
      this.#keyCache.hits.set(key, { ...owner, until: now + KEY_CACHE_TTL_MS });
    }
    this.#touch(owner.keyId, now);
    return owner;
  }

  /**
   * Writes the key's last_used_at when this process has not for LAST_USED_INTERVAL_MS. Not
   * awaited: the request does not wait for a bookkeeping write, and a failed one (the store
   * closing, a lost connection) only leaves the time older.
   */
  #touch(keyId: string, now: number): void {
    const touched = this.#keyCache.touched;
    const last = touched.get(keyId);
    if (last !== undefined && now - last < LAST_USED_INTERVAL_MS) return;
    if (touched.size >= KEY_CACHE_MAX) touched.clear();
    touched.set(keyId, now);
    this.#db.run('UPDATE api_keys SET last_used_at = ? WHERE id = ?', [new Date(now).toISOString(), keyId]).catch(() => {});
  }

  async activeKeyCount(): Promise<number> {
    const row = await this.#db.get<{ n: number }>('SELECT COUNT(*) AS n FROM api_keys WHERE revoked_at IS NULL');
    return row?.n ?? 0;
  }

  /** The oldest organization of that name (names are not unique; `keys create --org` reuses the oldest). */
  byName(name: string): Promise<Organization | undefined> {
    return byName(this.#db, name);
  }

  /**
   * The first start's organization and key: created only when no active key exists, else
   * undefined. Several nodes starting together on one PostgreSQL database would each see no key
   * and each create an organization; a transaction-level advisory lock makes them take turns, so
   * the first creates and the others find its key. (SQLite: the transaction is the lock.)
   */
  createInitialKey(orgName: string): Promise<{ org: Organization; key: string } | undefined> {
    return this.#db.transaction(async (tx) => {
      if (tx.dialect === 'postgres') await tx.get(`SELECT pg_advisory_xact_lock(${INITIAL_KEY_LOCK})`);
      const row = await tx.get<{ n: number }>('SELECT COUNT(*) AS n FROM api_keys WHERE revoked_at IS NULL');
      if ((row?.n ?? 0) > 0) return undefined;
      return insertKey(tx, orgName, 'initial key');
    });
  }

  /** Creates an organization (or reuses the one of that name) and a new key; returns the key once. */
  createKey(orgName: string, keyName = ''): Promise<{ org: Organization; key: string }> {
    return this.#db.transaction((tx) => insertKey(tx, orgName, keyName));
  }
}

/** Advisory lock key of the first start's key creation ("cbinikey" as a 64-bit integer; not the migration's or a role's). */
const INITIAL_KEY_LOCK = '7161402280408475001';

async function insertKey(tx: SqlClient, orgName: string, keyName: string): Promise<{ org: Organization; key: string }> {
  let org = await byName(tx, orgName);
  if (!org) {
    org = { id: newId(), name: orgName, created_at: nowIso() };
    await tx.run('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?)', [org.id, org.name, org.created_at]);
  }
  const { key } = await insertApiKey(tx, org.id, keyName);
  return { org, key };
}

function byName(db: SqlClient, name: string): Promise<Organization | undefined> {
  return db.get<Organization>('SELECT id, name, created_at FROM organizations WHERE name = ? ORDER BY created_at LIMIT 1', [name]);
}
