/**
 * Brings a PostgreSQL database's schema up to date, as src/store/db.ts's migrate() does for
 * SQLite: the same schema_migrations table, each migration in a transaction of its own, and a
 * refusal to start on a database newer than this code.
 *
 * Several nodes may start at once against one database: the whole run holds a session-level
 * advisory lock (MIGRATION_LOCK_KEY) on one connection, so one node migrates while the others
 * wait on the lock, then find every version applied and do nothing. A node that dies while
 * holding it loses its connection, and with it the lock.
 */
import type { Migration } from '../migrations.ts';
import type { PostgresClient } from './client.ts';
import { POSTGRES_MIGRATIONS } from './migrations.ts';

/**
 * The advisory lock key of schema migrations: the bytes of the ASCII text "cbschema" read as a
 * big-endian 64-bit integer (0x6362736368656d61). Other once-per-cluster work of callbridge takes
 * other keys; an application sharing the database must not use this one.
 */
export const MIGRATION_LOCK_KEY = '7161413228262944097';

/** Applies the migrations the database does not have yet; returns their versions, in order. */
export async function migratePostgres(client: PostgresClient, migrations: Migration[] = POSTGRES_MIGRATIONS): Promise<number[]> {
  return client.withConnection(async (session) => {
    // The key is a literal: a bigint parameter would need a cast anyway, and it never changes.
    await session.exec(`SELECT pg_advisory_lock(${MIGRATION_LOCK_KEY})`);
    // Past here a failure rejects withConnection, which closes the connection instead of
    // returning it to the pool: the lock goes with it.
    await session.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)');
    const rows = await session.all<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((r) => r.version));
    const newest = Math.max(0, ...applied);
    const known = Math.max(0, ...migrations.map((m) => m.version));
    if (newest > known) {
      throw new Error(`database schema version ${newest} is newer than this callbridge knows (${known}); refusing to start`);
    }
    const done: number[] = [];
    for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
      if (applied.has(m.version)) continue;
      await session.transaction(async (tx) => {
        await tx.exec(m.sql);
        await tx.run('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)', [m.version, m.name, new Date().toISOString()]);
      });
      done.push(m.version);
    }
    await session.exec(`SELECT pg_advisory_unlock(${MIGRATION_LOCK_KEY})`);
    return done;
  });
}
