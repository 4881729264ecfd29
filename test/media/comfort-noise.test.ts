import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  CN_PAYLOAD_TYPE,
  COMFORT_NOISE_RTPMAP,
  ComfortNoiseGenerator,
  comfortNoiseLevel,
  comfortNoiseSamples,
  comfortNoiseSilence,
  parseComfortNoise,
} from '../../src/media/comfort-noise.ts';
import { rmsDbfs } from './signal-analysis.ts';

describe('RFC 3389 comfort noise', () => {
  it('is PT 13, CN/8000', () => {
    expect(CN_PAYLOAD_TYPE).toBe(13);
    expect(COMFORT_NOISE_RTPMAP).toEqual({ name: 'CN', payloadType: 13, clockRate: 8000, channels: 1 });
  });

  it('parses the noise level and the spectral model order', () => {
    expect(parseComfortNoise(Uint8Array.of(70))).toEqual({ levelDbov: -70, order: 0 });
    expect(parseComfortNoise(Uint8Array.of(40, 1, 2, 3, 4))).toEqual({ levelDbov: -40, order: 4 });
    // The reserved MSB is ignored, not fatal (be liberal in what you accept).
    expect(comfortNoiseLevel(Uint8Array.of(0x80 | 50))).toBe(-50);
    expect(() => comfortNoiseLevel(new Uint8Array(0))).toThrow(RangeError);
  });

  it('lasts until the next packet when it is known, else one 20 ms frame', () => {
    expect(comfortNoiseSamples(1000, 1800)).toBe(800); // 100 ms at 8 kHz
    expect(comfortNoiseSamples(1000, undefined)).toBe(160);
    expect(comfortNoiseSamples(0xffffff00, 0x100)).toBe(512); // across the 32-bit wrap
    expect(comfortNoiseSamples(1000, 1800, 8000, 24000)).toBe(2400); // produced at 24 kHz
    expect(comfortNoiseSamples(1000, 1000)).toBe(160); // no gap: one frame
    expect(comfortNoiseSamples(1000, 900)).toBe(160); // next is older: one frame
    expect(comfortNoiseSamples(0, 8000 * 60)).toBe(160); // a 60 s "gap" is a jump, not silence
    expect(() => comfortNoiseSamples(0, 1, 0)).toThrow(RangeError);
  });

  it('property: any forward gap up to 10 s is honoured exactly, wrap-around included', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 1, max: 80000 }), (ts, gap) => {
        expect(comfortNoiseSamples(ts, (ts + gap) >>> 0)).toBe(gap);
      }),
    );
  });

  it('fills exactly the asked samples with zeros and leaves the rest of out alone', () => {
    const out = new Int16Array(400).fill(123);
    expect(comfortNoiseSilence(Uint8Array.of(60), 320, out)).toBe(320);
    expect(out.subarray(0, 320).every((v) => v === 0)).toBe(true);
    expect(out[320]).toBe(123);
    expect(() => comfortNoiseSilence(Uint8Array.of(60), 401, out)).toThrow(RangeError);
    expect(() => comfortNoiseSilence(new Uint8Array(0), 10, out)).toThrow(RangeError);
  });

  it('generator: silence by default, or white noise at the signalled level', () => {
    const out = new Int16Array(8000).fill(5);
    expect(new ComfortNoiseGenerator().fill(Uint8Array.of(30), 8000, out)).toBe(8000);
    expect(out.every((v) => v === 0)).toBe(true);

    for (const level of [30, 50, 70]) {
      const noise = new ComfortNoiseGenerator({ mode: 'noise', seed: 42 });
      noise.fill(Uint8Array.of(level), 8000, out);
      // 0 dBov is a full-scale square wave (RFC 3389 3.1), i.e. an RMS of full scale.
      const measured = rmsDbfs(out);
      expect(Math.abs(measured + level), `-${level} dBov measured ${measured.toFixed(2)} dBFS`).toBeLessThan(1);
    }
  });

  it('generator: deterministic for a seed and continuous across fills', () => {
    const a = new ComfortNoiseGenerator({ mode: 'noise', seed: 7 });
    const b = new ComfortNoiseGenerator({ mode: 'noise', seed: 7 });
    const whole = new Int16Array(320);
    const parts = new Int16Array(320);
    a.fill(Uint8Array.of(20), 320, whole);
    b.fill(Uint8Array.of(20), 160, parts.subarray(0, 160));
    b.fill(Uint8Array.of(20), 160, parts.subarray(160));
    expect(Array.from(parts)).toEqual(Array.from(whole));
  });
});
