/**
 * StoreProbe (src/store/store-probe.ts): /readyz reads its verdict. A failed or unanswered probe
 * sets the failure (the store's own message), an answer clears it, a probe is never sent while the
 * previous one is out, and start() probes on its interval until stop().
 */
import { describe, expect, it } from 'vitest';
import { StoreProbe } from '../../src/store/store-probe.ts';
import { delay } from '../helpers/until.ts';

/** A client whose next answers the test decides: 'ok', an Error, or 'hang' (never settles). */
function scripted() {
  const calls: string[] = [];
  let next: 'ok' | 'hang' | Error = 'ok';
  const client = {
    get<T>(sql: string): Promise<T | undefined> {
      calls.push(sql);
      if (next === 'hang') return new Promise<T | undefined>(() => {});
      if (next instanceof Error) return Promise.reject(next);
      return Promise.resolve({ ok: 1 } as T);
    },
  };
  return { client, calls, answer: (a: 'ok' | 'hang' | Error) => void (next = a) };
}

describe('StoreProbe', () => {
  it('reports the failure of the last probe, and clears it once the store answers again', async () => {
    const s = scripted();
    const probe = new StoreProbe(s.client, 1000, 200);
    await probe.probe();
    expect(probe.failure).toBeUndefined();
    s.answer(new Error('no connection to postgres://cb:***@127.0.0.1:5/cb'));
    await probe.probe();
    expect(probe.failure).toBe('no connection to postgres://cb:***@127.0.0.1:5/cb');
    s.answer('ok');
    await probe.probe();
    expect(probe.failure).toBeUndefined();
    expect(s.calls).toEqual(['SELECT 1 AS ok', 'SELECT 1 AS ok', 'SELECT 1 AS ok']);
  });

  it('counts a probe unanswered within its timeout as a failure, and sends no other meanwhile', async () => {
    const s = scripted();
    const probe = new StoreProbe(s.client, 1000, 50);
    s.answer('hang');
    const first = probe.probe();
    await probe.probe(); // still out: skipped
    expect(s.calls).toHaveLength(1);
    await first;
    expect(probe.failure).toBe('no answer within 50 ms');
  });

  it('probes on its interval once started, and stops', async () => {
    const s = scripted();
    const probe = new StoreProbe(s.client, 20, 10);
    probe.start();
    probe.start(); // idempotent
    s.answer(new Error('down'));
    await delay(110);
    expect(probe.failure).toBe('down');
    const sent = s.calls.length;
    expect(sent).toBeGreaterThanOrEqual(3);
    expect(sent).toBeLessThanOrEqual(7);
    probe.stop();
    await delay(60);
    expect(s.calls).toHaveLength(sent);
  });
});
