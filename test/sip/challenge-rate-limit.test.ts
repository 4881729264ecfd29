import { describe, expect, it } from 'vitest';
import { AuthRateLimiter } from '../../src/sip/ua/auth-rate-limit.ts';
import { ChallengeRateLimiter } from '../../src/sip/ua/challenge-rate-limit.ts';

class VirtualClock {
  t = 1000;
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

function setup(options: ConstructorParameters<typeof ChallengeRateLimiter>[0] = {}) {
  const clock = new VirtualClock();
  return { clock, limiter: new ChallengeRateLimiter({ clock, ...options }) };
}

describe('ChallengeRateLimiter (token bucket per source)', () => {
  it('defaults: a burst of 40 at once, then 20 a second', () => {
    const { clock, limiter } = setup();
    expect(limiter.ratePerSecond).toBe(20);
    expect(limiter.burst).toBe(40);
    const ip = '198.51.100.1';
    for (let i = 0; i < 40; i++) expect(limiter.take(ip), `take ${i}`).toBeUndefined();
    expect(limiter.take(ip)).toMatchObject({ log: true, suppressed: 0, retryAfterSecs: 1 });
    // One token every 50 ms.
    clock.advance(40);
    expect(limiter.take(ip)).toBeDefined();
    clock.advance(15);
    expect(limiter.take(ip)).toBeUndefined();
    expect(limiter.take(ip)).toBeDefined();
    // A second later: 20 more, not 40.
    clock.advance(1000);
    let granted = 0;
    for (let i = 0; i < 100; i++) if (limiter.take(ip) === undefined) granted++;
    expect(granted).toBe(20);
    // Other sources have their own bucket.
    expect(limiter.take('198.51.100.2')).toBeUndefined();
  });

  it('a throttled source is reported for logging once per window, with the count of the unreported ones', () => {
    const { clock, limiter } = setup({ burst: 1, ratePerSecond: 1, logWindowMs: 60_000 });
    const ip = '203.0.113.5';
    expect(limiter.take(ip)).toBeUndefined();
    expect(limiter.take(ip)).toMatchObject({ log: true, suppressed: 0 });
    for (let i = 0; i < 99; i++) expect(limiter.take(ip)).toMatchObject({ log: false });
    clock.advance(30_000);
    expect(limiter.take(ip)).toBeUndefined(); // refilled: granted, not reported
    expect(limiter.take(ip)).toMatchObject({ log: false }); // still inside the window of the last report
    clock.advance(30_000);
    expect(limiter.take(ip)).toBeUndefined();
    // 100 refusals not reported since the first report.
    expect(limiter.take(ip)).toMatchObject({ log: true, suppressed: 100 });
    expect(limiter.take(ip)).toMatchObject({ log: false });
  });

  it('Retry-After: the seconds until the next token (at least 1)', () => {
    const { limiter } = setup({ burst: 1, ratePerSecond: 0.25 });
    limiter.take('192.0.2.1');
    expect(limiter.take('192.0.2.1')?.retryAfterSecs).toBe(4);
  });

  it('IPv6 sources share the bucket of their /64; IPv4-mapped addresses count as IPv4', () => {
    const { limiter } = setup({ burst: 2 });
    expect(limiter.take('2001:db8:0:1::1')).toBeUndefined();
    expect(limiter.take('2001:db8:0:1::2')).toBeUndefined();
    expect(limiter.take('2001:db8:0:1:ffff::3')).toBeDefined();
    expect(limiter.take('2001:db8:0:2::1')).toBeUndefined();
    expect(limiter.take('::ffff:192.0.2.9')).toBeUndefined();
    expect(limiter.take('192.0.2.9')).toBeUndefined();
    expect(limiter.take('192.0.2.9')).toBeDefined();
  });

  it('memory is bounded: at most maxEntries sources are tracked', () => {
    const { limiter } = setup({ maxEntries: 100 });
    for (let i = 0; i < 1000; i++) limiter.take(`10.0.${i >> 8}.${i & 255}`);
    expect(limiter.size).toBeLessThanOrEqual(100);
  });

  it('refuses bad options', () => {
    expect(() => new ChallengeRateLimiter({ ratePerSecond: 0 })).toThrow(RangeError);
    expect(() => new ChallengeRateLimiter({ burst: 0 })).toThrow(RangeError);
  });
});

describe('AuthRateLimiter: refusals while blocked', () => {
  it('the first refusal of each block is the one to log; the rest are counted', () => {
    const clock = new VirtualClock();
    const limiter = new AuthRateLimiter({ clock, maxFailures: 1, blockMs: 10_000 });
    const ip = '198.51.100.40';
    expect(limiter.refusedWhileBlocked(ip)).toBeUndefined(); // not blocked
    limiter.recordFailure(ip);
    expect(limiter.refusedWhileBlocked(ip)).toEqual({ first: true, refused: 1 });
    expect(limiter.refusedWhileBlocked(ip)).toEqual({ first: false, refused: 2 });
    expect(limiter.refusedWhileBlocked(ip)).toEqual({ first: false, refused: 3 });
    clock.advance(10_000);
    expect(limiter.refusedWhileBlocked(ip)).toBeUndefined();
    limiter.recordFailure(ip);
    expect(limiter.refusedWhileBlocked(ip)).toEqual({ first: true, refused: 1 });
  });
});
