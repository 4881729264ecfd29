/**
 * A steady single-tone detector (an answering machine's "beep"): Goertzel filters over a band of
 * candidate frequencies, on 20 ms blocks at 8 kHz.
 *
 * Per block (160 samples at 8 kHz; a higher input rate is first averaged down by its integer
 * factor, a crude low-pass that keeps the band below 2.5 kHz within ~1.3 dB):
 *   - the block's energy E = sum x^2, and its level in dBFS; quieter than minLevelDb: no tone;
 *   - the Goertzel power P(f) at every candidate f from minHz to maxHz in stepHz steps; the
 *     purity of the best one is 2 P(f) / (N E), which is 1 for a pure sine exactly on f and
 *     about 0.8 at the worst offset between two 25 Hz candidates (the 160-sample window's main
 *     lobe is 100 Hz wide). Speech spreads its energy over several harmonics and formants, so a
 *     single candidate rarely holds most of it; a tone at 10 dB SNR still holds ~0.7.
 *   - a tonal block has purity >= minPurity; consecutive tonal blocks whose peaks stay within
 *     maxDriftHz of the run's first are one tone (speech glides its pitch; a beep does not).
 * A tone is reported once its run reaches minToneMs (`started`), and again when it ends
 * (`ended`, with its length). Pure arithmetic: no I/O, no imports.
 */

export interface ToneDetectorOptions {
  /** Input sample rate (a multiple of 8000). */
  sampleRate: number;
  minHz?: number;
  maxHz?: number;
  stepHz?: number;
  /** A run of tonal blocks this long is a tone (default 150 ms). */
  minToneMs?: number;
  /** Quieter blocks are never tonal (default -45 dBFS). */
  minLevelDb?: number;
  /** Share of the block's energy in the best candidate (default 0.6). */
  minPurity?: number;
  /** How far the peak may wander within one tone (default 50 Hz). */
  maxDriftHz?: number;
}

export type ToneEvent = { type: 'started'; hz: number; ms: number } | { type: 'ended'; hz: number; ms: number };

const RATE = 8000;
const BLOCK = 160;
const BLOCK_MS = (BLOCK / RATE) * 1000;

export class ToneDetector {
  readonly #factor: number;
  readonly #coeffs: Float64Array;
  readonly #freqs: Float64Array;
  readonly #minBlocks: number;
  readonly #minEnergy: number;
  readonly #minPurity: number;
  readonly #maxDrift: number;
  readonly #block = new Float64Array(BLOCK);
  #fill = 0;
  #acc = 0;
  #accN = 0;
  /** The current run of tonal blocks: its first peak and length. */
  #runHz = 0;
  #runBlocks = 0;
  #reported = false;

  constructor(o: ToneDetectorOptions) {
    this.#factor = Math.max(1, Math.round(o.sampleRate / RATE));
    const minHz = o.minHz ?? 300;
    const maxHz = o.maxHz ?? 2500;
    const step = o.stepHz ?? 25;
    const n = Math.floor((maxHz - minHz) / step) + 1;
    this.#freqs = new Float64Array(n);
    this.#coeffs = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const f = minHz + i * step;
      this.#freqs[i] = f;
      this.#coeffs[i] = 2 * Math.cos((2 * Math.PI * f) / RATE);
    }
    this.#minBlocks = Math.ceil((o.minToneMs ?? 150) / BLOCK_MS);
    // Energy of a block at minLevelDb: a full-scale square wave is 0 dBFS (E = N * 32768^2).
    this.#minEnergy = BLOCK * 32768 ** 2 * 10 ** ((o.minLevelDb ?? -45) / 10);
    this.#minPurity = o.minPurity ?? 0.6;
    this.#maxDrift = o.maxDriftHz ?? 50;
  }

  /** Whether a tone of at least minToneMs is sounding now. */
  get sounding(): boolean {
    return this.#reported;
  }

  /** Audio at the input rate, any length; returns what happened in it (usually nothing). */
  push(pcm: Int16Array): ToneEvent[] {
    const out: ToneEvent[] = [];
    for (let i = 0; i < pcm.length; i++) {
      this.#acc += pcm[i]!;
      if (++this.#accN < this.#factor) continue;
      this.#block[this.#fill++] = this.#acc / this.#factor;
      this.#acc = 0;
      this.#accN = 0;
      if (this.#fill === BLOCK) {
        this.#fill = 0;
        const e = this.#onBlock();
        if (e) out.push(e);
      }
    }
    return out;
  }

  #onBlock(): ToneEvent | undefined {
    const hz = this.#tonalPeak();
    const continues = hz !== undefined && this.#runBlocks > 0 && Math.abs(hz - this.#runHz) <= this.#maxDrift;
    if (continues) {
      this.#runBlocks++;
      if (!this.#reported && this.#runBlocks >= this.#minBlocks) {
        this.#reported = true;
        return { type: 'started', hz: this.#runHz, ms: this.#runBlocks * BLOCK_MS };
      }
      return undefined;
    }
    const ended: ToneEvent | undefined = this.#reported ? { type: 'ended', hz: this.#runHz, ms: this.#runBlocks * BLOCK_MS } : undefined;
    this.#reported = false;
    this.#runBlocks = hz === undefined ? 0 : 1;
    this.#runHz = hz ?? 0;
    return ended;
  }

  /** The block's dominant frequency when one candidate holds most of its energy. */
  #tonalPeak(): number | undefined {
    const x = this.#block;
    let mean = 0;
    for (let i = 0; i < BLOCK; i++) mean += x[i]!;
    mean /= BLOCK;
    let energy = 0;
    for (let i = 0; i < BLOCK; i++) energy += (x[i]! - mean) ** 2;
    if (energy < this.#minEnergy) return undefined;
    let best = 0;
    let bestI = -1;
    for (let k = 0; k < this.#coeffs.length; k++) {
      const c = this.#coeffs[k]!;
      let s1 = 0;
      let s2 = 0;
      for (let i = 0; i < BLOCK; i++) {
        const s0 = x[i]! - mean + c * s1 - s2;
        s2 = s1;
        s1 = s0;
      }
      const p = s1 * s1 + s2 * s2 - c * s1 * s2;
      if (p > best) {
        best = p;
        bestI = k;
      }
    }
    return bestI >= 0 && (2 * best) / (BLOCK * energy) >= this.#minPurity ? this.#freqs[bestI] : undefined;
  }
}
