/**
 * Outbound pacing: the voice session's 24 kHz PCM16 arrives in chunks of any size, usually faster
 * than real time; the phone side wants exactly one 20 ms frame every 20 ms.
 *
 * - PlayoutQueue buffers samples in a ring and hands out one frame per pull(). clear() drops
 *   everything at once (barge-in: the voice session's `interruption`) and says how much unplayed
 *   audio went.
 * - Pacer calls back once per period on a drift-free schedule: tick n is due at start + n * period,
 *   never "a period after the previous one", so timer lateness does not accumulate. A tick up to
 *   `maxLateMs` late is caught up at once (at most three frames back to back); after a longer
 *   stall the ticks in between are skipped and counted, rather than sent as a burst that would
 *   overflow the far end's jitter buffer.
 * - startPacing() joins the two: each tick pulls one frame, or reports null when the queue is
 *   empty (send nothing, or comfort noise; see docs/media-jitter-and-pacing.md).
 *
 * Nothing is allocated per push or tick in steady state: the ring grows (doubling) only when more
 * audio is queued than ever before, and frames and tick records are reused objects.
 */

import { systemClock, systemTimers, type Clock, type Timers } from './types.ts';

export interface PlayoutQueueOptions {
  /** Sample rate of the PCM pushed, Hz. Default 24000 (the voice protocol's rate). */
  sampleRate?: number;
  /** Frame duration, ms. Default 20. */
  frameMs?: number;
  /** Ring size to start with, ms of audio. Default 2000. */
  initialCapacityMs?: number;
  /** Most audio that may be queued, ms; push() beyond it throws. Default 600000 (10 min). */
  maxQueuedMs?: number;
}

/** What clear() dropped. */
export interface ClearResult {
  droppedSamples: number;
  droppedMs: number;
}

export interface PlayoutQueueStats {
  queuedSamples: number;
  queuedMs: number;
  /** Samples pushed since construction. */
  pushedSamples: number;
  /** Frames handed out. */
  frames: number;
  /** Frames whose end had to be padded with silence (the queue held less than a frame). */
  paddedFrames: number;
  /** clear() calls that dropped audio, and the samples they dropped. */
  clears: number;
  droppedSamples: number;
}

export class PlayoutQueue {
  readonly sampleRate: number;
  readonly frameMs: number;
  readonly samplesPerFrame: number;

  #ring: Int16Array;
  #read = 0;
  #size = 0;
  #carry = -1; // low byte of a sample split across two byte chunks
  readonly #maxSamples: number;
  readonly #frame: Int16Array;
  #lastPadding = 0;

  #pushed = 0;
  #frames = 0;
  #padded = 0;
  #clears = 0;
  #clearCalls = 0;
  #dropped = 0;

  /** @throws RangeError when the rate and frame duration do not give a whole number of samples. */
  constructor(options: PlayoutQueueOptions = {}) {
    this.sampleRate = options.sampleRate ?? 24000;
    this.frameMs = options.frameMs ?? 20;
    const spf = (this.sampleRate * this.frameMs) / 1000;
    if (!Number.isInteger(spf) || spf <= 0) {
      throw new RangeError(`${this.frameMs} ms at ${this.sampleRate} Hz is not a whole number of samples`);
    }
    this.samplesPerFrame = spf;
    this.#maxSamples = Math.round(((options.maxQueuedMs ?? 600_000) * this.sampleRate) / 1000);
    const initial = Math.round(((options.initialCapacityMs ?? 2000) * this.sampleRate) / 1000);
    this.#ring = new Int16Array(Math.max(2 * spf, Math.min(initial, this.#maxSamples)));
    this.#frame = new Int16Array(spf);
  }

  get queuedSamples(): number {
    return this.#size;
  }

