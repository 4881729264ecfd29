/**
 * `callbridge migrate-store --from sqlite:<path> --to postgres://...`: moves a single-node
 * installation's SQLite database into an empty PostgreSQL database (docs/store-postgres.md,
 * "Moving a single node to PostgreSQL").
 *
 * Both schemas are brought up to date first (the SQLite migrations on the file, the PostgreSQL
 * migrations under their lock, as a node does at start) and must then be at the same version.
 * The tables are those of both schemas, read from the catalogs; the rows go over in one
 * PostgreSQL transaction, parents before children, and the row counts of every table are compared
 * before COMMIT. Tables the target's triggers fill (the call counters) are copied with those
 * triggers off (plan.ts says why), and compared with the source's row for row. Any failure rolls
 * the whole copy back: the target is left as it was, empty.
 */
import { PostgresClient, POSTGRES_MIGRATIONS, migratePostgres, PostgresStoreError, redactUrl } from '../postgres/index.ts';
import type { SqlClient } from '../sql-client.ts';
import type { Database } from '../sqlite-driver.ts';
import { countRows, countSourceRows, copyTable, tableRows } from './copy-table.ts';
import { MigrateStoreError } from './errors.ts';
import { planCopy, type CopyPlan } from './plan.ts';
import { postgresSchemaVersion, quoteIdent, readTargetSchema } from './postgres-target.ts';
import { checkSealedValues, ENCRYPTION_KEY_FILE, findSecret, TOKEN_SECRET_FILE, type SecretOrigin } from './secrets.ts';
import { openSqliteSource, sourceTables, sqliteDerivedTables, sqliteSchemaVersion, sqliteSourcePath, type SqliteSource } from './sqlite-source.ts';

export { MigrateStoreError, type MigrateStoreErrorCode } from './errors.ts';
export type { SecretOrigin } from './secrets.ts';

export interface MigrateStoreOptions {
  /** `sqlite:<data directory or database file>`. */
  from: string;
  /** `postgres://...` or `postgresql://...`. */
  to: string;
  /** The SQLite installation's configured secrets ('' = generated into its data directory). */
  configured: { encryptionKey: string; tokenSecret: string };
}

export interface TableResult {
  table: string;
  rows: number;
  /** Filled by the target's triggers in normal use: copied with them off, and compared row for row. */
  derived: boolean;
}

export interface MigrateStoreReport {
  /** The source database file. */
  file: string;
  /** The target, password hidden. */
  target: string;
  schemaVersion: number;
  tables: TableResult[];
  /** SQLite's own derived tables, absent from PostgreSQL (its search uses pg_trgm instead). */
  sqliteOnly: string[];
  /** Rows copied, all tables. */
  rows: number;
  ms: number;
  encryptionKey: SecretOrigin;
  tokenSecret: SecretOrigin;
  /** Sealed values (trunk passwords, carrier tokens) checked to open with the encryption key. */
  sealedValues: number;
}

const isPostgresScheme = (url: string) => /^postgres(ql)?:\/\//i.test(url);

/** How long the copy waits for the target's tables (a node running on the database holds them). */
const LOCK_TIMEOUT = '5s';

export async function migrateStore(options: MigrateStoreOptions): Promise<MigrateStoreReport> {
  const started = Date.now();
  if (!isPostgresScheme(options.to)) {
    throw new MigrateStoreError('target', `--to must be a postgres:// or postgresql:// URL, got ${redactUrl(options.to)}`);
  }
  const source = await openSqliteSource(sqliteSourcePath(options.from));
  try {
    const encryptionKey = findSecret(source.dataDir, ENCRYPTION_KEY_FILE, options.configured.encryptionKey);
    const tokenSecret = findSecret(source.dataDir, TOKEN_SECRET_FILE, options.configured.tokenSecret);
    const tables = sourceTables(source.db);
    const derived = sqliteDerivedTables(source.db);
    // Before the target is touched: a key that does not open them is the operator's to fix first.
    const sealedValues = checkSealedValues(
      source.db,
      tables.filter((t) => !derived.has(t.name)),
      encryptionKey,
    );
    const target = await openTarget(options.to);
    try {
      const schema = await readTargetSchema(target);
      const schemaVersion = await sameSchemaVersion(source.db, target);
      const plan = planCopy(tables, derived, schema);
      const results = await copyAll(source, target, plan).catch((err: unknown) => {
        if (err instanceof MigrateStoreError) throw err;
        // The server gone mid-copy, a statement refused...: PostgresStoreError's message names the server redacted.
        throw new MigrateStoreError('copy', `the copy failed, rolled back, nothing was written: ${(err as Error).message}`, { cause: err });
      });
      return {
        file: source.file,
        target: redactUrl(options.to),
        schemaVersion,
        tables: results,
        sqliteOnly: plan.sqliteOnly,
        rows: results.reduce((sum, t) => sum + t.rows, 0),
        ms: Date.now() - started,
        encryptionKey: encryptionKey.origin,
        tokenSecret: tokenSecret.origin,
        sealedValues,
      };
    } finally {
      await target.close();
    }
  } finally {
    source.close();
  }
}

