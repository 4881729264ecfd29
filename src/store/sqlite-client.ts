/**
 * SqlClient over the embedded SQLite database (better-sqlite3). better-sqlite3 is synchronous and
 * SQLite has one connection here, so:
 *
 * - a statement runs at once, synchronously, and its result comes back as an already settled
 *   promise (the async wrapper costs a microtask, not a thread hop: routing an INVITE stays in
 *   the microseconds);
 * - a transaction holds the connection: `transaction(fn)` takes an async lock, runs BEGIN
 *   IMMEDIATE, awaits fn with a client bound to the transaction, then COMMIT (ROLLBACK when fn
 *   rejects, and the rejection is rethrown). Statements made meanwhile through the outer client
 *   wait for the lock, in the order they were made, so they never run inside someone else's
 *   transaction (and are never rolled back with it);
 * - `tx.transaction(fn)` inside a transaction is a SAVEPOINT, with the same lock one level down.
 *
 * Statements are prepared once per SQL text (a bounded cache: the call list builds its SQL from
 * fragments, so texts are many but finite).
 */
import type { Statement } from 'better-sqlite3';
import type { RunResult, SqlClient, SqlValue } from './sql-client.ts';
import type { Database } from './sqlite-driver.ts';

/** More distinct SQL texts than this and the cache starts over (the texts are finite, not few). */
const STATEMENT_CACHE_MAX = 512;

const NO_PARAMS: readonly SqlValue[] = [];

/** The connection and its statement cache, shared by the outer client and every transaction's client. */
class Connection {
  readonly #statements = new Map<string, Statement>();
  #savepoints = 0;

  constructor(readonly db: Database) {}

  statement(sql: string): Statement {
    let st = this.#statements.get(sql);
    if (st === undefined) {
      if (this.#statements.size >= STATEMENT_CACHE_MAX) this.#statements.clear();
      st = this.db.prepare(sql);
      this.#statements.set(sql, st);
    }
    return st;
  }

  nextSavepoint(): string {
    this.#savepoints += 1;
    return `sp_${this.#savepoints}`;
  }
}

/**
 * One level of the connection: the outer client (depth 0) or a transaction's client (depth 1, a
 * savepoint's: 2, ...). A level's statements run at once unless one of its own transactions is
 * open or waiting; then they queue behind it.
 */
class SqliteLevel implements SqlClient {
  readonly dialect = 'sqlite' as const;
  #busy = false;
  readonly #waiters: Array<() => void> = [];
  #ended = false;

  constructor(
    protected readonly conn: Connection,
    private readonly depth: number,
  ) {}

  all<T>(sql: string, params: readonly SqlValue[] = NO_PARAMS): Promise<T[]> {
    return this.#statementNow(() => this.conn.statement(sql).all(...params) as T[]);
  }

  get<T>(sql: string, params: readonly SqlValue[] = NO_PARAMS): Promise<T | undefined> {
    return this.#statementNow(() => this.conn.statement(sql).get(...params) as T | undefined);
  }

  run(sql: string, params: readonly SqlValue[] = NO_PARAMS): Promise<RunResult> {
    return this.#statementNow(() => ({ changes: this.conn.statement(sql).run(...params).changes }));
  }

  exec(sql: string): Promise<void> {
    return this.#statementNow(() => {
      this.conn.db.exec(sql);
    });
  }

  async transaction<T>(fn: (tx: SqlClient) => Promise<T>): Promise<T> {
    this.#checkOpen();
    await this.#acquire();
    try {
      this.#checkOpen();
      const savepoint = this.depth === 0 ? undefined : this.conn.nextSavepoint();
      this.conn.db.exec(savepoint === undefined ? 'BEGIN IMMEDIATE' : `SAVEPOINT ${savepoint}`);
      const inner = new SqliteLevel(this.conn, this.depth + 1);
      try {
        const result = await fn(inner);
        // Statements fn started but did not await run before the end (they were queued on inner).
        await inner.#drain();
        this.conn.db.exec(savepoint === undefined ? 'COMMIT' : `RELEASE ${savepoint}`);
        return result;
      } catch (err) {
        await inner.#drain().catch(() => undefined);
        this.#rollback(savepoint);
        throw err;
      } finally {
        inner.#ended = true;
      }
    } finally {
      this.#release();
    }
  }

  async close(): Promise<void> {
    if (this.depth !== 0) throw new Error('close() of a transaction: the transaction ends when its function returns');
    if (!this.conn.db.open) return;
    await this.#acquire();
    try {
      if (this.conn.db.open) this.conn.db.close();
    } finally {
      this.#release();
    }
  }

  #rollback(savepoint: string | undefined): void {
    if (savepoint === undefined) {
      // SQLite may already have rolled back by itself (e.g. SQLITE_FULL); then there is nothing to undo.
      if (this.conn.db.inTransaction) this.conn.db.exec('ROLLBACK');
    } else if (this.conn.db.inTransaction) {
      this.conn.db.exec(`ROLLBACK TO ${savepoint}; RELEASE ${savepoint}`);
    }
  }

  /** Runs a statement now when this level is free (the hot path), else once the lock is free. */
  #statementNow<R>(run: () => R): Promise<R> {
    if (this.#ended) return Promise.reject(new Error('statement on a transaction that has already ended'));
    if (!this.#busy) {
      try {
        return Promise.resolve(run());
      } catch (err) {
        return Promise.reject(err as Error);
      }
    }
    return this.#queued(run);
  }

  async #queued<R>(run: () => R): Promise<R> {
    await this.#acquire();
    try {
      this.#checkOpen();
      return run();
    } finally {
      this.#release();
    }
  }

  /** Resolves once every statement queued on this level so far has run. */
  async #drain(): Promise<void> {
    if (!this.#busy) return;
    await this.#acquire();
    this.#release();
  }

  #checkOpen(): void {
    if (this.#ended) throw new Error('statement on a transaction that has already ended');
  }

  #acquire(): Promise<void> {
    if (!this.#busy) {
      this.#busy = true;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.#waiters.push(resolve));
  }

  #release(): void {
    const next = this.#waiters.shift();
    if (next) next();
    else this.#busy = false;
  }
}

export class SqliteClient extends SqliteLevel {
  /** The raw handle, for what only SQLite has (pragmas, bulk loads, tests that read SQL directly). */
  readonly db: Database;

  constructor(db: Database) {
    const conn = new Connection(db);
    super(conn, 0);
    this.db = db;
  }
}
