/**
 * Rows written the way a store of an older schema holds them, for the migration tests: they
 * migrate to a past version and must not go through today's repositories, whose statements name
 * the columns of the newest schema (api_keys.name came with a later migration).
 */
import { randomUUID } from 'node:crypto';
import type { SqlClient } from '../../src/store/index.ts';

/** An organization as migration 1 made them (id, name, created_at); its id. */
export async function insertOrganization(client: SqlClient, name: string): Promise<string> {
  const id = randomUUID();
  await client.run('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?)', [id, name, new Date().toISOString()]);
  return id;
}
