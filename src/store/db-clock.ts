/** The database's clock, for times several nodes compare (leases, due times). */
import type { SqlClient } from './sql-client.ts';

/** The database's clock in ms since the epoch, as SQL (each dialect its own way). */
export function dbNowMs(db: SqlClient): string {
  // SQLite: julianday's day count since 4714 BC, 2440587.5 of them before 1970 (ms resolution).
  return db.dialect === 'postgres' ? 'CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)' : "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";
}
