/**
 * The shape of a database schema, read from SQLite and from PostgreSQL in one comparable form:
 * per table, its columns in order (name, type family, nullability, default), its primary and
 * unique keys, its foreign keys, its named indexes and its triggers. What the two dialects do
 * differently on purpose (docs/store-postgres.md) is left out by the caller's `ignore`.
 *
 * Normalised so that equal schemas compare equal:
 * - types by family: INTEGER and BIGINT are `integer` (SQLite's INTEGER is 64-bit), TEXT `text`,
 *   REAL and DOUBLE PRECISION `real`;
 * - a primary key column is NOT NULL (SQLite lets a non-INTEGER primary key hold NULL, a
 *   historical quirk; callbridge never stores one);
 * - defaults without PostgreSQL's `::text` casts; partial index predicates without parentheses.
 */
import type { Database } from '../../src/store/sqlite-driver.ts';
import type { SqlClient } from '../../src/store/sql-client.ts';

export interface TableShape {
  columns: string[];
  keys: string[];
  foreignKeys: string[];
  indexes: string[];
  triggers: string[];
}

export type SchemaShape = Record<string, TableShape>;

export interface Ignore {
  tables?: (name: string) => boolean;
  indexes?: string[];
  triggers?: string[];
}

const TYPE_FAMILY: Record<string, string> = {
  integer: 'integer',
  bigint: 'integer',
  int: 'integer',
  smallint: 'integer',
  text: 'text',
  real: 'real',
  'double precision': 'real',
};

function typeFamily(declared: string): string {
  const t = declared.trim().toLowerCase();
  return TYPE_FAMILY[t] ?? `unknown type ${t}`;
}

const normalizeDefault = (d: string | null): string => (d === null ? '' : ` default ${d.replace(/::[a-z ]+/g, '')}`);
const normalizePredicate = (p: string | null | undefined): string => (p ? ` where ${p.replace(/[()]/g, '').replace(/\s+/g, ' ').trim().toLowerCase()}` : '');
const column = (name: string, type: string, notNull: boolean, dflt: string | null) => `${name} ${typeFamily(type)}${notNull ? ' not null' : ''}${normalizeDefault(dflt)}`;

function emptyTable(): TableShape {
  return { columns: [], keys: [], foreignKeys: [], indexes: [], triggers: [] };
}

function finish(shape: SchemaShape): SchemaShape {
  for (const t of Object.values(shape)) {
    t.keys.sort();
    t.foreignKeys.sort();
    t.indexes.sort();
    t.triggers.sort();
  }
  return shape;
}

export function sqliteShape(db: Database, ignore: Ignore = {}): SchemaShape {
  const shape: SchemaShape = {};
  const tables = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as { name: string }[];
  for (const { name } of tables) {
    if (ignore.tables?.(name)) continue;
    const t = emptyTable();
    shape[name] = t;
    const cols = db.prepare(`SELECT name, type, "notnull" AS nn, dflt_value, pk FROM pragma_table_info(?) ORDER BY cid`).all(name) as { name: string; type: string; nn: number; dflt_value: string | null; pk: number }[];
    t.columns = cols.map((c) => column(c.name, c.type, c.nn === 1 || c.pk > 0, c.dflt_value));
    const pk = cols.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk);
    if (pk.length > 0) t.keys.push(`primary (${pk.map((c) => c.name).join(', ')})`);
    const indexes = db.prepare('SELECT name, "unique" AS u, origin, partial FROM pragma_index_list(?)').all(name) as { name: string; u: number; origin: string; partial: number }[];
    for (const ix of indexes) {
      if (ix.origin === 'pk') continue;
      const cols = (db.prepare('SELECT name FROM pragma_index_info(?) ORDER BY seqno').all(ix.name) as { name: string }[]).map((c) => c.name).join(', ');
      const sql = (db.prepare("SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ?").get(ix.name) as { sql: string | null } | undefined)?.sql;
      const predicate = normalizePredicate(ix.partial === 1 && sql ? /\bWHERE\b([\s\S]*)$/i.exec(sql)?.[1] : undefined);
      if (ix.u === 1) t.keys.push(`unique (${cols})${predicate}`);
      if (ix.origin === 'c' && !ignore.indexes?.includes(ix.name)) t.indexes.push(`${ix.u === 1 ? 'unique ' : ''}${ix.name} (${cols})${predicate}`);
    }
    const fks = db.prepare('SELECT id, seq, "table" AS ref, "from" AS src, "to" AS dst, on_delete FROM pragma_foreign_key_list(?) ORDER BY id, seq').all(name) as { id: number; ref: string; src: string; dst: string; on_delete: string }[];
    const byId = new Map<number, typeof fks>();
    for (const fk of fks) byId.set(fk.id, [...(byId.get(fk.id) ?? []), fk]);
    for (const parts of byId.values()) {
      t.foreignKeys.push(`(${parts.map((p) => p.src).join(', ')}) -> ${parts[0]!.ref} (${parts.map((p) => p.dst).join(', ')}) on delete ${parts[0]!.on_delete.toLowerCase()}`);
    }
  }
  const triggers = db.prepare("SELECT name, tbl_name FROM sqlite_schema WHERE type = 'trigger'").all() as { name: string; tbl_name: string }[];
  for (const tr of triggers) {
    if (ignore.triggers?.includes(tr.name) || shape[tr.tbl_name] === undefined) continue;
    shape[tr.tbl_name]!.triggers.push(tr.name);
  }
  return finish(shape);
}

