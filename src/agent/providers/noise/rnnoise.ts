/**
 * Noise suppression with RNNoise (Valin 2018: a small recurrent network predicting 22 Bark-band
 * gains plus a pitch comb filter, on 10 ms frames at 48 kHz), compiled to WASM by
 * @echogarden/rnnoise-wasm.
 *
 * Start-up: the module instantiates asynchronously, so call
 *
 *   await loadRnnoise();
 *
 * once per process (main.ts; tests in beforeAll). It also loads the media resamplers. After
 * that, `new RnnoiseSuppressor({ level })` is synchronous. Every suppressor lives on the one
 * shared WASM heap: its DenoiseState (~18 kB) and two 480-float buffers. close() frees them;
 * the heap is not garbage collected, so an unclosed suppressor leaks there.
 *
 * Per 20 ms frame (480 samples at 24 kHz):
 *
 *   frame --+--> resample 24k->48k (960) --> RNNoise x2 (480 each) --> resample 48k->24k (480) --> wet
 *           |                                                                                      |
 *           +--> delay line (WET_PATH_DELAY samples) ------------------------------------------> dry
 *   out = wet * g + dry * (1 - g),   g = level / 100
 *
 * RNNoise takes floats scaled like int16 (not -1..1); its output is delayed by one 10 ms frame
 * (480 samples at 48 kHz: overlap-add of 20 ms windows). The speex resamplers (linear phase)
 * add their own delay. The dry path is delayed by the same amount, so the mix adds two aligned
 * copies of the speech instead of comb-filtering: with speex quality 4 that is
 * (64 + 480) / 2 + 32 = 304 samples = 12.7 ms at 24 kHz (measured by cross-correlation of a
 * speech-like signal and its wet output, peak at exactly 304). This is the latency the
 * suppressor adds whenever level > 0.
 *
 * Level (the agent's noise_cancel_settings.level, 0..100): 100 = fully suppressed output,
 * 0 = the input untouched (a bypass that returns the input frame itself: no delay, no WASM
 * state). Between, the dry share (1 - g) bounds the suppression: stationary noise that RNNoise
 * removes completely comes out about 20 log10(1 - g) dB down (level 50: -6 dB, 90: -20 dB),
 * speech about unchanged.
 *
 * Cost, measured (node 20, the shared 2-core development VM with other jobs running, so the
 * figures are upper-ish; /tmp script timing 200 frames x 15 runs): 450-650 us per 20 ms frame
 * at any level > 0 (median ~600 us, best run ~450 us). RNNoise itself is ~190-200 us per 10 ms
 * frame, i.e. ~90% of it; the two speex resamplers and the copies ~30 us. That is 2-3% of a
 * core per call with noise cancellation on, about 20x the rest of the media path per call
 * (docs: 22-26 us), so enabled suppression, not media, bounds the calls per core (~30-40).
 * Level 0 costs nothing (bypass).
 *
 * Suppression observed at level 100 (test/agent/noise/rnnoise.test.ts has the exact figures):
 * pink noise at -30..-50 dBFS 37-60 dB for every seed tried; white noise is erratic: at -30 dBFS
 * median 48 dB (worst 14), at -40 dBFS median 33 dB but some realisations only 2-10 dB (the
 * same happens feeding RNNoise 48 kHz full-band white noise directly: it is the model). A
 * speech-like harmonic signal keeps its 100-4000 Hz energy within 0.2 dB; the noise above
 * it drops ~21 dB; SNR 6 dB in -> 12 dB out. RNNoise needs a second or so to learn a noise.
 *
 * Nothing is allocated per frame: process() returns a view of an internal buffer, valid until
 * the next process() call (copy it to keep it), like the media layer's resamplers.
 */
import type { RnnoiseModule } from '@echogarden/rnnoise-wasm';
import { createResampler, initResamplers } from '../../../media/resampler.ts';
import type { Resampler } from '../../../media/types.ts';
import { AgentError } from '../../errors.ts';
import { FRAME_SAMPLES, RUNTIME_SAMPLE_RATE, type NoiseSuppressor } from '../types.ts';

/** RNNoise's frame: 10 ms at 48 kHz. */
export const RNNOISE_FRAME = 480;
/** RNNoise's own sample rate. */
export const RNNOISE_RATE = 48_000;
/** RNNoise's algorithmic delay, in 48 kHz samples (one frame: 50% overlap-add). */
export const RNNOISE_DELAY_48K = RNNOISE_FRAME;

