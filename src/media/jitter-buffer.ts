/**
 * An adaptive jitter buffer of RTP payloads for one stream of fixed-duration frames (20 ms).
 *
 * The network hands packets over late, early, twice or never; the decoder wants exactly one frame
 * per 20 ms tick. push() files each packet in a preallocated slot of a ring indexed by its
 * (extended) sequence number; pop(nowMs), called once per playout tick, hands back the next frame
 * in order, `lost` when a frame the sender sent is missing at its turn (conceal it), or `empty`
 * when there is nothing to play (before the start, or while the talker pauses).
 *
 * Why sequence numbers index the ring and timestamps schedule it: the sequence number counts
 * packets *sent* (RFC 3550 §5.1), so a gap in it is loss and no gap is no loss; the timestamp
 * counts *media time*, so a timestamp jump without a sequence gap is a talker pause (silence
 * suppression / DTX, RFC 3551 §4.1, whose first packet after the pause carries the marker bit).
 * Deciding spurts from the pair still works when the marker packet itself is lost.
 *
 * Depth policy (docs/media-jitter-and-pacing.md has the reasons):
 * - The target depth is the 95th percentile of recent delay spreads (a packet's transit time
 *   above the fastest recent packet), from a histogram with exponential forgetting, or a peak
 *   that late packets set at once and that decays one frame per `targetDecayMs`: the buffer grows
 *   quickly and shrinks slowly. It is clamped to [minDepthMs, maxDepthMs].
 * - Each talk spurt starts at `target` after the fastest-path arrival time of its first frame, so
 *   depth changes at spurt starts cost nothing audible (silence is stretched or shortened).
 * - Within a spurt (a G.711 trunk without silence suppression never pauses) the depth grows only
 *   where a frame is missing anyway: the buffer conceals without advancing (a "stretch"), so a
 *   merely late packet still plays. It shrinks by skipping a missing frame instead of concealing
 *   it, and, at most once per `shrinkIntervalMs`, by dropping one frame; above maxDepthMs it drops
 *   at once.
 * - An empty buffer mid-spurt is concealed for up to `maxConcealMs` (the concealment has faded
 *   to silence by then), then the buffer reports `empty` until packets come back, and restarts
 *   from them as a new spurt.
 *
 * Nothing is allocated per packet: payloads are copied into one slab, the frame handed out is one
 * reused object whose payload view is valid until the next pop() or push().
 */

import type { PlayoutFrame, ReceivedRtp } from './types.ts';

/** What push() needs of a packet: ReceivedRtp, with ssrc and marker optional. */
export type JitterBufferPacket = Pick<ReceivedRtp, 'sequenceNumber' | 'timestamp' | 'payload' | 'payloadType' | 'arrivalMs'> &
  Partial<Pick<ReceivedRtp, 'ssrc' | 'marker'>>;

/** What push() did with a packet (useful in tests; the hot path may ignore it). */
export type JitterBufferPushResult = 'accepted' | 'duplicate' | 'late' | 'discarded' | 'reset';

export interface JitterBufferOptions {
  /** RTP clock rate of the stream (8000 for G.711, 48000 for Opus). */
  clockRate: number;
  /** RTP timestamp units per frame (160 for 20 ms G.711, 960 for 20 ms Opus). */
  samplesPerFrame: number;
  /** Lower bound of the target depth. Default 20 ms. */
  minDepthMs?: number;
  /** Upper bound of the target depth; above it (plus a frame) frames are dropped at once. Default 200 ms. */
  maxDepthMs?: number;
  /** Target depth before any jitter has been measured. Default 40 ms. */
  initialDepthMs?: number;
  /** Largest payload accepted; larger packets are discarded. Default 1500 (one Ethernet MTU). */
  maxPayloadBytes?: number;
  /** How long an empty buffer is concealed before it reports `empty`. Default 100 ms. */
  maxConcealMs?: number;
  /** At most one present frame is dropped per interval to shrink the depth. Default 1000 ms. */
  shrinkIntervalMs?: number;
  /** The late-packet peak of the target decays by one frame per this interval. Default 2000 ms. */
  targetDecayMs?: number;
  /** RFC 3389 comfort noise payload type: after it, an empty buffer is a pause, not a gap. Default 13. */
  comfortNoisePayloadType?: number;
}

