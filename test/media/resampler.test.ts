import { beforeAll, describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import {
  createResampler,
  DEFAULT_RESAMPLER_IMPL,
  initResamplers,
  resamplersReady,
  type ResamplerImpl,
} from '../../src/media/resampler.ts';
import type { Resampler } from '../../src/media/types.ts';
import { resampleAll, tone, toneThrough } from './signal-analysis.ts';

beforeAll(async () => {
  await initResamplers();
});

const IMPLS: ResamplerImpl[] = ['speex', 'fir'];
const PAIRS: [number, number][] = [
  [8000, 24000],
  [24000, 8000],
  [16000, 24000],
  [24000, 16000],
  [48000, 24000],
  [24000, 48000],
];

const fmt = (values: number[]) => values.map((v) => (Number.isFinite(v) ? v.toFixed(2) : String(v))).join(', ');

describe.each(IMPLS)('resampler %s: quality bar', (impl) => {
  const make = (inRate: number, outRate: number) => () => createResampler(inRate, outRate, { impl });

  it('8k->24k: passband ripple <= 0.5 dB over 300-3400 Hz, images >= 60 dB below the tone', () => {
    const tones = [300, 500, 800, 1000, 1500, 2000, 2500, 3000, 3400];
    const gains: number[] = [];
    const images: number[] = [];
    for (const f of tones) {
      // The only images of f inside 0-12 kHz are at 8000 - f and 8000 + f.
      const r = toneThrough(make(8000, 24000), f, [8000 - f, 8000 + f]);
      gains.push(r.gainDb);
      images.push(Math.max(...r.probesDb) - r.gainDb);
    }
    const ripple = Math.max(...gains) - Math.min(...gains);
    const figures = `${impl} 8k->24k tones ${tones.join('/')} Hz: gains [${fmt(gains)}] dB, ripple ${ripple.toFixed(3)} dB; worst image re tone [${fmt(images)}] dB`;
    expect(ripple, figures).toBeLessThanOrEqual(0.5);
    for (const g of gains) expect(Math.abs(g), figures).toBeLessThanOrEqual(0.5);
    for (const i of images) expect(i, figures).toBeLessThanOrEqual(-60);
  });

  it('24k->8k: 5 and 6 kHz attenuated >= 60 dB, 1 kHz passes within 0.5 dB (and 300-3400 Hz too)', () => {
    const pass = toneThrough(make(24000, 8000), 1000).gainDb;
    const at5 = toneThrough(make(24000, 8000), 5000).gainDb; // would alias to 3 kHz
    const at6 = toneThrough(make(24000, 8000), 6000).gainDb; // would alias to 2 kHz
    // Beyond the resampler's quality bar: the way down must be as flat over the telephone band as the way
    // up (this is what rules out speex quality 3, which droops ~1 dB at 3.4 kHz).
    const band = [300, 2000, 3000, 3400].map((f) => toneThrough(make(24000, 8000), f).gainDb);
    const figures = `${impl} 24k->8k: 1 kHz ${pass.toFixed(3)} dB, 300/2000/3000/3400 Hz [${fmt(band)}] dB, 5 kHz ${fmt([at5])} dB, 6 kHz ${fmt([at6])} dB (-Infinity: below 1 LSB)`;
    expect(Math.abs(pass), figures).toBeLessThanOrEqual(0.5);
    for (const g of band) expect(Math.abs(g), figures).toBeLessThanOrEqual(0.5);
    expect(at5, figures).toBeLessThanOrEqual(-60);
    expect(at6, figures).toBeLessThanOrEqual(-60);
  });

  // The same bar, scaled, for the wideband (16k) and Opus (48k) rates.
  it.each([
    { from: 16000, to: 24000, pass: [300, 1000, 4000, 6800], reject: [] as number[], image: (f: number) => [16000 - f] },
    { from: 24000, to: 16000, pass: [300, 1000, 4000, 6800], reject: [9200, 10000, 11500], image: () => [] },
    { from: 24000, to: 48000, pass: [300, 1000, 5000, 10000], reject: [] as number[], image: (f: number) => [24000 - f] },
    { from: 48000, to: 24000, pass: [300, 1000, 5000, 10000], reject: [13800, 16000, 20000], image: () => [] },
  ])('$from->$to: flat passband, images and aliases >= 60 dB down', ({ from, to, pass, reject, image }) => {
    const gains: number[] = [];
    const images: number[] = [];
    for (const f of pass) {
      const r = toneThrough(make(from, to), f, image(f));
      gains.push(r.gainDb);
      images.push(...r.probesDb.map((p) => p - r.gainDb));
    }
    const aliases = reject.map((f) => toneThrough(make(from, to), f).gainDb);
    const figures = `${impl} ${from}->${to}: gains at ${pass.join('/')} Hz [${fmt(gains)}] dB; images [${fmt(images)}] dB; aliases of ${reject.join('/')} Hz [${fmt(aliases)}] dB`;
    expect(Math.max(...gains) - Math.min(...gains), figures).toBeLessThanOrEqual(0.5);
    for (const g of gains) expect(Math.abs(g), figures).toBeLessThanOrEqual(0.5);
    for (const v of [...images, ...aliases]) expect(v, figures).toBeLessThanOrEqual(-60);
  });
});

describe.each(IMPLS)('resampler %s: streaming', (impl) => {
  it.each(PAIRS)('%d->%d: random chunk sizes give the one-piece output exactly (property)', (inRate, outRate) => {
    const input = tone(997, inRate, 0.25, 12000);
    const whole = (() => {
      const r = createResampler(inRate, outRate, { impl });
      const out = resampleAll(r, input);
      r.close();
      return out;
    })();
    expect(whole.length).toBe(Math.floor((input.length * outRate) / inRate));
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 1500 }), { minLength: 1, maxLength: 40 }), (sizes) => {
        const r = createResampler(inRate, outRate, { impl });
        const parts: number[] = [];
        let i = 0;
        for (let k = 0; i < input.length; k++) {
          const n = sizes[k % sizes.length]!;
          for (const v of r.process(input.subarray(i, i + n))) parts.push(v);
          i += n;
        }
        r.close();
        expect(parts.length).toBe(whole.length);
        const firstDiff = parts.findIndex((v, j) => v !== whole[j]);
        expect(firstDiff, `chunks [${sizes.join(',')}]: first difference at output ${firstDiff}`).toBe(-1);
      }),
      { numRuns: 25 },
    );
  });

  it('20 ms frames give 20 ms frames, in a reused buffer view', () => {
    for (const [inRate, outRate] of PAIRS) {
      const r = createResampler(inRate, outRate, { impl });
      const frame = tone(440, inRate, 0.02);
      const first = r.process(frame);
      expect(first.length).toBe(outRate / 50);
      const second = r.process(frame);
      expect(second.length).toBe(outRate / 50);
      expect(second.buffer).toBe(first.buffer);
      r.close();
    }
  });

  it('delaySamples matches where an impulse comes out', () => {
    for (const [inRate, outRate] of PAIRS) {
      const r = createResampler(inRate, outRate, { impl });
      const impulse = new Int16Array(inRate / 10);
      impulse[0] = 16000;
      const out = resampleAll(r, impulse);
      let peak = 0;
      for (let i = 1; i < out.length; i++) if (Math.abs(out[i]!) > Math.abs(out[peak]!)) peak = i;
      expect(Math.abs(peak - r.delaySamples), `${impl} ${inRate}->${outRate}: peak at ${peak}, delaySamples ${r.delaySamples}`).toBeLessThanOrEqual(1);
      r.close();
    }
  });

  it('reset() forgets history: the output equals a fresh resampler', () => {
    const a = createResampler(8000, 24000, { impl });
    const b = createResampler(8000, 24000, { impl });
    a.process(tone(1000, 8000, 0.1, 20000));
    a.reset();
    const probe = tone(300, 8000, 0.05, 5000);
    expect(Array.from(a.process(probe))).toEqual(Array.from(b.process(probe)));
    a.close();
    b.close();
  });

  it('accepts empty and very long chunks; close() is idempotent and final', () => {
    const r: Resampler = createResampler(24000, 8000, { impl });
    expect(r.process(new Int16Array(0)).length).toBe(0);
    expect(r.process(new Int16Array(24000 * 3)).length).toBe(8000 * 3);
    r.close();
    r.close();
    expect(() => r.process(new Int16Array(480))).toThrow(/closed/);
  });

  it('saturates instead of wrapping on full-scale input', () => {
    const r = createResampler(8000, 24000, { impl });
    // A full-scale square wave overshoots (Gibbs): the output must clip, not wrap to the other sign.
    const square = Int16Array.from({ length: 1600 }, (_, i) => (Math.floor(i / 8) % 2 === 0 ? 32767 : -32768));
    const out = resampleAll(r, square);
    let flips = 0;
    for (let i = 200; i < out.length - 1; i++) if (Math.abs(out[i + 1]! - out[i]!) > 40000) flips++;
    expect(flips).toBe(0);
    r.close();
  });
});

