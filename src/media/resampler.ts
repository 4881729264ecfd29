/**
 * Sample-rate conversion between the telephony rates (8, 16, 48 kHz) and the voice protocol's
 * 24 kHz, both ways, streaming (state carries across chunks, so frame borders are seamless).
 *
 * Two implementations, chosen by measurement (docs/media-resampler.md, bench/resampler-compare.ts):
 * - 'speex': SpeexDSP's resampler compiled to WASM (SIMD build), quality DEFAULT_SPEEX_QUALITY;
 * - 'fir':   the polyphase Kaiser-windowed-sinc FIR of resampler-fir.ts, pure TypeScript.
 * createResampler() returns DEFAULT_RESAMPLER_IMPL unless told otherwise.
 *
 * Start-up: the speex WASM module instantiates asynchronously, so call
 *
 *   await initResamplers();
 *
 * once before the first createResampler() (main.ts at start-up; tests in beforeAll). After that,
 * createResampler() is synchronous. Without it, asking for 'speex' throws; 'fir' needs no init.
 */
import { FirResampler } from './resampler-fir.ts';
import { loadSpeex, speexModule, SpeexResampler, type SpeexVariant } from './resampler-speex.ts';
import type { Resampler } from './types.ts';

export type ResamplerImpl = 'speex' | 'fir';

/** The implementation createResampler() returns by default (see docs/media-resampler.md). */
export const DEFAULT_RESAMPLER_IMPL: ResamplerImpl = 'speex';
/**
 * Speex quality used by default: 4 is the lowest level meeting the quality bar (quality 3 rolls
 * off about 1 dB at 3.4 kHz going down to 8 kHz).
 */
export const DEFAULT_SPEEX_QUALITY = 4;

/**
 * Rates createResampler() accepts, in either direction (any pair of them). 22050 is eSpeak-NG's
 * output rate (the local TTS voice); both implementations handle any integer ratio (speex
 * reduces 22050/24000 to 147/160 by GCD, the FIR designs an L=160/M=147 polyphase bank).
 */
export const SUPPORTED_RATES: readonly number[] = Object.freeze([8000, 16000, 22050, 24000, 48000]);

export interface ResamplerOptions {
  /** Implementation; default DEFAULT_RESAMPLER_IMPL. */
  impl?: ResamplerImpl;
  /** Speex quality 0-10 (speex only); default DEFAULT_SPEEX_QUALITY. */
  quality?: number;
  /** Speex WASM build (speex only): 'simd' (default) or 'plain'. */
  variant?: SpeexVariant;
}

/**
 * Loads what the resamplers need before first use: the speex WASM module (SIMD build, and
 * with `plain: true` also the non-SIMD build, for comparisons). Idempotent and safe to call
 * concurrently: later calls share the first load.
 * @throws Error (rejects) when the WASM module cannot be instantiated.
 */
export async function initResamplers(options: { plain?: boolean } = {}): Promise<void> {
  await loadSpeex('simd');
  if (options.plain === true) await loadSpeex('plain');
}

/** Whether initResamplers() has completed (speex resamplers can be created). */
export function resamplersReady(): boolean {
  return speexModule('simd') !== undefined;
}

/** Same rate in and out: copies into its own buffer, so the "view valid until next call" rule holds. */
class PassthroughResampler implements Resampler {
  readonly delaySamples = 0;
  private out = new Int16Array(1024);
  private closed = false;

  constructor(
    readonly inRate: number,
    readonly outRate: number,
  ) {}

  /** @throws Error when closed. */
  process(input: Int16Array): Int16Array {
    if (this.closed) throw new Error('resampler is closed');
    if (input.length > this.out.length) this.out = new Int16Array(input.length);
    this.out.set(input);
    return this.out.subarray(0, input.length);
  }

  reset(): void {}

  close(): void {
    this.closed = true;
  }
}

/**
 * A streaming resampler from inRate to outRate. Close it when done: a speex resampler holds
 * memory on the shared WASM heap that is not garbage collected.
 * @throws RangeError when a rate is not one of SUPPORTED_RATES or an option is invalid.
 * @throws Error when the speex implementation is asked for before initResamplers() resolved.
 */
export function createResampler(inRate: number, outRate: number, options: ResamplerOptions = {}): Resampler {
  if (!SUPPORTED_RATES.includes(inRate) || !SUPPORTED_RATES.includes(outRate)) {
    throw new RangeError(`unsupported resampling ${inRate} -> ${outRate} Hz (supported: ${SUPPORTED_RATES.join(', ')})`);
  }
  if (inRate === outRate) return new PassthroughResampler(inRate, outRate);
  const impl = options.impl ?? DEFAULT_RESAMPLER_IMPL;
  if (impl === 'fir') return new FirResampler(inRate, outRate);
  if (impl !== 'speex') throw new RangeError(`unknown resampler implementation: ${String(impl)}`);
  const variant = options.variant ?? 'simd';
  const mod = speexModule(variant);
  if (mod === undefined) {
    throw new Error(`speex resampler (${variant}) not loaded: call await initResamplers(${variant === 'plain' ? '{ plain: true }' : ''}) at start-up`);
  }
  return new SpeexResampler(mod, inRate, outRate, options.quality ?? DEFAULT_SPEEX_QUALITY);
}
