import type { Clock, Timers } from '../../src/media/types.ts';

/**
 * Lets every promise callback that is ready run: a few turns of the event loop, each of which
 * drains the microtask queue (async iterators, awaited fakes, promise chains). Code that only
 * waits on injected timers and on promises is then settled until the next timer.
 */
export async function settle(turns = 5): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise((resolve) => setImmediate(resolve));
}

/**
 * Virtual time: a clock and timers that fire when the test advances the clock. `lateness` says
 * how late each timer fires (an event loop is never exactly on time).
 *
 * `advanceTo`/`advance` run timers synchronously (code driven by timers alone); `runTo`/`run`
 * also settle promises before each timer and at the end (code that mixes timers with async
 * work, like the agent runtime's stages), so seconds of a conversation take milliseconds.
 */
export class VirtualTime implements Clock, Timers {
  nowMs = 1000;
  #timers: { at: number; seq: number; fn: () => void }[] = [];
  #seq = 0;
  constructor(private readonly lateness: () => number = () => 0) {}
  now(): number {
    return this.nowMs;
  }
  setTimeout(fn: () => void, delayMs: number): unknown {
    const t = { at: this.nowMs + delayMs + this.lateness(), seq: ++this.#seq, fn };
    this.#timers.push(t);
    return t.seq;
  }
  clearTimeout(handle: unknown): void {
    this.#timers = this.#timers.filter((t) => t.seq !== handle);
  }
  /** Runs every timer due up to `until`, in order, moving the clock to each. */
  advanceTo(until: number): void {
    while (this.#fireNext(until));
    this.nowMs = Math.max(this.nowMs, until);
  }
  /** advanceTo, `ms` from now. */
  advance(ms: number): void {
    this.advanceTo(this.nowMs + ms);
  }
  /** Like advanceTo, settling promises before each timer and once the clock is at `until`. */
  async runTo(until: number): Promise<void> {
    do await settle();
    while (this.#fireNext(until));
    this.nowMs = Math.max(this.nowMs, until);
    await settle();
  }
  /** runTo, `ms` from now. */
  async run(ms: number): Promise<void> {
    await this.runTo(this.nowMs + ms);
  }
  get pending(): number {
    return this.#timers.length;
  }
  /** Fires the earliest timer due by `until`, if any; false when there is none. */
  #fireNext(until: number): boolean {
    this.#timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
    const next = this.#timers[0];
    if (next === undefined || next.at > until) return false;
    this.#timers.shift();
    this.nowMs = Math.max(this.nowMs, next.at);
    next.fn();
    return true;
  }
}
