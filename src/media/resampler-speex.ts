/**
 * The SpeexDSP resampler (speex_resampler.c: windowed-sinc with a Kaiser-windowed, oversampled
 * and interpolated filter table; "quality" 0-10 picks its length and cutoff) compiled to WASM
 * by @echogarden/speex-resampler-wasm, wrapped as a streaming Resampler.
 *
 * The package is an Emscripten module: it must be instantiated asynchronously once
 * (loadSpeex()), after which every resampler is created synchronously on the one shared WASM
 * heap. Each resampler owns, on that heap, its speex state plus an input and an output buffer
 * and two length words; process() copies the chunk in, runs speex_resampler_process_int and
 * copies the result out into a JS buffer. close() frees all of it: the heap is not garbage
 * collected, so an unclosed resampler leaks there.
 */
import type { SpeexResamplerModule } from '@echogarden/speex-resampler-wasm';
import type { Resampler } from './types.ts';

export type SpeexVariant = 'simd' | 'plain';

const loading = new Map<SpeexVariant, Promise<SpeexResamplerModule>>();
const loaded = new Map<SpeexVariant, SpeexResamplerModule>();

/**
 * Instantiates the WASM module of a variant, once (later calls share the promise). The SIMD
 * build is 3-4x faster; 'plain' is the fallback for engines without WASM SIMD.
 * @throws Error (rejects) when the module cannot be loaded or instantiated.
 */
export function loadSpeex(variant: SpeexVariant = 'simd'): Promise<SpeexResamplerModule> {
  let p = loading.get(variant);
  if (p === undefined) {
    p = (async () => {
      const mod =
        variant === 'simd'
          ? (await import('@echogarden/speex-resampler-wasm/simd')).default
          : (await import('@echogarden/speex-resampler-wasm')).default;
      const instance = await mod();
      loaded.set(variant, instance);
      return instance;
    })();
    p.catch(() => loading.delete(variant)); // let a later call retry
    loading.set(variant, p);
  }
  return p;
}

/** The loaded module of a variant, or undefined before loadSpeex(variant) has resolved. */
export function speexModule(variant: SpeexVariant = 'simd'): SpeexResamplerModule | undefined {
  return loaded.get(variant);
}

/** Speex "quality" levels are 0 (fastest) to 10 (best). */
export const SPEEX_QUALITY_MIN = 0;
export const SPEEX_QUALITY_MAX = 10;

const INITIAL_CAPACITY = 1024;

export class SpeexResampler implements Resampler {
  readonly delaySamples: number;
  private readonly mod: SpeexResamplerModule;
  private state: number;
  /** Heap block: in_len (u32) at lenPtr, out_len (u32) at lenPtr + 4. */
  private readonly lenPtr: number;
  private inPtr = 0;
  private outPtr = 0;
  private inCapacity = 0;
  private outCapacity = 0;
  private out: Int16Array;
  private view: Int16Array;

  /**
   * @throws RangeError when quality is not an integer 0-10 or a rate is not a positive integer.
   * @throws Error when speex rejects the rates or the heap is exhausted.
   */
  constructor(
    mod: SpeexResamplerModule,
    readonly inRate: number,
    readonly outRate: number,
    readonly quality: number,
  ) {
    if (!Number.isInteger(quality) || quality < SPEEX_QUALITY_MIN || quality > SPEEX_QUALITY_MAX) {
      throw new RangeError(`speex resampler: quality must be an integer 0-10, got ${quality}`);
    }
    if (!Number.isInteger(inRate) || !Number.isInteger(outRate) || inRate <= 0 || outRate <= 0) {
      throw new RangeError(`speex resampler: rates must be positive integers, got ${inRate} -> ${outRate}`);
    }
    this.mod = mod;
    this.lenPtr = mod._malloc(8);
    if (this.lenPtr === 0) throw new Error('speex resampler: WASM heap exhausted');
    this.state = mod._speex_resampler_init(1, inRate, outRate, quality, this.lenPtr);
    const err = mod.HEAP32[this.lenPtr >> 2]!;
    if (this.state === 0 || err !== 0) {
      mod._free(this.lenPtr);
      throw new Error(`speex resampler: init ${inRate} -> ${outRate} q${quality} failed (error ${err})`);
    }
    this.delaySamples = mod._speex_resampler_get_output_latency(this.state);
    this.grow(INITIAL_CAPACITY);
    this.out = new Int16Array(this.outCapacity);
    this.view = this.out.subarray(0, 0);
  }

  /** (Re)allocates the heap buffers for chunks of up to `samples` input samples. */
  private grow(samples: number): void {
    const mod = this.mod;
    if (this.inPtr !== 0) mod._free(this.inPtr);
    if (this.outPtr !== 0) mod._free(this.outPtr);
    this.inCapacity = samples;
    // Speex never writes more than ceil(in * out / in_rate) plus its fractional carry; +16 spare.
    this.outCapacity = Math.ceil((samples * this.outRate) / this.inRate) + 16;
    this.inPtr = mod._malloc(this.inCapacity * 2);
    this.outPtr = mod._malloc(this.outCapacity * 2);
    if (this.inPtr === 0 || this.outPtr === 0) throw new Error('speex resampler: WASM heap exhausted');
  }

  /**
   * Converts one chunk (any length). Returns a view of an internal buffer, valid until the next
   * call. Allocates only when a chunk is longer than any before.
   * @throws Error when the resampler is closed, or the heap is exhausted growing buffers.
   */
  process(input: Int16Array): Int16Array {
    if (this.state === 0) throw new Error('resampler is closed');
    const n = input.length;
    if (n > this.inCapacity) {
      this.grow(n + (n >> 1));
      this.out = new Int16Array(this.outCapacity);
      this.view = this.out.subarray(0, 0);
    }
    const mod = this.mod;
    // Read the heap views only now: a malloc above may have grown (replaced) them.
    mod.HEAP16.set(input, this.inPtr >> 1);
    const len = this.lenPtr >> 2;
    let consumed = 0;
    let produced = 0;
    while (consumed < n) {
      const u32 = mod.HEAPU32;
      u32[len] = n - consumed;
      u32[len + 1] = this.outCapacity - produced;
      mod._speex_resampler_process_int(this.state, 0, this.inPtr + 2 * consumed, this.lenPtr, this.outPtr + 2 * produced, this.lenPtr + 4);
      const took = mod.HEAPU32[len]!;
      const gave = mod.HEAPU32[len + 1]!;
      consumed += took;
      produced += gave;
      if (took === 0 && gave === 0) break; // cannot happen with the capacity above; never spin
    }
    const heap = mod.HEAP16;
    const from = this.outPtr >> 1;
    const out = this.out;
    for (let i = 0; i < produced; i++) out[i] = heap[from + i]!;
    if (this.view.length !== produced) this.view = out.subarray(0, produced);
    return this.view;
  }

  reset(): void {
    if (this.state !== 0) this.mod._speex_resampler_reset_mem(this.state);
  }

  /** Frees the speex state and buffers on the WASM heap. Idempotent. */
  close(): void {
    if (this.state === 0) return;
    const mod = this.mod;
    mod._speex_resampler_destroy(this.state);
    mod._free(this.inPtr);
    mod._free(this.outPtr);
    mod._free(this.lenPtr);
    this.state = 0;
    this.inPtr = 0;
    this.outPtr = 0;
  }
}