/** Counters since construction (monotonic, fit for export as metrics) and current levels. */
export interface JitterBufferStats {
  /** Current playout delay of the frame being played above the fastest recent packet, ms. */
  depthMs: number;
  /** Depth the buffer steers toward, ms. */
  targetMs: number;
  /** RFC 3550 §6.4.1 interarrival jitter estimate, ms. */
  jitterMs: number;
  /** Packets accepted into the buffer. */
  received: number;
  /** Frames handed out (`kind: 'frame'`). */
  played: number;
  /** Frames the sender sent (by sequence number) that were missing at their turn: concealed or skipped. */
  lost: number;
  /** `lost` results handed out: concealed losses, stretches, and concealment of an empty buffer. */
  concealed: number;
  /** Packets that arrived after their playout time (dropped). */
  late: number;
  /** Packets received twice (dropped). */
  duplicates: number;
  /** Packets accepted out of order (sequence number below the highest seen). */
  reordered: number;
  /** Restarts: SSRC change, sequence or timestamp discontinuity, or reset(). */
  resets: number;
  /** Concealed ticks that did not advance playout, to grow the depth. */
  stretched: number;
  /** Frames skipped or dropped to shrink the depth. */
  shrunk: number;
  /** Frames that had arrived but were dropped (shrinking, or the ring overflowing). */
  dropped: number;
  /** Packets ignored: too large, a stray of the previous SSRC, or an unconfirmed sequence jump. */
  discarded: number;
}

// RFC 3550 Appendix A.1: a sequence number further ahead than MAX_DROPOUT, or further behind than
// MAX_MISORDER, is a restart of the sender only if the packet after it follows it.
const MAX_DROPOUT = 3000;
const MAX_MISORDER = 100;

// Delay histogram: forgetting factor per packet (time constant ~250 packets = 5 s at 50 pps)
// and the quantile that sets the target.
const FORGET = 0.996;
const QUANTILE = 0.95;
// Window, in packets, of the minimum transit time (the "fastest recent packet"): ~2.5 s at
// 50 pps, short enough to follow clock drift, long enough to contain a fast packet.
const MIN_WINDOW = 128;

const IDLE = 0; // nothing received since construction or reset
const BUFFERING = 1; // a spurt's first frame is buffered; waiting for its start time
const PLAYING = 2; // inside a talk spurt
const PAUSED = 3; // concealed an empty buffer as long as useful; waiting for packets

const SLOT_EMPTY = 0;
const SLOT_FILLED = 1;
const SLOT_PLAYED = 2;

const LOST: PlayoutFrame = Object.freeze({ kind: 'lost' });
const EMPTY: PlayoutFrame = Object.freeze({ kind: 'empty' });

interface ResizableArrayBuffer extends ArrayBuffer {
  resize(byteLength: number): void;
}
// ES2024 resizable ArrayBuffer (Node >= 20): a length-tracking view of it gives the played payload
// its exact length with no allocation per frame. tsconfig's lib is ES2023, hence the local type.
const ResizableBuffer = ArrayBuffer as unknown as new (byteLength: number, options: { maxByteLength: number }) => ResizableArrayBuffer;

function positive(name: string, v: number): number {
  if (!Number.isFinite(v) || v <= 0) throw new RangeError(`${name} must be a positive number, got ${v}`);
  return v;
}

export class JitterBuffer {
  readonly clockRate: number;
  readonly samplesPerFrame: number;
  readonly frameMs: number;
  readonly minDepthMs: number;
  readonly maxDepthMs: number;
  /** Slots in the ring (a power of two, at least twice the maximum depth in frames). */
  readonly capacity: number;

  readonly #mask: number;
  readonly #maxPayload: number;
  readonly #maxConcealFrames: number;
  readonly #shrinkIntervalMs: number;
  readonly #targetDecayMs: number;
  readonly #cnPt: number;
  readonly #msPerUnit: number;

  // The ring: slot i holds extended sequence number slotSeq[i].
  readonly #slab: Uint8Array;
  readonly #slotSeq: Float64Array;
  readonly #slotTs: Float64Array;
  readonly #slotLen: Int32Array;
  readonly #slotPt: Uint8Array;
  readonly #slotState: Uint8Array;

  // Output: one reused frame object over one resizable buffer.
  readonly #outBuf: ResizableArrayBuffer;
  readonly #frame: { kind: 'frame'; payload: Uint8Array; payloadType: number; timestamp: number };

