/**
 * Reception statistics of one remote RTP source (one SSRC), RFC 3550 appendix A: sequence
 * validity and the extended highest sequence number (A.1), loss (A.3) and interarrival jitter
 * (A.8). Written as close to the RFC's C as TypeScript allows, so it can be checked line by line
 * against the appendix.
 *
 * RtpSession keeps one instance per SSRC: a new SSRC gets a fresh one (RFC 3550 8.2), which is
 * how a sender that restarts its stream starts clean statistics. Nothing here touches sockets,
 * clocks or timers; it is fed sequence numbers, timestamps and arrival times.
 *
 * This sits on the receive hot path (two calls per packet), so it allocates nothing there.
 */

const SEQ_MOD = 0x10000;
const TWO_32 = 0x100000000;

/**
 * What update() made of a sequence number: 1 valid, 0 on probation (the packet is still
 * delivered; only the statistics wait), -1 rejected (an unconfirmed jump, A.1's "bad" case).
 */
export type SequenceVerdict = 1 | 0 | -1;

export class RtpReceiveStats {
  /** A.1: a forward jump of this many or more needs the next packet to confirm it. */
  static readonly MAX_DROPOUT = 3000;
  /** A.1: a packet less than this far behind the highest one is a duplicate or reordered, not a jump. */
  static readonly MAX_MISORDER = 100;
  /** A.1: a new source is valid after this many packets in sequence. */
  static readonly MIN_SEQUENTIAL = 2;

  maxSeq = 0;
  /** Shifted count of 16-bit wraps (a multiple of 2^16), as A.1's `cycles`. */
  cycles = 0;
  baseSeq = 0;
  /** The sequence number that would confirm the last unconfirmed jump (last bad seq + 1). */
  badSeq = 0;
  probation: number;
  received = 0;
  expectedPrior = 0;
  receivedPrior = 0;
  /** Relative transit time of the previous packet, in timestamp units (A.8). */
  transit = 0;
  hasTransit = false;
  /** Interarrival jitter estimate, in timestamp units (A.8). */
  jitter = 0;

  constructor(
    readonly ssrc: number,
    seq: number,
  ) {
    // A.1: a new source is on probation until MIN_SEQUENTIAL packets arrive in sequence.
    this.initSeq(seq);
    this.maxSeq = (seq - 1) & 0xffff;
    this.probation = RtpReceiveStats.MIN_SEQUENTIAL;
  }

  /** A.1 init_seq: the statistics (re)start at seq. */
  initSeq(seq: number): void {
    this.baseSeq = seq;
    this.maxSeq = seq;
    this.badSeq = SEQ_MOD + 1; // so seq === badSeq is false
    this.cycles = 0;
    this.received = 0;
    this.receivedPrior = 0;
    this.expectedPrior = 0;
  }

  /** Past probation: the figures below (lost, extendedMax, intervalReport) mean something. */
  get validated(): boolean {
    return this.probation === 0;
  }

  /** A.1 update_seq: 1 valid, 0 on probation (still delivered), -1 rejected. */
  update(seq: number): SequenceVerdict {
    const udelta = (seq - this.maxSeq) & 0xffff;
    if (this.probation > 0) {
      if (seq === ((this.maxSeq + 1) & 0xffff)) {
        this.probation--;
        this.maxSeq = seq;
        if (this.probation === 0) {
          this.initSeq(seq);
          this.received++;
          return 1;
        }
      } else {
        this.probation = RtpReceiveStats.MIN_SEQUENTIAL - 1;
        this.maxSeq = seq;
      }
      return 0;
    }
    if (udelta < RtpReceiveStats.MAX_DROPOUT) {
      // In order, with a permissible gap; a smaller number means the 16-bit counter wrapped.
      if (seq < this.maxSeq) this.cycles += SEQ_MOD;
      this.maxSeq = seq;
    } else if (udelta <= SEQ_MOD - RtpReceiveStats.MAX_MISORDER) {
      // A very large jump: accept it only when the next packet follows it (the sender restarted
      // without changing SSRC); otherwise it is garbage.
      if (seq === this.badSeq) {
        this.initSeq(seq);
      } else {
        this.badSeq = (seq + 1) & 0xffff;
        return -1;
      }
    }
    // else: a duplicate or a reordered packet; counted as received, as A.1 does.
    this.received++;
    return 1;
  }

  /** The extended highest sequence number received: cycles + max_seq (A.1). */
  get extendedMax(): number {
    return this.cycles + this.maxSeq;
  }

  /** A.3: expected - received; negative with duplicates. */
  get lost(): number {
    return this.extendedMax - this.baseSeq + 1 - this.received;
  }

  /**
   * A.8: J += (|D(i-1,i)| - J) / 16, with D the difference of relative transit times. The
   * arrival is converted to timestamp units; the transit difference is taken modulo 2^32 so the
   * 32-bit RTP timestamp may wrap.
   */
  updateJitter(arrivalUnits: number, timestamp: number): void {
    const transit = arrivalUnits - timestamp;
    if (this.hasTransit) {
      let d = transit - this.transit;
      d -= TWO_32 * Math.round(d / TWO_32);
      if (d < 0) d = -d;
      this.jitter += (d - this.jitter) / 16;
    }
    this.transit = transit;
    this.hasTransit = true;
  }

  /**
   * A.3 interval figures for a reception report block: the fraction lost since the previous
   * call (0-255, in 1/256) and the cumulative loss. Advances the "prior" counters, so call it
   * once per report sent.
   */
  intervalReport(): { fraction: number; cumulative: number } {
    const expected = this.extendedMax - this.baseSeq + 1;
    const expectedInterval = expected - this.expectedPrior;
    this.expectedPrior = expected;
    const receivedInterval = this.received - this.receivedPrior;
    this.receivedPrior = this.received;
    const lostInterval = expectedInterval - receivedInterval;
    const fraction = expectedInterval === 0 || lostInterval <= 0 ? 0 : Math.floor((lostInterval * 256) / expectedInterval);
    return { fraction: Math.min(fraction, 255), cumulative: expected - this.received };
  }
}
