/**
 * Packet-loss concealment on decoded PCM frames: repeat and fade.
 *
 * A lost 20 ms frame is replaced by the last good audio played on, with a gain falling about
 * 6 dB per frame and reaching silence after `silenceAfterFrames` (100 ms by default): a short gap
 * then sounds like the talker going on, a long one fades out instead of buzzing. The first good
 * frame after a loss is crossfaded with the continuation of the concealment over a few ms, so
 * resuming does not click (the same reason G.711 Appendix I overlap-adds at the seams).
 *
 * "Repeat" is done so that the seams are continuous too: when the last frames are periodic
 * (voiced speech) the last pitch period is repeated, found by normalised autocorrelation; when
 * they are not (unvoiced speech, noise), the last frame is played back and forth (mirrored), which
 * is continuous at every turn. Plain repetition of a 20 ms frame would put a step at each seam and
 * a 50 Hz buzz on top.
 *
 * Frames are written into caller buffers; nothing is allocated per frame. Use it on the codec's
 * own rate (before resampling), for codecs without their own concealment (G.711).
 */

export interface PlcOptions {
  /** Samples per frame (160 for 20 ms at 8 kHz). */
  samplesPerFrame: number;
  /** Sample rate, Hz (sets the pitch search range and the crossfade length). */
  sampleRate: number;
  /** Attenuation per concealed frame. Default 6 dB. */
  attenuationDbPerFrame?: number;
  /** Concealed frames after which the output is silent (the last one fades to zero). Default 5. */
  silenceAfterFrames?: number;
  /** Crossfade from the concealment into the next good frame. Default 5 ms. */
  crossfadeMs?: number;
}

// Pitch search range: 2.5..15 ms (400..67 Hz) covers speaking voices; voicing threshold on the
// normalised correlation below which the signal is treated as unvoiced.
const MIN_PITCH_MS = 2.5;
const MAX_PITCH_MS = 15;
const VOICED = 0.6;

function clamp16(x: number): number {
  return x > 32767 ? 32767 : x < -32768 ? -32768 : Math.round(x);
}

export class RepeatFadePlc {
  readonly samplesPerFrame: number;
  readonly sampleRate: number;

  readonly #history: Int16Array; // the last two good frames, oldest first
  readonly #scratch: Float64Array; // continuation for the crossfade
  readonly #factor: number; // gain per frame
  readonly #silenceAfter: number;
  readonly #fade: number; // crossfade length, samples
  readonly #minLag: number;
  readonly #maxLag: number;
  readonly #window: number;

  #haveHistory = false;
  #lost = 0; // consecutive concealed frames
  // Generator state: period > 0 repeats history[H - period, H); period 0 mirrors the last frame.
  #period = 0;
  #pos = 0;
  #dir = -1;
  #gain = 1; // gain at the end of the last concealed frame

  /** @throws RangeError on a non-positive frame size or rate. */
  constructor(options: PlcOptions) {
    const n = options.samplesPerFrame;
    if (!Number.isInteger(n) || n <= 0) throw new RangeError(`samplesPerFrame must be a positive integer, got ${n}`);
    if (!(options.sampleRate > 0)) throw new RangeError(`sampleRate must be positive, got ${options.sampleRate}`);
    this.samplesPerFrame = n;
    this.sampleRate = options.sampleRate;
    this.#history = new Int16Array(2 * n);
    this.#factor = 10 ** (-(options.attenuationDbPerFrame ?? 6) / 20);
    this.#silenceAfter = Math.max(1, options.silenceAfterFrames ?? 5);
    this.#fade = Math.min(n, Math.max(1, Math.round(((options.crossfadeMs ?? 5) * options.sampleRate) / 1000)));
    this.#scratch = new Float64Array(this.#fade);
    this.#window = Math.max(1, Math.floor(n / 2));
    this.#minLag = Math.max(2, Math.round((MIN_PITCH_MS * options.sampleRate) / 1000));
    this.#maxLag = Math.min(2 * n - this.#window, Math.round((MAX_PITCH_MS * options.sampleRate) / 1000));
  }

  /** Consecutive frames concealed so far (0 when the last frame was good). */
  get lostFrames(): number {
    return this.#lost;
  }

