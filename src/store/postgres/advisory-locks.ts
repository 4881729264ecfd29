/**
 * Holds named PostgreSQL session-level advisory locks (`pg_try_advisory_lock`) on one dedicated
 * connection for as long as that connection lives: what only one node of a cluster may do at a
 * time runs on the node holding its lock (src/store/cluster-roles.ts; docs/store-postgres.md,
 * "Once per cluster").
 *
 * No election of our own: the server grants each key to one session, and drops it with the
 * session. A holder that dies loses its connection, so the lock frees itself and another node's
 * next try wins. Every `pollMs`, a node tries the keys it does not hold; one that holds keys
 * checks its connection instead (a `SELECT 1`, failing after `pollMs`). The connection's loss
 * (the server ended it, restarted, a check failed or timed out) counts as losing every lock at
 * once: the listeners hear it before anything is awaited, so the work stops before another node
 * could be granted the lock; the connection is then closed and the next round starts afresh.
 */
import type { DedicatedSession } from './dedicated-session.ts';
import type { PostgresStoreError } from './errors.ts';

export interface AdvisoryLockHolderOptions {
  /** Opens the dedicated connection (again after a loss). */
  open: () => Promise<DedicatedSession>;
  /** Lock name -> key: a signed 64-bit integer as decimal text (a literal in the SQL). */
  keys: ReadonlyMap<string, string>;
  pollMs: number;
  /** A lock gained (held true) or lost/released (held false); `why` says how it was lost. */
  onChange: (name: string, held: boolean, why: string) => void;
  /** The connection could not be opened (the next round tries again). */
  onUnreachable?: (err: PostgresStoreError) => void;
}

const SIGNED_64 = /^-?\d{1,19}$/;

export class AdvisoryLockHolder {
  readonly #o: AdvisoryLockHolderOptions;
  readonly #held = new Set<string>();
  #session: DedicatedSession | undefined;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  #closed = false;

  constructor(o: AdvisoryLockHolderOptions) {
    for (const [name, key] of o.keys) {
      // Keys go into the SQL as literals: anything but an integer is a programming error.
      if (!SIGNED_64.test(key)) throw new Error(`advisory lock ${name}: key ${key} is not a 64-bit integer`);
    }
    this.#o = o;
  }

  holds(name: string): boolean {
    return this.#held.has(name);
  }

  /** Makes the first try (so a lone node holds everything once this resolves), then keeps trying. */
  async start(): Promise<void> {
    await this.round();
    if (this.#closed) return;
    this.#timer = setInterval(() => void this.round(), this.#o.pollMs);
    this.#timer.unref();
  }

  /** One round now (joined if one is running): try what is not held, or check the connection. */
  round(): Promise<void> {
    this.#round ??= this.#try().finally(() => {
      this.#round = undefined;
    });
    return this.#round;
  }

  /** Stops trying and gives every lock up (listeners hear held false first, then the connection ends). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#round;
    const session = this.#session;
    this.#session = undefined;
    this.#dropAll('released');
    await session?.close();
  }

  async #try(): Promise<void> {
    if (this.#closed) return;
    const session = this.#session ?? (await this.#connect());
    if (session === undefined) return;
    const wanted = [...this.#o.keys].filter(([name]) => !this.#held.has(name));
    try {
      if (wanted.length === 0) {
        await session.query('SELECT 1');
        return;
      }
      // pg_try_advisory_lock never waits. Only keys not held are asked for: a session lock
      // taken twice would need two unlocks.
      const columns = wanted.map(([, key], i) => `CASE WHEN pg_try_advisory_lock(${key}) THEN 1 ELSE 0 END AS l${i}`);
      const [row] = await session.query<Record<string, number>>(`SELECT ${columns.join(', ')}`);
      // Lost meanwhile: whatever was granted went with the session.
      if (this.#session !== session) return;
      wanted.forEach(([name], i) => {
        if (row?.[`l${i}`] !== 1 || this.#held.has(name)) return;
        this.#held.add(name);
        this.#o.onChange(name, true, 'granted');
      });
      // close() during the statement: the locks just granted are given up with the rest.
    } catch (err) {
      this.#lose(session, (err as Error).message);
    }
  }

  async #connect(): Promise<DedicatedSession | undefined> {
    let session: DedicatedSession;
    try {
      session = await this.#o.open();
    } catch (err) {
      this.#o.onUnreachable?.(err as PostgresStoreError);
      return undefined;
    }
    if (this.#closed) {
      await session.close();
      return undefined;
    }
    session.onLost((err) => this.#lose(session, err.message));
    this.#session = session;
    return session;
  }

  /** The connection is gone or cannot be trusted: every lock is lost with it. */
  #lose(session: DedicatedSession, why: string): void {
    if (this.#session !== session) return;
    this.#session = undefined;
    // Listeners stop the work before anything is awaited.
    this.#dropAll(`connection lost: ${why}`);
    void session.close();
  }

  #dropAll(why: string): void {
    for (const name of [...this.#held]) {
      this.#held.delete(name);
      this.#o.onChange(name, false, why);
    }
  }
}
