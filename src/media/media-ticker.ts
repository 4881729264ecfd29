/**
 * One media clock for every call in the process. The 20 ms frame period is cut into `slots`
 * phases (default 10: a tick every 2 ms); each subscriber (a call's inbound playout, its outbound
 * pacing) is put in the least-loaded phase and runs once per period, always in that phase.
 *
 * Why not a Pacer per call: two timers per bridged call (the caller's playout tick and the agent's
 * pacing) are 20,000 timer callbacks a second at 200 calls, each its own event-loop wake-up at its
 * own phase; the process spends its time waking up. One ticker wakes 500 times a second whatever
 * the number of calls, and the phases keep the calls' packets spread over the period instead of
 * sending every call's frame in one burst. It is the soft-timer design of media servers (one
 * timer per packet time, shared by the sessions on it).
 *
 * Drift-free like Pacer (it is one): a subscriber's ticks are due exactly one period apart. After a
 * stall longer than maxLateMs the missed ticks are skipped, never sent in a burst; the subscriber
 * sees how many of its own ticks were skipped. Late phases are caught up back to back, at most
 * one period's worth per event-loop turn, with I/O polled in between (bench/bridge found an
 * unbounded catch-up loop holding the event loop for 150 ms under load).
 */
import { Pacer, type PacerTick } from './playout-queue.ts';
import { systemClock, type Clock, type Timers } from './types.ts';

export interface MediaTickerOptions {
  /** The frame period every subscriber runs at, ms. Default 20. */
  periodMs?: number;
  /** Phases per period (a divisor of periodMs in whole ms is best). Default 10. */
  slots?: number;
  clock?: Clock;
  timers?: Timers;
  /** A tick later than this is not caught up (Pacer's maxLateMs). Default 60 ms. */
  maxLateMs?: number;
}

/** A subscriber's place on the ticker. */
export interface TickSubscription {
  readonly closed: boolean;
  /** Leaves the ticker (also from inside its own tick). Idempotent. */
  close(): void;
  /** Ticks run, and ticks skipped after stalls, for this subscriber. */
  stats(): { ticks: number; skipped: number };
}

type OnTick = (tick: Readonly<PacerTick>) => void;

class Subscriber implements TickSubscription {
  readonly tick: PacerTick = { index: 0, scheduledMs: 0, nowMs: 0, skipped: 0 };
  /** The base tick index this subscriber last ran at (-1: not yet). */
  lastBase = -1;
  ticks = 0;
  skipped = 0;
  closed = false;

  constructor(
    readonly onTick: OnTick,
    readonly onError: (err: unknown) => void,
    private readonly leave: () => void,
  ) {}

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.leave();
  }

  stats(): { ticks: number; skipped: number } {
    return { ticks: this.ticks, skipped: this.skipped };
  }
}

/** One phase's subscribers: those that send packets first, then the rest. */
interface Phase {
  first: Subscriber[];
  rest: Subscriber[];
  /** Some subscriber left: sweep the closed ones after the phase runs. */
  dirty: boolean;
}

export interface AddOptions {
  /**
   * Run before the phase's other subscribers: for work whose timing the far end hears (a call's
   * RTP out). The inbound ticks that follow vary in cost (speech or silence, WebSocket writes);
   * behind them, a call's packets would wander within its phase.
   */
  first?: boolean;
}

export class MediaTicker {
  readonly periodMs: number;
  readonly slots: number;
  /** The clock the ticks are scheduled on (their scheduledMs and nowMs). */
  readonly clock: Clock;
  readonly #options: MediaTickerOptions;
  readonly #phases: Phase[];
  #live = 0;
  #pacer: Pacer | undefined;

  constructor(options: MediaTickerOptions = {}) {
    this.periodMs = options.periodMs ?? 20;
    this.slots = options.slots ?? 10;
    if (!(this.periodMs > 0)) throw new RangeError(`periodMs must be positive, got ${this.periodMs}`);
    if (!Number.isInteger(this.slots) || this.slots < 1) throw new RangeError(`slots must be a positive integer, got ${this.slots}`);
    this.#options = options;
    this.clock = options.clock ?? systemClock;
    this.#phases = Array.from({ length: this.slots }, () => ({ first: [], rest: [], dirty: false }));
  }

