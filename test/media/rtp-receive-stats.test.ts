/**
 * RtpReceiveStats on its own: the RFC 3550 A.1 cases that loopback sessions (rtp-session.test.ts)
 * never produce (probation restarts, unconfirmed and confirmed sequence jumps, duplicates,
 * reordering across the 16-bit wrap), A.3 interval figures, and A.8 across the 32-bit
 * timestamp wrap.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { RtpReceiveStats } from '../../src/media/rtp-receive-stats.ts';

/** A source fed first, then seqs; returns the stats and each update's verdict. */
function feed(first: number, ...seqs: number[]) {
  const stats = new RtpReceiveStats(0x1234, first);
  const verdicts = [first, ...seqs].map((seq) => stats.update(seq));
  return { stats, verdicts };
}

describe('RFC 3550 A.1 probation', () => {
  it('holds a new source on probation until two packets arrive in sequence', () => {
    const { stats, verdicts } = feed(1000, 1001, 1002);
    expect(verdicts).toEqual([0, 1, 1]);
    expect(stats.validated).toBe(true);
    // Statistics start at the packet that ended probation (init_seq), not at the first one.
    expect(stats.baseSeq).toBe(1001);
    expect(stats.received).toBe(2);
    expect(stats.extendedMax).toBe(1002);
    expect(stats.lost).toBe(0);
  });

  it('restarts probation on an out-of-sequence packet, needing one more in sequence', () => {
    const { stats, verdicts } = feed(1000, 1005, 1006, 1007);
    expect(verdicts).toEqual([0, 0, 1, 1]);
    expect(stats.baseSeq).toBe(1006);
    expect(stats.lost).toBe(0);
  });

  it('stays on probation while packets keep jumping', () => {
    const { stats, verdicts } = feed(10, 20, 30, 40);
    expect(verdicts).toEqual([0, 0, 0, 0]);
    expect(stats.validated).toBe(false);
    expect(stats.probation).toBe(RtpReceiveStats.MIN_SEQUENTIAL - 1);
  });

  it('counts 65535 -> 0 as in sequence during probation', () => {
    const { stats, verdicts } = feed(65535, 0, 1);
    expect(verdicts).toEqual([0, 1, 1]);
    expect(stats.baseSeq).toBe(0);
    expect(stats.extendedMax).toBe(1);
  });
});

describe('RFC 3550 A.1 update_seq on a valid source', () => {
  it('counts 16-bit wraps in cycles (the extended highest sequence number)', () => {
    const { stats, verdicts } = feed(65533, 65534, 65535, 0, 1);
    expect(verdicts).toEqual([0, 1, 1, 1, 1]);
    expect(stats.cycles).toBe(65536);
    expect(stats.extendedMax).toBe(65536 + 1);
    expect(stats.lost).toBe(0);
  });

  it('accepts a forward gap below MAX_DROPOUT and counts the missing packets as lost', () => {
    const { stats, verdicts } = feed(9, 10, 11, 20);
    expect(verdicts).toEqual([0, 1, 1, 1]);
    expect(stats.lost).toBe(8);
    expect(stats.extendedMax).toBe(20);
  });

  it('takes a jump of MAX_DROPOUT - 1 as loss, and rejects MAX_DROPOUT', () => {
    const accepted = feed(99, 100, 100 + RtpReceiveStats.MAX_DROPOUT - 1);
    expect(accepted.verdicts).toEqual([0, 1, 1]);
    expect(accepted.stats.lost).toBe(RtpReceiveStats.MAX_DROPOUT - 2);

    const rejected = feed(99, 100, 100 + RtpReceiveStats.MAX_DROPOUT);
    expect(rejected.verdicts).toEqual([0, 1, -1]);
    expect(rejected.stats.extendedMax).toBe(100);
    expect(rejected.stats.received).toBe(1);
  });

  it('rejects a large jump until the next packet confirms it, then restarts the statistics', () => {
    // The sender restarted its sequence without changing SSRC.
    const { stats, verdicts } = feed(499, 500, 501, 40000, 40001, 40002);
    expect(verdicts).toEqual([0, 1, 1, -1, 1, 1]);
    expect(stats.baseSeq).toBe(40001);
    expect(stats.received).toBe(2);
    expect(stats.extendedMax).toBe(40002);
    expect(stats.lost).toBe(0);
  });

  it('keeps rejecting jumps that nothing confirms, and the old stream continues', () => {
    const { stats, verdicts } = feed(499, 500, 40000, 9000, 501, 502);
    expect(verdicts).toEqual([0, 1, -1, -1, 1, 1]);
    expect(stats.baseSeq).toBe(500);
    expect(stats.extendedMax).toBe(502);
    expect(stats.lost).toBe(0);
  });

  it('counts duplicates as received, so the loss goes negative (A.3)', () => {
    const { stats, verdicts } = feed(9, 10, 11, 11, 11, 12);
    expect(verdicts).toEqual([0, 1, 1, 1, 1, 1]);
    expect(stats.extendedMax).toBe(12);
    expect(stats.lost).toBe(-2);
  });

  it('accepts a packet up to MAX_MISORDER behind without moving the highest sequence', () => {
    const { stats, verdicts } = feed(9, 10, 12, 13, 11);
    expect(verdicts).toEqual([0, 1, 1, 1, 1]);
    expect(stats.extendedMax).toBe(13);
    expect(stats.lost).toBe(0);
  });

  it('treats a packet further behind than MAX_MISORDER as a jump', () => {
    const { stats, verdicts } = feed(999, 1000, 1000 - RtpReceiveStats.MAX_MISORDER - 1);
    expect(verdicts).toEqual([0, 1, -1]);
    expect(stats.extendedMax).toBe(1000);
  });

  it('does not count a cycle for a late packet from before the wrap', () => {
    const { stats, verdicts } = feed(65534, 65535, 0, 1, 65535 - 1);
    expect(verdicts).toEqual([0, 1, 1, 1, 1]);
    expect(stats.cycles).toBe(65536);
    expect(stats.extendedMax).toBe(65536 + 1);
    // 65535, 0, 1 and the late 65534 (which is before base_seq 65535): one more than expected.
    expect(stats.lost).toBe(-1);
  });

  it('matches a simple model for in-order streams with gaps, across many wraps (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 0xffff }),
        fc.array(fc.integer({ min: 1, max: RtpReceiveStats.MAX_DROPOUT - 1 }), { minLength: 1, maxLength: 200 }),
        (start, steps) => {
          const stats = new RtpReceiveStats(1, start);
          stats.update(start);
          const base = (start + 1) & 0xffff;
          stats.update(base); // probation passed: the statistics start here
          let extended = base;
          let received = 1;
          for (const step of steps) {
            extended += step;
            received++;
            expect(stats.update(extended & 0xffff)).toBe(1);
          }
          expect(stats.extendedMax).toBe(extended);
          expect(stats.lost).toBe(extended - base + 1 - received);
        },
      ),
      { numRuns: 300, seed: 3550 },
    );
  });
});

