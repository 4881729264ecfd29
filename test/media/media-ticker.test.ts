import { beforeAll, describe, expect, it } from 'vitest';
import { createCodec } from '../../src/media/codecs.ts';
import { MediaTicker } from '../../src/media/media-ticker.ts';
import { callerHeardGaps, OutboundPath } from '../../src/media/outbound-path.ts';
import { initResamplers } from '../../src/media/resampler.ts';
import { systemTimers } from '../../src/media/types.ts';
import { VirtualTime } from '../helpers/virtual-time.ts';

describe('MediaTicker', () => {
  beforeAll(() => initResamplers());

  it('runs every subscriber once per period, drift-free, spread over the phases', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt, slots: 4 });
    const seen: number[][] = [];
    for (let i = 0; i < 8; i++) {
      const at: number[] = [];
      seen.push(at);
      ticker.add((t) => at.push(t.scheduledMs));
    }
    vt.advanceTo(1000 + 20 * 50);
    const phases = new Set<number>();
    for (const at of seen) {
      expect(at.length).toBeGreaterThanOrEqual(50);
      for (let k = 1; k < at.length; k++) expect(at[k]! - at[k - 1]!).toBe(20);
      phases.add((at[0]! - 1000) % 20);
    }
    // 8 subscribers on 4 phases: two per phase, phases 5 ms apart.
    expect([...phases].sort((a, b) => a - b)).toEqual([0, 5, 10, 15]);
    expect(seen.map((at) => (at[0]! - 1000) % 20).filter((p) => p === 0)).toHaveLength(2);
  });

  it('skips the ticks missed in a stall instead of bursting, and tells each subscriber how many', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt });
    const ticks: { index: number; skipped: number; now: number }[] = [];
    ticker.add((t) => ticks.push({ index: t.index, skipped: t.skipped, now: t.nowMs }));
    vt.advanceTo(1100);
    const before = ticks.length;
    // The event loop was blocked for 200 ms.
    vt.nowMs = 1300;
    vt.advanceTo(1400);
    const after = ticks.slice(before);
    const resumed = after[0]!;
    expect(resumed.skipped).toBeGreaterThanOrEqual(8);
    // Never two of this subscriber's ticks closer than a period (no catch-up burst).
    for (let k = 1; k < after.length; k++) expect(after[k]!.now - after[k - 1]!.now).toBeGreaterThanOrEqual(20 - 1);
    // Its index counts the skipped ticks: still the frame number on its 20 ms grid.
    expect(resumed.index).toBe(ticks[before - 1]!.index + 1 + resumed.skipped);
  });

  it('keeps ticking the others when one subscriber throws', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt, slots: 1 });
    const errors: unknown[] = [];
    let good = 0;
    ticker.add(() => {
      throw new Error('boom');
    }, (err) => errors.push(err));
    ticker.add(() => good++);
    vt.advanceTo(1200);
    expect(good).toBeGreaterThanOrEqual(10);
    expect(errors.length).toBe(good);
  });

  it('lets a subscriber leave from inside its tick, and stops its timer when the last one leaves', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt, slots: 2 });
    let a = 0;
    let b = 0;
    const subA = ticker.add(() => {
      if (++a === 3) subA.close();
    });
    const subB = ticker.add(() => b++);
    vt.advanceTo(1200);
    expect(a).toBe(3);
    expect(subA.closed).toBe(true);
    expect(b).toBeGreaterThanOrEqual(9);
    expect(ticker.size).toBe(1);
    subB.close();
    subB.close();
    expect(ticker.size).toBe(0);
    expect(vt.pending).toBe(0);
    // And starts again for the next call.
    let c = 0;
    ticker.add(() => c++);
    vt.advanceTo(1300);
    expect(c).toBeGreaterThanOrEqual(4);
  });

  it('starts a subscriber added during a tick on its phase\'s next tick', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt, slots: 1 });
    const late: number[] = [];
    let added = false;
    ticker.add((t) => {
      if (added) return;
      added = true;
      const addedAt = t.scheduledMs; // the tick object is reused: keep the value
      ticker.add((u) => late.push(u.scheduledMs - addedAt));
    });
    vt.advanceTo(1100);
    expect(late[0]).toBe(20);
  });

  it('runs the subscribers added with `first` before the others of their phase', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt, slots: 1 });
    const order: string[] = [];
    ticker.add(() => order.push('in-1'));
    ticker.add(() => order.push('out-1'), undefined, { first: true });
    ticker.add(() => order.push('in-2'));
    ticker.add(() => order.push('out-2'), undefined, { first: true });
    vt.advanceTo(1000);
    expect(order).toEqual(['out-1', 'out-2', 'in-1', 'in-2']);
  });

  it('refuses a nonsense configuration', () => {
    expect(() => new MediaTicker({ slots: 0 })).toThrow(RangeError);
    expect(() => new MediaTicker({ periodMs: 0 })).toThrow(RangeError);
  });

  it('paces outbound paths: one frame per period each, the marker on each talk spurt', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt });
    const sent: { path: number; at: number; marker: boolean; bytes: number }[] = [];
    const paths = [0, 1, 2].map(
      (i) =>
        new OutboundPath({
          codec: createCodec('PCMU'),
          ticker,
          sendSilence: true,
          send: (payload, marker) => sent.push({ path: i, at: vt.now(), marker, bytes: payload.length }),
        }),
    );
    for (const p of paths) {
      p.push(new Int16Array(480 * 5).fill(1000)); // 100 ms of agent audio
      p.start();
    }
    vt.advanceTo(1000 + 20 * 10 - 1);
    for (let i = 0; i < 3; i++) {
      const mine = sent.filter((s) => s.path === i);
      expect(mine).toHaveLength(10);
      expect(mine.map((s) => s.marker)).toEqual([true, false, false, false, false, false, false, false, false, false]);
      expect(mine.every((s) => s.bytes === 160)).toBe(true);
      for (let k = 1; k < mine.length; k++) expect(mine[k]!.at - mine[k - 1]!.at).toBe(20);
    }
    // Audio for 5 frames, then encoded silence: the path ran dry, nothing was padded out of order.
    expect(paths[0]!.stats().framesSent).toBe(5);
    for (const p of paths) p.close();
    expect(ticker.size).toBe(0);
    expect(vt.pending).toBe(0);
  });

  it('counts the frames each path sent more than 5 ms after their slot, audio and silence alike', () => {
    const vt = new VirtualTime();
    const ticker = new MediaTicker({ clock: vt, timers: vt, slots: 1 });
    let slot = 0;
    ticker.add((t) => (slot = t.scheduledMs));
    let slowSends = 0;
    const paths = [0, 1].map(
      (i) =>
        new OutboundPath({
          codec: createCodec('PCMU'),
          ticker,
          sendSilence: true,
          // While slowSends lasts, path 0's send takes 6 ms: path 1, after it in the phase, goes out late.
          send: () => {
            if (i === 0 && slowSends > 0) {
              slowSends--;
              vt.nowMs += 6;
            }
          },
        }),
    );
    const [first, second] = paths as [OutboundPath, OutboundPath];
    second.push(new Int16Array(480 * 2).fill(1000)); // two frames of agent audio, then silence
    for (const p of paths) p.start();
    vt.advanceTo(1000 + 20 * 5);
    expect(first.stats()).toMatchObject({ framesLate: 0, maxLateMs: 0, framesSent: 0 });
    expect(second.stats()).toMatchObject({ framesLate: 0, maxLateMs: 0, framesSent: 2 });
    expect(second.stats().silenceSent).toBeGreaterThan(0);
    expect(callerHeardGaps(second.stats())).toBe(false);

    slowSends = 1;
    vt.advanceTo(vt.nowMs + 20);
    expect(first.stats().framesLate).toBe(0);
    expect(second.stats()).toMatchObject({ framesLate: 1, maxLateMs: 6 });

    // The event loop stalls 8 ms past the next slot: both paths send that frame late, skip nothing.
    vt.nowMs = slot + 20 + 8;
    vt.advanceTo(vt.nowMs + 1);
    expect(first.stats()).toMatchObject({ framesLate: 1, maxLateMs: 8, lateTicksSkipped: 0 });
    expect(second.stats()).toMatchObject({ framesLate: 2, maxLateMs: 8, lateTicksSkipped: 0 });
    expect(callerHeardGaps(second.stats())).toBe(true); // 2 of about 8 frames
    // Back on time afterwards: the schedule did not move.
    vt.advanceTo(vt.nowMs + 100);
    expect(first.stats().framesLate).toBe(1);
    expect(second.stats().framesLate).toBe(2);
    ticker.close();
  });

  it('says a caller heard gaps when a slot was skipped or more than 1 % of the frames went out late', () => {
    expect(callerHeardGaps({ framesSent: 500, silenceSent: 500, framesLate: 10, lateTicksSkipped: 0 })).toBe(false);
    expect(callerHeardGaps({ framesSent: 500, silenceSent: 500, framesLate: 11, lateTicksSkipped: 0 })).toBe(true);
    expect(callerHeardGaps({ framesSent: 0, silenceSent: 1000, framesLate: 0, lateTicksSkipped: 1 })).toBe(true);
    expect(callerHeardGaps({ framesSent: 0, silenceSent: 0, framesLate: 0, lateTicksSkipped: 0 })).toBe(false);
  });

  it('refuses a ticker whose period is not the codec\'s frame', () => {
    const path = new OutboundPath({ codec: createCodec('PCMU'), ticker: new MediaTicker({ periodMs: 10 }), send: () => {} });
    expect(() => path.start()).toThrow(/10 ms/);
  });
});

