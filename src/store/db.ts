/**
 * Opens the SQLite database in the data directory and brings its schema up to date; migrations
 * and the unique-violation test, which run over any SqlClient.
 * WAL for concurrent readers; synchronous=FULL so a committed write survives power loss, since
 * every write is committed before the API answers.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { MIGRATIONS, type Migration } from './migrations.ts';
import { isPostgresUniqueViolation, PostgresStoreError } from './postgres/errors.ts';
import type { SqlClient } from './sql-client.ts';
import { SqliteClient } from './sqlite-client.ts';
import { Database } from './sqlite-driver.ts';

export type Db = Database;

/** The largest database read through the memory map (larger ones: the rest by read()). */
const MMAP_BYTES = 4 * 1024 ** 3;

/**
 * SQLite's page cache, KiB. better-sqlite3 builds SQLite with 16,000 KiB per connection, and the
 * cache keeps every page a write touched until it is full: each call's record (row, indexes,
 * counters, search index) left ~1.5-1.8 KiB of the main thread's malloc heap behind, so the
 * daemon's RSS grew flood after flood of calls. Reads go through the memory map, so the cache
 * only holds pages written since the last WAL checkpoint; SQLite's own default size is plenty.
 */
export const PAGE_CACHE_KIB = 2000;

/** The data directory's database as a SqlClient, schema up to date. */
export async function openSqliteClient(dataDir: string, migrations: Migration[] = MIGRATIONS): Promise<SqliteClient> {
  const client = new SqliteClient(openDatabaseFile(dataDir));
  try {
    await migrate(client, migrations);
  } catch (err) {
    await client.close();
    throw err;
  }
  return client;
}

/** The data directory's database, its pragmas set, schema not migrated (openSqliteClient migrates). */
export function openDatabaseFile(dataDir: string): Db {
  const file = join(dataDir, 'callbridge.sqlite');
  restrictAccess(dataDir, file);
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  // Reads through a memory map instead of a read() per page: a list of a million calls counts
  // its total over tens of thousands of index pages (docs/calls.md, bench/calls). SQLite maps
  // only what the file holds; the pages are the OS page cache, shared, not the daemon's heap.
  db.pragma(`mmap_size = ${MMAP_BYTES}`);
  db.pragma(`cache_size = -${PAGE_CACHE_KIB}`);
  return db;
}

/**
 * The database holds transcripts, caller numbers and sealed secrets: the data directory is 0700
 * and the database files 0600, whatever the umask. The main file is created 0600 before SQLite
 * opens it, because SQLite gives the -wal and -shm files it creates later the main file's mode;
 * files of an older installation (0644) are tightened at every start.
 */
function restrictAccess(dataDir: string, file: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  try {
    chmodSync(dataDir, 0o700);
  } catch {
    // A directory someone else owns (a mounted volume): the files below are still 0600.
  }
  if (!existsSync(file)) closeSync(openSync(file, 'a', 0o600));
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    if (existsSync(f)) chmodSync(f, 0o600);
  }
}

/**
 * Applies the migrations not yet applied, each in its own transaction, recording each in
 * schema_migrations; refuses a database whose schema is newer than the newest migration known.
 */
export async function migrate(client: SqlClient, migrations: Migration[]): Promise<void> {
  await client.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)');
  const applied = new Set((await client.all<{ version: number }>('SELECT version FROM schema_migrations')).map((r) => r.version));
  const newest = Math.max(0, ...applied);
  const known = Math.max(0, ...migrations.map((m) => m.version));
  if (newest > known) {
    throw new Error(`database schema version ${newest} is newer than this callbridge knows (${known}); refusing to start`);
  }
  for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
    if (applied.has(m.version)) continue;
    await client.transaction(async (tx) => {
      await tx.exec(m.sql);
      await tx.run('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)', [m.version, m.name, new Date().toISOString()]);
    });
  }
}

/**
 * True when err is the database's UNIQUE constraint failure (optionally on the given column),
 * SQLite's or PostgreSQL's (SQLSTATE 23505, whose key columns isPostgresUniqueViolation reads).
 */
export function isUniqueViolation(err: unknown, column?: string): boolean {
  if (err instanceof PostgresStoreError) return isPostgresUniqueViolation(err, column);
  const e = err as { code?: string; message?: string };
  if (e?.code !== 'SQLITE_CONSTRAINT_UNIQUE' && e?.code !== 'SQLITE_CONSTRAINT_PRIMARYKEY') return false;
  return column === undefined || (e.message ?? '').includes(column);
}
