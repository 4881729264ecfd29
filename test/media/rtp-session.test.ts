/**
 * RtpSession over real UDP sockets on loopback: two sessions talk to each other (and to plain
 * sockets standing in for odd peers, a decoy SDP address, a lossy link, a fuzzer).
 */
import dgram from 'node:dgram';
import { randomInt } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { CompoundPacket, type ReceiverReportPacket, type SenderReportPacket, type SdesPacket } from 'rtp.js/packets';
import { PortAllocator } from '../../src/media/port-allocator.ts';
import { RtpSession, type RtpSessionOptions } from '../../src/media/rtp-session.ts';
import type { Clock, ReceivedRtp } from '../../src/media/types.ts';
import type { MediaError } from '../../src/media/errors.ts';

// A random high range per run, so parallel test files rarely meet; the allocator skips
// whatever is taken anyway.
const BASE = 20000 + 2 * randomInt(0, 9000);
const allocator = new PortAllocator({ min: BASE, max: BASE + 399, address: '127.0.0.1' });
const allocator6 = new PortAllocator({ min: BASE, max: BASE + 399, address: '::1' });

const open: { close(): void }[] = [];
afterEach(() => {
  for (const o of open.splice(0)) o.close();
});

async function session(options: Partial<RtpSessionOptions> = {}, alloc = allocator): Promise<RtpSession> {
  const ports = await alloc.allocate();
  const s = new RtpSession({ ports, clockRate: 8000, rtcpIntervalMs: 0, mediaTimeoutMs: 0, ...options });
  open.push(s);
  return s;
}

/** Two sessions whose SDP addresses point at each other. */
async function pair(a: Partial<RtpSessionOptions> = {}, b: Partial<RtpSessionOptions> = {}, alloc = allocator) {
  const sa = await session(a, alloc);
  const sb = await session(b, alloc);
  sa.setRemote({ address: sb.local.address, port: sb.local.rtpPort });
  sb.setRemote({ address: sa.local.address, port: sa.local.rtpPort });
  return [sa, sb] as const;
}

async function udp(address = '127.0.0.1'): Promise<dgram.Socket> {
  const s = dgram.createSocket(address.includes(':') ? 'udp6' : 'udp4');
  await new Promise<void>((resolve) => s.bind(0, address, resolve));
  open.push({ close: () => s.close() });
  return s;
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function collect(s: RtpSession): ReceivedRtp[] {
  const got: ReceivedRtp[] = [];
  s.on('rtp', (p) => got.push({ ...p, payload: p.payload.slice() }));
  return got;
}

function manualClock(t = 0): Clock & { t: number } {
  return {
    t,
    now() {
      return this.t;
    },
  };
}

const frame = (fill: number, n = 160) => new Uint8Array(n).fill(fill);

const ipv6 = await (async () => {
  const s = dgram.createSocket('udp6');
  try {
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.bind(0, '::1', resolve);
    });
    return true;
  } catch {
    return false;
  } finally {
    s.close();
  }
})();

async function flowBothWays(alloc: PortAllocator): Promise<void> {
  const [a, b] = await pair({}, {}, alloc);
  const atB = collect(b);
  const atA = collect(a);
  for (let i = 0; i < 20; i++) {
    expect(a.send(frame(i), { payloadType: 0, timestampIncrement: 160 })).toBe(true);
    expect(b.send(frame(100 + i, 80), { payloadType: 8, timestampIncrement: 80 })).toBe(true);
  }
  await waitFor('20 packets each way', () => atB.length === 20 && atA.length === 20);
  for (const [got, from, inc, pt, base] of [
    [atB, a, 160, 0, 0],
    [atA, b, 80, 8, 100],
  ] as const) {
    for (let i = 0; i < 20; i++) {
      const p = got[i]!;
      expect(p.ssrc).toBe(from.ssrc);
      expect(p.payloadType).toBe(pt);
      expect(p.sequenceNumber).toBe((got[0]!.sequenceNumber + i) & 0xffff);
      expect(p.timestamp).toBe((got[0]!.timestamp + i * inc) >>> 0);
      expect(p.marker).toBe(i === 0); // first packet of the first talk spurt
      expect(p.payload[0]).toBe(base + i);
      expect(p.payload.length).toBe(inc);
    }
  }
  const sa = a.stats();
  const sb = b.stats();
  expect(sa.packetsSent).toBe(20);
  expect(sa.bytesSent).toBe(20 * 160);
  expect(sb.packetsReceived).toBe(20);
  expect(sb.bytesReceived).toBe(20 * 160);
  expect(sb.packetsLost).toBe(0);
  expect(sb.remoteSsrc).toBe(a.ssrc);
  expect(sa.packetsReceived).toBe(20);
  expect(sa.bytesReceived).toBe(20 * 80);
}