describe('MediaTicker on the real clock', () => {
  it('system timers: a delay of 0 runs on the next loop turn (no 1 ms floor) and can be cancelled', async () => {
    const order: string[] = [];
    setTimeout(() => order.push('1 ms timer'), 1);
    systemTimers.setTimeout(() => {
      order.push('immediate');
      // What a pacer does next (Node 20 never fired this when the immediate was unref'd).
      systemTimers.setTimeout(() => order.push('timer armed from the immediate'), 3);
    }, 0);
    const cancelled = systemTimers.setTimeout(() => order.push('cancelled'), 0);
    systemTimers.clearTimeout(cancelled);
    const cancelledTimer = systemTimers.setTimeout(() => order.push('cancelled timer'), 2);
    systemTimers.clearTimeout(cancelledTimer);
    await new Promise((r) => setTimeout(r, 20));
    expect(order).toEqual(['immediate', '1 ms timer', 'timer armed from the immediate']);
  });

  it('holds a 20 ms period for 100 subscribers over half a second (loose bounds for a loaded CI)', async () => {
    const ticker = new MediaTicker();
    const at: number[][] = Array.from({ length: 100 }, () => []);
    const subs = at.map((list) => ticker.add((t) => list.push(t.nowMs)));
    await new Promise((r) => setTimeout(r, 520));
    for (const s of subs) s.close();
    expect(ticker.size).toBe(0);
    for (const list of at) {
      const period = (list[list.length - 1]! - list[1]!) / (list.length - 2);
      expect(list.length, `ticks: ${list.length}`).toBeGreaterThanOrEqual(18);
      expect(period).toBeGreaterThan(18);
      expect(period).toBeLessThan(22);
    }
  });
});
