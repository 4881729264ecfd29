/** PCM16 byte decoding across chunk borders, and the volume gain. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { applyGain, Pcm16Decoder, volumeGain } from '../../../src/agent/providers/tts/pcm.ts';
import { samplesOf } from './fake-tts-servers.ts';

describe('Pcm16Decoder', () => {
  it('decodes little-endian signed samples, keeping an odd byte for the next chunk', () => {
    const d = new Pcm16Decoder();
    expect(Array.from(d.push(Uint8Array.of(0x01, 0x00, 0xff)))).toEqual([1]);
    expect(d.pending).toBe(true);
    expect(Array.from(d.push(Uint8Array.of()))).toEqual([]);
    expect(Array.from(d.push(Uint8Array.of(0xff, 0x00, 0x80)))).toEqual([-1, -32768]);
    expect(d.pending).toBe(false);
  });

  it('gives the same samples however the bytes are cut', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 200 }), fc.array(fc.nat(40), { maxLength: 20 }), (bytes, cuts) => {
        const even = bytes.subarray(0, bytes.length & ~1);
        const d = new Pcm16Decoder();
        const out: number[] = [];
        let at = 0;
        for (const n of cuts) {
          out.push(...d.push(even.subarray(at, at + n)));
          at = Math.min(even.length, at + n);
        }
        out.push(...d.push(even.subarray(at)));
        expect(out).toEqual(Array.from(samplesOf(even)));
        expect(d.pending).toBe(false);
      }),
    );
  });
});

describe('gain', () => {
  it('treats 0, absent, negative and non-finite volume as 1', () => {
    expect([0, undefined, -1, Number.NaN, Infinity].map(volumeGain)).toEqual([1, 1, 1, 1, 1]);
    expect(volumeGain(0.5)).toBe(0.5);
  });

  it('scales and saturates', () => {
    expect(Array.from(applyGain(Int16Array.of(100, -100, 20000, -20000), 2))).toEqual([200, -200, 32767, -32768]);
  });
});
