/**
 * The SqlClient of src/store/sql-client.ts on PostgreSQL, through node-postgres's pool
 * (docs/store-postgres.md). Statements are the portable SQL the repositories write: `?`
 * parameters are numbered here ($1..$n, placeholders.ts), rows come back with the values SQLite
 * would give (types.ts), failures as PostgresStoreError without the password (errors.ts).
 *
 * A statement on the client runs on whichever pooled connection is free; a transaction holds one
 * connection from BEGIN to COMMIT, so a statement made on the client while it runs goes to
 * another connection and neither sees nor joins it.
 */
import pg from 'pg';
import type { RunResult, SqlClient, SqlValue } from '../sql-client.ts';
import { openDedicatedSession, type DedicatedSession, type DedicatedSessionOptions } from './dedicated-session.ts';
import { PostgresStoreError, redactUrl, toStoreError } from './errors.ts';
import { rewritePlaceholders } from './placeholders.ts';
import { STORE_TYPES } from './types.ts';

export interface PostgresClientOptions {
  /** postgres://user:password@host:port/database?options (libpq's URL form). */
  url: string;
  /** Connections the pool may open; default 10. */
  poolSize?: number;
  /** How long to wait for a connection (a new one or a free pooled one), ms; default 10 s. */
  connectTimeoutMs?: number;
  /**
   * An idle pooled connection failed (the server restarted, the network dropped it): the pool
   * drops it and opens another when needed. Without a listener node-postgres would crash the
   * process on it; the default is to ignore it, the next statement reports any lasting failure.
   */
  onIdleError?: (err: PostgresStoreError) => void;
}

export const DEFAULT_POOL_SIZE = 10;
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** What the server shows in pg_stat_activity for our connections (a URL parameter overrides it). */
export const APPLICATION_NAME = 'callbridge';

type Queryable = pg.Pool | pg.PoolClient;

/** One statement with `?` parameters, its failure turned into a PostgresStoreError. */
async function query(on: Queryable, url: string, sql: string, params: readonly SqlValue[]): Promise<pg.QueryResult> {
  const { text, count } = rewritePlaceholders(sql);
  if (params.length !== count) {
    throw new PostgresStoreError('query', `the statement takes ${count} parameter(s), ${params.length} given: ${sql.slice(0, 120)}`, undefined, undefined);
  }
  try {
    return await on.query({ text, values: params as unknown[] });
  } catch (err) {
    throw toStoreError(err, url);
  }
}

/** Several statements, no parameters: the simple query protocol, which allows many at once. */
async function execute(on: Queryable, url: string, sql: string): Promise<void> {
  try {
    await on.query(sql);
  } catch (err) {
    throw toStoreError(err, url);
  }
}

/**
 * BEGIN, fn, COMMIT on one connection; ROLLBACK and rethrow when fn rejects. `broken` is called
 * when the connection cannot be trusted afterwards (ROLLBACK failed): the caller then discards
 * it instead of returning it to the pool.
 */
async function inTransaction<T>(conn: pg.PoolClient, url: string, fn: (tx: SqlClient) => Promise<T>, broken: (err: Error) => void): Promise<T> {
  try {
    await execute(conn, url, 'BEGIN');
  } catch (err) {
    broken(err as Error);
    throw err;
  }
  const tx = new ConnectionClient(conn, url, 1);
  try {
    const result = await fn(tx);
    await execute(conn, url, 'COMMIT');
    return result;
  } catch (err) {
    try {
      await conn.query('ROLLBACK');
    } catch (rollbackErr) {
      broken(rollbackErr as Error);
    }
    throw err;
  } finally {
    tx.end();
  }
}

/**
 * A SqlClient bound to one connection: the `tx` of a transaction (depth >= 1; a transaction
 * inside it is a SAVEPOINT), or a session outside any transaction (depth 0, withConnection).
 * Once its transaction or session is over it refuses statements: the connection is back in the
 * pool and belongs to someone else.
 */
class ConnectionClient implements SqlClient {
  readonly dialect = 'postgres' as const;
  private ended = false;
  private broken: Error | undefined;

  constructor(
    private readonly conn: pg.PoolClient,
    private readonly url: string,
    /** 0: no transaction open; 1: in BEGIN; n > 1: in savepoint sp_<n>. */
    private readonly depth: number,
  ) {}

  /** The connection failed in a way that leaves it unusable (see inTransaction). */
  get brokenBy(): Error | undefined {
    return this.broken;
  }

  end(): void {
    this.ended = true;
  }

  private open(): pg.PoolClient {
    if (this.ended) {
      throw new PostgresStoreError('closed', this.depth > 0 ? 'this transaction has ended: use the client it was started on' : 'this connection has been released', undefined, undefined);
    }
    return this.conn;
  }