  /**
   * A good decoded frame. After a loss it is crossfaded with the concealment's continuation and
   * written to out (which may be frame itself); otherwise it is copied to out unless out is frame.
   * @throws RangeError when frame is not samplesPerFrame long or out is shorter.
   */
  good(frame: Int16Array, out: Int16Array = frame): void {
    const n = this.samplesPerFrame;
    if (frame.length !== n || out.length < n) {
      throw new RangeError(`frame must be ${n} samples (got ${frame.length}) and out at least as long (got ${out.length})`);
    }
    if (this.#lost > 0 && this.#haveHistory) {
      const fade = this.#fade;
      const cont = this.#scratch;
      // The continuation keeps the gain where the concealment left it (0 once it has faded out,
      // which makes this a fade-in).
      this.#generate(cont, fade, this.#gain, this.#gain);
      for (let j = 0; j < fade; j++) {
        const w = (j + 1) / (fade + 1);
        out[j] = clamp16(w * (frame[j] ?? 0) + (1 - w) * (cont[j] ?? 0));
      }
      if (out !== frame) for (let j = fade; j < n; j++) out[j] = frame[j] ?? 0;
    } else if (out !== frame) {
      out.set(frame);
    }
    // Keep what was played as history for the next concealment.
    const h = this.#history;
    h.copyWithin(0, n);
    for (let j = 0; j < n; j++) h[n + j] = out[j] ?? 0;
    this.#haveHistory = true;
    this.#lost = 0;
  }

  /**
   * Writes the concealment of one lost frame into out[0, samplesPerFrame).
   * @throws RangeError when out is shorter than a frame.
   */
  conceal(out: Int16Array): void {
    const n = this.samplesPerFrame;
    if (out.length < n) throw new RangeError(`out must hold ${n} samples, got ${out.length}`);
    if (!this.#haveHistory || this.#lost >= this.#silenceAfter) {
      out.fill(0, 0, n);
      this.#lost++;
      this.#gain = 0;
      return;
    }
    if (this.#lost === 0) this.#startConcealment();
    const g0 = this.#gain;
    const g1 = this.#lost + 1 >= this.#silenceAfter ? 0 : g0 * this.#factor;
    const buf = this.#scratch;
    // Generate in crossfade-sized pieces through the scratch buffer (no allocation).
    for (let done = 0; done < n; ) {
      const len = Math.min(buf.length, n - done);
      this.#generate(buf, len, g0 + ((g1 - g0) * done) / n, g0 + ((g1 - g0) * (done + len)) / n);
      for (let j = 0; j < len; j++) out[done + j] = clamp16(buf[j] ?? 0);
      done += len;
    }
    this.#gain = g1;
    this.#lost++;
  }

  /** Forgets the history (a new stream). */
  reset(): void {
    this.#history.fill(0);
    this.#haveHistory = false;
    this.#lost = 0;
    this.#gain = 1;
  }

  /** Chooses how to repeat: the last pitch period if voiced, else the last frame mirrored. */
  #startConcealment(): void {
    const size = this.#history.length;
    // Coarse search on a decimated grid keeps the cost independent of the rate, then refine.
    const step = Math.max(1, Math.round(this.sampleRate / 8000));
    let best = 0;
    let bestScore = -Infinity;
    for (let lag = this.#minLag; lag <= this.#maxLag; lag += step) {
      const s = this.#correlation(lag, step);
      if (s > bestScore) {
        bestScore = s;
        best = lag;
      }
    }
    if (step > 1) {
      const lo = Math.max(this.#minLag, best - step);
      const hi = Math.min(this.#maxLag, best + step);
      bestScore = -Infinity;
      for (let lag = lo; lag <= hi; lag++) {
        const s = this.#correlation(lag, 1);
        if (s > bestScore) {
          bestScore = s;
          best = lag;
        }
      }
    }
    if (bestScore >= VOICED) {
      this.#period = best;
      this.#pos = size - best;
    } else {
      this.#period = 0;
      this.#pos = size - 1;
      this.#dir = -1;
    }
    this.#gain = 1;
  }

  /** Normalised correlation of the history's last `window` samples with those `lag` earlier. */
  #correlation(lag: number, stride: number): number {
    const h = this.#history;
    const end = h.length;
    let xy = 0;
    let yy = 0;
    let xx = 0;
    for (let j = end - this.#window; j < end; j += stride) {
      const x = h[j] ?? 0;
      const y = h[j - lag] ?? 0;
      xy += x * y;
      yy += y * y;
      xx += x * x;
    }
    return xx > 0 && yy > 0 ? xy / Math.sqrt(xx * yy) : 0;
  }

  /** Writes len samples of the repetition into out, with the gain ramping from g0 to g1. */
  #generate(out: Float64Array, len: number, g0: number, g1: number): void {
    const h = this.#history;
    const size = h.length;
    const period = this.#period;
    let pos = this.#pos;
    let dir = this.#dir;
    const lo = size - this.samplesPerFrame;
    for (let j = 0; j < len; j++) {
      const g = g0 + ((g1 - g0) * (j + 1)) / len;
      out[j] = (h[pos] ?? 0) * g;
      if (period > 0) {
        pos++;
        if (pos >= size) pos = size - period;
      } else {
        pos += dir;
        if (pos < lo) {
          pos = lo;
          dir = 1;
        } else if (pos >= size) {
          pos = size - 1;
          dir = -1;
        }
      }
    }
    this.#pos = pos;
    this.#dir = dir;
  }
}
