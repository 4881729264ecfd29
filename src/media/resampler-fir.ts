/**
 * A streaming polyphase FIR sample-rate converter for rational ratios L/M (8k->24k is 3/1,
 * 24k->8k 1/3, 16k->24k 3/2, 24k->16k 2/3, 48k->24k 1/2, 24k->48k 2/1).
 *
 * Conceptually: insert L-1 zeros between input samples (rate inRate*L), low-pass filter there
 * with a windowed-sinc prototype h, keep every M-th sample. Polyphase form computes only the
 * kept outputs and skips the zero products: the output at high-rate time t uses the phase
 * p = t mod L of the prototype, i.e. taps h[p], h[p+L], h[p+2L], ... against the newest input
 * samples x[floor(t/L)], x[floor(t/L)-1], ...  That is K = N/L multiplies per output sample.
 *
 * Prototype: ideal low-pass with its -6 dB point halfway between the passband edge fp and the
 * stopband edge fs, times a Kaiser window whose beta and length follow Kaiser's formulas
 * (Oppenheim & Schafer, Discrete-Time Signal Processing, 3rd ed., section 7.6.1):
 *   beta = 0.1102 (A - 8.7)                for A > 50 dB
 *   N    = (A - 8) / (2.285 * 2 pi (fs - fp) / (inRate * L)) + 1
 *
 * Streaming: the last K-1 input samples are kept as history, and the high-rate time of the
 * next output (as input index + phase) carries over, so the output depends only on the whole
 * input stream, never on how it was cut into chunks: chunked output is bit-identical to
 * one-piece output.
 */
import type { Resampler } from './types.ts';

/** Filter design of one rate pair. Frequencies in Hz. */
export interface FirDesign {
  /** Passband edge: flat (ripple ~10^(-A/20)) up to here. */
  passHz: number;
  /** Stopband edge: attenuated by at least A dB from here up. */
  stopHz: number;
  /** Stopband attenuation in dB. */
  attenuationDb: number;
}

/**
 * Default design: passband to 85% of the lower Nyquist frequency, stopband from 115% of it
 * (8 kHz: 3.4 / 4.6 kHz, the telephone band's edge and its first image for a 3.4 kHz tone),
 * 70 dB (the quality bar asks 60; 10 dB of margin for the Kaiser length estimate and for
 * rounding the coefficients' sums).
 */