describe('RFC 3550 A.3 interval figures', () => {
  it('reports the fraction lost per interval in 1/256 and the cumulative loss', () => {
    const stats = new RtpReceiveStats(1, 0);
    stats.update(0);
    stats.update(1); // base 1
    for (let seq = 2; seq <= 10; seq++) if (seq !== 5) stats.update(seq); // 10 expected, 1 lost
    expect(stats.intervalReport()).toEqual({ fraction: Math.floor((1 * 256) / 10), cumulative: 1 });
    // An interval with nothing received: nothing expected either.
    expect(stats.intervalReport()).toEqual({ fraction: 0, cumulative: 1 });
    for (let seq = 11; seq <= 14; seq++) if (seq !== 12 && seq !== 13) stats.update(seq); // 4 expected, 2 lost
    expect(stats.intervalReport()).toEqual({ fraction: 128, cumulative: 3 });
  });

  it('reports 0 for an interval with more packets than expected (duplicates)', () => {
    const stats = new RtpReceiveStats(1, 0);
    for (const seq of [0, 1, 2, 2, 2, 3]) stats.update(seq);
    expect(stats.intervalReport()).toEqual({ fraction: 0, cumulative: -2 });
  });
});

describe('RFC 3550 A.8 interarrival jitter', () => {
  it('ignores the first packet and moves by |D| / 16 per packet', () => {
    const stats = new RtpReceiveStats(1, 0);
    stats.updateJitter(1000, 0);
    expect(stats.jitter).toBe(0);
    stats.updateJitter(1160 + 32, 160); // 32 units late
    expect(stats.jitter).toBe(2);
    stats.updateJitter(1320, 320); // back on time: D = -32, |D| = 32
    expect(stats.jitter).toBe(2 + (32 - 2) / 16);
  });

  it('stays 0 for a steady stream whose timestamps wrap at 2^32', () => {
    const stats = new RtpReceiveStats(1, 0);
    const first = 2 ** 32 - 3 * 160;
    for (let i = 0; i < 8; i++) stats.updateJitter(5000 + i * 160, (first + i * 160) >>> 0);
    expect(stats.jitter).toBe(0);
  });

  it('measures a late packet across the wrap as late, not as 2^32 late', () => {
    const stats = new RtpReceiveStats(1, 0);
    stats.updateJitter(5000, 2 ** 32 - 160);
    stats.updateJitter(5160 + 16, 0); // 16 units late, timestamp wrapped
    expect(stats.jitter).toBe(1);
  });
});
