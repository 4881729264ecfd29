import type { Clock, Timers } from '../../src/media/types.ts';

/**
 * Virtual time: a clock and timers that fire when the test advances the clock. `lateness` says
 * how late each timer fires (an event loop is never exactly on time).
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
    for (;;) {
      this.#timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.#timers[0];
      if (next === undefined || next.at > until) break;
      this.#timers.shift();
      this.nowMs = Math.max(this.nowMs, next.at);
      next.fn();
    }
    this.nowMs = Math.max(this.nowMs, until);
  }
  get pending(): number {
    return this.#timers.length;
  }
}
