/**
 * An organization's API keys (docs/api-keys.md): list, create (the key is returned once, only its
 * sha256 is stored), revoke. Which organization a bearer key belongs to is OrganizationRepo's
 * authenticate; both share the KeyCache so that a revocation here is seen there at once.
 */
import type { SqlClient } from './sql-client.ts';
import { nowIso } from '../domain/ids.ts';
import { insertApiKey, type ApiKeyRecord, type KeyCache } from './api-key-material.ts';

export type { ApiKeyRecord, KeyCache } from './api-key-material.ts';

export type RevokeResult = 'revoked' | 'not_found' | 'last_key';

const COLUMNS = 'id, name, prefix, created_at, last_used_at';

export class ApiKeyRepo {
  readonly #db: SqlClient;
  readonly #cache: KeyCache;

  constructor(db: SqlClient, cache: KeyCache) {
    this.#db = db;
    this.#cache = cache;
  }

  /** The organization's active keys, oldest first. */
  list(orgId: string, limit: number, offset: number): Promise<ApiKeyRecord[]> {
    return this.#db.all<ApiKeyRecord>(`SELECT ${COLUMNS} FROM api_keys WHERE org_id = ? AND revoked_at IS NULL ORDER BY created_at, id LIMIT ? OFFSET ?`, [orgId, limit, offset]);
  }

  create(orgId: string, name: string): Promise<{ record: ApiKeyRecord; key: string }> {
    return insertApiKey(this.#db, orgId, name);
  }

  /**
   * Revokes an active key of the organization, unless it is the organization's last one (which
   * would lock it out of the API for good). The count and the revocation are one transaction; on
   * PostgreSQL the organization's row is locked first, so two keys revoking each other at once
   * cannot both succeed (SQLite's write transaction is a lock already).
   */
  async revoke(orgId: string, id: string): Promise<RevokeResult> {
    const result = await this.#db.transaction(async (tx): Promise<RevokeResult> => {
      if (tx.dialect === 'postgres') await tx.get('SELECT id FROM organizations WHERE id = ? FOR UPDATE', [orgId]);
      const key = await tx.get<{ id: string }>('SELECT id FROM api_keys WHERE id = ? AND org_id = ? AND revoked_at IS NULL', [id, orgId]);
      if (!key) return 'not_found';
      const active = await tx.get<{ n: number | string }>('SELECT COUNT(*) AS n FROM api_keys WHERE org_id = ? AND revoked_at IS NULL', [orgId]);
      if (Number(active?.n ?? 0) <= 1) return 'last_key';
      await tx.run('UPDATE api_keys SET revoked_at = ? WHERE id = ?', [nowIso(), id]);
      return 'revoked';
    });
    // This process's cache forgets the key at once (on SQLite the only process that revokes).
    if (result === 'revoked') {
      for (const [key, hit] of this.#cache.hits) if (hit.keyId === id) this.#cache.hits.delete(key);
      this.#cache.touched.delete(id);
    }
    return result;
  }
}
