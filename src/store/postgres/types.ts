/**
 * How PostgreSQL's values become JavaScript values, so that a row reads the same as the same row
 * from SQLite (better-sqlite3): node-postgres returns int8 (bigint columns, count(*), sum of
 * integers) and numeric as strings, SQLite returns numbers. The parsers are given to each pool
 * (its `types` option), never set on node-postgres's global registry, so another user of `pg` in
 * the same process is not affected.
 *
 * int2/int4/float4/float8 are numbers already, text is text; callbridge's schema has no other
 * types (booleans are INTEGER 0/1, timestamps and JSON are TEXT: docs/store-postgres.md).
 */
import pg from 'pg';

const INT8_OID = 20;
const NUMERIC_OID = 1700;

/** An int8 as a number; one beyond 2^53 would come back wrong, so it fails instead. */
export function parseInt8(text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`PostgreSQL returned the 64-bit integer ${text}, beyond the largest exact JavaScript number (${Number.MAX_SAFE_INTEGER})`);
  }
  return n;
}

/** numeric as a double, as SQLite's REAL would hold it. */
function parseNumeric(text: string): number {
  return Number(text);
}

type GetTypeParser = pg.CustomTypesConfig['getTypeParser'];

const getTypeParser = ((oid: number, format?: 'text' | 'binary') => {
  if (format === undefined || format === 'text') {
    if (oid === INT8_OID) return parseInt8;
    if (oid === NUMERIC_OID) return parseNumeric;
  }
  return pg.types.getTypeParser(oid, format);
}) as GetTypeParser;

/** The `types` option of callbridge's pools. */
export const STORE_TYPES: pg.CustomTypesConfig = { getTypeParser };