  /** Subscribers on the ticker now. */
  get size(): number {
    return this.#live;
  }

  /**
   * Runs `onTick` once per period from the next tick of its phase on. An exception it throws goes
   * to `onError` and never stops the ticker or the other subscribers.
   */
  add(
    onTick: OnTick,
    onError: (err: unknown) => void = (err) => process.emitWarning(err instanceof Error ? err : String(err), 'MediaTickerWarning'),
    options: AddOptions = {},
  ): TickSubscription {
    let phase = this.#phases[0]!;
    for (const p of this.#phases) if (this.#count(p) < this.#count(phase)) phase = p;
    const list = options.first === true ? phase.first : phase.rest;
    const s = new Subscriber(onTick, onError, () => this.#leave(phase));
    list.push(s);
    this.#live++;
    // The timer runs only while someone listens: an idle daemon has no media wake-ups.
    if (this.#pacer === undefined) {
      this.#pacer = new Pacer((t) => this.#run(t), {
        periodMs: this.periodMs / this.slots,
        clock: this.clock,
        ...(this.#options.timers ? { timers: this.#options.timers } : {}),
        maxLateMs: this.#options.maxLateMs ?? 60,
        // Late phases catch up back to back, at most one period's worth per event-loop turn:
        // all at once would hold off the RTP and WebSocket messages the next ticks consume for
        // as long as the stall lasted; one per turn let the I/O backlog of the stall run
        // between phases and kept them late (bench/bridge: 97.3 % of frames on time at 100
        // calls against 98.7 % back to back).
        maxTicksPerRun: this.slots,
        onError: (err) => process.emitWarning(err instanceof Error ? err : String(err), 'MediaTickerWarning'),
      });
      this.#pacer.start();
    }
    return s;
  }

  /** Stops the clock and drops every subscriber (daemon shutdown). */
  close(): void {
    for (const phase of this.#phases) {
      for (const s of [...phase.first, ...phase.rest]) s.closed = true;
    }
    this.#live = 0;
    this.#stop();
  }

  #count(phase: Phase): number {
    const n = phase.first.length + phase.rest.length;
    return phase.dirty ? n - phase.first.filter((s) => s.closed).length - phase.rest.filter((s) => s.closed).length : n;
  }

  #leave(phase: Phase): void {
    if (!this.#phases.includes(phase)) return; // close() or a restart dropped it already
    phase.dirty = true;
    if (--this.#live === 0) this.#stop();
  }

  #stop(): void {
    this.#pacer?.close();
    this.#pacer = undefined;
    for (let p = 0; p < this.slots; p++) this.#phases[p] = { first: [], rest: [], dirty: false };
  }

  #run(base: Readonly<PacerTick>): void {
    const phase = this.#phases[base.index % this.slots]!;
    this.#runList(phase.first, base);
    this.#runList(phase.rest, base);
    // A sweep of the subscribers that left (the phase may have been replaced inside the loop:
    // the ticker stopped when the last one left, and maybe started again).
    if (phase.dirty) {
      phase.first = phase.first.filter((s) => !s.closed);
      phase.rest = phase.rest.filter((s) => !s.closed);
      phase.dirty = false;
    }
  }

  #runList(list: Subscriber[], base: Readonly<PacerTick>): void {
    // Subscribers added during this tick wait for their phase's next one.
    const n = list.length;
    for (let i = 0; i < n; i++) {
      const s = list[i]!;
      if (s.closed) continue;
      const t = s.tick;
      t.skipped = s.lastBase < 0 ? 0 : (base.index - s.lastBase) / this.slots - 1;
      t.index = s.ticks + s.skipped + t.skipped;
      t.scheduledMs = base.scheduledMs;
      t.nowMs = base.nowMs;
      s.lastBase = base.index;
      s.skipped += t.skipped;
      s.ticks++;
      try {
        s.onTick(t);
      } catch (err) {
        s.onError(err);
      }
    }
  }
}