let loading: Promise<RnnoiseModule> | undefined;
let loaded: RnnoiseModule | undefined;

/**
 * Instantiates a fresh RNNoise WASM module (not the shared one). `moduleArg` is passed to the
 * Emscripten factory (e.g. `wasmBinary`, `printErr`); loadRnnoise() uses no arguments.
 * @throws AgentError LOCAL_ENGINE_FAILED (rejects) when the module cannot be imported or
 *   instantiated, or does not speak RNNoise's 480-sample frames.
 */
export async function instantiateRnnoise(moduleArg: object = {}): Promise<RnnoiseModule> {
  let mod: RnnoiseModule;
  try {
    const factory = (await import('@echogarden/rnnoise-wasm')).default;
    mod = await factory(moduleArg);
  } catch (cause) {
    throw new AgentError('LOCAL_ENGINE_FAILED', `RNNoise WASM module failed to load: ${String(cause)}`, { cause });
  }
  const frame = mod._rnnoise_get_frame_size();
  if (frame !== RNNOISE_FRAME) {
    throw new AgentError('LOCAL_ENGINE_FAILED', `RNNoise WASM module has frame size ${frame}, expected ${RNNOISE_FRAME}`);
  }
  return mod;
}

/**
 * Loads what suppressors need: the shared RNNoise module and the media resamplers. Idempotent
 * and safe to call concurrently (later calls share the first load); a failed load is retried
 * by the next call.
 * @throws AgentError LOCAL_ENGINE_FAILED (rejects) when either cannot be loaded.
 */
export function loadRnnoise(): Promise<void> {
  if (loading === undefined) {
    const p = (async () => {
      try {
        await initResamplers();
      } catch (cause) {
        throw new AgentError('LOCAL_ENGINE_FAILED', `resampler for RNNoise failed to load: ${String(cause)}`, { cause });
      }
      const mod = await instantiateRnnoise();
      loaded = mod;
      return mod;
    })();
    p.catch(() => {
      if (loading === p) loading = undefined;
    });
    loading = p;
  }
  return loading.then(() => undefined);
}

/** Whether loadRnnoise() has completed (suppressors can be created). */
export function rnnoiseReady(): boolean {
  return loaded !== undefined;
}

/** Size of the shared RNNoise WASM heap in bytes (0 before loading). For leak checks and metrics. */
export function rnnoiseHeapBytes(): number {
  return loaded?.HEAPU8.length ?? 0;
}

export interface RnnoiseSuppressorOptions {
  /** 0..100: 100 = fully suppressed, 0 = untouched (noise_cancel_settings.level). */
  level: number;
}

export class RnnoiseSuppressor implements NoiseSuppressor {
  /** The mix level 0..100. */
  readonly level: number;
  /** Latency added by process(), in 24 kHz samples (0 in bypass at level 0). */
  readonly delaySamples: number;

  private readonly wetGain: number;
  private readonly mod: RnnoiseModule | undefined;
  private state = 0;
  private inPtr = 0;
  private outPtr = 0;
  private up: Resampler | undefined;
  private down: Resampler | undefined;
  /** The denoised 48 kHz samples of one 20 ms frame. */
  private readonly wet48: Int16Array;
  /** Dry-path delay line (ring buffer of delaySamples). */
  private readonly dryLine: Int16Array;
  private dryPos = 0;
  private readonly out: Int16Array;
  private isClosed = false;

