/**
 * The media clock of the stream we send: the RTP timestamp of the next sample, in the codec's
 * clock rate, wrapping at 2^32 (RFC 3550 5.1).
 *
 * Each packet advances it by the samples its payload covers. Alongside, it tracks the clock
 * time (ms on the session's Clock) at which that next sample is due, so a pause in sending
 * shows as a due time in the past: catchUp() then moves the timestamp over the whole frames that
 * passed, because the timestamp must keep reflecting the sampling instant, and the session marks
 * the packet as the first of a talk spurt (RFC 3551 4.1).
 */
export class RtpMediaClock {
  readonly #clockRate: number;
  readonly #talkspurtGapMs: number;
  /** Timestamp of the next sample we send. */
  #nextTs: number;
  /** Clock time at which that sample is due; NaN before the first packet. */
  #nextTsAtMs = Number.NaN;
  /** The last non-zero increment: the frame size that catchUp() moves in. */
  #lastIncrement = 0;
  /** Timestamp and clock time of the last packet actually sent (for the SR's timestamp). */
  #lastSentTs = 0;
  #lastSendMs = Number.NaN;

  constructor(clockRate: number, initialTimestamp: number, talkspurtGapMs: number) {
    this.#clockRate = clockRate;
    this.#nextTs = initialTimestamp >>> 0;
    this.#talkspurtGapMs = talkspurtGapMs;
  }

  /** The timestamp the next packet carries. */
  get next(): number {
    return this.#nextTs;
  }

  /**
   * If sending paused longer than the talk-spurt gap (or force: a talk spurt was asked for),
   * moves the timestamp on by the whole frames that passed, so the timestamp keeps tracking the
   * sampling instant (RFC 3550 5.1). Returns whether a pause was detected.
   */
  catchUp(nowMs: number, force: boolean): boolean {
    if (Number.isNaN(this.#nextTsAtMs)) return false; // first packet: the marker is set anyway
    const behindMs = nowMs - this.#nextTsAtMs;
    if (!force && behindMs <= this.#talkspurtGapMs) return false;
    if (behindMs > 0) {
      const frame = this.#lastIncrement > 0 ? this.#lastIncrement : 1;
      const units = Math.floor((behindMs * this.#clockRate) / 1000 / frame) * frame;
      this.#nextTs = (this.#nextTs + units) >>> 0;
      this.#nextTsAtMs += (units * 1000) / this.#clockRate;
    }
    return true;
  }

  /** A packet covering `increment` samples took the current timestamp: move on past them. */
  advance(nowMs: number, increment: number): void {
    this.#nextTs = (this.#nextTs + increment) >>> 0;
    const due = Number.isNaN(this.#nextTsAtMs) ? nowMs : Math.max(this.#nextTsAtMs, nowMs);
    this.#nextTsAtMs = due + (increment * 1000) / this.#clockRate;
    if (increment > 0) this.#lastIncrement = increment;
  }

  /** A packet with this timestamp went on the wire at nowMs. */
  sent(timestamp: number, nowMs: number): void {
    this.#lastSentTs = timestamp;
    this.#lastSendMs = nowMs;
  }

  /** The RTP timestamp that corresponds to nowMs (for the SR), extrapolated from the last packet. */
  timestampAt(nowMs: number): number {
    if (Number.isNaN(this.#lastSendMs)) return this.#nextTs;
    return (this.#lastSentTs + Math.round(((nowMs - this.#lastSendMs) * this.#clockRate) / 1000)) >>> 0;
  }

  /**
   * An event (DTMF) that started at eventTs and lasted `units` samples, ending at clock time
   * endMs, is over: audio resumes from the event's end (RFC 4733 2.5.1.4), never going back.
   */
  resumeAfterEvent(eventTs: number, units: number, endMs: number): void {
    const end = (eventTs + units) >>> 0;
    // Serial-number comparison: only move forward (audio that ran on while muted may be ahead).
    if (((end - this.#nextTs) | 0) > 0) this.#nextTs = end;
    if (Number.isNaN(this.#nextTsAtMs) || this.#nextTsAtMs < endMs) this.#nextTsAtMs = endMs;
    // No audio sent yet: assume 20 ms frames for the next catch-up.
    if (this.#lastIncrement === 0) this.#lastIncrement = Math.round((this.#clockRate * 20) / 1000);
  }
}