describe('createResampler', () => {
  it(`defaults to ${DEFAULT_RESAMPLER_IMPL} and passes 24k->24k through`, () => {
    expect(resamplersReady()).toBe(true);
    const same = createResampler(24000, 24000);
    const x = tone(1000, 24000, 0.02);
    expect(Array.from(same.process(x))).toEqual(Array.from(x));
    expect(same.delaySamples).toBe(0);
  });

  it('rejects unsupported rates and options', () => {
    expect(() => createResampler(44100, 24000)).toThrow(RangeError);
    expect(() => createResampler(8000, 24000, { impl: 'sox' as never })).toThrow(RangeError);
    expect(() => createResampler(8000, 24000, { impl: 'speex', quality: 11 })).toThrow(RangeError);
  });

  it('asks for initResamplers() when speex is used before the WASM module is loaded', async () => {
    vi.resetModules();
    const fresh = await import('../../src/media/resampler.ts');
    expect(fresh.resamplersReady()).toBe(false);
    expect(() => fresh.createResampler(8000, 24000, { impl: 'speex' })).toThrow(/initResamplers/);
    expect(() => fresh.createResampler(8000, 24000, { impl: 'fir' })).not.toThrow();
    await fresh.initResamplers();
    await fresh.initResamplers(); // idempotent
    fresh.createResampler(8000, 24000, { impl: 'speex' }).close();
  });
});
