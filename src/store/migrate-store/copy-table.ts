/**
 * Copies one table's rows from the SQLite source into the PostgreSQL transaction, in multi-row
 * INSERTs, and compares what arrived.
 *
 * Values: the source is read with safe integers (64-bit integers as BigInt, exact) and every value
 * is bound as a parameter of the target column it goes into, so PostgreSQL's own input of that
 * column's type converts it: SQLite's 0/1 into INTEGER (or BOOLEAN), its 64-bit integers into
 * BIGINT, its TEXT (timestamps, JSON) into TEXT as is, BLOBs into BYTEA. The target's columns are
 * those the PostgreSQL migrations declare, so the daemon reads the copied rows as it reads rows it
 * wrote itself (src/store/postgres/types.ts).
 */
import type { SqlClient, SqlValue } from '../sql-client.ts';
import type { Database } from '../sqlite-driver.ts';
import { MigrateStoreError } from './errors.ts';
import type { CopiedTable } from './plan.ts';
import { quoteIdent } from './postgres-target.ts';

/** PostgreSQL takes at most 65,535 parameters in one statement. */
const MAX_PARAMETERS = 65_535;
/** Rows per INSERT: past a few hundred the round trips saved no longer show, the statement text grows. */
const MAX_ROWS_PER_INSERT = 500;

/** Rows in a batch for a table of `columns` columns. */
export function rowsPerInsert(columns: number): number {
  return Math.max(1, Math.min(MAX_ROWS_PER_INSERT, Math.floor(MAX_PARAMETERS / columns)));
}

/** INSERT INTO t (c1, c2) VALUES (?, ?), (?, ?)... for `rows` rows. */
function insertSql(table: CopiedTable, rows: number): string {
  const tuple = `(${table.columns.map(() => '?').join(', ')})`;
  return `INSERT INTO ${quoteIdent(table.name)} (${table.columns.map(quoteIdent).join(', ')}) VALUES ${Array.from({ length: rows }, () => tuple).join(', ')}`;
}

/** Copies every row of the table (the source is inside its read transaction); the rows copied. */
export async function copyTable(source: Database, target: SqlClient, table: CopiedTable): Promise<number> {
  const select = source.prepare(`SELECT ${table.columns.map(quoteIdent).join(', ')} FROM ${quoteIdent(table.name)}`);
  select.raw(true);
  select.safeIntegers(true);
  const perInsert = rowsPerInsert(table.columns.length);
  const fullBatchSql = insertSql(table, perInsert);
  let batch: SqlValue[] = [];
  let rowsInBatch = 0;
  let copied = 0;
  const flush = async () => {
    if (rowsInBatch === 0) return;
    try {
      await target.run(rowsInBatch === perInsert ? fullBatchSql : insertSql(table, rowsInBatch), batch);
    } catch (err) {
      throw new MigrateStoreError('copy', `copying ${table.name} failed, nothing was written: ${(err as Error).message}`, { cause: err });
    }
    copied += rowsInBatch;
    batch = [];
    rowsInBatch = 0;
  };
  // The iterator holds the source's only connection; nothing else reads the source meanwhile.
  for (const row of select.iterate() as IterableIterator<SqlValue[]>) {
    for (const v of row) batch.push(v);
    rowsInBatch += 1;
    if (rowsInBatch === perInsert) await flush();
  }
  await flush();
  return copied;
}

export async function countRows(target: SqlClient, table: string): Promise<number> {
  return (await target.get<{ n: number }>(`SELECT count(*) AS n FROM ${quoteIdent(table)}`))!.n;
}

export function countSourceRows(source: Database, table: string): number {
  return (source.prepare(`SELECT count(*) AS n FROM ${quoteIdent(table)}`).get() as { n: number }).n;
}

/** A table's rows on both sides, as comparable text, sorted. */
export async function tableRows(source: Database, target: SqlClient, table: string, columns: readonly string[]): Promise<{ source: string[]; target: string[] }> {
  const sql = `SELECT ${columns.map(quoteIdent).join(', ')} FROM ${quoteIdent(table)}`;
  const encode = (row: Record<string, unknown>) => JSON.stringify(columns.map((c) => row[c]));
  return {
    source: (source.prepare(sql).all() as Array<Record<string, unknown>>).map(encode).sort(),
    target: (await target.all<Record<string, unknown>>(sql)).map(encode).sort(),
  };
}
