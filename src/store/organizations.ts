/** Organizations and their API keys. Keys are stored as sha256 hashes only. */
import { createHash, randomBytes } from 'node:crypto';
import type { SqlClient } from './sql-client.ts';
import { newId, nowIso } from '../domain/ids.ts';

export interface Organization {
  id: string;
  name: string;
  created_at: string;
}

const KEY_PREFIX = 'cbk_';
/**
 * Known keys are remembered for a short while: hashing the key and querying the database on every
 * request was a sixth of an agent GET's CPU (bench/api). Only hits are cached, so a key created
 * by the CLI in another process works at once; a revoked key stops working within the TTL.
 */
const KEY_CACHE_TTL_MS = 30_000;
const KEY_CACHE_MAX = 10_000;
const hashKey = (key: string) => createHash('sha256').update(key).digest('hex');

/** Known keys, shared by the store's repository and those bound to a transaction. */
export type KeyCache = Map<string, { org: Organization; until: number }>;

export class OrganizationRepo {
  readonly #db: SqlClient;
  readonly #keyCache: KeyCache;

  constructor(db: SqlClient, keyCache: KeyCache = new Map()) {
    this.#db = db;
    this.#keyCache = keyCache;
  }

  get(id: string): Promise<Organization | undefined> {
    return this.#db.get<Organization>('SELECT id, name, created_at FROM organizations WHERE id = ?', [id]);
  }

  /** The organization a bearer key belongs to, or undefined for an unknown or revoked key. */
  async byApiKey(key: string): Promise<Organization | undefined> {
    if (!key.startsWith(KEY_PREFIX)) return undefined;
    const now = Date.now();
    const hit = this.#keyCache.get(key);
    if (hit && hit.until > now) return hit.org;
    const org = await this.#db.get<Organization>(
      'SELECT o.id, o.name, o.created_at FROM api_keys k JOIN organizations o ON o.id = k.org_id WHERE k.key_hash = ? AND k.revoked_at IS NULL',
      [hashKey(key)],
    );
    if (!org) {
      this.#keyCache.delete(key);
      return undefined;
    }
    if (this.#keyCache.size >= KEY_CACHE_MAX) this.#keyCache.clear();
    this.#keyCache.set(key, { org, until: now + KEY_CACHE_TTL_MS });
    return org;
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
      return insertKey(tx, orgName);
    });
  }

  /** Creates an organization (or reuses the one of that name) and a new key; returns the key once. */
  createKey(orgName: string): Promise<{ org: Organization; key: string }> {
    return this.#db.transaction((tx) => insertKey(tx, orgName));
  }
}

/** Advisory lock key of the first start's key creation ("cbinikey" as a 64-bit integer; not the migration's or a role's). */
const INITIAL_KEY_LOCK = '7161402280408475001';

async function insertKey(tx: SqlClient, orgName: string): Promise<{ org: Organization; key: string }> {
  let org = await byName(tx, orgName);
  if (!org) {
    org = { id: newId(), name: orgName, created_at: nowIso() };
    await tx.run('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?)', [org.id, org.name, org.created_at]);
  }
  const key = KEY_PREFIX + randomBytes(24).toString('base64url');
  await tx.run('INSERT INTO api_keys (id, org_id, key_hash, prefix, created_at) VALUES (?, ?, ?, ?, ?)', [newId(), org.id, hashKey(key), key.slice(0, 10), nowIso()]);
  return { org, key };
}

function byName(db: SqlClient, name: string): Promise<Organization | undefined> {
  return db.get<Organization>('SELECT id, name, created_at FROM organizations WHERE name = ? ORDER BY created_at LIMIT 1', [name]);
}
