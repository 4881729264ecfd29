/**
 * RtpSession with SDES-SRTP over real UDP on loopback: two sessions with crossed keys exchange
 * RTP and RTCP; what is on the wire is not the payload; a peer with other keys and a forged or
 * replayed datagram are dropped and counted, never emitted; new keys (re-INVITE) take effect.
 * The same through a media worker (RemoteRtpSession), as calls run by default.
 */
import dgram from 'node:dgram';
import { randomBytes, randomInt } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { PortAllocator } from '../../src/media/port-allocator.ts';
import { RtpSession, type RtpSessionOptions } from '../../src/media/rtp-session.ts';
import { MediaWorkerPool, RemoteRtpSession } from '../../src/media/media-worker-pool.ts';
import type { SrtpKeys } from '../../src/media/srtp.ts';
import type { ReceivedRtp } from '../../src/media/types.ts';
import { delay, until } from '../helpers/until.ts';

const BASE = 20000 + 2 * randomInt(0, 9000);
const allocator = new PortAllocator({ min: BASE, max: BASE + 99, address: '127.0.0.1' });
const open: { close(): void }[] = [];
afterEach(() => {
  for (const o of open.splice(0)) o.close();
});

function keys(suite: SrtpKeys['suite'] = 'AES_CM_128_HMAC_SHA1_80'): [SrtpKeys, SrtpKeys] {
  const a = randomBytes(30);
  const b = randomBytes(30);
  return [
    { suite, sendKey: a, receiveKey: b },
    { suite, sendKey: b, receiveKey: a },
  ];
}

async function session(options: Partial<RtpSessionOptions>): Promise<RtpSession> {
  const s = new RtpSession({ ports: await allocator.allocate(), clockRate: 8000, rtcpIntervalMs: 0, mediaTimeoutMs: 0, ...options });
  open.push(s);
  return s;
}

async function pair(a: Partial<RtpSessionOptions>, b: Partial<RtpSessionOptions>): Promise<[RtpSession, RtpSession]> {
  const sa = await session(a);
  const sb = await session(b);
  sa.setRemote({ address: '127.0.0.1', port: sb.local.rtpPort });
  sb.setRemote({ address: '127.0.0.1', port: sa.local.rtpPort });
  return [sa, sb];
}

function collect(s: { on(e: 'rtp', fn: (p: ReceivedRtp) => void): unknown }): ReceivedRtp[] {
  const got: ReceivedRtp[] = [];
  s.on('rtp', (p) => got.push({ ...p, payload: p.payload.slice() }));
  return got;
}

const frame = (i: number) => new Uint8Array(160).fill(i & 0xff);

