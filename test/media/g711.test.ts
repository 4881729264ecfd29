import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import alawmulaw from 'alawmulaw';
import {
  createPcma,
  createPcmu,
  decodeALaw,
  decodeMuLaw,
  encodeALaw,
  encodeMuLaw,
} from '../../src/media/g711.ts';
import { codecInfo, createCodec, SUPPORTED_CODECS } from '../../src/media/codecs.ts';
import type { Codec } from '../../src/media/types.ts';
import { snrDb, speechLike } from './signal-analysis.ts';

const { alaw, mulaw } = alawmulaw;

const laws = [
  { name: 'PCMU', pt: 0, create: createPcmu, encode: encodeMuLaw, decode: decodeMuLaw, ref: mulaw },
  { name: 'PCMA', pt: 8, create: createPcma, encode: encodeALaw, decode: decodeALaw, ref: alaw },
] as const;

/** Every 16-bit sample value, -32768..32767. */
const ALL_SAMPLES = Int16Array.from({ length: 65536 }, (_, i) => i - 32768);
const ALL_CODES = Uint8Array.from({ length: 256 }, (_, i) => i);

function encodeFrames(codec: Codec, pcm: Int16Array): Uint8Array {
  const out = new Uint8Array(pcm.length);
  for (let i = 0; i < pcm.length; i += 160) codec.encode(pcm.subarray(i, i + 160), out.subarray(i, i + 160));
  return out;
}

function decodeFrames(codec: Codec, codes: Uint8Array): Int16Array {
  const out = new Int16Array(codes.length);
  for (let i = 0; i < codes.length; i += 160) codec.decode(codes.subarray(i, i + 160), out.subarray(i, i + 160));
  return out;
}

describe.each(laws)('G.711 $name', (law) => {
  const codec = law.create();

  it('has the RTP/SDP fields of RFC 3551', () => {
    expect(codec.name).toBe(law.name);
    expect(codec.payloadType).toBe(law.pt);
    expect(codec.clockRate).toBe(8000);
    expect(codec.sampleRate).toBe(8000);
    expect(codec.frameMs).toBe(20);
    expect(codec.samplesPerFrame).toBe(160);
    expect(codec.conceal?.(new Int16Array(160))).toBe(0);
  });

  it('encode table equals alawmulaw for all 65,536 sample values', () => {
    const reference = law.ref.encode(ALL_SAMPLES);
    // 65,536 samples are 409.6 frames: the codec takes whole frames, the function any length.
    const frames = 409 * 160;
    const ours = encodeFrames(codec, ALL_SAMPLES.subarray(0, frames));
    expect(Buffer.from(ours).equals(Buffer.from(reference.subarray(0, frames)))).toBe(true);
    const whole = new Uint8Array(65536);
    law.encode(ALL_SAMPLES, whole);
    expect(Buffer.from(whole).equals(Buffer.from(reference))).toBe(true);
  });

  it('decode table equals alawmulaw for all 256 codes', () => {
    const ours = new Int16Array(256);
    expect(codec.decode(ALL_CODES, ours)).toBe(256);
    expect(Array.from(ours)).toEqual(Array.from(law.ref.decode(ALL_CODES)));
  });

  it.each([-30, -20])('round trip of speech-like audio at %d dBFS keeps SNR >= 35 dB', (level) => {
    const x = speechLike(3, level, 11);
    const y = decodeFrames(codec, encodeFrames(codec, x));
    const snr = snrDb(x, y);
    expect(snr, `${law.name} SNR at ${level} dBFS: ${snr.toFixed(2)} dB (bar 35 dB)`).toBeGreaterThanOrEqual(35);
  });

  it('property: decode(encode(decode(c))) === decode(c) for any codes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 160, maxLength: 160 }), (codes) => {
        const once = decodeFrames(codec, codes);
        const twice = decodeFrames(codec, encodeFrames(codec, once));
        expect(Array.from(twice)).toEqual(Array.from(once));
      }),
    );
  });

  it('property: encode(decode(c)) === c, except mu-law negative zero (0x7f) which becomes +0 (0xff)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 160, maxLength: 160 }), (codes) => {
        const again = encodeFrames(codec, decodeFrames(codec, codes));
        const expected = law.name === 'PCMU' ? codes.map((c) => (c === 0x7f ? 0xff : c)) : codes;
        expect(Array.from(again)).toEqual(Array.from(expected));
      }),
    );
  });

  it('property: the quantisation error is at most max(8, |x|/16) and the law is monotone', () => {
    fc.assert(
      fc.property(fc.integer({ min: -32768, max: 32767 }), fc.integer({ min: -32768, max: 32767 }), (a, b) => {
        const pcm = new Int16Array(160);
        pcm[0] = Math.min(a, b);
        pcm[1] = Math.max(a, b);
        const y = decodeFrames(codec, encodeFrames(codec, pcm));
        for (const i of [0, 1]) expect(Math.abs(y[i]! - pcm[i]!)).toBeLessThanOrEqual(Math.max(8, Math.abs(pcm[i]!) / 16));
        expect(y[0]!).toBeLessThanOrEqual(y[1]!);
      }),
    );
  });

  it('decodes payloads longer than one frame (e.g. 30 ms) and rejects a short output', () => {
    const payload = new Uint8Array(240).fill(0x55);
    expect(codec.decode(payload, new Int16Array(240))).toBe(240);
    expect(() => codec.decode(payload, new Int16Array(160))).toThrow(RangeError);
  });

  it('encode rejects a wrong frame length or a short output', () => {
    expect(() => codec.encode(new Int16Array(159), new Uint8Array(160))).toThrow(RangeError);
    expect(() => codec.encode(new Int16Array(160), new Uint8Array(159))).toThrow(RangeError);
    expect(() => law.encode(new Int16Array(10), new Uint8Array(10), 11)).toThrow(RangeError);
  });

  it('writes only into the caller buffer, at an offset view too', () => {
    const big = new Int16Array(400).fill(7);
    const view = big.subarray(100, 260);
    codec.decode(new Uint8Array(160), view);
    expect(big[99]).toBe(7);
    expect(big[260]).toBe(7);
  });
});

describe('createCodec and SUPPORTED_CODECS', () => {
  it('lists the rtpmap data of each codec', () => {
    expect(SUPPORTED_CODECS.map((c) => `${c.defaultPayloadType} ${c.name}/${c.clockRate}/${c.channels}`)).toEqual([
      '0 PCMU/8000/1',
      '8 PCMA/8000/1',
      '111 opus/48000/2',
    ]);
    expect(codecInfo('pcmu')?.dynamic).toBe(false);
    expect(codecInfo('OPUS')?.dynamic).toBe(true);
    expect(codecInfo('G729')).toBeUndefined();
  });

  it('builds each codec with its default or a negotiated payload type', () => {
    for (const info of SUPPORTED_CODECS) {
      const codec = createCodec(info.name);
      expect(codec.name).toBe(info.name);
      expect(codec.payloadType).toBe(info.defaultPayloadType);
      expect(codec.clockRate).toBe(info.clockRate);
      codec.close();
    }
    const opus = createCodec('opus', { payloadType: 96 });
    expect(opus.payloadType).toBe(96);
    opus.close();
    expect(createCodec('PCMA', { payloadType: 101 }).payloadType).toBe(101);
  });

  it('rejects unknown codecs and invalid payload types', () => {
    expect(() => createCodec('G729' as never)).toThrow(RangeError);
    expect(() => createCodec('PCMU', { payloadType: 128 })).toThrow(RangeError);
    expect(() => createCodec('opus', { payloadType: -1 })).toThrow(RangeError);
  });
});
