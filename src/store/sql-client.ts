/**
 * The one way repositories reach a database: asynchronous, so that the same repositories run on
 * the embedded SQLite (better-sqlite3, synchronous underneath) and on PostgreSQL (a network
 * round trip per query) without the daemon's main thread ever waiting on a socket
 * (docs/decisions.md, "Store: one set of repositories, two databases").
 *
 * SQL is written once, in the subset both dialects share:
 * - parameters are `?` (the PostgreSQL client numbers them `$1`, `$2`, ... outside quoted text);
 * - booleans are INTEGER 0/1, timestamps ISO-8601 TEXT, JSON documents TEXT, in both schemas, so
 *   a row maps to the same JavaScript values whatever the backend (64-bit integers come back as
 *   numbers from both);
 * - `INSERT ... ON CONFLICT ... DO NOTHING / DO UPDATE` and `RETURNING` (SQLite >= 3.35), never
 *   `INSERT OR IGNORE` / `INSERT OR REPLACE`;
 * - what only one dialect can say (SQLite's FTS5 MATCH, PostgreSQL's pg_trgm) is chosen by
 *   `dialect` in the repository, beside the portable statement.
 */

/** A value bound to a `?` parameter. Booleans are passed as 0/1. */
export type SqlValue = string | number | bigint | null | Buffer;

export interface RunResult {
  /** Rows inserted, updated or deleted by the statement. */
  changes: number;
}

export interface SqlClient {
  readonly dialect: 'sqlite' | 'postgres';
  /** Every row of a query. */
  all<T>(sql: string, params?: readonly SqlValue[]): Promise<T[]>;
  /** The first row of a query, or undefined. */
  get<T>(sql: string, params?: readonly SqlValue[]): Promise<T | undefined>;
  /** A statement that returns no rows (or whose rows are not wanted). */
  run(sql: string, params?: readonly SqlValue[]): Promise<RunResult>;
  /** Several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
  /**
   * Runs fn in one transaction on one connection: every statement fn makes through `tx` commits
   * together or none does (fn's rejection rolls back and is rethrown). Statements made through
   * the outer client while it runs wait for it to end on SQLite (one connection) and run on
   * another connection on PostgreSQL: never inside it.
   */
  transaction<T>(fn: (tx: SqlClient) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}
