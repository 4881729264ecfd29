/**
 * The PostgreSQL side of `migrate-store`: the schema as the catalog describes it after the
 * migrations ran (tables, columns, foreign keys, the tables its triggers fill, sequences), read
 * rather than listed here, so a table a later migration adds is copied without a change here.
 */
import type { SqlClient } from '../sql-client.ts';
import { insertTargets } from './sqlite-source.ts';

export interface TargetColumn {
  name: string;
  /** information_schema's data_type: text, integer, bigint... */
  type: string;
  /** The column takes its default from a sequence (serial or identity): advanced after the copy. */
  sequenced: boolean;
}

export interface TargetSchema {
  /** Base tables of the current schema, their columns in order. */
  tables: Map<string, TargetColumn[]>;
  /** child -> the tables its foreign keys reference (itself excluded). */
  references: Map<string, Set<string>>;
  /** Tables the target's triggers insert into (the call counters), derived from other tables' rows. */
  derived: Set<string>;
  /** Tables carrying the triggers that fill `derived` (calls). */
  deriving: Set<string>;
}

export async function readTargetSchema(db: SqlClient): Promise<TargetSchema> {
  const columns = await db.all<{ table_name: string; column_name: string; data_type: string; column_default: string | null; is_identity: string }>(
    `SELECT c.table_name, c.column_name, c.data_type, c.column_default, c.is_identity
       FROM information_schema.columns c
       JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
      WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
      ORDER BY c.table_name, c.ordinal_position`,
  );
  const tables = new Map<string, TargetColumn[]>();
  for (const c of columns) {
    const list = tables.get(c.table_name) ?? [];
    list.push({ name: c.column_name, type: c.data_type, sequenced: c.is_identity === 'YES' || /^nextval\(/.test(c.column_default ?? '') });
    tables.set(c.table_name, list);
  }
  const fks = await db.all<{ child: string; parent: string }>(
    `SELECT child.relname AS child, parent.relname AS parent
       FROM pg_constraint k
       JOIN pg_class child ON child.oid = k.conrelid
       JOIN pg_class parent ON parent.oid = k.confrelid
       JOIN pg_namespace n ON n.oid = child.relnamespace
      WHERE k.contype = 'f' AND n.nspname = current_schema()`,
  );
  const references = new Map<string, Set<string>>();
  for (const { child, parent } of fks) {
    if (child === parent) continue;
    references.set(child, (references.get(child) ?? new Set()).add(parent));
  }
  const triggers = await db.all<{ table_name: string; body: string }>(
    `SELECT DISTINCT c.relname AS table_name, p.prosrc AS body
       FROM pg_trigger t
       JOIN pg_proc p ON p.oid = t.tgfoid
       JOIN pg_class c ON c.oid = t.tgrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE NOT t.tgisinternal AND n.nspname = current_schema()`,
  );
  const derived = new Set<string>();
  const deriving = new Set<string>();
  for (const t of triggers) {
    const filled = insertTargets(t.body).filter((name) => tables.has(name));
    for (const name of filled) derived.add(name);
    if (filled.length > 0) deriving.add(t.table_name);
  }
  return { tables, references, derived, deriving };
}

/** The newest schema version applied to the target. */
export async function postgresSchemaVersion(db: SqlClient): Promise<number> {
  return (await db.get<{ v: number }>('SELECT coalesce(max(version), 0) AS v FROM schema_migrations'))!.v;
}

/**
 * The tables in an order where every table comes after those its foreign keys reference, so each
 * row's parents are already there when it is inserted (the keys are checked per statement, not
 * deferred). Ties keep the name order. A cycle cannot be ordered: it throws, naming its tables.
 */
export function foreignKeyOrder(tables: readonly string[], references: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  const wanted = new Set(tables);
  const done = new Set<string>();
  const order: string[] = [];
  const pending = [...tables].sort();
  while (pending.length > 0) {
    const ready = pending.filter((t) => [...(references.get(t) ?? [])].every((p) => done.has(p) || !wanted.has(p)));
    if (ready.length === 0) throw new Error(`the foreign keys of ${pending.join(', ')} form a cycle: no order inserts them`);
    for (const t of ready) {
      done.add(t);
      order.push(t);
      pending.splice(pending.indexOf(t), 1);
    }
  }
  return order;
}

/** An identifier for SQL text: the catalog's names, double-quoted. */
export const quoteIdent = (name: string): string => `"${name.replace(/"/g, '""')}"`;