const ON_DELETE: Record<string, string> = { a: 'no action', r: 'restrict', c: 'cascade', n: 'set null', d: 'set default' };

export async function postgresShape(db: SqlClient, ignore: Ignore = {}): Promise<SchemaShape> {
  const shape: SchemaShape = {};
  const tables = await db.all<{ name: string }>("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name");
  for (const { name } of tables) {
    if (ignore.tables?.(name)) continue;
    shape[name] = emptyTable();
  }
  const cols = await db.all<{ tbl: string; name: string; type: string; nullable: string; dflt: string | null }>(
    `SELECT table_name AS tbl, column_name AS name, data_type AS type, is_nullable AS nullable, column_default AS dflt
     FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`,
  );
  for (const c of cols) shape[c.tbl]?.columns.push(column(c.name, c.type, c.nullable === 'NO', c.dflt));
  const attnames = (rel: string, keys: string) =>
    `(SELECT string_agg(a.attname::text, ', ' ORDER BY k.ord) FROM unnest(${keys}::int2[]) WITH ORDINALITY AS k (attnum, ord) JOIN pg_attribute a ON a.attrelid = ${rel} AND a.attnum = k.attnum)`;
  const indexes = await db.all<{ tbl: string; name: string; is_primary: boolean; is_unique: boolean; cols: string; predicate: string | null; backs_constraint: boolean }>(
    `SELECT t.relname AS tbl, ic.relname AS name, i.indisprimary AS is_primary, i.indisunique AS is_unique,
            ${attnames('i.indrelid', 'i.indkey')} AS cols, pg_get_expr(i.indpred, i.indrelid) AS predicate,
            EXISTS (SELECT 1 FROM pg_constraint con WHERE con.conindid = i.indexrelid) AS backs_constraint
     FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid
     JOIN pg_namespace ns ON ns.oid = t.relnamespace WHERE ns.nspname = 'public'`,
  );
  for (const ix of indexes) {
    const t = shape[ix.tbl];
    if (t === undefined) continue;
    const predicate = normalizePredicate(ix.predicate);
    if (ix.is_primary) t.keys.push(`primary (${ix.cols})`);
    else if (ix.is_unique) t.keys.push(`unique (${ix.cols})${predicate}`);
    if (!ix.backs_constraint && !ignore.indexes?.includes(ix.name)) t.indexes.push(`${ix.is_unique ? 'unique ' : ''}${ix.name} (${ix.cols})${predicate}`);
  }
  const fks = await db.all<{ tbl: string; ref: string; src: string; dst: string; on_delete: string }>(
    `SELECT t.relname AS tbl, r.relname AS ref, ${attnames('con.conrelid', 'con.conkey')} AS src, ${attnames('con.confrelid', 'con.confkey')} AS dst,
            con.confdeltype::text AS on_delete
     FROM pg_constraint con JOIN pg_class t ON t.oid = con.conrelid JOIN pg_class r ON r.oid = con.confrelid
     JOIN pg_namespace ns ON ns.oid = con.connamespace WHERE con.contype = 'f' AND ns.nspname = 'public'`,
  );
  for (const fk of fks) shape[fk.tbl]?.foreignKeys.push(`(${fk.src}) -> ${fk.ref} (${fk.dst}) on delete ${ON_DELETE[fk.on_delete] ?? fk.on_delete}`);
  const triggers = await db.all<{ tbl: string; name: string }>(
    `SELECT t.relname AS tbl, tg.tgname AS name FROM pg_trigger tg JOIN pg_class t ON t.oid = tg.tgrelid
     JOIN pg_namespace ns ON ns.oid = t.relnamespace WHERE ns.nspname = 'public' AND NOT tg.tgisinternal`,
  );
  for (const tr of triggers) {
    if (!ignore.triggers?.includes(tr.name)) shape[tr.tbl]?.triggers.push(tr.name);
  }
  return finish(shape);
}

/** Every difference between two shapes, one line each (empty: the same schema). */
export function schemaDifferences(a: SchemaShape, b: SchemaShape, names: [string, string] = ['sqlite', 'postgres']): string[] {
  const out: string[] = [];
  const tables = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
  for (const table of tables) {
    const ta = a[table];
    const tb = b[table];
    if (ta === undefined || tb === undefined) {
      out.push(`table ${table}: only in ${ta === undefined ? names[1] : names[0]}`);
      continue;
    }
    if (ta.columns.join('\n') !== tb.columns.join('\n')) {
      const onlyA = ta.columns.filter((c) => !tb.columns.includes(c));
      const onlyB = tb.columns.filter((c) => !ta.columns.includes(c));
      if (onlyA.length === 0 && onlyB.length === 0) out.push(`${table}: columns in another order (${names[0]}: ${ta.columns.join('; ')})`);
      for (const c of onlyA) out.push(`${table}.${c}: only in ${names[0]}`);
      for (const c of onlyB) out.push(`${table}.${c}: only in ${names[1]}`);
    }
    for (const part of ['keys', 'foreignKeys', 'indexes', 'triggers'] as const) {
      for (const x of ta[part].filter((v) => !tb[part].includes(v))) out.push(`${table} ${part}: ${x}: only in ${names[0]}`);
      for (const x of tb[part].filter((v) => !ta[part].includes(v))) out.push(`${table} ${part}: ${x}: only in ${names[1]}`);
    }
  }
  return out;
}
