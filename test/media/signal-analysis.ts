/**
 * Test signals and measurements for the media quality tests (and bench/resampler-compare.ts).
 *
 * Levels are measured with a windowed DTFT evaluated at exactly the frequency of interest (a
 * Goertzel-style correlation, not an FFT bin), so there is no scalloping loss: a tone's
 * amplitude is read to a few thousandths of a dB. The 4-term Blackman-Harris window keeps the
 * leakage of a tone below -92 dB away from its main lobe (+-4 / window length), so components
 * 60-90 dB down are measurable next to it.
 */

import type { Resampler } from '../../src/media/types.ts';
import { prng } from '../helpers/prng.ts';

/** A sine of `amplitude` (in sample units) at `freq` Hz, `seconds` long, at `rate`. */
export function tone(freq: number, rate: number, seconds: number, amplitude = 16384, phase = 0): Int16Array {
  const n = Math.round(rate * seconds);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.round(amplitude * Math.sin((2 * Math.PI * freq * i) / rate + phase));
  return out;
}

/** 4-term Blackman-Harris window (Harris 1978), sidelobes -92 dB. */
function blackmanHarris(n: number): Float64Array {
  const w = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const x = (2 * Math.PI * i) / (n - 1);
    w[i] = 0.35875 - 0.48829 * Math.cos(x) + 0.14128 * Math.cos(2 * x) - 0.01168 * Math.cos(3 * x);
  }
  return w;
}

const windows = new Map<number, Float64Array>();

/**
 * The amplitude of the sinusoidal component at `freq` in x[start, start+length), in sample units
 * (a full-scale sine reads 32767).
 */
export function amplitudeAt(x: ArrayLike<number>, rate: number, freq: number, start: number, length: number): number {
  if (start + length > x.length) throw new RangeError(`analysis window [${start}, ${start + length}) beyond ${x.length} samples`);
  let w = windows.get(length);
  if (w === undefined) {
    w = blackmanHarris(length);
    windows.set(length, w);
  }
  const omega = (2 * Math.PI * freq) / rate;
  let re = 0;
  let im = 0;
  let sumW = 0;
  for (let i = 0; i < length; i++) {
    const v = x[start + i]! * w[i]!;
    re += v * Math.cos(omega * i);
    im -= v * Math.sin(omega * i);
    sumW += w[i]!;
  }
  return (2 * Math.hypot(re, im)) / sumW;
}

export function db(ratio: number): number {
  return 20 * Math.log10(ratio);
}

/** Signal-to-noise ratio of `decoded` against `reference` (same length), in dB. */
export function snrDb(reference: ArrayLike<number>, decoded: ArrayLike<number>): number {
  let signal = 0;
  let noise = 0;
  for (let i = 0; i < reference.length; i++) {
    const r = reference[i]!;
    const e = r - decoded[i]!;
    signal += r * r;
    noise += e * e;
  }
  return 10 * Math.log10(signal / noise);
}

/** RMS level in dB relative to full scale (32768). */
export function rmsDbfs(x: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i]! * x[i]!;
  return 20 * Math.log10(Math.sqrt(s / x.length) / 32768);
}

/** A deterministic PRNG (mulberry32) so test signals are reproducible. */
export { prng };

/**
 * A speech-like 8 kHz signal: a voiced source (harmonics of a slowly gliding f0 around
 * `f0` Hz, up to 3.4 kHz, with a 1/k spectral tilt and two formant-like bumps), a syllabic
 * amplitude envelope (~4 syllables per second, dropping to 5% between syllables) and a little
 * noise (breath, -30 dB re the voiced part), scaled to an RMS of `levelDbfs`.
 */
export function speechLike(seconds: number, levelDbfs = -20, seed = 1, f0 = 120): Int16Array {
  const rate = 8000;
  const n = Math.round(rate * seconds);
  const rand = prng(seed);
  const raw = new Float64Array(n);
  const formants = [
    [700, 150],
    [1200, 200],
    [2500, 300],
  ] as const;
  const harmonics = Math.floor(3400 / (f0 * 1.2));
  const gains = new Float64Array(harmonics + 1);
  for (let k = 1; k <= harmonics; k++) {
    const f = k * f0;
    let g = 1 / k;
    for (const [fc, bw] of formants) g += (0.5 / k) * Math.exp(-(((f - fc) / bw) ** 2));
    gains[k] = g;
  }
  const phases = Array.from({ length: harmonics + 1 }, () => rand() * 2 * Math.PI);
  let phase = 0;
  for (let i = 0; i < n; i++) {
    const t = i / rate;
    const pitch = f0 * (1 + 0.15 * Math.sin(2 * Math.PI * 0.7 * t)); // intonation
    phase += (2 * Math.PI * pitch) / rate;
    let v = 0;
    for (let k = 1; k <= harmonics; k++) if (k * pitch < 3400) v += gains[k]! * Math.sin(k * phase + phases[k]!);
    const syllable = 0.5 - 0.5 * Math.cos(2 * Math.PI * 4 * t); // 4 Hz syllabic rate
    const envelope = 0.05 + 0.95 * syllable * syllable;
    raw[i] = v * envelope + 0.03 * (rand() * 2 - 1);
  }
  let s = 0;
  for (let i = 0; i < n; i++) s += raw[i]! * raw[i]!;
  const scale = (32768 * Math.pow(10, levelDbfs / 20)) / Math.sqrt(s / n);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.max(-32768, Math.min(32767, Math.round(raw[i]! * scale)));
  return out;
}

/** Runs all of `input` through `r` in chunks of `chunk` samples; the concatenated output. */
export function resampleAll(r: Resampler, input: Int16Array, chunk = input.length): Int16Array {
  const parts: Int16Array[] = [];
  let total = 0;
  for (let i = 0; i < input.length; i += chunk) {
    const out = r.process(input.subarray(i, Math.min(input.length, i + chunk)));
    parts.push(out.slice());
    total += out.length;
  }
  const all = new Int16Array(total);
  let o = 0;
  for (const p of parts) {
    all.set(p, o);
    o += p.length;
  }
  return all;
}

/** The frequency at which a tone of `freq` appears after sampling at `rate` (folding). */
export function aliasOf(freq: number, rate: number): number {
  const f = freq % rate;
  return f <= rate / 2 ? f : rate - f;
}

export interface ToneResponse {
  /** Output level of the tone (at its alias frequency, if above the output Nyquist) re input, dB. */
  gainDb: number;
  /** Output level at each probe frequency, in dB relative to the input tone's amplitude. */
  probesDb: number[];
}

/**
 * Sends a 1 s tone of `freq` (amplitude 16384, -6 dBFS) through a fresh resampler made by
 * `create` in 20 ms chunks, and measures the output over 0.1-0.9 s (well past the filter's
 * start-up transient): the level at the tone's (folded) frequency and at each probe frequency.
 */
export function toneThrough(create: () => Resampler, freq: number, probes: readonly number[] = []): ToneResponse {
  const r = create();
  try {
    const amplitude = 16384;
    const input = tone(freq, r.inRate, 1, amplitude);
    const out = resampleAll(r, input, r.inRate / 50);
    const start = Math.round(0.1 * r.outRate);
    const length = Math.round(0.8 * r.outRate);
    const level = (f: number) => db(amplitudeAt(out, r.outRate, f, start, length) / amplitude);
    return { gainDb: level(aliasOf(freq, r.outRate)), probesDb: probes.map(level) };
  } finally {
    r.close();
  }
}
