/**
 * The agent's direction: 24 kHz PCM16 (`response_audio`, any chunk size) -> playout queue ->
 * one paced 20 ms frame per tick -> resample to the codec's rate -> encode -> send.
 *
 * `clear()` is barge-in (the voice protocol's `interruption`): everything not yet played is
 * dropped at once and the amount is reported. The first frame after silence or a clear carries
 * the RTP marker bit (RFC 3551 section 4.1).
 */
import { systemClock, type Clock, type Codec, type Resampler } from './types.ts';
import { Pacer, PlayoutQueue, pacedFrames, type ClearResult, type TimerApi } from './playout-queue.ts';
import type { MediaTicker, TickSubscription } from './media-ticker.ts';
import { createResampler } from './resampler.ts';

/**
 * A frame sent more than this after its slot on the 20 ms grid is late: the tolerance of the
 * bridge's target ("every 20 ms frame sent on time within 5 ms"), the one bench/bridge judges by.
 */
export const SEND_LATE_MS = 5;

/** Sends one encoded frame; timestampIncrement is in the codec's RTP clock units. */
export type SendFrame = (payload: Uint8Array, marker: boolean, timestampIncrement: number) => void;

export interface OutboundPathOptions {
  codec: Codec;
  send: SendFrame;
  /** Rate of the audio pushed in; the voice protocol's is 24 kHz. */
  inRate?: number;
  /** Longest backlog kept (ms) before the oldest audio is dropped; default the queue's. */
  maxQueuedMs?: number;
  clock?: Clock;
  timers?: TimerApi;
  /**
   * Pace on this shared clock (one for every call in the process) instead of a timer of this
   * path's own; clock and timers are then the ticker's.
   */
  ticker?: MediaTicker;
  onError?: (err: unknown) => void;
  /** Sees every frame sent, at inRate before resampling (call recording); a view, valid during the call. */
  onFrame?: (frame: Int16Array) => void;
  /**
   * While nothing is queued, send encoded silence every 20 ms instead of nothing: a continuous
   * stream keeps carrier media timers and NAT bindings alive and RTP timestamps steady.
   */
  sendSilence?: boolean;
  /**
   * The first frame of agent audio after a silence or a clear (the one with the marker bit) was
   * just sent: when an agent turn's audio first left for the caller (docs/latency.md).
   */
  onSpurtStart?: () => void;
}

export interface OutboundPathStats {
  /** Frames of agent audio sent. */
  framesSent: number;
  /** Frames of encoded silence sent while the agent was quiet (sendSilence). */
  silenceSent: number;
  /**
   * Frames (audio or silence) sent more than SEND_LATE_MS after their slot, and the latest one,
   * ms: what the caller hears as a gap when the far end's jitter buffer is shallow.
   */
  framesLate: number;
  maxLateMs: number;
  queuedMs: number;
  /** Unplayed audio dropped by clear(), in total. */
  droppedMs: number;
  /** Slots passed over after a stall (maxLateMs of the pacer) instead of sent in a burst. */
  lateTicksSkipped: number;
}

/**
 * Whether the caller will have heard the bridge's own gaps: a slot skipped after a stall, or more
 * than 1 % of the frames late (a far end with a shallow jitter buffer plays each as a click or a
 * gap). The per-call log line is a warning then.
 */
export function callerHeardGaps(s: Pick<OutboundPathStats, 'framesSent' | 'silenceSent' | 'framesLate' | 'lateTicksSkipped'>): boolean {
  const sent = s.framesSent + s.silenceSent;
  return s.lateTicksSkipped > 0 || (sent > 0 && s.framesLate > sent * 0.01);
}

export class OutboundPath {
  readonly codec: Codec;
  readonly #queue: PlayoutQueue;
  readonly #resampler: Resampler | null;
  readonly #encoded: Uint8Array;
  readonly #send: SendFrame;
  readonly #options: OutboundPathOptions;
  readonly #timestampIncrement: number;
  #pacer: Pacer | TickSubscription | null = null;
  /** The clock the pacing runs on (the ticker's when there is one). */
  readonly #clock: Clock;
  #framesSent = 0;
  #silenceSent = 0;
  #framesLate = 0;
  #maxLateMs = 0;
  #droppedMs = 0;
  #closed = false;

