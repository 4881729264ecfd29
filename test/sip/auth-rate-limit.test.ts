import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { AuthRateLimiter, sourceKey } from '../../src/sip/ua/auth-rate-limit.ts';

class VirtualClock {
  t = 0;
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

function setup(options: ConstructorParameters<typeof AuthRateLimiter>[0] = {}) {
  const clock = new VirtualClock();
  const limiter = new AuthRateLimiter({ clock, ...options });
  return { clock, limiter };
}

describe('AuthRateLimiter', () => {
  it('blocks on the 10th failure within a minute, reports it once, and lifts the block after 5 minutes', () => {
    const { clock, limiter } = setup();
    const ip = '198.51.100.20';
    for (let i = 1; i <= 9; i++) {
      clock.advance(1000);
      expect(limiter.recordFailure(ip)).toEqual({ blocked: false, newlyBlocked: false, failures: i, blockedUntil: undefined });
      expect(limiter.isBlocked(ip)).toBe(false);
    }
    clock.advance(1000);
    const tenth = limiter.recordFailure(ip);
    expect(tenth).toEqual({ blocked: true, newlyBlocked: true, failures: 0, blockedUntil: 10_000 + 300_000 });
    expect(limiter.isBlocked(ip)).toBe(true);
    expect(limiter.blockedUntil(ip)).toBe(310_000);
    // further failures: still blocked, not reported again, block not extended
    for (let i = 0; i < 5; i++) {
      clock.advance(10_000);
      expect(limiter.recordFailure(ip)).toMatchObject({ blocked: true, newlyBlocked: false, blockedUntil: 310_000 });
    }
    // other sources are unaffected
    expect(limiter.isBlocked('198.51.100.21')).toBe(false);
    clock.t = 309_999;
    expect(limiter.isBlocked(ip)).toBe(true);
    clock.t = 310_000;
    expect(limiter.isBlocked(ip)).toBe(false);
    expect(limiter.blockedUntil(ip)).toBeUndefined();
    // a fresh start: one failure does not re-block
    expect(limiter.recordFailure(ip)).toMatchObject({ blocked: false, failures: 1 });
  });

  it('counts only failures inside the sliding window', () => {
    const { clock, limiter } = setup({ maxFailures: 3, windowMs: 60_000 });
    const ip = '203.0.113.9';
    limiter.recordFailure(ip); // t=0
    clock.advance(30_000);
    limiter.recordFailure(ip); // t=30s
    clock.advance(30_001);
    // the first failure left the window: 2 in the window, not blocked
    expect(limiter.recordFailure(ip)).toMatchObject({ blocked: false, failures: 2 });
    clock.advance(1);
    expect(limiter.recordFailure(ip)).toMatchObject({ blocked: true, newlyBlocked: true });
  });

  it('a success clears the failures', () => {
    const { limiter } = setup({ maxFailures: 3 });
    limiter.recordFailure('192.0.2.1');
    limiter.recordFailure('192.0.2.1');
    limiter.recordSuccess('192.0.2.1');
    expect(limiter.size).toBe(0);
    expect(limiter.recordFailure('192.0.2.1')).toMatchObject({ blocked: false, failures: 1 });
    limiter.recordSuccess('192.0.2.99'); // unknown source: nothing to do
  });

  it('a success does not lift an active block; unblock() does', () => {
    const { limiter } = setup({ maxFailures: 1 });
    expect(limiter.recordFailure('192.0.2.1').newlyBlocked).toBe(true);
    limiter.recordSuccess('192.0.2.1');
    expect(limiter.isBlocked('192.0.2.1')).toBe(true);
    limiter.unblock('192.0.2.1');
    expect(limiter.isBlocked('192.0.2.1')).toBe(false);
  });

  it('groups IPv6 sources by /64 and IPv4-mapped addresses with IPv4', () => {
    const { limiter } = setup({ maxFailures: 2 });
    limiter.recordFailure('2001:db8:1:2::1');
    expect(limiter.recordFailure('[2001:db8:1:2:ffff::42]').newlyBlocked).toBe(true);
    expect(limiter.isBlocked('2001:db8:1:2:aaaa:bbbb:cccc:dddd')).toBe(true);
    expect(limiter.isBlocked('2001:db8:1:3::1')).toBe(false);
    limiter.recordFailure('::ffff:192.0.2.7');
    expect(limiter.recordFailure('192.0.2.7').newlyBlocked).toBe(true);
  });

  it('computes source keys', () => {
    expect(sourceKey('192.0.2.1')).toBe('192.0.2.1');
    expect(sourceKey(' 192.0.2.1 ')).toBe('192.0.2.1');
    expect(sourceKey('::ffff:192.0.2.1')).toBe('192.0.2.1');
    expect(sourceKey('::FFFF:c000:0201')).toBe('192.0.2.1');
    expect(sourceKey('2001:DB8::1')).toBe('2001:db8:0:0:0:0:0:0/64');
    expect(sourceKey('fe80::1%eth0')).toBe('fe80:0:0:0:0:0:0:0/64');
    expect(sourceKey('2001:db8:aaaa:bbbb:cccc::1', 48)).toBe('2001:db8:aaaa:0:0:0:0:0/48');
    expect(sourceKey('2001:db8:aaaa:bbff::1', 60)).toBe('2001:db8:aaaa:bbf0:0:0:0:0/60');
    expect(sourceKey('2001:db8::1', 128)).toBe('2001:db8:0:0:0:0:0:1/128');
    expect(sourceKey('64:ff9b::192.0.2.33', 128)).toBe('64:ff9b:0:0:0:0:c000:221/128');
    expect(sourceKey('::', 0)).toBe('0:0:0:0:0:0:0:0/0');
    expect(sourceKey('pbx.example.com')).toBe('pbx.example.com');
    fc.assert(fc.property(fc.string(), (s) => typeof sourceKey(s) === 'string'));
    fc.assert(
      fc.property(fc.ipV6(), (ip) => {
        const key = sourceKey(ip);
        expect(key === sourceKey(ip.toUpperCase())).toBe(true);
        return /^(\d+\.){3}\d+$/.test(key) || key.endsWith('/64');
      }),
    );
  });

  it('keeps memory bounded under a flood of sources', () => {
    const { clock, limiter } = setup({ maxEntries: 1000 });
    for (let i = 0; i < 100_000; i++) {
      if (i % 1000 === 0) clock.advance(1);
      limiter.recordFailure(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
      if (limiter.size > 1000) throw new Error(`size ${limiter.size} after ${i} sources`);
    }
    expect(limiter.size).toBe(1000);
  });

  it('evicts idle and unblocked sources before blocked ones', () => {
    const { clock, limiter } = setup({ maxEntries: 10, maxFailures: 3, windowMs: 1000 });
    // one attacker blocked first (the least recently seen entry)
    for (let i = 0; i < 3; i++) limiter.recordFailure('192.0.2.66');
    expect(limiter.isBlocked('192.0.2.66')).toBe(true);
    for (let i = 0; i < 500; i++) {
      clock.advance(10);
      limiter.recordFailure(`198.51.${i >> 8}.${i & 255}`);
    }
    expect(limiter.size).toBeLessThanOrEqual(10);
    expect(limiter.isBlocked('192.0.2.66')).toBe(true);
  });

  it('prune() drops entries with nothing left to remember', () => {
    const { clock, limiter } = setup({ maxFailures: 2, windowMs: 1000, blockMs: 5000 });
    limiter.recordFailure('192.0.2.1');
    limiter.recordFailure('192.0.2.2');
    limiter.recordFailure('192.0.2.2'); // blocked
    clock.advance(1001);
    expect(limiter.prune()).toBe(1);
    expect(limiter.size).toBe(1);
    clock.advance(5000);
    expect(limiter.prune()).toBe(1);
    expect(limiter.size).toBe(0);
    limiter.recordFailure('192.0.2.3');
    limiter.clear();
    expect(limiter.size).toBe(0);
  });

  it('rejects bad options', () => {
    expect(() => new AuthRateLimiter({ maxFailures: 0 })).toThrow(RangeError);
    expect(() => new AuthRateLimiter({ windowMs: 0 })).toThrow(RangeError);
    expect(() => new AuthRateLimiter({ blockMs: -1 })).toThrow(RangeError);
    expect(() => new AuthRateLimiter({ maxEntries: 0 })).toThrow(RangeError);
    expect(() => new AuthRateLimiter({ ipv6PrefixLength: 129 })).toThrow(RangeError);
  });

  it('works with the default monotonic clock', () => {
    const limiter = new AuthRateLimiter({ maxFailures: 2 });
    limiter.recordFailure('192.0.2.1');
    expect(limiter.recordFailure('192.0.2.1').newlyBlocked).toBe(true);
    expect(limiter.isBlocked('192.0.2.1')).toBe(true);
  });
});
