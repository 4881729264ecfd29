/**
 * The composed media paths over real UDP sockets on loopback: a 1 kHz tone sent as PCMU by one
 * RtpSession arrives at the other, goes through the jitter buffer, decoder and resampler, and
 * comes out as continuous 24 kHz frames; agent audio pushed at 24 kHz is paced out as RTP.
 */
import { randomInt } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PortAllocator } from '../../src/media/port-allocator.ts';
import { RtpSession } from '../../src/media/rtp-session.ts';
import { createCodec } from '../../src/media/codecs.ts';
import { initResamplers } from '../../src/media/resampler.ts';
import { InboundPath } from '../../src/media/inbound-path.ts';
import { OutboundPath } from '../../src/media/outbound-path.ts';
import { base64BytesToPcm16, base64Length, base64ToPcm16, pcm16ToBase64, pcm16ToBase64Bytes } from '../../src/media/pcm.ts';
import type { ReceivedRtp } from '../../src/media/types.ts';
import { amplitudeAt, db, tone } from './signal-analysis.ts';

const BASE = 20000 + 2 * randomInt(0, 9000);
const allocator = new PortAllocator({ min: BASE, max: BASE + 99, address: '127.0.0.1' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(() => initResamplers());

async function sessionPair() {
  const a = new RtpSession({ ports: await allocator.allocate(), clockRate: 8000, rtcpIntervalMs: 0, mediaTimeoutMs: 0 });
  const b = new RtpSession({ ports: await allocator.allocate(), clockRate: 8000, rtcpIntervalMs: 0, mediaTimeoutMs: 0 });
  a.setRemote({ address: '127.0.0.1', port: b.local.rtpPort });
  b.setRemote({ address: '127.0.0.1', port: a.local.rtpPort });
  return { a, b };
}

describe('inbound path over loopback RTP', () => {
  let s: Awaited<ReturnType<typeof sessionPair>>;
  afterAll(() => {
    s?.a.close();
    s?.b.close();
  });

  it('turns a PCMU tone into continuous 24 kHz frames with the tone intact', async () => {
    s = await sessionPair();
    const codec = createCodec('PCMU');
    const inbound = new InboundPath({ codec, jitter: { initialDepthMs: 40 } });
    s.b.on('rtp', (p: ReceivedRtp) => inbound.push(p));

    // One second of 1 kHz at -12 dBFS, sent as 50 packets of 20 ms at real pace.
    const pcm8k = tone(1000, 8000, 1, 8192);
    const payload = new Uint8Array(160);
    const frames: Int16Array[] = [];
    const start = performance.now();
    for (let i = 0; i < 50; i++) {
      codec.encode(pcm8k.subarray(i * 160, (i + 1) * 160), payload);
      s.a.send(payload, { payloadType: 0, timestampIncrement: 160, marker: i === 0 });
      await sleep(Math.max(0, start + (i + 1) * 20 - performance.now()));
      const f = inbound.tick(performance.now());
      if (f) frames.push(Int16Array.from(f));
    }
    for (let i = 0; i < 10; i++) {
      await sleep(20);
      const f = inbound.tick(performance.now());
      if (f) frames.push(Int16Array.from(f));
    }
    const st = inbound.stats();
    expect(st.received, JSON.stringify(st)).toBe(50);
    expect(st.decoded).toBeGreaterThanOrEqual(48);
    expect(frames.every((f) => f.length === 480)).toBe(true);
    // The middle of the output is the tone at its level: nothing lost, no clicks.
    const out = new Int16Array(frames.length * 480);
    frames.forEach((f, i) => out.set(f, i * 480));
    const from = 480 * 10;
    const level = db(amplitudeAt(out, 24000, 1000, from, 24000 / 2) / 8192);
    expect(Math.abs(level), `1 kHz level through the path: ${level.toFixed(2)} dB`).toBeLessThan(0.5);
    let maxStep = 0;
    for (let i = from + 1; i < from + 12000; i++) maxStep = Math.max(maxStep, Math.abs(out[i]! - out[i - 1]!));
    // A 1 kHz sine at 8192 changes by at most 8192*2*pi*1000/24000 ~ 2145 per sample.
    expect(maxStep, `largest sample step ${maxStep}`).toBeLessThan(2400);
    inbound.close();
    inbound.close();
    expect(inbound.closed).toBe(true);
  });
});

describe('outbound path', () => {
  it('paces 24 kHz audio pushed in odd chunk sizes out as 20 ms PCMU packets, marker on the first', async () => {
    const s = await sessionPair();
    try {
      const received: ReceivedRtp[] = [];
      s.b.on('rtp', (p: ReceivedRtp) => received.push({ ...p, payload: Uint8Array.from(p.payload) }));
      const codec = createCodec('PCMU');
      const out = new OutboundPath({ codec, send: (payload, marker, inc) => s.a.send(payload, { payloadType: codec.payloadType, timestampIncrement: inc, marker }) });
      const audio = tone(440, 24000, 0.2, 8000); // 200 ms = 10 frames
      for (let i = 0; i < audio.length; i += 777) out.push(audio.subarray(i, Math.min(audio.length, i + 777)));
      expect(out.stats().queuedMs).toBeCloseTo(200, 0);
      out.start();
      await sleep(400);
      expect(received.length).toBe(10);
      expect(received[0]!.marker).toBe(true);
      expect(received.slice(1).every((p) => !p.marker)).toBe(true);
      for (let i = 1; i < received.length; i++) {
        expect((received[i]!.timestamp - received[i - 1]!.timestamp) >>> 0).toBe(160);
        expect((received[i]!.sequenceNumber - received[i - 1]!.sequenceNumber) & 0xffff).toBe(1);
      }
      out.close();
    } finally {
      s.a.close();
      s.b.close();
    }
  });

  it('sendSilence: encoded silence fills the idle ticks (continuous RTP), audio plays in between with its marker; onSpurtStart follows that first audio packet', async () => {
    const sent: Array<{ silent: boolean; marker: boolean; inc: number }> = [];
    /** How many packets had gone out at each onSpurtStart (an agent turn's first audio out, docs/latency.md). */
    const spurts: number[] = [];
    const out = new OutboundPath({
      codec: createCodec('PCMU'),
      sendSilence: true,
      // PCMU silence is 0xff (mu-law of 0): a packet of only 0xff is a silent one.
      send: (p, marker, inc) => sent.push({ silent: p.every((b) => b === 0xff), marker, inc }),
      onSpurtStart: () => spurts.push(sent.length),
    });
    out.start();
    await sleep(110);
    const idle = sent.length;
    expect(idle).toBeGreaterThanOrEqual(3);
    expect(sent.every((x) => x.silent && !x.marker && x.inc === 160)).toBe(true);
    out.push(tone(440, 24000, 0.1, 8000)); // 5 frames
    await sleep(200);
    const audio = sent.slice(idle).filter((x) => !x.silent);
    expect(audio.length).toBe(5);
    expect(audio[0]!.marker).toBe(true);
    // Silence again after the tone: the stream never stops.
    expect(sent.at(-1)!.silent).toBe(true);
    // Once per spurt, right after its marker packet (not for silence, not for the later frames).
    expect(spurts).toEqual([sent.findIndex((x) => x.marker) + 1]);
    out.close();
  });

  it('barge-in: clear() drops the unplayed audio at once and reports how much', async () => {
    const sent: number[] = [];
    const out = new OutboundPath({ codec: createCodec('PCMA'), send: (p) => sent.push(p.length) });
    out.push(tone(300, 24000, 1, 4000)); // 1 s
    out.start();
    await sleep(110);
    const played = sent.length;
    const r = out.clear();
    expect(r.droppedMs).toBeGreaterThan(800);
    expect(r.droppedMs + played * 20).toBeGreaterThanOrEqual(980);
    await sleep(100);
    // At most the frame in flight at clear() time follows it.
    expect(sent.length - played).toBeLessThanOrEqual(1);
    expect(out.stats().droppedMs).toBe(r.droppedMs);
    out.close();
  });
});

describe('PCM16 base64', () => {
  it('round-trips samples and rejects bad input', () => {
    const samples = Int16Array.from([0, 1, -1, 32767, -32768, 1234]);
    const holder = { buffer: Buffer.alloc(0) };
    expect(Array.from(base64ToPcm16(pcm16ToBase64(samples), holder))).toEqual(Array.from(samples));
    expect(() => base64ToPcm16('not base64!', holder)).toThrow(/base64/);
    // Every way text can be 4-aligned and still not be base64: a character outside the alphabet,
    // whitespace, padding in the middle, too much padding.
    for (const bad of ['AAA!AAAA', 'AAAA AAA', 'AA==AAAA', 'A===', '====', 'AAAA\nAAA']) expect(() => base64ToPcm16(bad, holder), bad).toThrow(/base64/);
    expect(Array.from(base64ToPcm16('AAA=', holder))).toEqual([0]);
    expect(Array.from(base64ToPcm16('', holder))).toEqual([]);
    expect(() => base64ToPcm16(Buffer.from([1, 2, 3]).toString('base64'), holder)).toThrow(/odd byte count/);
    // Little-endian on the wire, as the voice protocol says.
    expect(Buffer.from(pcm16ToBase64(Int16Array.from([0x0102])), 'base64')).toEqual(Buffer.from([0x02, 0x01]));
  });

  it('the byte-level forms agree with Node for every length and padding, and refuse what is not base64', () => {
    const holder = { buffer: Buffer.alloc(0) };
    for (let n = 0; n <= 40; n++) {
      const samples = Int16Array.from({ length: n }, () => randomInt(-32768, 32768));
      const out = Buffer.alloc(base64Length(samples.byteLength) + 6, 0x2a);
      const end = pcm16ToBase64Bytes(samples, out, 3);
      expect(out.subarray(3, end).toString('latin1'), `n=${n}`).toBe(pcm16ToBase64(samples));
      expect(out[end]).toBe(0x2a); // nothing written past the end
      expect(Array.from(base64BytesToPcm16(out, 3, end, holder)!), `n=${n}`).toEqual(Array.from(samples));
    }
    // Odd byte counts (1 and 2 padding characters) are not PCM16; bad text is not base64: null,
    // and the caller's slow path says which.
    const bytes = (t: string) => Buffer.from(t, 'latin1');
    for (const bad of ['AQ==', 'AQID', 'AAA!AAAA', 'AAAA AAA', 'AA==AAAA', 'A===', '====', 'AAAA\nAAA', 'AAA', 'AAAA\\/AA']) {
      const b = bytes(bad);
      expect(base64BytesToPcm16(b, 0, b.length, holder), bad).toBeNull();
    }
    expect(Array.from(base64BytesToPcm16(bytes('AAA='), 0, 4, holder)!)).toEqual([0]);
    expect(Array.from(base64BytesToPcm16(bytes('x'), 0, 0, holder)!)).toEqual([]);
    // A view at an odd offset of a pooled Buffer still decodes into an aligned one.
    const samples = Int16Array.from([1, -2, 300]);
    const text = Buffer.from(' ' + pcm16ToBase64(samples), 'latin1');
    expect(Array.from(base64BytesToPcm16(text, 1, text.length, { buffer: Buffer.alloc(8).subarray(1) })!)).toEqual([1, -2, 300]);
  });
});