  // Stream state.
  #state = IDLE;
  #closed = false;
  #firstSpurt = true; // nothing played since (re)start: earlier packets may still move the cursor back
  #ssrc = -1;
  #previousSsrc = -1;
  #badSeq = -1;
  #highestSeq = 0; // extended
  #highestTs = 0; // extended timestamp of the highest sequence number
  #baseTs = 0; // extended timestamp that maps to media time 0
  #cursor = 0; // extended sequence number of the next frame to play
  #expectedTs = 0; // extended timestamp the cursor's frame should carry
  #offsetMs = 0; // playout time minus media time, at the last tick
  #pendingHolds = 0; // concealments of an empty buffer not yet known to be stretch or spurt tail
  #lastPt = -1;
  #lastShrinkMs = -Infinity;

  // Delay estimation.
  readonly #transit: Float64Array; // ring of recent transit times (arrival - media time), ms
  #transitPos = 0;
  #transitCount = 0;
  #minTransit = Infinity;
  #prevTransit = NaN;
  #jitterMs = 0;
  readonly #hist: Float64Array; // delay-spread histogram, one bin per frame
  #peakMs: number;
  #lastDecayMs = NaN;
  #targetMs: number;
  #depthMs = 0;

  // Counters.
  #received = 0;
  #played = 0;
  #lost = 0;
  #concealed = 0;
  #late = 0;
  #duplicates = 0;
  #reordered = 0;
  #resets = 0;
  #stretched = 0;
  #shrunk = 0;
  #dropped = 0;
  #discarded = 0;

