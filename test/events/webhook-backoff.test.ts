/**
 * The deliverer's retry delays (src/events/webhook-deliverer.ts backoffMs): doubling from the
 * base, capped at an hour, each drawn between half and all of its full value (jitter).
 */
import { describe, expect, it } from 'vitest';
import { backoffMs } from '../../src/events/webhook-deliverer.ts';

describe('webhook retry backoff', () => {
  it('doubles from the base and stays between half and all of it', () => {
    expect([1, 2, 3, 4].map((n) => backoffMs(n, 1000, () => 0.999999))).toEqual([1000, 2000, 4000, 8000]);
    expect([1, 2, 3, 4].map((n) => backoffMs(n, 1000, () => 0))).toEqual([500, 1000, 2000, 4000]);
    for (let n = 1; n < 10; n++) {
      const d = backoffMs(n, 100);
      expect(d).toBeGreaterThanOrEqual(50 * 2 ** (n - 1));
      expect(d).toBeLessThanOrEqual(100 * 2 ** (n - 1));
    }
  });

  it('is capped at an hour however many attempts failed', () => {
    for (const n of [30, 10_000]) {
      expect(backoffMs(n, 5000, () => 0.999999)).toBeGreaterThan(3_599_990);
      expect(backoffMs(n, 5000, () => 0.999999)).toBeLessThanOrEqual(3_600_000);
    }
    expect(backoffMs(10_000, 5000, () => 0)).toBe(1_800_000);
  });
});
