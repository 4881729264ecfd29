/**
 * The impairing relay of the impaired-network test (test/helpers/impairing-relay.ts): its seeded
 * decisions, its loss rate, and, through real sockets on loopback, that jitter reorders,
 * duplicates arrive and close() is clean.
 */
import dgram from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import { ImpairmentModel, describeRelayStats, startImpairingRelay, type ImpairingRelay } from '../helpers/impairing-relay.ts';

const SEED = 20;
const IMPAIR = { loss: 0.05, delayMs: 10, jitterMs: 60, duplicate: 0.02 };

describe('ImpairmentModel', () => {
  it('one seed makes the same decisions in the same order; another seed does not', () => {
    const run = (seed: number) => {
      const m = new ImpairmentModel(seed, IMPAIR);
      return Array.from({ length: 500 }, () => m.decide());
    };
    expect(run(SEED)).toEqual(run(SEED));
    expect(run(SEED)).not.toEqual(run(SEED + 1));
  });

  it('loss within bounds over many packets; delays within [delay, delay + jitter]; duplicates at their rate', () => {
    for (const distribution of ['uniform', 'normal'] as const) {
      const m = new ImpairmentModel(SEED, { ...IMPAIR, distribution });
      const n = 20_000;
      let lost = 0;
      let dups = 0;
      const delays: number[] = [];
      for (let i = 0; i < n; i++) {
        const d = m.decide();
        if (d.drop) lost++;
        if (d.delaysMs.length === 2) dups++;
        delays.push(...d.delaysMs);
      }
      // 5 % of 20,000: sd ~31 packets; +-0.6 % is about 4 sd.
      expect(lost / n, distribution).toBeGreaterThan(0.044);
      expect(lost / n, distribution).toBeLessThan(0.056);
      expect(dups / n, distribution).toBeGreaterThan(0.015);
      expect(dups / n, distribution).toBeLessThan(0.025);
      expect(Math.min(...delays)).toBeGreaterThanOrEqual(10);
      expect(Math.max(...delays)).toBeLessThanOrEqual(70);
      expect(Math.max(...delays) - Math.min(...delays)).toBeGreaterThan(50);
    }
  });

  it('bursty loss keeps the long-run rate and makes runs of about the mean length', () => {
    const m = new ImpairmentModel(SEED, { loss: 0.05, burstLength: 3 });
    const n = 50_000;
    let lost = 0;
    let runs = 0;
    let prev = false;
    for (let i = 0; i < n; i++) {
      const drop = m.decide().drop;
      if (drop) lost++;
      if (drop && !prev) runs++;
      prev = drop;
    }
    expect(lost / n).toBeGreaterThan(0.04);
    expect(lost / n).toBeLessThan(0.06);
    expect(lost / runs).toBeGreaterThan(2.5);
    expect(lost / runs).toBeLessThan(3.5);
  });

  it('rejects nonsense', () => {
    expect(() => new ImpairmentModel(1, { loss: 1.5 })).toThrow(RangeError);
    expect(() => new ImpairmentModel(1, { burstLength: 0.5 })).toThrow(RangeError);
    expect(() => new ImpairmentModel(1, { jitterMs: -1 })).toThrow(RangeError);
  });
});

describe('startImpairingRelay (loopback sockets)', () => {
  let relay: ImpairingRelay | undefined;
  const socks: dgram.Socket[] = [];
  afterEach(async () => {
    await relay?.close();
    for (const s of socks.splice(0)) await new Promise<void>((r) => s.close(() => r()));
  });

  const open = async () => {
    const s = dgram.createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    socks.push(s);
    return s;
  };
  const rtp = (seq: number) => {
    const b = Buffer.alloc(12 + 160, 0xff);
    b[0] = 0x80;
    b.writeUInt16BE(seq & 0xffff, 2);
    b.writeUInt32BE((seq * 160) >>> 0, 4);
    return b;
  };

  it('forwards both ways, learns A from its first packet, reorders with jitter, duplicates and drops as counted, closes cleanly', async () => {
    const a = await open();
    const b = await open();
    relay = await startImpairingRelay({ seed: SEED, impair: IMPAIR, b: { address: '127.0.0.1', port: b.address().port } });
    expect(relay.a.port % 2).toBe(0);
    const atB: number[] = [];
    const atA: number[] = [];
    b.on('message', (m) => atB.push(m.readUInt16BE(2)));
    a.on('message', (m) => atA.push(m.readUInt16BE(2)));
    // 150 packets each way, 20 ms apart (3 s), seq wrapping on the way A -> B.
    const N = 150;
    for (let i = 0; i < N; i++) {
      a.send(rtp(65_500 + i), relay.a.port, '127.0.0.1');
      if (i > 0) b.send(rtp(1000 + i), relay.b.port, '127.0.0.1'); // B's first comes after A is learnt
      await new Promise((r) => setTimeout(r, 20));
    }
    // Everything in flight delivered (no fixed sleep: a loaded machine may take longer).
    const r = relay;
    const settled = () => {
      const t = r.stats();
      return t.aToB.pending === 0 && t.bToA.pending === 0 && atB.length === t.aToB.sent && atA.length === t.bToA.sent;
    };
    for (const deadline = Date.now() + 10_000; !settled() && Date.now() < deadline; ) await new Promise((res) => setTimeout(res, 20));
    const s = relay.stats();
    const ctx = `seed ${SEED}: ${describeRelayStats(s)}`;
    expect(relay.endpoint('a'), ctx).toEqual({ address: '127.0.0.1', port: a.address().port });
    expect(s.aToB.received, ctx).toBe(N);
    expect(s.aToB.sent, ctx).toBe(N - s.aToB.dropped + s.aToB.duplicated);
    expect(atB.length, ctx).toBe(s.aToB.sent);
    expect(atA.length, ctx).toBe(s.bToA.sent);
    expect(s.aToB.dropped + s.bToA.dropped, ctx).toBeGreaterThan(0);
    expect(s.aToB.reordered, ctx).toBeGreaterThan(10);
    // What B saw out of order (wrap-aware) matches the relay's count.
    let high = atB[0]!;
    let seen = 0;
    for (const q of atB.slice(1)) {
      if (((q - high + 0x8000) & 0xffff) - 0x8000 < 0) seen++;
      else high = q;
    }
    expect(seen, ctx).toBe(s.aToB.reordered);
    // Same seed, same decisions: the drops are the model's.
    const m = new ImpairmentModel(SEED, IMPAIR);
    expect(Array.from({ length: N }, () => m.decide()).filter((d) => d.drop).length).toBe(s.aToB.dropped);
    // A packet in flight at close() is dropped, and nothing fires after.
    a.send(rtp(1), relay.a.port, '127.0.0.1');
    await new Promise((r) => setTimeout(r, 2));
    const before = atB.length;
    await relay.close();
    await relay.close();
    expect(relay.closed).toBe(true);
    await new Promise((r) => setTimeout(r, 100));
    expect(atB.length).toBe(before);
  });
});