  constructor(options: OutboundPathOptions) {
    this.codec = options.codec;
    this.#options = options;
    this.#send = options.send;
    const inRate = options.inRate ?? 24000;
    this.#queue = new PlayoutQueue({ sampleRate: inRate, frameMs: this.codec.frameMs, maxQueuedMs: options.maxQueuedMs });
    this.#resampler = inRate === this.codec.sampleRate ? null : createResampler(inRate, this.codec.sampleRate);
    // Opus frames stay well under 1,500 bytes; G.711 is one byte per sample.
    this.#encoded = new Uint8Array(Math.max(1500, this.codec.samplesPerFrame));
    this.#timestampIncrement = (this.codec.clockRate * this.codec.frameMs) / 1000;
    this.#clock = options.ticker?.clock ?? options.clock ?? systemClock;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Queues agent audio (PCM16 at inRate, any length; a Buffer is read as little-endian bytes). */
  push(audio: Int16Array | Uint8Array): void {
    if (!this.#closed) this.#queue.push(audio);
  }

  /** Barge-in: drops all unplayed audio now and says how much. */
  clear(): ClearResult {
    const r = this.#queue.clear();
    this.#droppedMs += r.droppedMs;
    return r;
  }

  /** Starts the drift-free 20 ms pacing. Idempotent. */
  start(): void {
    if (this.#pacer || this.#closed) return;
    const silence = this.#options.sendSilence === true ? this.#encodedSilence() : undefined;
    const onTick = pacedFrames(this.#queue, (frame, tick) => {
      if (frame === null && silence === undefined) return;
      // Timed here, at this path's turn in its phase: the encode before the send takes microseconds.
      this.#noteLateness(this.#clock.now() - tick.scheduledMs);
      if (frame) {
        this.encodeAndSend(frame, tick.spurtStart);
        if (tick.spurtStart) this.#options.onSpurtStart?.();
      } else if (silence) {
        this.#send(silence, false, this.#timestampIncrement);
        this.#silenceSent++;
      }
    });
    const { ticker, onError } = this.#options;
    if (ticker) {
      if (ticker.periodMs !== this.codec.frameMs) throw new RangeError(`the ticker runs at ${ticker.periodMs} ms, the codec's frames are ${this.codec.frameMs} ms`);
      this.#pacer = ticker.add(onTick, onError, { first: true });
    } else {
      const pacer = new Pacer(onTick, { periodMs: this.codec.frameMs, clock: this.#options.clock, timers: this.#options.timers, onError });
      pacer.start();
      this.#pacer = pacer;
    }
  }

  /**
   * Resamples, encodes and sends one frame at inRate. The pacer calls it; exposed so a
   * benchmark or a test can drive the path without timers.
   */
  encodeAndSend(frame: Int16Array, marker: boolean): void {
    this.#options.onFrame?.(frame);
    const pcm = this.#resampler ? this.#resampler.process(frame) : frame;
    const bytes = this.codec.encode(pcm, this.#encoded);
    this.#send(this.#encoded.subarray(0, bytes), marker, this.#timestampIncrement);
    this.#framesSent++;
  }

  /** Counts a frame sent lateMs after its slot (slots are exact multiples of 20 ms from the start). */
  #noteLateness(lateMs: number): void {
    if (lateMs > SEND_LATE_MS) this.#framesLate++;
    if (lateMs > this.#maxLateMs) this.#maxLateMs = lateMs;
  }

  /** One frame of silence in the codec, encoded once (the same payload serves every idle tick). */
  #encodedSilence(): Uint8Array {
    const out = new Uint8Array(Math.max(1500, this.codec.samplesPerFrame));
    return out.slice(0, this.codec.encode(new Int16Array(this.codec.samplesPerFrame), out));
  }

  /** Pulls the next queued frame without pacing (tests and benchmarks). */
  pullFrame(): Int16Array | null {
    return this.#queue.pull();
  }

  stats(): OutboundPathStats {
    return {
      framesSent: this.#framesSent,
      silenceSent: this.#silenceSent,
      framesLate: this.#framesLate,
      maxLateMs: Math.round(this.#maxLateMs * 100) / 100,
      queuedMs: this.#queue.queuedMs,
      droppedMs: this.#droppedMs,
      lateTicksSkipped: this.#pacer?.stats().skipped ?? 0,
    };
  }

  /** Idempotent: stops pacing, drops the queue, frees the resampler. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pacer?.close();
    this.#queue.clear();
    this.#resampler?.close();
  }
}
