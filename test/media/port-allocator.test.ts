import dgram from 'node:dgram';
import { randomInt } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { PortAllocator, type RtpPortPair } from '../../src/media/port-allocator.ts';
import { MediaError, PortsExhaustedError } from '../../src/media/errors.ts';

// A random high even base per run, away from the other media test files' habits.
const base = () => 20000 + 2 * randomInt(0, 9000);

const held: { close(): void }[] = [];
afterEach(() => {
  for (const h of held.splice(0)) h.close();
});

async function take(alloc: PortAllocator, address?: string): Promise<RtpPortPair> {
  const pair = await alloc.allocate(address === undefined ? {} : { address });
  held.push(pair);
  return pair;
}

async function foreignBind(port: number, address = '127.0.0.1'): Promise<dgram.Socket | undefined> {
  const s = dgram.createSocket(address.includes(':') ? 'udp6' : 'udp4');
  try {
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.bind(port, address, resolve);
    });
  } catch {
    s.close();
    return undefined;
  }
  held.push({ close: () => s.close() });
  return s;
}

describe('PortAllocator', () => {
  it('binds an even RTP port and RTCP on the next odd one, inside the range', async () => {
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 99, address: '127.0.0.1' });
    const pair = await take(alloc);
    expect(pair.rtpPort % 2).toBe(0);
    expect(pair.rtcpPort).toBe(pair.rtpPort + 1);
    expect(pair.rtpPort).toBeGreaterThanOrEqual(min);
    expect(pair.rtcpPort).toBeLessThanOrEqual(min + 99);
    expect(pair.rtp.address()).toMatchObject({ address: '127.0.0.1', port: pair.rtpPort });
    expect(pair.rtcp.address()).toMatchObject({ address: '127.0.0.1', port: pair.rtcpPort });
    expect(pair.family).toBe('IPv4');
    expect(alloc.inUse).toBe(1);
    expect(alloc.capacity).toBe(50);
  });

  it('rounds an odd minimum up and never hands out a pair that would pass max', () => {
    const alloc = new PortAllocator({ min: 30001, max: 30006 });
    expect(alloc.capacity).toBe(2); // 30002/3 and 30004/5; 30006 has no RTCP partner
    expect(() => new PortAllocator({ min: 30001, max: 30002 })).toThrow(RangeError);
    expect(() => new PortAllocator({ min: 40000, max: 30000 })).toThrow(RangeError);
    expect(() => new PortAllocator({ min: 0, max: 100 })).toThrow(RangeError);
    expect(() => new PortAllocator({ min: 65534, max: 65536 })).toThrow(RangeError);
  });

  it('skips pairs whose RTP or RTCP port another process holds', async () => {
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 9, address: '127.0.0.1' });
    const blockedRtcp = await foreignBind(min + 1);
    const blockedRtp = await foreignBind(min + 2);
    const pair = await take(alloc);
    // Which pairs were free depends on the machine; the blocked ones are never returned.
    if (blockedRtcp) expect(pair.rtpPort).not.toBe(min);
    if (blockedRtp) expect(pair.rtpPort).not.toBe(min + 2);
    if (blockedRtcp && blockedRtp) expect(pair.rtpPort).toBeGreaterThanOrEqual(min + 4);
    // The half-bound pair was released: its free port can be bound by someone else.
    if (blockedRtcp) expect(await foreignBind(min)).toBeDefined();
  });

  it('is round-robin: a freed pair is not handed out again at once', async () => {
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 7, address: '127.0.0.1' }); // 4 pairs
    const first = await alloc.allocate();
    const port = first.rtpPort;
    first.close();
    const seen = [];
    for (let i = 0; i < 3; i++) {
      const p = await take(alloc);
      seen.push(p.rtpPort);
    }
    expect(seen).not.toContain(port);
    expect(new Set(seen).size).toBe(3);
  });

  it('fails with MEDIA_PORTS_EXHAUSTED when every pair is taken, and recovers when one is freed', async () => {
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 3, address: '127.0.0.1' }); // 2 pairs
    const a = await alloc.allocate();
    const b = await take(alloc);
    const err = await alloc.allocate().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PortsExhaustedError);
    expect(err).toBeInstanceOf(MediaError);
    expect((err as MediaError).code).toBe('MEDIA_PORTS_EXHAUSTED');
    a.close();
    a.close(); // idempotent
    expect(a.closed).toBe(true);
    expect(alloc.inUse).toBe(1);
    const c = await take(alloc);
    expect(c.rtpPort).toBe(a.rtpPort);
    expect(c.rtpPort).not.toBe(b.rtpPort);
  });

  it('gives concurrent callers distinct pairs', async () => {
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 59, address: '127.0.0.1' });
    const pairs = await Promise.all(Array.from({ length: 10 }, () => take(alloc)));
    expect(new Set(pairs.map((p) => p.rtpPort)).size).toBe(10);
    expect(alloc.inUse).toBe(10);
  });

  it('reports MEDIA_BIND_FAILED for an address this host does not have', async () => {
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 9 });
    const err = await alloc.allocate({ address: '192.0.2.1' }).catch((e: unknown) => e);
    expect((err as MediaError).code).toBe('MEDIA_BIND_FAILED');
    expect(alloc.inUse).toBe(0);
  });

  it('releases the ports on close so they can be bound again', async () => {
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 9, address: '127.0.0.1' });
    const pair = await alloc.allocate();
    pair.close();
    expect(await foreignBind(pair.rtpPort)).toBeDefined();
    expect(await foreignBind(pair.rtcpPort)).toBeDefined();
  });

  it('binds IPv6 (::1) when the host has it', async (ctx) => {
    const probe = await foreignBind(0, '::1');
    if (!probe) ctx.skip();
    const min = base();
    const alloc = new PortAllocator({ min, max: min + 9, address: '127.0.0.1' });
    const pair = await take(alloc, '::1');
    expect(pair.family).toBe('IPv6');
    expect(pair.rtp.address()).toMatchObject({ address: '::1', family: 'IPv6', port: pair.rtpPort });
  });
});