describe('RtpSession over loopback', () => {
  it('carries packets both ways on 127.0.0.1 with consecutive sequence numbers and timestamps', async () => {
    await flowBothWays(allocator);
  });

  it.skipIf(!ipv6)('carries packets both ways on ::1', async () => {
    await flowBothWays(allocator6);
  });

  it('keeps every payload intact in a burst (the reused send buffer is never overwritten early)', async () => {
    const [a, b] = await pair();
    const got = collect(b);
    // Bursts of 50 (a larger burst can overflow the receiver's default socket buffer).
    for (let i = 0; i < 300; i++) {
      const payload = new Uint8Array(172);
      for (let j = 0; j < payload.length; j++) payload[j] = (i * 7 + j) & 0xff;
      a.send(payload, { payloadType: 0, timestampIncrement: 160 });
      if (i % 50 === 49) await waitFor(`${i + 1} packets`, () => got.length === i + 1);
    }
    got.forEach((p, i) => {
      const seqOffset = (p.sequenceNumber - got[0]!.sequenceNumber) & 0xffff;
      expect(seqOffset).toBe(i);
      for (let j = 0; j < p.payload.length; j++) expect(p.payload[j]).toBe((i * 7 + j) & 0xff);
    });
  });

  it('wraps the 16-bit sequence and the 32-bit timestamp; the receiver extends the sequence (RFC 3550 A.1)', async () => {
    const [a, b] = await pair({ initialSequence: 65530, initialTimestamp: 2 ** 32 - 480 }, {});
    const got = collect(b);
    for (let i = 0; i < 12; i++) a.send(frame(i), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('12 packets', () => got.length === 12);
    expect(got.map((p) => p.sequenceNumber)).toEqual([65530, 65531, 65532, 65533, 65534, 65535, 0, 1, 2, 3, 4, 5]);
    expect(got.map((p) => p.timestamp)).toEqual(
      Array.from({ length: 12 }, (_, i) => (2 ** 32 - 480 + i * 160) >>> 0),
    );
    expect(got[3]!.timestamp).toBe(0); // 2^32 - 480 + 3 * 160
    const stats = b.stats();
    expect(stats.extendedHighestSeq).toBe(65536 + 5); // one cycle + max_seq 5
    expect(stats.packetsLost).toBe(0);
  });

  it('latches onto the source the peer really sends from (symmetric RTP, RFC 4961)', async () => {
    const clock = manualClock(0); // A's view of time decides "the latched source went quiet"
    const a = await session({ relatchAfterMs: 500, clock });
    const b = await session();
    const decoy = await udp(); // what B's SDP claimed; B really sends from its RTP socket
    let decoyGot = 0;
    decoy.on('message', () => decoyGot++);
    a.setRemote({ address: '127.0.0.1', port: decoy.address().port });
    b.setRemote({ address: '127.0.0.1', port: a.local.rtpPort });
    const atB = collect(b);
    const latches: unknown[] = [];
    a.on('latch', (r) => latches.push(r));

    a.send(frame(1), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('the decoy gets the pre-latch packet', () => decoyGot === 1);
    expect(a.remote).toEqual({ address: '127.0.0.1', port: decoy.address().port, latched: false });

    b.send(frame(2), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('a latches', () => latches.length === 1);
    expect(latches[0]).toEqual({ address: '127.0.0.1', port: b.local.rtpPort });
    expect(a.remote).toEqual({ address: '127.0.0.1', port: b.local.rtpPort, latched: true });
    a.send(frame(3), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('b gets the reply', () => atB.length === 1);
    expect(atB[0]!.payload[0]).toBe(3);
    expect(decoyGot).toBe(1);

    // A third party while B is active (499 ms after B's last packet): dropped, no re-latch.
    const intruder = await session();
    intruder.setRemote({ address: '127.0.0.1', port: a.local.rtpPort });
    const atA = collect(a);
    clock.t += 499;
    intruder.send(frame(9), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('the intruder packet is dropped', () => a.stats().dropped.wrongSource === 1);
    expect(atA).toHaveLength(0);
    expect(latches).toHaveLength(1);

    // Once B has been silent for relatchAfterMs, a new source takes over (the path moved).
    clock.t += 1;
    intruder.send(frame(10), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('re-latch', () => latches.length === 2);
    expect(latches[1]).toEqual({ address: '127.0.0.1', port: intruder.local.rtpPort });
    expect(atA.map((p) => p.payload[0])).toEqual([10]);
    const atIntruder = collect(intruder);
    a.send(frame(11), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('the reply goes to the new source', () => atIntruder.length === 1);
    expect(atB).toHaveLength(1);
  });

  it('sets the marker on the first packet of a talk spurt and moves the timestamp over the pause', async () => {
    const clock = manualClock(1000);
    const [a, b] = await pair({ clock, initialTimestamp: 5000 }, {});
    const got = collect(b);
    const send = (marker?: boolean) =>
      a.send(frame(0), marker === undefined ? { payloadType: 0, timestampIncrement: 160 } : { payloadType: 0, timestampIncrement: 160, marker });
    for (let i = 0; i < 3; i++) {
      send();
      clock.t += 20;
    }
    clock.t += 420; // 480 ms after the last packet was due... a pause
    send();
    clock.t += 20;
    send();
    a.startTalkspurt(); // the caller knows a new spurt starts (no pause this time)
    clock.t += 20;
    send();
    clock.t += 20;
    send(true); // explicit marker
    clock.t += 500;
    send(false); // explicit "no marker" wins over the detected pause
    await waitFor('8 packets', () => got.length === 8);
    expect(got.map((p) => p.marker)).toEqual([true, false, false, true, false, true, true, false]);
    expect(got.map((p) => p.timestamp - 5000)).toEqual([
      0,
      160,
      320,
      // the 4th packet is due at t=1060; sent at 1480: 420 ms = 21 frames late
      480 + 21 * 160,
      480 + 22 * 160,
      480 + 23 * 160,
      480 + 24 * 160,
      // 500 - 20 ms late = 24 frames
      480 + 25 * 160 + 24 * 160,
    ]);
  });

  it('exchanges SR/RR with the right loss over a link that drops every 10th packet', async () => {
    const a = await session({ rtcpIntervalMs: 120, initialSequence: 65500, initialTimestamp: 2 ** 32 - 1600 });
    const b = await session({ rtcpIntervalMs: 120 });
    // The lossy link: A -> proxy -> B for RTP; B latches onto the proxy and replies through it.
    const proxy = await udp();
    let fromA = 0;
    let aAddr: { address: string; port: number } | undefined;
    proxy.on('message', (msg, rinfo) => {
      if (rinfo.port === b.local.rtpPort) {
        if (aAddr) proxy.send(msg, aAddr.port, aAddr.address);
        return;
      }
      aAddr = { address: rinfo.address, port: rinfo.port };
      fromA++;
      if (fromA % 10 === 0) return; // drop packets 10, 20, ... 100
      proxy.send(msg, b.local.rtpPort, '127.0.0.1');
    });
    a.setRemote({ address: '127.0.0.1', port: proxy.address().port, rtcpPort: b.local.rtcpPort });
    b.setRemote({ address: '127.0.0.1', port: a.local.rtpPort });
    const got = collect(b);
    const reports: { packetsLost: number; fractionLost: number }[] = [];
    a.on('report', (r) => reports.push(r));

    for (let i = 0; i < 101; i++) {
      a.send(frame(i & 0xff), { payloadType: 0, timestampIncrement: 160 });
      if (i % 10 === 0) await sleep(2);
    }
    await waitFor('91 packets at B', () => got.length === 91);
    const sb = b.stats();
    expect(sb.packetsLost).toBe(10);
    expect(sb.extendedHighestSeq).toBe(65500 + 100);
    // Received timestamps wrapped too, and lost ones left gaps of exactly one frame.
    expect(got.at(-1)!.timestamp).toBe((2 ** 32 - 1600 + 100 * 160) >>> 0);

    // B's report (an RR: B sent no RTP) tells A the same; A's SR reached B, so A has a round trip.
    await waitFor('a report with the loss', () => reports.some((r) => r.packetsLost === 10));
    const first = reports.find((r) => r.packetsLost === 10)!;
    expect(first.fractionLost).toBeGreaterThan(0);
    expect(first.fractionLost).toBeLessThanOrEqual(0.25);
    await waitFor('rtt', () => a.stats().rttMs !== undefined);
    const sa = a.stats();
    expect(sa.rttMs).toBeGreaterThanOrEqual(0);
    expect(sa.rttMs).toBeLessThan(100);
    expect(sa.remote?.packetsLost).toBe(10);
    expect(sa.remote?.extendedHighestSeq).toBe(65500 + 100);
    expect(sa.rtcpReceived).toBeGreaterThan(0);
    expect(b.stats().rtcpReceived).toBeGreaterThan(0);
  });

  it('sends SR when it has sent RTP and RR when not, each with SDES CNAME; BYE on close', async () => {
    const sink = await udp();
    const rtpSink = await udp();
    const seen: CompoundPacket[] = [];
    sink.on('message', (msg) => seen.push(new CompoundPacket(new DataView(msg.buffer, msg.byteOffset, msg.length))));
    const sender = await session({ rtcpIntervalMs: 60, cname: 'sender@test' });
    const receiverOnly = await session({ rtcpIntervalMs: 60, cname: 'listener@test' });
    const remote = { address: '127.0.0.1', port: rtpSink.address().port, rtcpPort: sink.address().port };
    sender.setRemote(remote);
    receiverOnly.setRemote(remote);
    for (let i = 0; i < 5; i++) sender.send(frame(i), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('reports from both', () => seen.length >= 4);
    const bySsrc = (ssrc: number) =>
      seen.filter((c) => (c.getPackets()[0] as SenderReportPacket | ReceiverReportPacket).getSsrc() === ssrc);
    const sr = bySsrc(sender.ssrc)[0]!.getPackets();
    expect(sr[0]!.getPacketType()).toBe(200);
    expect((sr[0] as SenderReportPacket).getPacketCount()).toBe(5);
    expect((sr[0] as SenderReportPacket).getOctetCount()).toBe(5 * 160);
    expect((sr[1] as SdesPacket).getChunks()[0]!.getItems()).toEqual([{ type: 1, text: 'sender@test' }]);
    const rr = bySsrc(receiverOnly.ssrc)[0]!.getPackets();
    expect(rr[0]!.getPacketType()).toBe(201);
    expect((rr[1] as SdesPacket).getChunks()[0]!.getItems()).toEqual([{ type: 1, text: 'listener@test' }]);

    const before = seen.length;
    // SR only while we send (RFC 3550 6.4: RTP sent since the report before last); send again.
    sender.send(frame(9), { payloadType: 0, timestampIncrement: 160 });
    sender.close();
    await waitFor('the BYE', () => seen.length > before && seen.some((c) => c.getPackets().some((p) => p.getPacketType() === 203)));
    const bye = seen.find((c) => c.getPackets().some((p) => p.getPacketType() === 203))!;
    expect(bye.getPackets().map((p) => p.getPacketType())).toEqual([200, 202, 203]);
  });

  it('reads the 24-bit signed cumulative loss of a peer report (rtp.js getTotalLost reads 12 bits)', async () => {
    const a = await session();
    const peer = await udp();
    a.setRemote({ address: '127.0.0.1', port: peer.address().port });
    const reports: { packetsLost: number; fractionLost: number; jitterMs: number }[] = [];
    a.on('report', (r) => reports.push(r));
    const rr = (lostBytes: [number, number, number]) => {
      const buf = Buffer.alloc(32);
      buf[0] = 0x81; // V=2, RC=1
      buf[1] = 201;
      buf.writeUInt16BE(7, 2); // length in words - 1
      buf.writeUInt32BE(0xabcdef01, 4); // reporter
      buf.writeUInt32BE(a.ssrc, 8); // about our stream
      buf[12] = 64; // fraction lost 64/256
      buf[13] = lostBytes[0];
      buf[14] = lostBytes[1];
      buf[15] = lostBytes[2];
      buf.writeUInt32BE(70000, 16); // extended highest seq
      buf.writeUInt32BE(800, 20); // jitter: 800 units = 100 ms at 8 kHz
      return buf;
    };
    peer.send(rr([0x00, 0x13, 0x88]), a.local.rtcpPort, '127.0.0.1'); // 5000
    peer.send(rr([0xff, 0xff, 0xfd]), a.local.rtcpPort, '127.0.0.1'); // -3 (duplicates)
    await waitFor('two reports', () => reports.length === 2);
    expect(reports.map((r) => r.packetsLost)).toEqual([5000, -3]);
    expect(reports[0]!.fractionLost).toBe(0.25);
    expect(reports[0]!.jitterMs).toBe(100);
    expect(a.stats().remote?.extendedHighestSeq).toBe(70000);
  });

  it('computes interarrival jitter per RFC 3550 A.8 (timestamp units, reported in ms)', async () => {
    const clockA = manualClock(0);
    const clockB = manualClock(0);
    const [a, b] = await pair({ clock: clockA, initialTimestamp: 1000 }, { clock: clockB });
    const got = collect(b);
    // Arrival times in ms: a 20 ms cadence with a deterministic wobble.
    const arrivals = Array.from({ length: 40 }, (_, i) => i * 20 + [0, 7, 2, 11, 4][i % 5]!);
    for (let i = 0; i < arrivals.length; i++) {
      clockB.t = arrivals[i]!;
      a.send(frame(i), { payloadType: 0, timestampIncrement: 160 });
      clockA.t += 20;
      await waitFor(`packet ${i}`, () => got.length === i + 1);
    }
    let jitter = 0;
    for (let i = 1; i < got.length; i++) {
      const d = (got[i]!.arrivalMs - got[i - 1]!.arrivalMs) * 8 - (got[i]!.timestamp - got[i - 1]!.timestamp);
      jitter += (Math.abs(d) - jitter) / 16;
    }
    expect(got.map((p) => p.arrivalMs)).toEqual(arrivals);
    expect(b.stats().jitterMs).toBeCloseTo(jitter / 8, 9);
    expect(b.stats().jitterMs).toBeGreaterThan(1);
  });

  it('emits timeout once when no RTP arrives, and not while packets flow', async () => {
    const [a, b] = await pair({}, { mediaTimeoutMs: 250 });
    let timeouts = 0;
    b.on('timeout', () => timeouts++);
    const start = Date.now();
    const flowing = setInterval(() => a.send(frame(0), { payloadType: 0, timestampIncrement: 160 }), 20);
    await sleep(800);
    clearInterval(flowing);
    expect(timeouts).toBe(0);
    const stopped = Date.now();
    await waitFor('the timeout', () => timeouts === 1);
    const after = Date.now() - stopped;
    expect(after).toBeGreaterThanOrEqual(200);
    expect(after).toBeLessThan(1500);
    await sleep(500);
    expect(timeouts).toBe(1); // once per outage
    // Media comes back: re-armed, a second outage is reported again.
    a.send(frame(0), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('the second timeout', () => timeouts === 2);
    expect(Date.now() - start).toBeGreaterThan(1500);

    // 0 disables it (hold).
    b.setMediaTimeout(0);
    await sleep(300);
    expect(timeouts).toBe(2);
  });

  it('close() is idempotent, says BYE, releases both ports and stops everything', async () => {
    const [a, b] = await pair({}, { rtcpIntervalMs: 0 });
    const atB = collect(b);
    let byes = 0;
    b.on('bye', () => byes++);
    a.send(frame(1), { payloadType: 0, timestampIncrement: 160 });
    a.send(frame(2), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('b hears a', () => atB.length === 2);
    const inUse = allocator.inUse;
    let closes = 0;
    a.on('close', () => closes++);
    const { rtpPort, rtcpPort } = a.local;
    a.close();
    a.close();
    expect(a.closed).toBe(true);
    expect(closes).toBe(1);
    expect(allocator.inUse).toBe(inUse - 1);
    await waitFor('the BYE', () => byes === 1);
    expect(a.send(frame(3), { payloadType: 0, timestampIncrement: 160 })).toBe(false);
    await expect(a.sendDtmf('1')).rejects.toMatchObject({ code: 'MEDIA_CLOSED' });
    // Both ports can be bound again right away.
    for (const port of [rtpPort, rtcpPort]) {
      const s = dgram.createSocket('udp4');
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.bind(port, '127.0.0.1', resolve);
      });
      s.close();
    }
  });

  it('counts random datagrams and RTCP garbage without throwing (fast-check fuzz)', async () => {
    const [a, b] = await pair({ relatchAfterMs: 50 }, {});
    const errors: MediaError[] = [];
    a.on('error', (e) => errors.push(e));
    const fuzzer = await udp();
    const anyBytes = fc.uint8Array({ minLength: 0, maxLength: 300 });
    const rtpLike = fc
      .tuple(fc.integer({ min: 0x80, max: 0xbf }), fc.uint8Array({ minLength: 0, maxLength: 200 }))
      .map(([b0, rest]) => Uint8Array.from([b0, ...rest]));
    const rtcpLike = fc
      .tuple(fc.integer({ min: 0x80, max: 0xbf }), fc.integer({ min: 192, max: 223 }), fc.uint8Array({ maxLength: 120 }))
      .map(([b0, b1, rest]) => Uint8Array.from([b0, b1, ...rest]));
    const datagrams = fc.sample(fc.oneof(anyBytes, rtpLike, rtcpLike), { numRuns: 3000, seed: 4733 });
    const total = () => {
      const s = a.stats();
      const d = s.dropped;
      return (
        s.packetsReceived + s.rtcpReceived + d.tooShort + d.badVersion + d.malformed + d.wrongSource + d.badSequence + d.rtcpMalformed
      );
    };
    for (let i = 0; i < datagrams.length; i += 100) {
      const batch = datagrams.slice(i, i + 100);
      batch.forEach((d, j) => fuzzer.send(d, (i + j) % 2 === 0 ? a.local.rtpPort : a.local.rtcpPort, '127.0.0.1'));
      await waitFor(`batch ${i}`, () => total() === i + batch.length);
    }
    const d = a.stats().dropped;
    expect(d.tooShort + d.badVersion + d.malformed + d.rtcpMalformed).toBeGreaterThan(1000);
    expect(errors).toEqual([]);
    // Still a working session: the real peer re-latches after the fuzzer's silence.
    await sleep(80);
    const got = collect(a);
    b.send(frame(42), { payloadType: 0, timestampIncrement: 160 });
    b.send(frame(43), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('a real packet after the fuzz', () => got.length === 2);
    expect(got[1]!.payload[0]).toBe(43);
  });

  it('reports a throwing listener as an error event and keeps receiving', async () => {
    const [a, b] = await pair();
    const errors: MediaError[] = [];
    b.on('error', (e) => errors.push(e));
    let n = 0;
    b.on('rtp', () => {
      n++;
      throw new Error('listener bug');
    });
    a.send(frame(1), { payloadType: 0, timestampIncrement: 160 });
    a.send(frame(2), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('two packets', () => n === 2);
    expect(errors).toHaveLength(2);
    expect(errors[0]!.code).toBe('MEDIA_LISTENER_FAILED');
    expect((errors[0]!.cause as Error).message).toBe('listener bug');
  });

  it('signals a new SSRC so the jitter buffer can restart', async () => {
    const [a, b] = await pair();
    const changes: { previous: number | undefined; current: number }[] = [];
    b.on('ssrc', (c) => changes.push(c));
    a.send(frame(1), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('first source', () => changes.length === 1);
    // The peer restarts its stream from the same address with another SSRC.
    const ports = { ...a.local };
    a.close();
    const restarted = new RtpSession({
      ports: await new PortAllocator({ min: ports.rtpPort, max: ports.rtcpPort, address: '127.0.0.1' }).allocate(),
      clockRate: 8000,
      rtcpIntervalMs: 0,
      mediaTimeoutMs: 0,
      remote: { address: '127.0.0.1', port: b.local.rtpPort },
    });
    open.push(restarted);
    restarted.send(frame(2), { payloadType: 0, timestampIncrement: 160 });
    await waitFor('second source', () => changes.length === 2);
    expect(changes).toEqual([
      { previous: undefined, current: a.ssrc },
      { previous: a.ssrc, current: restarted.ssrc },
    ]);
  });

  it('rejects bad arguments with RangeError', async () => {
    const s = await session();
    expect(() => s.send(frame(0), { payloadType: 128, timestampIncrement: 160 })).toThrow(RangeError);
    expect(() => s.setRemote({ address: '127.0.0.1', port: 0 })).toThrow(RangeError);
    await expect(s.sendDtmf('X')).rejects.toThrow(RangeError);
    expect(s.send(frame(0), { payloadType: 0, timestampIncrement: 160 })).toBe(false); // no remote yet
    expect(s.stats().dropped.noRemote).toBe(1);
  });
});
