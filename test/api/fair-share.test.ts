/**
 * The REST fair share's scheduler (src/api/fair-share.ts) with a hand-driven clock and deferral:
 * tasks never run in the caller's turn, run first in first out in turns of at most the budget
 * (at least one task each), count the work their promise callbacks do, and leave the loop free
 * between turns.
 */
import { describe, expect, it } from 'vitest';
import { FairShare } from '../../src/api/fair-share.ts';

/** A clock the tasks advance, and deferred turns the test runs one at a time. */
function harness(budgetMs: number) {
  let now = 0;
  const deferred: (() => void)[] = [];
  const errors: unknown[] = [];
  const fs = new FairShare({ budgetMs, now: () => now, defer: (fn) => deferred.push(fn), onError: (e) => errors.push(e) });
  return {
    fs,
    errors,
    advance: (ms: number) => void (now += ms),
    get pendingTurns() {
      return deferred.length;
    },
    /** Runs the next deferred turn, then every promise callback it left (as the loop would). */
    async turn(): Promise<void> {
      const fn = deferred.shift();
      if (!fn) throw new Error('no turn scheduled');
      fn();
      for (let i = 0; i < 50; i++) await Promise.resolve();
    },
  };
}

describe('FairShare', () => {
  it('queues an admitted task for a later turn instead of running it in the caller', async () => {
    const h = harness(4);
    const ran: number[] = [];
    h.fs.admit(() => ran.push(1));
    expect(ran).toEqual([]);
    expect(h.pendingTurns).toBe(1);
    expect(h.fs.stats.queued).toBe(1);
    await h.turn();
    expect(ran).toEqual([1]);
    expect(h.fs.stats).toMatchObject({ queued: 0, turns: 1, yields: 0, tasks: 1 });
    expect(h.pendingTurns).toBe(0);
  });

  it('schedules one turn for many tasks admitted together', () => {
    const h = harness(4);
    for (let i = 0; i < 10; i++) h.fs.admit(() => undefined);
    expect(h.pendingTurns).toBe(1);
  });

  it('runs tasks first in first out until the budget is used, then yields to the loop', async () => {
    const h = harness(4);
    const ran: number[] = [];
    for (let i = 0; i < 10; i++) {
      h.fs.admit(() => {
        ran.push(i);
        h.advance(1.5);
      });
    }
    await h.turn();
    // 1.5, 3.0 (< 4: one more), 4.5 (>= 4: stop)
    expect(ran).toEqual([0, 1, 2]);
    expect(h.fs.stats).toMatchObject({ queued: 7, yields: 1 });
    expect(h.pendingTurns).toBe(1);
    await h.turn();
    expect(ran).toEqual([0, 1, 2, 3, 4, 5]);
    await h.turn();
    await h.turn();
    expect(ran).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(h.pendingTurns).toBe(0);
    expect(h.fs.stats).toMatchObject({ queued: 0, turns: 4, yields: 3, tasks: 10 });
  });

  it('runs one task per turn even when that task alone is over the budget', async () => {
    const h = harness(4);
    const ran: number[] = [];
    for (let i = 0; i < 3; i++) {
      h.fs.admit(() => {
        ran.push(i);
        h.advance(50);
      });
    }
    await h.turn();
    expect(ran).toEqual([0]);
    await h.turn();
    expect(ran).toEqual([0, 1]);
    await h.turn();
    expect(ran).toEqual([0, 1, 2]);
  });

  it("counts the work a task's promise callbacks do in the turn it started (an async handler's serialization)", async () => {
    const h = harness(4);
    const ran: number[] = [];
    for (let i = 0; i < 4; i++) {
      h.fs.admit(() => {
        ran.push(i);
        // The synchronous part is free; the reply is built in a promise callback, as Fastify
        // sends an async handler's result.
        void Promise.resolve().then(() => h.advance(3));
      });
    }
    await h.turn();
    // Task 0: 3 ms (< 4), task 1: 6 ms (>= 4): the turn stops after two, not after all four.
    expect(ran).toEqual([0, 1]);
  });

  it('takes tasks admitted while a turn runs in the same turn when the budget allows', async () => {
    const h = harness(4);
    const ran: string[] = [];
    h.fs.admit(() => {
      ran.push('a');
      h.fs.admit(() => ran.push('b'));
    });
    await h.turn();
    expect(ran).toEqual(['a', 'b']);
    expect(h.pendingTurns).toBe(0);
  });

  it('a task that throws is reported and the turn goes on', async () => {
    const h = harness(4);
    const ran: number[] = [];
    h.fs.admit(() => {
      throw new Error('boom');
    });
    h.fs.admit(() => ran.push(2));
    await h.turn();
    expect(ran).toEqual([2]);
    expect(h.errors).toHaveLength(1);
  });

  it('budget 0 runs every task at once, in the caller', () => {
    const h = harness(0);
    const ran: number[] = [];
    h.fs.admit(() => ran.push(1));
    expect(ran).toEqual([1]);
    expect(h.pendingTurns).toBe(0);
    expect(h.fs.enabled).toBe(false);
  });

  it('refuses a negative or non-finite budget', () => {
    expect(() => new FairShare({ budgetMs: -1 })).toThrow(RangeError);
    expect(() => new FairShare({ budgetMs: Number.NaN })).toThrow(RangeError);
  });

  it('with the real loop, a timer (the network) runs between two turns of a long queue', async () => {
    const fs = new FairShare({ budgetMs: 2 });
    const order: string[] = [];
    const busy = (ms: number) => {
      const end = performance.now() + ms;
      while (performance.now() < end);
    };
    const done = new Promise<void>((resolve) => {
      for (let i = 0; i < 20; i++) {
        fs.admit(() => {
          busy(1);
          order.push(`task${i}`);
          if (i === 19) resolve();
        });
      }
    });
    setTimeout(() => order.push('timer'), 0);
    await done;
    const at = order.indexOf('timer');
    // Unscheduled, the 20 tasks (20 ms) would have run before the timer; in 2 ms turns it runs early.
    expect(at).toBeGreaterThan(-1);
    expect(at).toBeLessThan(10);
  });
});
