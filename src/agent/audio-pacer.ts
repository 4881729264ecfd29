/**
 * Sends the agent's speech to the client at the pace it is heard, a little ahead of the
 * playhead, instead of as fast as synthesis produces it. That is what makes barge-in work: when
 * the caller interrupts, at most `leadMs` of audio is already on its way, the rest is dropped
 * here, and the runtime knows how much was actually heard (so the history keeps only that).
 *
 *   queue: [chunk][chunk][chunk]...      sent when the client has < leadMs buffered
 *   client:        |<-- buffered -->|    playEnd = when everything sent so far has played
 *                  now           playEnd
 *
 * Chunks are `chunkSamples` long (the last one of a turn may be shorter). `finish()` marks the
 * end of the turn: its last chunk goes out with isFinal (an empty final chunk when everything
 * had already been sent), and `onDrained` fires when the client has played it all.
 */
import type { Clock, Timers } from '../media/types.ts';
import { RUNTIME_SAMPLE_RATE } from './providers/types.ts';

export interface AudioPacerOptions {
  clock: Clock;
  timers: Timers;
  /** Samples per sent chunk (24 kHz). */
  chunkSamples: number;
  /** How far ahead of the playhead audio is sent, ms. */
  leadMs: number;
  send(pcm: Int16Array, isFinal: boolean): void;
  /** The turn was finished and the client has played all of it. */
  onDrained(): void;
}

const MS_PER_SAMPLE = 1000 / RUNTIME_SAMPLE_RATE;

export class AudioPacer {
  readonly #o: AudioPacerOptions;
  /** Whole chunks waiting, plus the partial one being filled at the end. */
  #queue: Int16Array[] = [];
  #partial: Int16Array;
  #partialLen = 0;
  #finished = false;
  #sentMs = 0;
  #playEnd = 0;
  #timer: unknown;
  #drainTimer: unknown;
  #started = false;

  constructor(options: AudioPacerOptions) {
    this.#o = options;
    this.#partial = new Int16Array(options.chunkSamples);
  }

  /** Queues audio of the current turn. */
  push(pcm: Int16Array): void {
    if (this.#finished) return;
    let i = 0;
    while (i < pcm.length) {
      const n = Math.min(this.#partial.length - this.#partialLen, pcm.length - i);
      this.#partial.set(pcm.subarray(i, i + n), this.#partialLen);
      this.#partialLen += n;
      i += n;
      if (this.#partialLen === this.#partial.length) {
        this.#queue.push(this.#partial);
        this.#partial = new Int16Array(this.#o.chunkSamples);
        this.#partialLen = 0;
      }
    }
    this.#pump();
  }

  /** No more audio in this turn. */
  finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    if (this.#partialLen > 0) this.#queue.push(this.#partial.slice(0, this.#partialLen));
    this.#partialLen = 0;
    if (!this.#started) {
      // A turn that produced no audio at all has nothing to play: it is drained now.
      this.#o.onDrained();
      return;
    }
    if (this.#queue.length === 0) this.#o.send(new Int16Array(0), true);
    this.#pump();
  }

  /** Drops everything not yet sent and stops. Returns the ms the client has played so far. */
  clear(): number {
    const played = this.playedMs();
    this.#queue = [];
    this.#partialLen = 0;
    this.#finished = true;
    this.#o.timers.clearTimeout(this.#timer);
    this.#o.timers.clearTimeout(this.#drainTimer);
    this.#timer = this.#drainTimer = undefined;
    return played;
  }

  /** Whether any audio of this turn has been sent. */
  get started(): boolean {
    return this.#started;
  }

  /** Estimated ms of this turn's audio the client has played (sent minus still buffered). */
  playedMs(): number {
    return this.#sentMs - Math.max(0, this.#playEnd - this.#o.clock.now());
  }

  /** Ms of audio sent in this turn. */
  get sentMs(): number {
    return this.#sentMs;
  }

  #pump(): void {
    if (this.#timer !== undefined) return;
    const now = this.#o.clock.now();
    while (this.#queue.length > 0 && this.#playEnd - now < this.#o.leadMs) {
      const chunk = this.#queue.shift()!;
      const isFinal = this.#finished && this.#queue.length === 0;
      if (!this.#started) {
        this.#started = true;
        this.#playEnd = now;
      }
      const dur = chunk.length * MS_PER_SAMPLE;
      this.#playEnd = Math.max(this.#playEnd, now) + dur;
      this.#sentMs += dur;
      this.#o.send(chunk, isFinal);
    }
    if (this.#queue.length > 0) {
      const wait = Math.max(1, this.#playEnd - now - this.#o.leadMs);
      this.#timer = this.#o.timers.setTimeout(() => {
        this.#timer = undefined;
        this.#pump();
      }, wait);
    } else if (this.#finished && this.#drainTimer === undefined) {
      this.#drainTimer = this.#o.timers.setTimeout(() => {
        this.#drainTimer = undefined;
        this.#o.onDrained();
      }, Math.max(0, this.#playEnd - now));
    }
  }
}
