import { describe, expect, it } from 'vitest';
import { RepeatFadePlc } from '../../src/media/plc.ts';

const RATE = 8000;
const N = 160;

/** Frame k of a continuous sine (phase runs on across frames, as if nothing were lost). */
function sineFrame(k: number, freq: number, amplitude = 10000, rate = RATE, n = N): Int16Array {
  const out = new Int16Array(n);
  for (let j = 0; j < n; j++) out[j] = Math.round(amplitude * Math.sin((2 * Math.PI * freq * (k * n + j)) / rate));
  return out;
}

const rms = (x: Int16Array) => Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length);
const db = (a: number, b: number) => 20 * Math.log10(a / b);

/** Largest sample-to-sample step over a sequence of frames. */
function maxStep(frames: Int16Array[]): { step: number; at: number } {
  const all = frames.flatMap((f) => Array.from(f));
  let step = 0;
  let at = -1;
  for (let i = 1; i < all.length; i++) {
    const d = Math.abs((all[i] ?? 0) - (all[i - 1] ?? 0));
    if (d > step) {
      step = d;
      at = i;
    }
  }
  return { step, at };
}

describe('repeat-and-fade concealment', () => {
  it('fades about 6 dB per frame and is silent from the 5th concealed frame (100 ms)', () => {
    const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE });
    for (let k = 0; k < 3; k++) plc.good(sineFrame(k, 300));
    const ref = rms(sineFrame(0, 300));
    const levels: number[] = [];
    const frames: Int16Array[] = [];
    for (let k = 0; k < 7; k++) {
      const out = new Int16Array(N).fill(1234);
      plc.conceal(out);
      frames.push(out);
      levels.push(db(rms(out) + 1e-9, ref));
    }
    const msg = `levels per concealed frame: ${levels.map((l) => l.toFixed(1)).join(', ')} dB`;
    // Each frame ramps its gain down 6 dB; a frame's RMS sits between its start and end gains.
    for (let k = 0; k < 4; k++) {
      expect(levels[k], msg).toBeLessThan(-6 * k);
      expect(levels[k], msg).toBeGreaterThan(-6 * (k + 1) - 1);
    }
    expect(frames[4]?.[N - 1], msg).toBe(0);
    expect(Array.from(frames[5]!).every((v) => v === 0), msg).toBe(true);
    expect(Array.from(frames[6]!).every((v) => v === 0), msg).toBe(true);
    expect(plc.lostFrames).toBe(7);
  });

  it('continues a voiced signal smoothly: the first concealed frame follows the waveform', () => {
    const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE });
    for (let k = 0; k < 3; k++) plc.good(sineFrame(k, 200));
    const out = new Int16Array(N);
    plc.conceal(out);
    const truth = sineFrame(3, 200);
    // 200 Hz has a whole period of 40 samples: the repetition is in phase with the real signal,
    // scaled by the fade (1 -> 0.5 over the frame).
    let worst = 0;
    for (let j = 0; j < N; j++) {
      const g = 1 - (0.5 * (j + 1)) / N;
      worst = Math.max(worst, Math.abs((out[j] ?? 0) - g * (truth[j] ?? 0)));
    }
    expect(worst, `largest deviation from the faded continuation: ${worst}`).toBeLessThanOrEqual(60);
    const { step } = maxStep([sineFrame(2, 200), out]);
    expect(step).toBeLessThanOrEqual(Math.ceil(10000 * 2 * Math.sin((Math.PI * 200) / RATE)) + 2);
  });

  it('has no click at the seams: steps stay within the signal own slope, voiced or not', () => {
    for (const freq of [130, 440, 1000]) {
      const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE });
      const frames: Int16Array[] = [];
      for (let k = 0; k < 3; k++) {
        const f = sineFrame(k, freq);
        plc.good(f);
        frames.push(f);
      }
      for (let k = 0; k < 3; k++) {
        const out = new Int16Array(N);
        plc.conceal(out);
        frames.push(out);
      }
      const natural = 10000 * 2 * Math.sin((Math.PI * freq) / RATE);
      const { step, at } = maxStep(frames);
      expect(step, `${freq} Hz: step ${step} at sample ${at}, the sine's own largest ${natural.toFixed(0)}`).toBeLessThanOrEqual(natural * 1.25 + 2);
    }
    // Noise (unvoiced) is played back and forth: continuous at every turn.
    let seed = 1;
    const noise = new Int16Array(N).map(() => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % 2001) - 1000);
    const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE });
    plc.good(noise);
    const out = new Int16Array(N);
    plc.conceal(out);
    // The first concealed sample repeats the last good one (less the first step of the fade).
    expect(Math.abs((out[0] ?? 0) - (noise[N - 1] ?? 0))).toBeLessThanOrEqual(Math.abs(noise[N - 1] ?? 0) * 0.01 + 1);
  });

  /** Largest |second difference| over the frames: a click shows as a kink far above a tone's own. */
  function maxKink(frames: Int16Array[]): number {
    const all = frames.flatMap((f) => Array.from(f));
    let k = 0;
    for (let i = 2; i < all.length; i++) k = Math.max(k, Math.abs((all[i] ?? 0) - 2 * (all[i - 1] ?? 0) + (all[i - 2] ?? 0)));
    return k;
  }

  /** Plays 3 good frames of a tone, loses `lost`, resumes; returns the last concealed and the resumed frame. */
  function resumeAfter(lost: number, freq: number, crossfadeMs?: number): { seam: Int16Array[]; resume: Int16Array; out: Int16Array } {
    const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE, ...(crossfadeMs === undefined ? {} : { crossfadeMs }) });
    for (let k = 0; k < 3; k++) plc.good(sineFrame(k, freq));
    let last = new Int16Array(N);
    for (let k = 0; k < lost; k++) {
      last = new Int16Array(N);
      plc.conceal(last);
    }
    const resume = sineFrame(3 + lost, freq);
    const out = new Int16Array(N);
    plc.good(resume, out);
    expect(plc.lostFrames).toBe(0);
    return { seam: [last, out], resume, out };
  }

  it('crossfades back into the next good frame: no discontinuity at resume beyond a bound', () => {
    for (const freq of [200, 440]) {
      // A tone's largest second difference is A * (2 pi f / fs)^2; allow 25 % over it.
      const natural = 10000 * ((2 * Math.PI * freq) / RATE) ** 2;
      const bound = natural * 1.25 + 20;
      for (const lost of [1, 2, 3, 8]) {
        const { seam, resume, out } = resumeAfter(lost, freq);
        const kink = maxKink(seam);
        expect(kink, `${freq} Hz after ${lost} lost: largest kink ${kink} across the resume, bound ${bound.toFixed(0)}`).toBeLessThanOrEqual(bound);
        // Past the crossfade (5 ms = 40 samples) the good frame is untouched.
        expect(Array.from(out.subarray(40))).toEqual(Array.from(resume.subarray(40)));
        // The test has teeth: with a one-sample crossfade the same resume clicks.
        const sharp = maxKink(resumeAfter(lost, freq, 0.125).seam);
        expect(sharp, `${freq} Hz after ${lost} lost without crossfade: ${sharp}`).toBeGreaterThan(bound);
      }
    }
  });

  it('after silence the next good frame fades in from zero', () => {
    const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE });
    plc.good(sineFrame(0, 440));
    const out = new Int16Array(N);
    for (let k = 0; k < 6; k++) plc.conceal(out);
    const full = new Int16Array(N).fill(20000);
    plc.good(full);
    expect(full[0]).toBeLessThanOrEqual(20000 / 40);
    expect(full[20]).toBeGreaterThan(9000);
    expect(full[20]).toBeLessThan(11000);
    expect(full[45]).toBe(20000);
  });

  it('conceals silence when it has never had a good frame, and works at 24 and 48 kHz', () => {
    const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE });
    const out = new Int16Array(N).fill(7);
    plc.conceal(out);
    expect(out.every((v) => v === 0)).toBe(true);
    for (const rate of [24000, 48000]) {
      const n = rate / 50;
      const p = new RepeatFadePlc({ samplesPerFrame: n, sampleRate: rate });
      for (let k = 0; k < 2; k++) p.good(sineFrame(k, 220, 10000, rate, n));
      const o = new Int16Array(n);
      p.conceal(o);
      const natural = 10000 * 2 * Math.sin((Math.PI * 220) / rate);
      const { step } = maxStep([sineFrame(1, 220, 10000, rate, n), o]);
      expect(step, `${rate} Hz`).toBeLessThanOrEqual(natural * 1.25 + 2);
      expect(rms(o)).toBeGreaterThan(rms(sineFrame(0, 220, 10000, rate, n)) * 0.5);
    }
  });

  it('rejects frames of the wrong size', () => {
    const plc = new RepeatFadePlc({ samplesPerFrame: N, sampleRate: RATE });
    expect(() => plc.good(new Int16Array(N - 1))).toThrow(RangeError);
    expect(() => plc.conceal(new Int16Array(N - 1))).toThrow(RangeError);
    expect(() => new RepeatFadePlc({ samplesPerFrame: 0, sampleRate: RATE })).toThrow(RangeError);
  });
});