  async all<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    return (await query(this.open(), this.url, sql, params)).rows as T[];
  }

  async get<T>(sql: string, params: readonly SqlValue[] = []): Promise<T | undefined> {
    return (await query(this.open(), this.url, sql, params)).rows[0] as T | undefined;
  }

  async run(sql: string, params: readonly SqlValue[] = []): Promise<RunResult> {
    return { changes: (await query(this.open(), this.url, sql, params)).rowCount ?? 0 };
  }

  async exec(sql: string): Promise<void> {
    await execute(this.open(), this.url, sql);
  }

  async transaction<T>(fn: (tx: SqlClient) => Promise<T>): Promise<T> {
    const conn = this.open();
    if (this.depth === 0) {
      return inTransaction(conn, this.url, fn, (err) => {
        this.broken = err;
      });
    }
    const savepoint = `sp_${this.depth + 1}`;
    await execute(conn, this.url, `SAVEPOINT ${savepoint}`);
    const inner = new ConnectionClient(conn, this.url, this.depth + 1);
    try {
      const result = await fn(inner);
      await execute(conn, this.url, `RELEASE SAVEPOINT ${savepoint}`);
      return result;
    } catch (err) {
      // Undo the savepoint's work only; the enclosing transaction goes on (or fails on its own
      // if the connection is gone).
      try {
        await conn.query(`ROLLBACK TO SAVEPOINT ${savepoint}`);
        await conn.query(`RELEASE SAVEPOINT ${savepoint}`);
      } catch {
        // The enclosing transaction's COMMIT reports it.
      }
      throw err;
    } finally {
      inner.end();
    }
  }

  async close(): Promise<void> {
    throw new PostgresStoreError('closed', 'close the PostgresClient, not a transaction or session of it', undefined, undefined);
  }
}

export class PostgresClient implements SqlClient {
  readonly dialect = 'postgres' as const;
  /** The URL with its password replaced, for logs. */
  readonly redactedUrl: string;
  private readonly url: string;
  private readonly pool: pg.Pool;
  private closed = false;

  constructor(options: PostgresClientOptions) {
    const { url } = options;
    let protocol: string;
    try {
      protocol = new URL(url).protocol;
    } catch {
      throw new Error(`the PostgreSQL store URL is not a URL: ${redactUrl(url)} (expected postgres://user:password@host:port/database)`);
    }
    if (protocol !== 'postgres:' && protocol !== 'postgresql:') {
      throw new Error(`the PostgreSQL store URL must start with postgres:// or postgresql://, got ${redactUrl(url)}`);
    }
    const poolSize = options.poolSize ?? DEFAULT_POOL_SIZE;
    if (!Number.isInteger(poolSize) || poolSize < 1) throw new Error(`the PostgreSQL pool size must be a positive integer, got ${poolSize}`);
    this.url = url;
    this.redactedUrl = redactUrl(url);
    this.pool = new pg.Pool({
      connectionString: url,
      max: poolSize,
      application_name: APPLICATION_NAME,
      connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      types: STORE_TYPES,
    });
    const onIdleError = options.onIdleError;
    this.pool.on('error', (err) => onIdleError?.(toStoreError(err, url)));
  }

  private live(): pg.Pool {
    if (this.closed) throw new PostgresStoreError('closed', `the PostgreSQL store ${this.redactedUrl} is closed`, undefined, undefined);
    return this.pool;
  }

  async all<T>(sql: string, params: readonly SqlValue[] = []): Promise<T[]> {
    return (await query(this.live(), this.url, sql, params)).rows as T[];
  }

  async get<T>(sql: string, params: readonly SqlValue[] = []): Promise<T | undefined> {
    return (await query(this.live(), this.url, sql, params)).rows[0] as T | undefined;
  }

  async run(sql: string, params: readonly SqlValue[] = []): Promise<RunResult> {
    return { changes: (await query(this.live(), this.url, sql, params)).rowCount ?? 0 };
  }

  async exec(sql: string): Promise<void> {
    await execute(this.live(), this.url, sql);
  }

  async transaction<T>(fn: (tx: SqlClient) => Promise<T>): Promise<T> {
    const conn = await this.acquire();
    let broken: Error | undefined;
    try {
      return await inTransaction(conn, this.url, fn, (err) => {
        broken = err;
      });
    } finally {
      // A connection whose ROLLBACK failed is closed rather than handed to the next caller.
      conn.release(broken);
    }
  }

  private async acquire(): Promise<pg.PoolClient> {
    const pool = this.live();
    try {
      return await pool.connect();
    } catch (err) {
      throw toStoreError(err, this.url);
    }
  }

  /**
   * fn on one dedicated connection outside any transaction, for what must span several
   * transactions on the same session (the migrations' advisory lock). fn must undo what it sets
   * on the session; if fn rejects, the connection is closed instead of going back to the pool,
   * so a lock or setting it left behind dies with it.
   */
  async withConnection<T>(fn: (session: SqlClient) => Promise<T>): Promise<T> {
    const conn = await this.acquire();
    const session = new ConnectionClient(conn, this.url, 0);
    let failed: Error | undefined;
    try {
      return await fn(session);
    } catch (err) {
      failed = err instanceof Error ? err : new Error(String(err));
      throw err;
    } finally {
      session.end();
      conn.release(failed ?? session.brokenBy);
    }
  }

  /**
   * A connection of its own, outside the pool, for session-level state held as long as this
   * process lives (dedicated-session.ts; the cluster roles' advisory locks).
   */
  openDedicatedSession(options: DedicatedSessionOptions): Promise<DedicatedSession> {
    this.live();
    return openDedicatedSession(this.url, APPLICATION_NAME, options);
  }

  /** Closes every connection (waiting for those in use to be released). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }
}