describe('RtpSession with SRTP', () => {
  for (const suite of ['AES_CM_128_HMAC_SHA1_80', 'AES_CM_128_HMAC_SHA1_32'] as const) {
    it(`${suite}: both ways, payloads intact; the wire carries ciphertext with the tag`, async () => {
      const [ka, kb] = keys(suite);
      const [a, b] = await pair({ srtp: ka }, { srtp: kb });
      const spy = dgram.createSocket('udp4');
      open.push({ close: () => spy.close() });
      await new Promise<void>((r) => spy.bind(0, '127.0.0.1', r));
      const wire: Buffer[] = [];
      spy.on('message', (m) => wire.push(m));
      const gotA = collect(a);
      const gotB = collect(b);
      for (let i = 0; i < 20; i++) {
        a.send(frame(i), { payloadType: 0, timestampIncrement: 160 });
        b.send(frame(100 + i), { payloadType: 0, timestampIncrement: 160 });
      }
      await until(() => gotA.length === 20 && gotB.length === 20, 'both streams');
      expect(gotB.map((p) => p.payload[0])).toEqual(Array.from({ length: 20 }, (_, i) => i));
      expect(gotA.map((p) => p.payload[5])).toEqual(Array.from({ length: 20 }, (_, i) => 100 + i));
      // A copy of a's stream to the spy: what a peer without keys sees.
      a.setRemote({ address: '127.0.0.1', port: (spy.address() as { port: number }).port });
      a.send(new Uint8Array(160).fill(0x55), { payloadType: 0, timestampIncrement: 160 });
      await until(() => wire.length === 1, 'a packet at the spy');
      expect(wire[0]!.length).toBe(12 + 160 + (suite.endsWith('80') ? 10 : 4));
      expect(wire[0]!.subarray(12, 172).every((x) => x === 0x55)).toBe(false);
      expect(b.stats().dropped.srtpAuthFailed).toBe(0);
    });
  }

  it('packets under other keys, forged and replayed ones are dropped and counted, never emitted', async () => {
    const [ka, kb] = keys();
    const [, stranger] = keys();
    const [a, b] = await pair({ srtp: stranger }, { srtp: kb });
    void ka;
    const got = collect(b);
    for (let i = 0; i < 5; i++) a.send(frame(i), { payloadType: 0, timestampIncrement: 160 });
    await until(() => b.stats().dropped.srtpAuthFailed === 5, '5 authentication failures');
    expect(got).toHaveLength(0);

    // Replay: a raw socket captures a genuine packet and sends it twice.
    const [k1, k2] = keys();
    const [c, d] = await pair({ srtp: k1 }, { srtp: k2 });
    const tap = dgram.createSocket('udp4');
    open.push({ close: () => tap.close() });
    await new Promise<void>((r) => tap.bind(0, '127.0.0.1', r));
    const captured: Buffer[] = [];
    tap.on('message', (m) => captured.push(m));
    c.setRemote({ address: '127.0.0.1', port: (tap.address() as { port: number }).port });
    c.send(frame(7), { payloadType: 0, timestampIncrement: 160 });
    await until(() => captured.length === 1, 'captured');
    const gotD = collect(d);
    tap.send(captured[0]!, d.local.rtpPort, '127.0.0.1');
    await until(() => gotD.length === 1, 'the genuine packet');
    tap.send(captured[0]!, d.local.rtpPort, '127.0.0.1');
    const forged = Buffer.from(captured[0]!);
    forged[3]! ^= 1; // another sequence number, same tag
    tap.send(forged, d.local.rtpPort, '127.0.0.1');
    await until(() => d.stats().dropped.srtpReplayed === 1 && d.stats().dropped.srtpAuthFailed === 1, 'replay and forgery counted');
    await delay(50);
    expect(gotD).toHaveLength(1);
  });

  it('SRTCP: reports cross and are read (RTT appears); plain RTCP to an SRTP session is dropped', async () => {
    const [ka, kb] = keys('AES_CM_128_HMAC_SHA1_32');
    const [a, b] = await pair({ srtp: ka, rtcpIntervalMs: 100 }, { srtp: kb, rtcpIntervalMs: 100 });
    a.setRemote({ address: '127.0.0.1', port: b.local.rtpPort, rtcpPort: b.local.rtcpPort });
    b.setRemote({ address: '127.0.0.1', port: a.local.rtpPort, rtcpPort: a.local.rtcpPort });
    const timer = setInterval(() => {
      a.send(frame(1), { payloadType: 0, timestampIncrement: 160 });
      b.send(frame(2), { payloadType: 0, timestampIncrement: 160 });
    }, 20);
    try {
      await until(() => a.stats().rttMs !== undefined && b.stats().rtcpReceived >= 2, 'SRTCP reports with a round trip', 5000);
      expect(a.stats().dropped.rtcpMalformed + (a.stats().dropped.srtpAuthFailed ?? 0)).toBe(0);
      const plain = await session({ rtcpIntervalMs: 100 });
      plain.setRemote({ address: '127.0.0.1', port: b.local.rtpPort, rtcpPort: b.local.rtcpPort });
      await until(() => (b.stats().dropped.srtcpAuthFailed ?? 0) >= 1, 'plain RTCP dropped', 5000);
    } finally {
      clearInterval(timer);
    }
  });

  it('the sequence number wraps (ROC 0 -> 1) on the wire and every packet still authenticates', async () => {
    const [ka, kb] = keys('AES_CM_128_HMAC_SHA1_32');
    const [a, b] = await pair({ srtp: ka, initialSequence: 65525 }, { srtp: kb });
    const got = collect(b);
    for (let i = 0; i < 30; i++) {
      a.send(frame(i), { payloadType: 0, timestampIncrement: 160 });
      if (i % 5 === 4) await delay(5); // let the receiver keep up
    }
    await until(() => got.length === 30, '30 packets across the wrap');
    expect(got.map((p) => p.sequenceNumber).slice(9, 12)).toEqual([65534, 65535, 0]);
    expect(got.map((p) => p.payload[0])).toEqual(Array.from({ length: 30 }, (_, i) => i));
    expect(b.stats().dropped.srtpAuthFailed).toBe(0);
  });

  it('setSrtp: new keys on both sides (re-INVITE) and the stream goes on', async () => {
    const [ka, kb] = keys();
    const [a, b] = await pair({ srtp: ka }, { srtp: kb });
    const got = collect(b);
    a.send(frame(1), { payloadType: 0, timestampIncrement: 160 });
    await until(() => got.length === 1, 'first');
    const [na, nb] = keys('AES_CM_128_HMAC_SHA1_32');
    a.setSrtp(na);
    a.send(frame(2), { payloadType: 0, timestampIncrement: 160 });
    await until(() => b.stats().dropped.srtpAuthFailed === 1, 'old keys at b fail the new packet');
    b.setSrtp(nb);
    a.send(frame(3), { payloadType: 0, timestampIncrement: 160 });
    await until(() => got.length === 2, 'after re-keying');
    expect(got[1]!.payload[0]).toBe(3);
  });
});

describe('RemoteRtpSession (media worker) with SRTP', () => {
  it('the keys cross to the worker in the session message; setSrtp too', async () => {
    const pool = new MediaWorkerPool({ workers: 1, portMin: BASE + 200, portMax: BASE + 299, address: '127.0.0.1', logger: { warn: () => {}, info: () => {}, error: () => {}, debug: () => {} } as never });
    const [ka, kb] = keys();
    const remote = new RemoteRtpSession(await pool.allocate(), { clockRate: 8000, mediaTimeoutMs: 0, srtp: ka });
    await remote.opened;
    const local = await session({ srtp: kb });
    local.setRemote({ address: '127.0.0.1', port: remote.local.rtpPort });
    remote.setRemote({ address: '127.0.0.1', port: local.local.rtpPort });
    const got = collect(local);
    const fromWorker = collect(remote);
    await delay(50); // the worker starts forwarding packets once the 'forwardRtp' message is there
    remote.send(frame(9), { payloadType: 0, timestampIncrement: 160 });
    local.send(frame(8), { payloadType: 0, timestampIncrement: 160 });
    await until(() => got.length === 1 && fromWorker.length === 1, 'both ways through the worker');
    expect(got[0]!.payload[0]).toBe(9);
    expect(fromWorker[0]!.payload[0]).toBe(8);
    const [na, nb] = keys('AES_CM_128_HMAC_SHA1_32');
    remote.setSrtp(na);
    local.setSrtp(nb);
    await delay(50);
    remote.send(frame(10), { payloadType: 0, timestampIncrement: 160 });
    await until(() => got.length === 2, 'after re-keying in the worker');
    expect(got[1]!.payload[0]).toBe(10);
    remote.close();
    await pool.close();
  });
});