  get queuedMs(): number {
    return (this.#size * 1000) / this.sampleRate;
  }

  /** clear() calls so far, whether or not they dropped anything (a new spurt starts after one). */
  get clearCalls(): number {
    return this.#clearCalls;
  }

  /** Samples of silence at the end of the frame last pulled (0 unless the queue ran short). */
  get lastPadding(): number {
    return this.#lastPadding;
  }

  /**
   * Appends PCM16: an Int16Array of samples, or bytes (a Buffer of base64-decoded audio) in
   * little-endian order. Byte chunks may split a sample; the odd byte waits for the next chunk.
   * @throws RangeError when the queue would exceed maxQueuedMs (nothing is queued then).
   */
  push(chunk: Int16Array | Uint8Array): void {
    if (chunk instanceof Int16Array) {
      this.#reserve(chunk.length);
      const ring = this.#ring;
      const w = (this.#read + this.#size) % ring.length;
      const first = Math.min(chunk.length, ring.length - w);
      if (first === chunk.length) {
        ring.set(chunk, w); // the common case: one native copy, no view allocated
      } else {
        for (let j = 0; j < first; j++) ring[w + j] = chunk[j] ?? 0;
        for (let j = first; j < chunk.length; j++) ring[j - first] = chunk[j] ?? 0;
      }
      this.#size += chunk.length;
      this.#pushed += chunk.length;
      return;
    }
    const bytes = chunk.length + (this.#carry >= 0 ? 1 : 0);
    const samples = bytes >> 1;
    this.#reserve(samples);
    const ring = this.#ring;
    let w = (this.#read + this.#size) % ring.length;
    let j = 0;
    if (this.#carry >= 0 && chunk.length > 0) {
      ring[w] = ((this.#carry | ((chunk[0] ?? 0) << 8)) << 16) >> 16;
      if (++w === ring.length) w = 0;
      this.#carry = -1;
      j = 1;
    }
    // Byte-wise, not through an Int16Array view: a Buffer's byteOffset may be odd. Two straight
    // runs (before and after the ring's end) rather than a wrap test per sample.
    const whole = (chunk.length - j) >> 1;
    const first = Math.min(whole, ring.length - w);
    for (let k = 0; k < first; k++, j += 2) ring[w + k] = (((chunk[j] ?? 0) | ((chunk[j + 1] ?? 0) << 8)) << 16) >> 16;
    for (let k = 0; k < whole - first; k++, j += 2) ring[k] = (((chunk[j] ?? 0) | ((chunk[j + 1] ?? 0) << 8)) << 16) >> 16;
    if (j < chunk.length) this.#carry = chunk[j] ?? 0;
    this.#size += samples;
    this.#pushed += samples;
  }

  /**
   * The next frame, or null when nothing is queued. When less than a frame is queued, that audio
   * is sent at once with silence after it (lastPadding says how much): queued audio never waits
   * behind an empty tick. The frame is a reused buffer, valid until the next pull().
   */
  pull(): Int16Array | null {
    const n = this.samplesPerFrame;
    if (this.#size === 0) {
      this.#lastPadding = 0;
      return null;
    }
    const take = Math.min(n, this.#size);
    const ring = this.#ring;
    const frame = this.#frame;
    let r = this.#read;
    // Two straight runs (before and after the ring's end) rather than a wrap test per sample.
    const first = Math.min(take, ring.length - r);
    for (let j = 0; j < first; j++) frame[j] = ring[r + j] ?? 0;
    for (let j = first; j < take; j++) frame[j] = ring[j - first] ?? 0;
    r += take;
    if (r >= ring.length) r -= ring.length;
    if (take < n) {
      frame.fill(0, take);
      this.#padded++;
    }
    this.#read = r;
    this.#size -= take;
    this.#lastPadding = n - take;
    this.#frames++;
    return frame;
  }

  /** Drops all unplayed audio at once (barge-in) and reports how much it was. */
  clear(): ClearResult {
    const dropped = this.#size;
    this.#size = 0;
    this.#read = 0;
    this.#carry = -1;
    this.#clearCalls++;
    if (dropped > 0) {
      this.#clears++;
      this.#dropped += dropped;
    }
    return { droppedSamples: dropped, droppedMs: (dropped * 1000) / this.sampleRate };
  }

  stats(): PlayoutQueueStats {
    return {
      queuedSamples: this.#size,
      queuedMs: this.queuedMs,
      pushedSamples: this.#pushed,
      frames: this.#frames,
      paddedFrames: this.#padded,
      clears: this.#clears,
      droppedSamples: this.#dropped,
    };
  }

  /** Makes room for `more` samples, growing the ring (amortised: doubling) when needed. */
  #reserve(more: number): void {
    const need = this.#size + more;
    if (need > this.#maxSamples) {
      throw new RangeError(`playout queue full: ${need} samples would exceed ${this.#maxSamples}`);
    }
    const old = this.#ring;
    if (need <= old.length) return;
    let cap = old.length;
    while (cap < need) cap *= 2;
    const ring = new Int16Array(Math.min(cap, this.#maxSamples));
    for (let j = 0, r = this.#read; j < this.#size; j++) {
      ring[j] = old[r] ?? 0;
      if (++r === old.length) r = 0;
    }
    this.#ring = ring;
    this.#read = 0;
  }
}

/** Timers of the pacer (the media engine's one Timers interface). */
export type TimerApi = Timers;

export interface PacerOptions {
  /** Tick period, ms. Default 20. */
  periodMs?: number;
  /** Default systemClock (performance.now). */
  clock?: Clock;
  /** Default the global setTimeout / clearTimeout. */
  timers?: TimerApi;
  /** A tick later than this is not caught up: the ticks missed are skipped. Default 60 ms. */
  maxLateMs?: number;
  /** Receives exceptions thrown by the tick callback (they never stop the pacer). Default: process.emitWarning. */
  onError?: (err: unknown) => void;
  /**
   * Late ticks run back to back, at most this many per timer callback; the rest run after the
   * event loop has polled I/O (a timer of 0). Default: no limit. A pacer whose ticks are heavy
   * (MediaTicker: every call's media) sets 1, or catching up would hold off the packets and
   * messages those ticks are waiting for.
   */
  maxTicksPerRun?: number;
}

/** One tick, as the callback sees it (a reused object: copy what you keep). */
export interface PacerTick {
  /** Tick number since start(): due at startMs + index * periodMs. */
  index: number;
  /** When the tick was due, on the pacer's clock. */
  scheduledMs: number;
  /** When it ran. */
  nowMs: number;
  /** Ticks skipped just before this one because the pacer was stalled (0 normally). */
  skipped: number;
}

export interface PacerStats {
  ticks: number;
  /** Ticks skipped after stalls longer than maxLateMs. */
  skipped: number;
  /** Worst lateness of a tick that ran, ms. */
  maxLateMs: number;
  /** Exceptions thrown by the tick callback. */
  errors: number;
}

// A timer may fire a little before its time (the event loop's clock is coarser than
// performance.now()); within this margin the tick runs instead of being re-armed for a fraction
// of a millisecond, which Node would round up to a whole one.
const EARLY_MS = 1;

export class Pacer {
  readonly periodMs: number;
  readonly #onTick: (tick: Readonly<PacerTick>) => void;
  readonly #clock: Clock;
  readonly #timers: TimerApi;
  readonly #maxLateMs: number;
  readonly #maxTicksPerRun: number;
  readonly #onError: (err: unknown) => void;
  readonly #tick: PacerTick = { index: 0, scheduledMs: 0, nowMs: 0, skipped: 0 };
  readonly #run = () => this.#fire();

  #startMs = 0;
  #next = 0;
  #handle: unknown = undefined;
  #started = false;
  #closed = false;
  #ticks = 0;
  #skipped = 0;
  #worstLate = 0;
  #errors = 0;

  constructor(onTick: (tick: Readonly<PacerTick>) => void, options: PacerOptions = {}) {
    this.periodMs = options.periodMs ?? 20;
    if (!(this.periodMs > 0)) throw new RangeError(`periodMs must be positive, got ${this.periodMs}`);
    this.#onTick = onTick;
    this.#clock = options.clock ?? systemClock;
    this.#timers = options.timers ?? systemTimers;
    this.#maxLateMs = options.maxLateMs ?? 60;
    this.#maxTicksPerRun = options.maxTicksPerRun ?? Infinity;
    this.#onError = options.onError ?? ((err) => process.emitWarning(err instanceof Error ? err : String(err), 'PacerWarning'));
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** When tick 0 was due, on the pacer's clock (NaN before start()). */
  get startMs(): number {
    return this.#started ? this.#startMs : NaN;
  }

  /** Starts ticking: tick 0 is due now. A second call does nothing. */
  start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    this.#startMs = this.#clock.now();
    this.#next = 0;
    this.#handle = this.#timers.setTimeout(this.#run, 0);
  }

  /** Stops for good. Idempotent; a tick callback may call it. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#handle !== undefined) this.#timers.clearTimeout(this.#handle);
    this.#handle = undefined;
  }

  stats(): PacerStats {
    return { ticks: this.#ticks, skipped: this.#skipped, maxLateMs: this.#worstLate, errors: this.#errors };
  }

  #fire(): void {
    this.#handle = undefined;
    const period = this.periodMs;
    let now = this.#clock.now();
    let ran = 0;
    while (!this.#closed) {
      let due = this.#startMs + this.#next * period;
      if (due > now + EARLY_MS || ran === this.#maxTicksPerRun) break;
      ran++;
      let skipped = 0;
      if (now - due > this.#maxLateMs) {
        // Stalled: jump to the latest tick that is due rather than sending a burst.
        const latest = Math.floor((now - this.#startMs) / period);
        skipped = latest - this.#next;
        this.#skipped += skipped;
        this.#next = latest;
        due = this.#startMs + latest * period;
      }
      if (now - due > this.#worstLate) this.#worstLate = now - due;
      const tick = this.#tick;
      tick.index = this.#next;
      tick.scheduledMs = due;
      tick.nowMs = now;
      tick.skipped = skipped;
      this.#next++;
      this.#ticks++;
      try {
        this.#onTick(tick);
      } catch (err) {
        this.#errors++;
        this.#onError(err);
      }
      now = this.#clock.now();
    }
    if (this.#closed) return;
    const due = this.#startMs + this.#next * period;
    this.#handle = this.#timers.setTimeout(this.#run, Math.max(0, due - now));
  }
}

/** One paced frame, as startPacing's callback sees it (a reused object). */
export interface FrameTick extends PacerTick {
  /** First frame after silence or a clear(): an RTP sender sets the marker bit (RFC 3551 §4.1). */
  spurtStart: boolean;
  /** Samples of silence padded at the end of this frame (the queue ran short). */
  padding: number;
}

/**
 * The tick handler of a paced queue: each tick hands onFrame one frame, or null when the queue is
 * empty (the caller sends nothing, or comfort noise). The frame is the queue's reused buffer.
 * Run it from a Pacer (startPacing) or a shared MediaTicker.
 */
export function pacedFrames(queue: PlayoutQueue, onFrame: (frame: Int16Array | null, tick: Readonly<FrameTick>) => void): (tick: Readonly<PacerTick>) => void {
  const info: FrameTick = { index: 0, scheduledMs: 0, nowMs: 0, skipped: 0, spurtStart: false, padding: 0 };
  let talking = false;
  let clears = queue.clearCalls;
  return (tick) => {
    const frame = queue.pull();
    // A clear() since the last tick ends the spurt even if new audio is already queued.
    const c = queue.clearCalls;
    if (c !== clears) {
      clears = c;
      talking = false;
    }
    info.index = tick.index;
    info.scheduledMs = tick.scheduledMs;
    info.nowMs = tick.nowMs;
    info.skipped = tick.skipped;
    info.spurtStart = frame !== null && !talking;
    info.padding = queue.lastPadding;
    talking = frame !== null;
    onFrame(frame, info);
  };
}

/** Drives `queue` with a Pacer of its own (see pacedFrames). Returns the started Pacer; close() it to stop. */
export function startPacing(
  queue: PlayoutQueue,
  onFrame: (frame: Int16Array | null, tick: Readonly<FrameTick>) => void,
  options: PacerOptions = {},
): Pacer {
  const pacer = new Pacer(pacedFrames(queue, onFrame), { periodMs: queue.frameMs, ...options });
  pacer.start();
  return pacer;
}
