/**
 * The SQLite side of `migrate-store`: the installation's database file, opened so that nothing
 * else can use it while it is copied, its schema brought up to date, and what it holds described
 * (tables, columns, which tables SQLite itself derives).
 *
 * Consistency: the file is opened in SQLite's EXCLUSIVE locking mode and an exclusive transaction
 * is taken at once. A daemon that has the file open holds a shared lock on it (every WAL
 * connection does), so the command refuses a file in use instead of copying a snapshot of a
 * database that goes on changing (calls that end after the snapshot would be lost on the switch);
 * and once the lock is ours, a daemon started meanwhile cannot open the file until the copy ends.
 * The copy itself then reads inside one read transaction.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { migrate } from '../db.ts';
import { MIGRATIONS } from '../migrations.ts';
import { SqliteClient } from '../sqlite-client.ts';
import { Database } from '../sqlite-driver.ts';
import { MigrateStoreError } from './errors.ts';

/** The database file's name in a data directory (src/store/db.ts opens the same). */
const DATABASE_FILE = 'callbridge.sqlite';

export interface SqliteSource {
  /** The database file. */
  file: string;
  /** The directory the file is in: the installation's data directory (its generated secrets). */
  dataDir: string;
  db: Database;
  close(): void;
}

/**
 * `sqlite:<path>`: a data directory, or the database file itself. Anything else is refused without
 * being repeated (it could be a URL with a password, given to the wrong flag).
 */
export function sqliteSourcePath(spec: string): string {
  const path = spec.startsWith('sqlite:') ? spec.slice('sqlite:'.length) : '';
  if (path === '') throw new MigrateStoreError('source', '--from must be sqlite:<data directory or database file>');
  return path;
}

/**
 * Opens the installation's database for the copy, its schema migrated as the daemon would at
 * start (an older installation works). Refuses a missing file, one that is not a SQLite
 * database, and one a running daemon has open.
 */
export async function openSqliteSource(path: string): Promise<SqliteSource> {
  if (!existsSync(path)) throw new MigrateStoreError('source', `no such file or directory: ${path}`);
  const file = statSync(path).isDirectory() ? join(path, DATABASE_FILE) : path;
  if (!existsSync(file)) throw new MigrateStoreError('source', `no callbridge database in ${path} (expected ${file})`);
  let db: Database;
  try {
    db = new Database(file, { fileMustExist: true });
  } catch (err) {
    throw new MigrateStoreError('source', `cannot open ${file}: ${(err as Error).message}`, { cause: err });
  }
  try {
    lockExclusively(db, file);
    const client = new SqliteClient(db);
    await migrate(client, MIGRATIONS).catch((err: unknown) => {
      throw new MigrateStoreError('source', `cannot bring ${file} up to date: ${(err as Error).message}`, { cause: err });
    });
  } catch (err) {
    db.close();
    throw err;
  }
  return { file, dataDir: dirname(file), db, close: () => db.close() };
}

function lockExclusively(db: Database, file: string): void {
  try {
    // No waiting: a lock held by a running daemon is not going away.
    db.pragma('busy_timeout = 0');
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
    db.exec('COMMIT');
  } catch (err) {
    const e = err as { code?: string; message?: string };
    if (e.code === 'SQLITE_BUSY' || e.code === 'SQLITE_LOCKED') {
      throw new MigrateStoreError('source', `${file} is in use (a callbridge daemon running on it?): stop it first, so that no call is lost after the copy`, { cause: err });
    }
    if (e.code === 'SQLITE_NOTADB') throw new MigrateStoreError('source', `${file} is not a SQLite database`, { cause: err });
    throw new MigrateStoreError('source', `cannot read ${file}: ${e.message ?? String(err)}`, { cause: err });
  }
}

export interface SourceTable {
  name: string;
  columns: string[];
}

/** The ordinary tables of the source (not SQLite's own, not virtual ones), with their columns in order. */
export function sourceTables(db: Database): SourceTable[] {
  const rows = db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name").all() as Array<{ name: string; sql: string | null }>;
  return rows
    .filter((r) => !/^\s*CREATE\s+VIRTUAL\s+TABLE/i.test(r.sql ?? ''))
    .map((r) => ({ name: r.name, columns: (db.prepare('SELECT name FROM pragma_table_info(?) ORDER BY cid').all(r.name) as Array<{ name: string }>).map((c) => c.name) }));
}

/**
 * The tables SQLite fills by itself: the virtual tables (FTS5) with their shadow tables
 * (`<virtual>_data`, `_idx`...), and every table a trigger inserts into (the search side table,
 * the call counters). What they hold is derived from other tables' rows.
 */
export function sqliteDerivedTables(db: Database): Set<string> {
  const derived = new Set<string>();
  const objects = db.prepare("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'trigger')").all() as Array<{ type: string; name: string; sql: string | null }>;
  const virtual = objects.filter((o) => o.type === 'table' && /^\s*CREATE\s+VIRTUAL\s+TABLE/i.test(o.sql ?? '')).map((o) => o.name);
  for (const o of objects) {
    if (o.type === 'table' && virtual.some((v) => o.name === v || o.name.startsWith(`${v}_`))) derived.add(o.name);
    if (o.type === 'trigger') for (const t of insertTargets(o.sql ?? '')) derived.add(t);
  }
  return derived;
}

/** The tables a trigger's (or trigger function's) body inserts into. */
export function insertTargets(body: string): string[] {
  return [...body.matchAll(/\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+"?([A-Za-z_][A-Za-z0-9_]*)"?/gi)].map((m) => m[1]!);
}

/** The newest schema version applied to the source. */
export function sqliteSchemaVersion(db: Database): number {
  return (db.prepare('SELECT coalesce(max(version), 0) AS v FROM schema_migrations').get() as { v: number }).v;
}