/** The target, reachable and migrated to the current schema. */
async function openTarget(url: string): Promise<PostgresClient> {
  let client: PostgresClient;
  try {
    client = new PostgresClient({ url, poolSize: 2 });
  } catch (err) {
    throw new MigrateStoreError('target', (err as Error).message, { cause: err });
  }
  try {
    await migratePostgres(client, POSTGRES_MIGRATIONS);
    return client;
  } catch (err) {
    await client.close();
    // PostgresStoreError's messages name the server by its redacted URL.
    const why = err instanceof PostgresStoreError ? err.message : `${redactUrl(url)}: ${(err as Error).message}`;
    throw new MigrateStoreError('target', why, { cause: err });
  }
}

async function sameSchemaVersion(source: Database, target: SqlClient): Promise<number> {
  const sqlite = sqliteSchemaVersion(source);
  const postgres = await postgresSchemaVersion(target);
  if (sqlite !== postgres) {
    throw new MigrateStoreError('schema', `the SQLite database is at schema version ${sqlite}, the PostgreSQL database at ${postgres}: run both with the same callbridge`);
  }
  return sqlite;
}

/** The copy, in one transaction on each side: a snapshot read of the source, all-or-nothing on the target. */
async function copyAll(source: SqliteSource, target: PostgresClient, plan: CopyPlan): Promise<TableResult[]> {
  source.db.exec('BEGIN');
  try {
    return await target.transaction(async (tx) => {
      await lockAndCheckEmpty(tx, plan.targetTables);
      // Transactional like the rest: a rollback leaves the triggers on.
      for (const t of plan.triggersOff) await tx.exec(`ALTER TABLE ${quoteIdent(t)} DISABLE TRIGGER USER`);
      const results: TableResult[] = [];
      for (const table of plan.copied) {
        const rows = await copyTable(source.db, tx, table);
        const expected = countSourceRows(source.db, table.name);
        const arrived = await countRows(tx, table.name);
        if (rows !== expected || arrived !== expected) {
          throw new MigrateStoreError('verify', `${table.name}: the source has ${expected} rows, ${arrived} arrived; rolled back, nothing was written`);
        }
        if (table.derived) await sameRows(source.db, tx, table.name, table.columns);
        await advanceSequences(tx, table.name, table.targetColumns);
        results.push({ table: table.name, rows, derived: table.derived });
      }
      for (const t of plan.triggersOff) await tx.exec(`ALTER TABLE ${quoteIdent(t)} ENABLE TRIGGER USER`);
      return results;
    });
  } finally {
    source.db.exec('COMMIT');
  }
}

/**
 * Takes the target's tables for the copy (a node started meanwhile waits, then finds the data),
 * and refuses a database that holds any row: the copy never merges into existing data.
 */
async function lockAndCheckEmpty(tx: SqlClient, tables: readonly string[]): Promise<void> {
  if (tables.length === 0) return;
  await tx.exec(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
  try {
    await tx.exec(`LOCK TABLE ${tables.map(quoteIdent).join(', ')} IN EXCLUSIVE MODE`);
  } catch (err) {
    throw new MigrateStoreError('not-empty', `the PostgreSQL database's tables are in use (a callbridge node running on it?): ${(err as Error).message}`, { cause: err });
  }
  const holding: string[] = [];
  for (const t of tables) {
    if ((await tx.get(`SELECT 1 AS one FROM ${quoteIdent(t)} LIMIT 1`)) !== undefined) holding.push(t);
  }
  if (holding.length > 0) {
    throw new MigrateStoreError(
      'not-empty',
      `the PostgreSQL database already holds data (${holding.join(', ')}): migrate-store copies into an empty database only (was a node started on it? use a new database)`,
    );
  }
}

/** A column filled from a sequence continues past the copied values. */
async function advanceSequences(tx: SqlClient, table: string, columns: readonly { name: string; sequenced: boolean }[]): Promise<void> {
  for (const c of columns.filter((col) => col.sequenced)) {
    await tx.get(
      `SELECT setval(pg_get_serial_sequence(CAST(? AS TEXT), CAST(? AS TEXT)), max(${quoteIdent(c.name)})) AS v FROM ${quoteIdent(table)} HAVING max(${quoteIdent(c.name)}) IS NOT NULL`,
      [quoteIdent(table), c.name],
    );
  }
}

/** A derived table (the counters the daemon's totals come from) equal to the source's, row for row. */
async function sameRows(source: Database, tx: SqlClient, table: string, columns: readonly string[]): Promise<void> {
  const rows = await tableRows(source, tx, table, columns);
  const inTarget = new Set(rows.target);
  const differing = rows.source.filter((r) => !inTarget.has(r));
  if (differing.length > 0) {
    throw new MigrateStoreError('verify', `${table}: ${differing.length} row(s) of the source differ on the target (e.g. ${differing[0]}); rolled back, nothing was written`);
  }
}
