/**
 * Test signals for the VAD and noise-suppression tests, at the runtime's 24 kHz, generated from
 * a seeded PRNG (test/helpers/prng.ts) so every failure replays.
 *
 * Levels are RMS in dBFS relative to 32768 (a full-scale sine reads -3 dBFS), like the VAD.
 */
import { prng } from '../../helpers/prng.ts';

export const RATE = 24_000;
export const FRAME = 480;

/** Samples of `secs` seconds at 24 kHz. */
export function samples(secs: number): number {
  return Math.round(secs * RATE);
}

/** RMS level of x[start, end) in dBFS (-Infinity for silence). */
export function levelDbfs(x: ArrayLike<number>, start = 0, end = x.length): number {
  let s = 0;
  for (let i = start; i < end; i++) s += x[i]! * x[i]!;
  return 10 * Math.log10(s / (end - start) / (32768 * 32768));
}

/** Scales a float signal to an RMS of `dbfs` and rounds it to int16 (clipping). */
export function toInt16(raw: Float64Array, dbfs: number): Int16Array {
  let s = 0;
  for (let i = 0; i < raw.length; i++) s += raw[i]! * raw[i]!;
  const rms = Math.sqrt(s / raw.length);
  const scale = rms === 0 ? 0 : (32768 * Math.pow(10, dbfs / 20)) / rms;
  const out = new Int16Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = Math.max(-32768, Math.min(32767, Math.round(raw[i]! * scale)));
  return out;
}

export interface VoiceOptions {
  /** Fundamental in Hz (100-250 for speech). Default 140. */
  f0?: number;
  /** RMS of the signal while voiced, dBFS. Default -20. */
  levelDb?: number;
  /** Syllabic amplitude modulation (Hz); 0 = a held vowel. Default 0. */
  syllableHz?: number;
  /** Envelope minimum between syllables (fraction of the peak). Default 0.1 (-20 dB). */
  syllableFloor?: number;
  seed?: number;
}

/**
 * A voiced, speech-like signal: harmonics of a gliding f0 (+-10% intonation at 0.7 Hz) up to
 * 4 kHz with a 1/k tilt and three formant bumps (700, 1200, 2500 Hz), 5 ms raised-cosine
 * attack and release, optionally syllable-modulated (a raised-cosine envelope from
 * syllableFloor to 1 at syllableHz, like the 10-20 dB energy dips between real syllables). With syllableHz 0 it is a held vowel whose
 * frame level is constant within a fraction of a dB.
 */
export function voice(seconds: number, options: VoiceOptions = {}): Int16Array {
  const f0 = options.f0 ?? 140;
  const syllableHz = options.syllableHz ?? 0;
  const floor = options.syllableFloor ?? 0.1;
  const rand = prng(options.seed ?? 1);
  const n = samples(seconds);
  const raw = new Float64Array(n);
  const formants = [
    [700, 150],
    [1200, 200],
    [2500, 300],
  ] as const;
  const maxK = Math.floor(4000 / (f0 * 0.9));
  const gains = new Float64Array(maxK + 1);
  const phases = new Float64Array(maxK + 1);
  for (let k = 1; k <= maxK; k++) {
    const f = k * f0;
    let g = 1 / k;
    for (const [fc, bw] of formants) g += (0.5 / k) * Math.exp(-(((f - fc) / bw) ** 2));
    gains[k] = g;
    phases[k] = rand() * 2 * Math.PI;
  }
  const ramp = samples(0.005);
  let phase = 0;
  for (let i = 0; i < n; i++) {
    const t = i / RATE;
    const pitch = f0 * (1 + 0.1 * Math.sin(2 * Math.PI * 0.7 * t));
    phase += (2 * Math.PI * pitch) / RATE;
    let v = 0;
    for (let k = 1; k <= maxK; k++) if (k * pitch < 4000) v += gains[k]! * Math.sin(k * phase + phases[k]!);
    let env = 1;
    if (syllableHz > 0) {
      const s = 0.5 - 0.5 * Math.cos(2 * Math.PI * syllableHz * t);
      env = floor + (1 - floor) * s;
    }
    if (i < ramp) env *= 0.5 - 0.5 * Math.cos((Math.PI * i) / ramp);
    if (i >= n - ramp) env *= 0.5 - 0.5 * Math.cos((Math.PI * (n - 1 - i)) / ramp);
    raw[i] = v * env;
  }
  // Scale so that the *peak-envelope* part has levelDb: measure the unmodulated carrier.
  const carrier = new Float64Array(Math.min(n, samples(0.5)));
  phase = 0;
  for (let i = 0; i < carrier.length; i++) {
    const pitch = f0 * (1 + 0.1 * Math.sin(2 * Math.PI * 0.7 * (i / RATE)));
    phase += (2 * Math.PI * pitch) / RATE;
    let v = 0;
    for (let k = 1; k <= maxK; k++) if (k * pitch < 4000) v += gains[k]! * Math.sin(k * phase + phases[k]!);
    carrier[i] = v;
  }
  let s = 0;
  for (let i = 0; i < carrier.length; i++) s += carrier[i]! * carrier[i]!;
  const scale = (32768 * Math.pow(10, (options.levelDb ?? -20) / 20)) / Math.sqrt(s / carrier.length);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.max(-32768, Math.min(32767, Math.round(raw[i]! * scale)));
  return out;
}

/** White noise, uniform source (flat spectrum), RMS `dbfs`. */
export function whiteNoise(seconds: number, dbfs: number, seed = 7): Int16Array {
  const rand = prng(seed);
  const raw = new Float64Array(samples(seconds));
  for (let i = 0; i < raw.length; i++) raw[i] = rand() * 2 - 1;
  return toInt16(raw, dbfs);
}

/** Pink (1/f) noise by Paul Kellet's refined filter of white noise, RMS `dbfs`. */
export function pinkNoise(seconds: number, dbfs: number, seed = 11): Int16Array {
  const rand = prng(seed);
  const raw = new Float64Array(samples(seconds));
  let b0 = 0;
  let b1 = 0;
  let b2 = 0;
  let b3 = 0;
  let b4 = 0;
  let b5 = 0;
  let b6 = 0;
  for (let i = 0; i < raw.length; i++) {
    const w = rand() * 2 - 1;
    b0 = 0.99886 * b0 + w * 0.0555179;
    b1 = 0.99332 * b1 + w * 0.0750759;
    b2 = 0.969 * b2 + w * 0.153852;
    b3 = 0.8665 * b3 + w * 0.3104856;
    b4 = 0.55 * b4 + w * 0.5329522;
    b5 = -0.7616 * b5 - w * 0.016898;
    raw[i] = b0 + b1 + b2 + b3 + b4 + b5 + b6 + w * 0.5362;
    b6 = w * 0.115926;
  }
  return toInt16(raw, dbfs);
}

/** Sample-wise sum (clipped) of signals, the result as long as the longest. */
export function mix(...signals: Int16Array[]): Int16Array {
  const n = Math.max(...signals.map((s) => s.length));
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    let v = 0;
    for (const s of signals) v += s[i] ?? 0;
    out[i] = Math.max(-32768, Math.min(32767, v));
  }
  return out;
}

/** Concatenation. */
export function concat(...parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** `seconds` of digital silence. */
export function silence(seconds: number): Int16Array {
  return new Int16Array(samples(seconds));
}

/** Splits into 480-sample frames (the tail, if any, is dropped). */
export function frames(x: Int16Array): Int16Array[] {
  const out: Int16Array[] = [];
  for (let at = 0; at + FRAME <= x.length; at += FRAME) out.push(x.subarray(at, at + FRAME));
  return out;
}
