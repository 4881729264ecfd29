import { afterEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { OpusCodec, OPUS_MAX_SAMPLES_PER_PACKET } from '../../src/media/opus.ts';
import { amplitudeAt, db, tone } from './signal-analysis.ts';

const FRAME = 960;
const codecs: OpusCodec[] = [];
function make(options?: ConstructorParameters<typeof OpusCodec>[0]): OpusCodec {
  const c = new OpusCodec(options);
  codecs.push(c);
  return c;
}
afterEach(() => {
  for (const c of codecs.splice(0)) c.close();
});

/** Encodes then decodes `pcm` frame by frame; returns the decoded stream and the packet sizes. */
function roundTrip(codec: OpusCodec, pcm: Int16Array): { out: Int16Array; sizes: number[] } {
  const out = new Int16Array(pcm.length);
  const packet = new Uint8Array(1500);
  const sizes: number[] = [];
  for (let i = 0; i + FRAME <= pcm.length; i += FRAME) {
    const n = codec.encode(pcm.subarray(i, i + FRAME), packet);
    sizes.push(n);
    expect(codec.decode(packet.subarray(0, n), out.subarray(i, i + FRAME))).toBe(FRAME);
  }
  return { out, sizes };
}

describe('Opus codec', () => {
  it('has the RTP fields of RFC 7587: 48 kHz clock, 20 ms = 960 samples, dynamic PT', () => {
    const c = make();
    expect(c.name).toBe('opus');
    expect(c.payloadType).toBe(111);
    expect(c.clockRate).toBe(48000);
    expect(c.sampleRate).toBe(48000);
    expect(c.frameMs).toBe(20);
    expect(c.samplesPerFrame).toBe(960);
    expect(make({ payloadType: 96 }).payloadType).toBe(96);
  });

  it.each([300, 1000, 3000])('round trip of a %d Hz tone keeps its frequency and energy', (freq) => {
    const c = make();
    const pcm = tone(freq, 48000, 1, 8000);
    const { out, sizes } = roundTrip(c, pcm);
    // Skip the codec's start-up (look-ahead ~6.5 ms, encoder convergence): measure 0.2-0.9 s.
    const start = 0.2 * 48000;
    const length = 0.7 * 48000;
    const gain = db(amplitudeAt(out, 48000, freq, start, length) / 8000);
    const spurious = Math.max(...[0.5, 1.5, 2, 3].map((k) => db(amplitudeAt(out, 48000, freq * k, start, length) / 8000)));
    const avgBytes = sizes.reduce((a, b) => a + b, 0) / sizes.length;
    const figures = `${freq} Hz: gain ${gain.toFixed(2)} dB, strongest other component ${spurious.toFixed(1)} dB, ${avgBytes.toFixed(0)} bytes/packet`;
    expect(Math.abs(gain), figures).toBeLessThan(1);
    expect(spurious, figures).toBeLessThan(-30);
    expect(avgBytes, figures).toBeLessThan(200); // ~32 kbit/s = 80 bytes; far below PCM's 1920
  });

  it('conceals lost frames with libopus PLC: a continuation of the tone, fading, for any run length', () => {
    const c = make();
    const pcm = tone(1000, 48000, 0.4, 8000);
    roundTrip(c, pcm);
    const concealed = new Int16Array(FRAME * 8);
    for (let i = 0; i < 8; i++) expect(c.conceal(concealed.subarray(i * FRAME, (i + 1) * FRAME))).toBe(FRAME);
    const first = db(amplitudeAt(concealed, 48000, 1000, 0, FRAME) / 8000);
    expect(first, `first concealed frame at ${first.toFixed(1)} dB`).toBeGreaterThan(-12);
    // After a loss run, real packets decode again.
    const { out } = roundTrip(c, tone(1000, 48000, 0.2, 8000));
    expect(db(amplitudeAt(out, 48000, 1000, 4800, 4800) / 8000)).toBeGreaterThan(-3);
  });

  it('decodes packets longer than 20 ms into a large enough output, rejects a short one', () => {
    const c = make();
    const packet = new Uint8Array(1500);
    const n = c.encode(new Int16Array(FRAME), packet);
    expect(() => c.decode(packet.subarray(0, n), new Int16Array(FRAME - 1))).toThrow(RangeError);
    expect(c.decode(packet.subarray(0, n), new Int16Array(OPUS_MAX_SAMPLES_PER_PACKET))).toBe(FRAME);
  });

  it('rejects a wrong frame length, a short packet buffer and bad options', () => {
    const c = make();
    expect(() => c.encode(new Int16Array(480), new Uint8Array(1500))).toThrow(RangeError);
    expect(() => c.encode(tone(1000, 48000, 0.02), new Uint8Array(2))).toThrow(RangeError);
    expect(() => c.conceal(new Int16Array(100))).toThrow(RangeError);
    expect(() => new OpusCodec({ payloadType: 200 })).toThrow(RangeError);
    expect(() => new OpusCodec({ bitrate: 100 })).toThrow(RangeError);
    expect(() => new OpusCodec({ expectedLossPercent: 101 })).toThrow(RangeError);
    expect(() => new OpusCodec({ complexity: 11 })).toThrow(RangeError);
  });

  it('close() is idempotent; a closed codec throws', () => {
    const c = make();
    c.close();
    c.close();
    expect(c.closed).toBe(true);
    expect(() => c.encode(new Int16Array(FRAME), new Uint8Array(1500))).toThrow(/closed/);
  });

  it('property: any 20 ms frame of PCM encodes to one decodable packet of 960 samples', () => {
    const c = make({ expectedLossPercent: 10 });
    const packet = new Uint8Array(1500);
    const out = new Int16Array(FRAME);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -32768, max: 32767 }), { minLength: FRAME, maxLength: FRAME }), (samples) => {
        const n = c.encode(Int16Array.from(samples), packet);
        expect(n).toBeGreaterThan(0);
        expect(c.decode(packet.subarray(0, n), out)).toBe(FRAME);
      }),
      { numRuns: 30 },
    );
  });

  it('rejects a corrupt packet with a TypeError from libopus', () => {
    const c = make();
    // TOC byte 0xff (code 3, CELT FB 20 ms) with a frame-count byte of 0: invalid (RFC 6716 3.2.5).
    expect(() => c.decode(new Uint8Array([0xff, 0x00]), new Int16Array(OPUS_MAX_SAMPLES_PER_PACKET))).toThrow(TypeError);
  });
});