export function defaultFirDesign(inRate: number, outRate: number): FirDesign {
  const nyquist = Math.min(inRate, outRate) / 2;
  return { passHz: 0.85 * nyquist, stopHz: 1.15 * nyquist, attenuationDb: 70 };
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** Zeroth-order modified Bessel function of the first kind, by its power series. */
function besselI0(x: number): number {
  let sum = 1;
  let term = 1;
  const q = (x * x) / 4;
  for (let k = 1; k < 64; k++) {
    term *= q / (k * k);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

/** The polyphase coefficients of one rate pair, shared by every resampler of that pair. */
export interface FirBank {
  readonly up: number; // L
  readonly down: number; // M
  /** Taps per phase (K). */
  readonly taps: number;
  /** Phase p's taps at [p*K, p*K+K), ordered oldest input first (reversed h[p + kL]). */
  readonly coeffs: Float64Array;
  /** Group delay in output samples ((N-1)/2 high-rate samples / M). */
  readonly delaySamples: number;
}

/**
 * Designs the polyphase filter bank of a rate pair.
 * @throws RangeError on non-positive or non-integer rates, or a design whose edges are not
 *   0 < passHz < stopHz.
 */
export function designFirBank(inRate: number, outRate: number, design: FirDesign = defaultFirDesign(inRate, outRate)): FirBank {
  if (!Number.isInteger(inRate) || !Number.isInteger(outRate) || inRate <= 0 || outRate <= 0) {
    throw new RangeError(`FIR resampler: rates must be positive integers, got ${inRate} -> ${outRate}`);
  }
  if (!(design.passHz > 0 && design.stopHz > design.passHz)) {
    throw new RangeError(`FIR resampler: need 0 < passHz < stopHz, got ${design.passHz} / ${design.stopHz}`);
  }
  const g = gcd(inRate, outRate);
  const L = outRate / g;
  const M = inRate / g;
  const fsHigh = inRate * L;
  const A = design.attenuationDb;
  const beta = A > 50 ? 0.1102 * (A - 8.7) : A >= 21 ? 0.5842 * Math.pow(A - 21, 0.4) + 0.07886 * (A - 21) : 0;
  const width = (2 * Math.PI * (design.stopHz - design.passHz)) / fsHigh;
  const estimate = Math.ceil((A - 8) / (2.285 * width)) + 1;
  const K = Math.max(2, Math.ceil(estimate / L));
  const N = K * L;
  const fc = (design.passHz + design.stopHz) / 2 / fsHigh; // cycles per high-rate sample
  const mid = (N - 1) / 2;
  const h = new Float64Array(N);
  const i0beta = besselI0(beta);
  let sum = 0;
  for (let i = 0; i < N; i++) {
    const x = i - mid;
    const sinc = x === 0 ? 2 * fc : Math.sin(2 * Math.PI * fc * x) / (Math.PI * x);
    const r = (2 * i) / (N - 1) - 1;
    const w = besselI0(beta * Math.sqrt(Math.max(0, 1 - r * r))) / i0beta;
    h[i] = sinc * w;
    sum += h[i]!;
  }
  // Unit DC gain through zero-stuffing: the L phases together must sum to L.
  const coeffs = new Float64Array(N);
  for (let p = 0; p < L; p++) {
    for (let k = 0; k < K; k++) coeffs[p * K + (K - 1 - k)] = (h[p + k * L]! * L) / sum;
  }
  return { up: L, down: M, taps: K, coeffs, delaySamples: mid / M };
}

const banks = new Map<string, FirBank>();

/** The default-design bank of a rate pair, designed once and cached (coefficients are read-only). */
export function firBank(inRate: number, outRate: number): FirBank {
  const key = `${inRate}:${outRate}`;
  let bank = banks.get(key);
  if (bank === undefined) {
    bank = designFirBank(inRate, outRate);
    banks.set(key, bank);
  }
  return bank;
}

/** The polyphase FIR as a streaming Resampler. */
export class FirResampler implements Resampler {
  readonly delaySamples: number;
  private readonly L: number;
  private readonly M: number;
  private readonly K: number;
  private readonly coeffs: Float64Array;
  /** History (K-1 samples) followed by the current chunk, as doubles. */
  private work: Float64Array;
  /** Index in `work` of the newest input the next output needs, and that output's phase. */
  private base: number;
  private phase = 0;
  private out: Int16Array;
  private view: Int16Array;
  private closed = false;

  /** @throws RangeError on invalid rates or design (see designFirBank). */
  constructor(
    readonly inRate: number,
    readonly outRate: number,
    design?: FirDesign,
  ) {
    const bank = design === undefined ? firBank(inRate, outRate) : designFirBank(inRate, outRate, design);
    this.L = bank.up;
    this.M = bank.down;
    this.K = bank.taps;
    this.coeffs = bank.coeffs;
    this.delaySamples = bank.delaySamples;
    this.base = this.K - 1;
    this.work = new Float64Array(this.K - 1 + 1024);
    this.out = new Int16Array(Math.ceil((1024 * this.L) / this.M) + 1);
    this.view = this.out.subarray(0, 0);
  }

  /**
   * Converts one chunk (any length). Returns a view of an internal buffer, valid until the next
   * call. Allocates only when a chunk is longer than any before (the buffers grow).
   * @throws Error when the resampler is closed.
   */
  process(input: Int16Array): Int16Array {
    if (this.closed) throw new Error('resampler is closed');
    const K = this.K;
    const hist = K - 1;
    const end = hist + input.length;
    if (end > this.work.length) {
      const grown = new Float64Array(end + (end >> 1));
      grown.set(this.work.subarray(0, hist));
      this.work = grown;
    }
    const work = this.work;
    for (let i = 0; i < input.length; i++) work[hist + i] = input[i]!;
    const maxOut = Math.ceil(((end - this.base) * this.L) / this.M) + 1;
    if (maxOut > this.out.length) {
      this.out = new Int16Array(maxOut + (maxOut >> 1));
      this.view = this.out.subarray(0, 0);
    }
    const out = this.out;
    const c = this.coeffs;
    const L = this.L;
    const M = this.M;
    // Output n of this chunk is at high-rate time t0 + n*M; it needs inputs up to floor(t/L).
    const t0 = this.base * L + this.phase;
    const last = end * L - 1 - t0;
    const count = last < 0 ? 0 : Math.floor(last / M) + 1;
    // Outputs n, n+L, n+2L, n+3L share a phase (the same K taps) and read windows M inputs
    // apart: computing them in one pass over the taps loads each tap once for four products,
    // which in V8 is about twice as fast as one output at a time. Every output still sums its
    // products in the same order (k ascending) on either path, so results do not depend on
    // how the stream was chunked.
    const block = 4 * L;
    let n = 0;
    for (; n + block <= count; n += block) {
      for (let j = 0; j < L; j++) {
        const t = t0 + (n + j) * M;
        const p = t % L;
        const s0 = (t - p) / L - hist;
        const s1 = s0 + M;
        const s2 = s1 + M;
        const s3 = s2 + M;
        const off = p * K;
        let a0 = 0;
        let a1 = 0;
        let a2 = 0;
        let a3 = 0;
        for (let k = 0; k < K; k++) {
          const ck = c[off + k]!;
          a0 += ck * work[s0 + k]!;
          a1 += ck * work[s1 + k]!;
          a2 += ck * work[s2 + k]!;
          a3 += ck * work[s3 + k]!;
        }
        out[n + j] = toInt16(a0);
        out[n + j + L] = toInt16(a1);
        out[n + j + 2 * L] = toInt16(a2);
        out[n + j + 3 * L] = toInt16(a3);
      }
    }
    for (; n < count; n++) {
      const t = t0 + n * M;
      const p = t % L;
      const s0 = (t - p) / L - hist;
      const off = p * K;
      let a0 = 0;
      for (let k = 0; k < K; k++) a0 += c[off + k]! * work[s0 + k]!;
      out[n] = toInt16(a0);
    }
    const tNext = t0 + count * M;
    const phase = tNext % L;
    const base = (tNext - phase) / L;
    const o = count;
    // Keep the newest K-1 samples as the next chunk's history.
    const shift = end - hist;
    work.copyWithin(0, shift, end);
    this.base = base - shift;
    this.phase = phase;
    // Reuse the returned view while chunks keep the same size (the steady 20 ms case); growing
    // `out` above resets the view, so a same-length view is always of the current buffer.
    if (this.view.length !== o) this.view = out.subarray(0, o);
    return this.view;
  }

  reset(): void {
    this.work.fill(0);
    this.base = this.K - 1;
    this.phase = 0;
  }

  close(): void {
    this.closed = true;
  }
}

/** Rounds to the nearest integer and saturates to the int16 range. */
function toInt16(x: number): number {
  const v = Math.round(x);
  return v > 32767 ? 32767 : v < -32768 ? -32768 : v;
}
