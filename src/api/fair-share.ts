/**
 * Time-slicing of REST work on the main thread, so that SIP signaling, the voice sessions and
 * /readyz, which share that thread, are served while the API is saturated.
 *
 * Why: Node's event loop runs, in one poll phase, the callback of every socket that has data. With
 * N keep-alive connections each carrying a request that costs a few ms of synchronous work
 * (auth, a SQLite read, the handler, JSON serialization), a SIP datagram that arrives meanwhile
 * waits for all N before the loop polls again: 100 connections of `GET /v1/agents?limit=100`
 * held OPTIONS 0.3-1 s (bench/signaling).
 *
 * How: a request's work is a task handed to `admit()`. Tasks never run in the poll phase; they
 * are queued and run in turns, each turn a `setImmediate` callback (the loop's check phase),
 * first in first out, until the turn has used `budgetMs`. The tasks left wait for the next turn,
 * and between two turns the loop polls again: a SIP datagram waits at most about one budget
 * (plus the cheap part of the poll phase: reading and parsing the requests that came in).
 *
 *   poll: UDP (SIP), voice sockets, HTTP parsing -> admit() queues   check: one turn, <= budget
 *   |------------------------------------------|---------------------------------------------|
 *
 * Each task runs, then the turn awaits once before reading the clock, so the work its promise
 * callbacks do (Fastify sends an async handler's result from a promise callback: serialization
 * and the socket write) is counted in the turn it started in. A turn that finds a task over its
 * budget by itself still runs it: one task per turn at least, so nothing starves.
 *
 * `budgetMs` 0 runs every task at once (no scheduling). Clock and deferral are injectable for
 * tests.
 */

export interface FairShareOptions {
  /** Most ms of tasks run per turn; 0 = no limit, every task runs when admitted. */
  budgetMs: number;
  /** Milliseconds from any origin; default performance.now. */
  now?: () => number;
  /** Runs `fn` in a later event-loop turn; default setImmediate. */
  defer?: (fn: () => void) => void;
  /** A task threw (tasks should not: they are Fastify continuations). */
  onError?: (err: unknown) => void;
}

export interface FairShareStats {
  /** Tasks waiting now. */
  queued: number;
  /** Turns run so far. */
  turns: number;
  /** Turns that ended with tasks left over (the budget was used up). */
  yields: number;
  /** Tasks run so far. */
  tasks: number;
}

export class FairShare {
  readonly #budget: number;
  readonly #now: () => number;
  readonly #defer: (fn: () => void) => void;
  readonly #onError: (err: unknown) => void;
  /** FIFO: tasks from #head on are waiting; the array is compacted when it empties. */
  #queue: (() => void)[] = [];
  #head = 0;
  #scheduled = false;
  #turns = 0;
  #yields = 0;
  #tasks = 0;

  constructor(o: FairShareOptions) {
    if (!Number.isFinite(o.budgetMs) || o.budgetMs < 0) throw new RangeError(`budgetMs must be a non-negative number, got ${o.budgetMs}`);
    this.#budget = o.budgetMs;
    this.#now = o.now ?? (() => performance.now());
    this.#defer = o.defer ?? ((fn) => void setImmediate(fn));
    this.#onError = o.onError ?? (() => undefined);
  }

  /** Whether tasks are scheduled at all (budgetMs > 0). */
  get enabled(): boolean {
    return this.#budget > 0;
  }

  get stats(): FairShareStats {
    return { queued: this.#queue.length - this.#head, turns: this.#turns, yields: this.#yields, tasks: this.#tasks };
  }

  /** Runs `task` in the next turn with budget left (at once when scheduling is off). */
  admit(task: () => void): void {
    if (this.#budget === 0) {
      this.#run(task);
      return;
    }
    this.#queue.push(task);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    this.#defer(() => void this.#turn());
  }

  #run(task: () => void): void {
    this.#tasks++;
    try {
      task();
    } catch (err) {
      this.#onError(err);
    }
  }

  async #turn(): Promise<void> {
    this.#turns++;
    const start = this.#now();
    let ran = 0;
    while (this.#head < this.#queue.length) {
      if (ran > 0 && this.#now() - start >= this.#budget) break;
      const task = this.#queue[this.#head] as () => void;
      this.#queue[this.#head++] = undefined as unknown as () => void;
      ran++;
      this.#run(task);
      // The task's promise callbacks (queued while it ran) go first: their time counts here.
      await undefined;
    }
    if (this.#head === this.#queue.length) {
      this.#queue = [];
      this.#head = 0;
    } else if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
    this.#scheduled = false;
    if (this.#head < this.#queue.length) {
      this.#yields++;
      this.#schedule();
    }
  }
}