  /**
   * @throws RangeError when level is not a number in 0..100.
   * @throws AgentError LOCAL_ENGINE_FAILED when loadRnnoise() has not completed, or the WASM
   *   heap cannot hold another suppressor.
   */
  constructor(options: RnnoiseSuppressorOptions) {
    const level = options.level;
    if (typeof level !== 'number' || !(level >= 0 && level <= 100)) {
      throw new RangeError(`RnnoiseSuppressor: level must be 0..100, got ${String(level)}`);
    }
    this.level = level;
    this.wetGain = level / 100;
    this.out = new Int16Array(FRAME_SAMPLES);
    if (level === 0) {
      // Bypass: nothing to run, nothing to hold.
      this.mod = undefined;
      this.delaySamples = 0;
      this.wet48 = new Int16Array(0);
      this.dryLine = new Int16Array(0);
      return;
    }
    const mod = loaded;
    if (mod === undefined) {
      throw new AgentError('LOCAL_ENGINE_FAILED', 'RNNoise is not loaded: call await loadRnnoise() at start-up');
    }
    this.mod = mod;
    try {
      this.up = createResampler(RUNTIME_SAMPLE_RATE, RNNOISE_RATE);
      this.down = createResampler(RNNOISE_RATE, RUNTIME_SAMPLE_RATE);
      this.state = mod._rnnoise_create(0);
      this.inPtr = mod._malloc(RNNOISE_FRAME * 4);
      this.outPtr = mod._malloc(RNNOISE_FRAME * 4);
      if (this.state === 0 || this.inPtr === 0 || this.outPtr === 0) throw new Error('WASM heap exhausted');
    } catch (cause) {
      this.close();
      throw new AgentError('LOCAL_ENGINE_FAILED', `RNNoise suppressor could not be created: ${String(cause)}`, { cause });
    }
    const ratio = RNNOISE_RATE / RUNTIME_SAMPLE_RATE;
    // Up-resampler delay and RNNoise's are in 48 kHz samples, the down-resampler's in 24 kHz
    // output samples. (With speex they sum to a whole number of 24 kHz samples; an odd total
    // would leave a 1/48000 s misalignment, harmless below 12 kHz.)
    this.delaySamples = Math.round((this.up.delaySamples + RNNOISE_DELAY_48K) / ratio + this.down.delaySamples);
    this.wet48 = new Int16Array(FRAME_SAMPLES * ratio);
    this.dryLine = new Int16Array(this.delaySamples);
  }

  get closed(): boolean {
    return this.isClosed;
  }

  /**
   * Suppresses noise in one 20 ms frame. At level 0 returns `frame` itself; otherwise a view of
   * an internal buffer (480 samples) valid until the next call.
   * @throws RangeError when the frame is not 480 samples.
   * @throws Error when the suppressor is closed.
   */
  process(frame: Int16Array): Int16Array {
    if (this.isClosed) throw new Error('noise suppressor is closed');
    if (frame.length !== FRAME_SAMPLES) {
      throw new RangeError(`RnnoiseSuppressor: frame must be ${FRAME_SAMPLES} samples, got ${frame.length}`);
    }
    const mod = this.mod;
    if (mod === undefined) return frame;

    const up = this.up!.process(frame);
    const wet48 = this.wet48;
    const inIdx = this.inPtr >> 2;
    const outIdx = this.outPtr >> 2;
    for (let k = 0; k < wet48.length; k += RNNOISE_FRAME) {
      // Read the heap view each time: nothing here allocates, but a view is only valid until
      // the heap grows (another session's malloc between our calls).
      const heap = mod.HEAPF32;
      for (let i = 0; i < RNNOISE_FRAME; i++) heap[inIdx + i] = up[k + i] ?? 0;
      mod._rnnoise_process_frame(this.state, this.outPtr, this.inPtr);
      const res = mod.HEAPF32;
      for (let i = 0; i < RNNOISE_FRAME; i++) {
        const v = Math.round(res[outIdx + i]!);
        wet48[k + i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
      }
    }
    const wet = this.down!.process(wet48);

    const out = this.out;
    const g = this.wetGain;
    const line = this.dryLine;
    const d = line.length;
    let pos = this.dryPos;
    for (let i = 0; i < FRAME_SAMPLES; i++) {
      let dry: number;
      if (d === 0) {
        dry = frame[i]!;
      } else {
        dry = line[pos]!;
        line[pos] = frame[i]!;
        pos = pos + 1 === d ? 0 : pos + 1;
      }
      const w = wet[i] ?? 0;
      const v = Math.round(w * g + dry * (1 - g));
      out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
    }
    this.dryPos = pos;
    return out;
  }

  /** Frees the RNNoise state, its heap buffers and the resamplers. Idempotent. */
  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    const mod = this.mod;
    if (mod !== undefined) {
      if (this.state !== 0) mod._rnnoise_destroy(this.state);
      if (this.inPtr !== 0) mod._free(this.inPtr);
      if (this.outPtr !== 0) mod._free(this.outPtr);
    }
    this.state = 0;
    this.inPtr = 0;
    this.outPtr = 0;
    this.up?.close();
    this.down?.close();
    this.up = undefined;
    this.down = undefined;
  }
}