  /** @throws RangeError on a non-positive rate or frame size, or depth bounds out of order. */
  constructor(options: JitterBufferOptions) {
    this.clockRate = positive('clockRate', options.clockRate);
    this.samplesPerFrame = positive('samplesPerFrame', options.samplesPerFrame);
    this.frameMs = (this.samplesPerFrame * 1000) / this.clockRate;
    this.minDepthMs = options.minDepthMs ?? 20;
    this.maxDepthMs = options.maxDepthMs ?? 200;
    const initial = options.initialDepthMs ?? 40;
    if (!(this.minDepthMs >= 0 && this.minDepthMs <= this.maxDepthMs)) {
      throw new RangeError(`need 0 <= minDepthMs <= maxDepthMs, got ${this.minDepthMs} and ${this.maxDepthMs}`);
    }
    this.#maxPayload = positive('maxPayloadBytes', options.maxPayloadBytes ?? 1500);
    this.#maxConcealFrames = Math.round((options.maxConcealMs ?? 100) / this.frameMs);
    this.#shrinkIntervalMs = options.shrinkIntervalMs ?? 1000;
    this.#targetDecayMs = positive('targetDecayMs', options.targetDecayMs ?? 2000);
    this.#cnPt = options.comfortNoisePayloadType ?? 13;
    this.#msPerUnit = 1000 / this.clockRate;

    const maxFrames = Math.ceil(this.maxDepthMs / this.frameMs);
    let cap = 16;
    while (cap < 2 * maxFrames + 8) cap *= 2;
    this.capacity = cap;
    this.#mask = cap - 1;
    this.#slab = new Uint8Array(cap * this.#maxPayload);
    this.#slotSeq = new Float64Array(cap).fill(-1);
    this.#slotTs = new Float64Array(cap);
    this.#slotLen = new Int32Array(cap);
    this.#slotPt = new Uint8Array(cap);
    this.#slotState = new Uint8Array(cap);
    this.#outBuf = new ResizableBuffer(0, { maxByteLength: this.#maxPayload });
    this.#frame = { kind: 'frame', payload: new Uint8Array(this.#outBuf), payloadType: 0, timestamp: 0 };

    this.#transit = new Float64Array(MIN_WINDOW);
    this.#hist = new Float64Array(maxFrames + 1);
    this.#peakMs = initial;
    this.#targetMs = this.#clampTarget(initial);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The current target depth, ms. */
  get targetMs(): number {
    return this.#targetMs;
  }

  /**
   * Files one received packet. The payload is copied; the caller may reuse its buffer at once.
   * Returns what became of the packet.
   */
  push(packet: JitterBufferPacket): JitterBufferPushResult {
    if (this.#closed || packet.payload.length > this.#maxPayload) {
      this.#discarded++;
      return 'discarded';
    }
    if (this.#state === IDLE) {
      this.#begin(packet);
      return 'accepted';
    }
    const ssrc = packet.ssrc;
    if (ssrc !== undefined && ssrc !== this.#ssrc) {
      // RFC 3550 §8.2: a new SSRC is a new source. A straggler of the one it replaced is ignored,
      // so a late packet cannot flip the stream back.
      if (ssrc === this.#previousSsrc) {
        this.#discarded++;
        return 'discarded';
      }
      this.#restart(packet);
      return 'reset';
    }

    // Extend the 16-bit sequence number around the highest seen (RFC 3550 A.1).
    const seq = packet.sequenceNumber;
    const d = ((seq - this.#highestSeq) << 16) >> 16;
    if (d > MAX_DROPOUT || d < -MAX_MISORDER) {
      if (seq === this.#badSeq) {
        this.#restart(packet);
        return 'reset';
      }
      this.#badSeq = (seq + 1) & 0xffff;
      this.#discarded++;
      return 'discarded';
    }
    this.#badSeq = -1;
    const ext = this.#highestSeq + d;
    // Extend the 32-bit timestamp the same way: `| 0` keeps the signed 32-bit difference.
    const tsd = (packet.timestamp - this.#highestTs) | 0;
    if (d > 0 && tsd < 0) {
      // A newer packet with an older timestamp: the sender's media clock restarted.
      this.#restart(packet);
      return 'reset';
    }
    if (d < 0 && tsd > 0) {
      // An older packet with a newer timestamp is inconsistent: ignore it rather than guess.
      this.#discarded++;
      return 'discarded';
    }
    const extTs = this.#highestTs + tsd;

    const cursor = this.#cursor;
    if (ext < cursor) {
      const i = ext & this.#mask;
      if (this.#state === BUFFERING && this.#firstSpurt && this.#highestSeq - ext < this.capacity) {
        // Nothing played yet: an earlier packet overtaken on the way starts the stream instead.
        if (this.#slotSeq[i] === ext && this.#slotState[i] === SLOT_FILLED) return this.#duplicate();
        this.#cursor = ext;
      } else {
        if (this.#slotSeq[i] === ext && this.#slotState[i] !== SLOT_EMPTY) return this.#duplicate();
        this.#late++;
        this.#observe(packet.arrivalMs, extTs, true);
        return 'late';
      }
    } else if (ext >= cursor + this.capacity) {
      this.#overflow(ext - this.capacity + 1);
    } else {
      const i = ext & this.#mask;
      if (this.#slotSeq[i] === ext && this.#slotState[i] === SLOT_FILLED) return this.#duplicate();
    }

    this.#store(ext, extTs, packet);
    if (ext > this.#highestSeq) {
      this.#highestSeq = ext;
      this.#highestTs = extTs;
    } else if (ext < this.#highestSeq) {
      this.#reordered++;
    }
    this.#received++;
    this.#observe(packet.arrivalMs, extTs, false);
    return 'accepted';
  }

  /**
   * The frame to play at this tick; call once per frame period (20 ms). A `frame` result is valid
   * until the next pop() or push().
   */
  pop(nowMs: number): PlayoutFrame {
    if (this.#closed || this.#state === IDLE) return EMPTY;
    this.#updateTarget(nowMs);
    switch (this.#state) {
      case BUFFERING:
        return this.#tryStart(nowMs);
      case PAUSED:
        return this.#resumeFromPause(nowMs);
      default:
        return this.#playNext(nowMs);
    }
  }

  /** Forgets the stream (e.g. after a re-INVITE); the jitter estimate and counters are kept. */
  reset(): void {
    if (this.#closed) return;
    this.#clearStream();
    this.#resets++;
  }

  /** Idempotent. Afterwards push() discards and pop() returns `empty`. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#clearStream();
  }

  stats(): JitterBufferStats {
    return {
      depthMs: this.#depthMs,
      targetMs: this.#targetMs,
      jitterMs: this.#jitterMs,
      received: this.#received,
      played: this.#played,
      lost: this.#lost,
      concealed: this.#concealed,
      late: this.#late,
      duplicates: this.#duplicates,
      reordered: this.#reordered,
      resets: this.#resets,
      stretched: this.#stretched,
      shrunk: this.#shrunk,
      dropped: this.#dropped,
      discarded: this.#discarded,
    };
  }

  // --- playout --------------------------------------------------------------------------------

  /** Starts the buffered spurt at the cursor once its start time has come. */
  #tryStart(nowMs: number): PlayoutFrame {
    const i = this.#cursor & this.#mask;
    const ts = this.#slotTs[i] ?? 0;
    // Start time: the media time of the first frame, plus the fastest recent transit time, plus
    // the target. A first packet that was itself slow therefore waits less.
    const startMs = this.#mediaMs(ts) + this.#minTransit + this.#targetMs;
    if (nowMs < startMs) return EMPTY;
    this.#state = PLAYING;
    // No shrinking by dropping until the estimates have had a shrink interval to settle.
    if (this.#firstSpurt) this.#lastShrinkMs = nowMs;
    this.#firstSpurt = false;
    this.#expectedTs = ts;
    return this.#playSlot(i, nowMs);
  }

  #playNext(nowMs: number): PlayoutFrame {
    const mask = this.#mask;
    const half = this.samplesPerFrame / 2;
    for (;;) {
      const c = this.#cursor;
      const i = c & mask;
      const depth = nowMs - this.#mediaMs(this.#expectedTs) - this.#minTransit;
      if (this.#slotSeq[i] === c && this.#slotState[i] === SLOT_FILLED) {
        const ts = this.#slotTs[i] ?? 0;
        if (ts > this.#expectedTs + half) {
          // Media time jumped with no packet missing: the talker paused (DTX). The next spurt
          // starts on its own schedule, which is where the depth moves to its target for free.
          this.#pendingHolds = 0;
          this.#state = BUFFERING;
          return this.#tryStart(nowMs);
        }
        if (
          depth - this.frameMs >= this.#targetMs &&
          (depth > this.maxDepthMs + this.frameMs || nowMs - this.#lastShrinkMs >= this.#shrinkIntervalMs) &&
          this.#nextFollows(c, ts)
        ) {
          // Too deep in a continuous spurt: drop this frame (the next one follows it directly).
          this.#slotState[i] = SLOT_PLAYED;
          this.#dropped++;
          this.#shrunk++;
          this.#lastShrinkMs = nowMs;
          this.#cursor = c + 1;
          this.#expectedTs = ts + this.samplesPerFrame;
          continue;
        }
        return this.#playSlot(i, nowMs);
      }
      if (this.#highestSeq > c) {
        // A later packet is here, so this one was sent: lost, or still on its way.
        this.#resolveHolds(true);
        if (depth < this.#targetMs) {
          // Too shallow: conceal without advancing, so a late packet can still play (stretch).
          this.#stretched++;
          return this.#conceal(nowMs);
        }
        this.#lost++;
        this.#cursor = c + 1;
        this.#expectedTs += this.samplesPerFrame;
        if (depth - this.frameMs >= this.#targetMs) {
          this.#shrunk++; // too deep: skip the gap instead of concealing it
          continue;
        }
        return this.#conceal(nowMs);
      }
      // Nothing buffered: a late packet, a lost one, or the talker stopped. Conceal while it still
      // sounds like something (unless comfort noise announced the pause), then report silence.
      if (this.#lastPt === this.#cnPt || this.#pendingHolds >= this.#maxConcealFrames) {
        this.#state = PAUSED;
        return EMPTY;
      }
      this.#pendingHolds++;
      // Depth is left as it was: if the talker has paused, this is not playout delay.
      this.#concealed++;
      return LOST;
    }
  }

  #resumeFromPause(nowMs: number): PlayoutFrame {
    return this.#rebuffer() ? this.#tryStart(nowMs) : EMPTY;
  }

  /**
   * Moves the cursor to the first buffered frame, to start from it as a new spurt. False when
   * nothing is buffered.
   */
  #rebuffer(): boolean {
    const mask = this.#mask;
    let c = this.#cursor;
    while (c <= this.#highestSeq && !(this.#slotSeq[c & mask] === c && this.#slotState[c & mask] === SLOT_FILLED)) c++;
    if (c > this.#highestSeq) return false;
    const continuing = c === this.#cursor && (this.#slotTs[c & mask] ?? 0) <= this.#expectedTs + this.samplesPerFrame / 2;
    this.#resolveHolds(continuing);
    this.#lost += c - this.#cursor; // sent (a later sequence number arrived) but never here
    this.#cursor = c;
    this.#state = BUFFERING;
    return true;
  }

  #playSlot(i: number, nowMs: number): PlayoutFrame {
    const ts = this.#slotTs[i] ?? 0;
    const len = this.#slotLen[i] ?? 0;
    this.#resolveHolds(true);
    this.#slotState[i] = SLOT_PLAYED;
    this.#cursor++;
    this.#expectedTs = ts + this.samplesPerFrame;
    this.#played++;
    this.#offsetMs = nowMs - this.#mediaMs(ts);
    this.#depthMs = Math.max(0, this.#offsetMs - this.#minTransit);
    const pt = this.#slotPt[i] ?? 0;
    this.#lastPt = pt;
    this.#outBuf.resize(len);
    const off = i * this.#maxPayload;
    const frame = this.#frame;
    const out = frame.payload;
    const slab = this.#slab;
    for (let k = 0; k < len; k++) out[k] = slab[off + k] ?? 0; // no subarray: no view allocated
    frame.payloadType = pt;
    frame.timestamp = ts >>> 0;
    return frame;
  }

  #conceal(nowMs: number): PlayoutFrame {
    this.#concealed++;
    this.#offsetMs = nowMs - this.#mediaMs(this.#expectedTs);
    this.#depthMs = Math.max(0, this.#offsetMs - this.#minTransit);
    return LOST;
  }

  /**
   * Concealments of an empty buffer turn out to be a stretch (the same spurt went on, later) or
   * the tail of a spurt (the talker had paused); only now can they be told apart.
   */
  #resolveHolds(continuing: boolean): void {
    if (this.#pendingHolds === 0) return;
    if (continuing) this.#stretched += this.#pendingHolds;
    this.#pendingHolds = 0;
  }

  /** Whether frame c + 1 is buffered and directly follows frame c (timestamp `ts`). */
  #nextFollows(c: number, ts: number): boolean {
    const j = (c + 1) & this.#mask;
    return (
      this.#slotSeq[j] === c + 1 &&
      this.#slotState[j] === SLOT_FILLED &&
      (this.#slotTs[j] ?? 0) <= ts + this.samplesPerFrame + this.samplesPerFrame / 2
    );
  }

  // --- filing -------------------------------------------------------------------------------

  #begin(packet: JitterBufferPacket): void {
    this.#state = BUFFERING;
    this.#firstSpurt = true;
    this.#ssrc = packet.ssrc ?? -1;
    this.#badSeq = -1;
    this.#highestSeq = packet.sequenceNumber;
    this.#highestTs = packet.timestamp;
    this.#baseTs = packet.timestamp;
    this.#cursor = packet.sequenceNumber;
    this.#expectedTs = packet.timestamp;
    this.#store(this.#highestSeq, this.#highestTs, packet);
    this.#received++;
    this.#observe(packet.arrivalMs, this.#highestTs, false);
  }

  #restart(packet: JitterBufferPacket): void {
    const old = this.#ssrc;
    this.#clearStream();
    this.#resets++;
    if (packet.ssrc !== undefined && packet.ssrc !== old) this.#previousSsrc = old;
    this.#begin(packet);
  }

  #clearStream(): void {
    this.#state = IDLE;
    this.#slotState.fill(SLOT_EMPTY);
    this.#slotSeq.fill(-1);
    this.#pendingHolds = 0;
    this.#lastPt = -1;
    this.#badSeq = -1;
    // Transit times are relative to this stream's timestamps; the spread histogram and the peak
    // describe the network path and carry over.
    this.#transitCount = 0;
    this.#transitPos = 0;
    this.#minTransit = Infinity;
    this.#prevTransit = NaN;
  }

  #store(ext: number, extTs: number, packet: JitterBufferPacket): void {
    const i = ext & this.#mask;
    const len = packet.payload.length;
    this.#slab.set(packet.payload, i * this.#maxPayload);
    this.#slotSeq[i] = ext;
    this.#slotTs[i] = extTs;
    this.#slotLen[i] = len;
    this.#slotPt[i] = packet.payloadType;
    this.#slotState[i] = SLOT_FILLED;
  }

  /** The ring cannot hold ext: drop everything before newCursor (a stalled consumer, or a burst). */
  #overflow(newCursor: number): void {
    const mask = this.#mask;
    for (let s = this.#cursor; s < newCursor; s++) {
      const i = s & mask;
      if (this.#slotSeq[i] === s && this.#slotState[i] === SLOT_FILLED) {
        this.#slotState[i] = SLOT_PLAYED;
        this.#dropped++;
      } else if (s <= this.#highestSeq) {
        this.#lost++;
      }
    }
    this.#cursor = newCursor;
    this.#pendingHolds = 0;
    // The cursor's frame may be missing now: the next pop() restarts from the first frame here.
    this.#state = PAUSED;
  }

  #duplicate(): JitterBufferPushResult {
    this.#duplicates++;
    return 'duplicate';
  }

  // --- delay estimation ---------------------------------------------------------------------

  /** Media time of an extended timestamp, ms since the stream's first packet. */
  #mediaMs(extTs: number): number {
    return (extTs - this.#baseTs) * this.#msPerUnit;
  }

  #observe(arrivalMs: number, extTs: number, late: boolean): void {
    // Transit time up to a constant (the clocks' offset), as in RFC 3550 §6.4.1.
    const transit = arrivalMs - this.#mediaMs(extTs);
    // RFC 3550 §6.4.1 / A.8: J += (|D(i-1,i)| - J) / 16, in arrival order.
    if (this.#prevTransit === this.#prevTransit) {
      this.#jitterMs += (Math.abs(transit - this.#prevTransit) - this.#jitterMs) / 16;
    }
    this.#prevTransit = transit;

    // Minimum transit over the last MIN_WINDOW packets: the "fastest path" reference.
    const evicted = this.#transitCount === MIN_WINDOW ? (this.#transit[this.#transitPos] ?? Infinity) : Infinity;
    this.#transit[this.#transitPos] = transit;
    this.#transitPos = (this.#transitPos + 1) % MIN_WINDOW;
    if (this.#transitCount < MIN_WINDOW) this.#transitCount++;
    if (transit <= this.#minTransit) {
      this.#minTransit = transit;
    } else if (evicted === this.#minTransit) {
      let m = Infinity;
      for (let k = 0; k < this.#transitCount; k++) m = Math.min(m, this.#transit[k] ?? Infinity);
      this.#minTransit = m;
    }

    // Spread histogram with exponential forgetting (one bin per frame).
    const spread = transit - this.#minTransit;
    const hist = this.#hist;
    for (let k = 0; k < hist.length; k++) hist[k] = (hist[k] ?? 0) * FORGET;
    const bin = Math.min(hist.length - 1, Math.floor(spread / this.frameMs));
    hist[bin] = (hist[bin] ?? 0) + (1 - FORGET);

    // Grow quickly: a packet that missed (or would have missed) its playout time raises the target
    // at once to cover it.
    if (late || (this.#state === PLAYING && transit > this.#offsetMs)) {
      const need = Math.ceil(spread / this.frameMs) * this.frameMs;
      if (need > this.#peakMs) this.#peakMs = Math.min(need, this.maxDepthMs);
    }
    this.#targetMs = this.#clampTarget(Math.max(this.#peakMs, this.#quantileMs()));
  }

  /** Upper edge of the histogram bin where the cumulative weight reaches QUANTILE. */
  #quantileMs(): number {
    const hist = this.#hist;
    let total = 0;
    for (let k = 0; k < hist.length; k++) total += hist[k] ?? 0;
    if (total <= 0) return 0;
    let acc = 0;
    for (let k = 0; k < hist.length; k++) {
      acc += hist[k] ?? 0;
      if (acc >= QUANTILE * total) return (k + 1) * this.frameMs;
    }
    return hist.length * this.frameMs;
  }

  /** Shrink slowly: the late-packet peak loses one frame per targetDecayMs. */
  #updateTarget(nowMs: number): void {
    if (this.#lastDecayMs !== this.#lastDecayMs) this.#lastDecayMs = nowMs;
    if (nowMs - this.#lastDecayMs >= this.#targetDecayMs) {
      this.#lastDecayMs = nowMs;
      this.#peakMs = Math.max(0, this.#peakMs - this.frameMs);
      this.#targetMs = this.#clampTarget(Math.max(this.#peakMs, this.#quantileMs()));
    }
  }

  #clampTarget(ms: number): number {
    return Math.min(this.maxDepthMs, Math.max(this.minDepthMs, ms));
  }
}
