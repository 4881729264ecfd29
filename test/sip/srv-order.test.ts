/**
 * RFC 2782 ordering (src/sip/dns/srv-order.ts) and the dead-target memory
 * (src/sip/dns/target-status.ts): pure functions, with the random draw and the clock injected.
 * Also the resolver's /etc/hosts fallback with the system's DNS configuration.
 */
import { describe, expect, it } from 'vitest';
import { orderSrv } from '../../src/sip/dns/srv-order.ts';
import { TargetStatus } from '../../src/sip/dns/target-status.ts';

const rec = (name: string, priority: number, weight: number) => ({ name, priority, weight });

describe('orderSrv (RFC 2782)', () => {
  it('orders by ascending priority whatever the weights', () => {
    const out = orderSrv([rec('c', 30, 100), rec('a', 10, 1), rec('b', 20, 50)], () => 0.99);
    expect(out.map((r) => r.name)).toEqual(['a', 'b', 'c']);
  });

  it('within a priority, picks by running sum of weights: the draw decides', () => {
    const records = [rec('light', 10, 10), rec('heavy', 10, 90)];
    // draw = floor(r * 101): 0..10 -> light (running sum 10), 11..100 -> heavy.
    expect(orderSrv(records, () => 0.05).map((r) => r.name)).toEqual(['light', 'heavy']);
    expect(orderSrv(records, () => 0.5).map((r) => r.name)).toEqual(['heavy', 'light']);
  });

  it('weights share the picks in proportion (seeded draws)', () => {
    let seed = 42;
    const random = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const firsts = { a: 0, b: 0 };
    for (let i = 0; i < 4000; i++) firsts[orderSrv([rec('a', 1, 25), rec('b', 1, 75)], random)[0]!.name as 'a' | 'b']++;
    expect(firsts.b / 4000).toBeGreaterThan(0.65);
    expect(firsts.b / 4000).toBeLessThan(0.85);
  });

  it('weight 0 records are kept and come first only on a zero draw', () => {
    const records = [rec('zero', 5, 0), rec('some', 5, 10)];
    expect(orderSrv(records, () => 0).map((r) => r.name)).toEqual(['zero', 'some']);
    expect(orderSrv(records, () => 0.5).map((r) => r.name)).toEqual(['some', 'zero']);
    expect(orderSrv([rec('x', 1, 0), rec('y', 1, 0)], () => 0.7)).toHaveLength(2);
  });
});

describe('TargetStatus', () => {
  const a = { protocol: 'udp' as const, address: '192.0.2.1', port: 5060 };
  const b = { protocol: 'udp' as const, address: '192.0.2.2', port: 5060 };

  it('a failed target is tried last for deadMs, then in its place again; an answer puts it back at once', () => {
    let now = 1000;
    const s = new TargetStatus({ deadMs: 60_000, now: () => now });
    s.failed(a);
    expect(s.order([{ destination: a }, { destination: b }]).map((t) => t.destination)).toEqual([b, a]);
    now += 59_999;
    expect(s.isOut(a)).toBe(true);
    now += 2;
    expect(s.isOut(a)).toBe(false);
    s.failed(a);
    s.answered(a);
    expect(s.isOut(a)).toBe(false);
  });

  it('a target pinged down stays out until a ping answers; deadMs 0 remembers no failure', () => {
    const s = new TargetStatus({ deadMs: 0 });
    s.failed(a);
    expect(s.isOut(a)).toBe(false);
    s.pinged(b, false);
    expect(s.isOut(b)).toBe(true);
    s.pinged(b, true);
    expect(s.isOut(b)).toBe(false);
    expect(() => new TargetStatus({ deadMs: -1 })).toThrow(RangeError);
  });
});

describe('SipDnsResolver with the system resolver', () => {
  it('a name DNS does not know (localhost) falls back to getaddrinfo, as /etc/hosts says; with explicit servers it does not', async () => {
    const { SipDnsResolver } = await import('../../src/sip/dns/resolver.ts');
    const system = new SipDnsResolver({ timeoutMs: 500, tries: 1 });
    const out = await system.resolve({ host: 'localhost', port: 5080, transport: 'udp', transportExplicit: false, supported: ['udp'] });
    expect(out.length).toBeGreaterThan(0);
    for (const t of out) expect(['127.0.0.1', '::1']).toContain(t.destination.address);
    expect(out.every((t) => t.destination.port === 5080)).toBe(true);
    // A DNS server that does not exist: the resolution fails, it does not quietly use /etc/hosts.
    const explicit = new SipDnsResolver({ servers: ['127.0.0.1:9'], timeoutMs: 300, tries: 1 });
    await expect(explicit.resolve({ host: 'localhost', port: 5080, transport: 'udp', transportExplicit: false, supported: ['udp'] })).rejects.toThrow(/did not answer/);
  });
});
