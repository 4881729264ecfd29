/**
 * Which tables `migrate-store` copies, in which order, and with which triggers off: the source's
 * tables matched against the target's, by name, with nothing listed by hand but the migrations'
 * own bookkeeping.
 */
import { MigrateStoreError } from './errors.ts';
import { foreignKeyOrder, type TargetColumn, type TargetSchema } from './postgres-target.ts';
import type { SourceTable } from './sqlite-source.ts';

/** Each database keeps its own record of the migrations applied to it (the versions are compared instead). */
export const BOOKKEEPING_TABLES: ReadonlySet<string> = new Set(['schema_migrations']);

export interface CopiedTable {
  name: string;
  /** Filled by the target's triggers in normal use (the call counters): copied with those triggers off. */
  derived: boolean;
  /** The source's columns, all of which the target has. */
  columns: string[];
  /** The target's description of those columns, in the same order. */
  targetColumns: TargetColumn[];
}

export interface CopyPlan {
  /** Copied row by row, parents before children. */
  copied: CopiedTable[];
  /**
   * Tables whose triggers fill the derived ones: those triggers are off during the copy, since the
   * derived rows are copied as they are. Left on, each call inserted would update its
   * organization's counter rows again, and in one transaction every update of a row adds a
   * version no one can prune yet: the copy slows down with the square of the calls (a 100,000-call
   * database did not finish in 10 minutes).
   */
  triggersOff: string[];
  /** SQLite's own derived tables (search index, FTS5), which PostgreSQL does without. */
  sqliteOnly: string[];
  /** Every table of the target that must be empty before the copy (all but the bookkeeping). */
  targetTables: string[];
}

export function planCopy(source: readonly SourceTable[], sqliteDerived: ReadonlySet<string>, target: TargetSchema): CopyPlan {
  const copied = new Map<string, CopiedTable>();
  const sqliteOnly: string[] = [];
  for (const table of source) {
    if (BOOKKEEPING_TABLES.has(table.name)) continue;
    const targetColumns = target.tables.get(table.name);
    if (targetColumns === undefined) {
      if (sqliteDerived.has(table.name)) {
        sqliteOnly.push(table.name);
        continue;
      }
      throw new MigrateStoreError('schema', `the SQLite table ${table.name} has no counterpart in the PostgreSQL schema: its rows would be lost`);
    }
    const missing = table.columns.filter((c) => !targetColumns.some((t) => t.name === c));
    if (missing.length > 0) {
      throw new MigrateStoreError('schema', `the PostgreSQL table ${table.name} has no column ${missing.join(', ')}: its values would be lost`);
    }
    copied.set(table.name, { name: table.name, derived: target.derived.has(table.name), columns: table.columns, targetColumns: table.columns.map((c) => targetColumns.find((t) => t.name === c)!) });
  }
  const underived = [...target.derived].filter((t) => !copied.has(t));
  if (underived.length > 0) {
    throw new MigrateStoreError('schema', `the PostgreSQL table ${underived.join(', ')} (filled by triggers) has no counterpart in the SQLite database to copy it from`);
  }
  let order: string[];
  try {
    order = foreignKeyOrder([...copied.keys()], target.references);
  } catch (err) {
    throw new MigrateStoreError('schema', (err as Error).message, { cause: err });
  }
  return {
    copied: order.map((name) => copied.get(name)!),
    triggersOff: [...target.deriving].filter((t) => copied.has(t)).sort(),
    sqliteOnly,
    targetTables: [...target.tables.keys()].filter((t) => !BOOKKEEPING_TABLES.has(t)).sort(),
  };
}
