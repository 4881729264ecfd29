/**
 * Types for @echogarden/speex-resampler-wasm, which ships none: an Emscripten module factory
 * exposing SpeexDSP's resampler C API (speex_resampler.h) over the WASM heap. Only what
 * resampler-speex.ts uses is declared. Pointers are byte offsets into the heap.
 */
declare module '@echogarden/speex-resampler-wasm' {
  export interface SpeexResamplerModule {
    /** Views of the heap; replaced when the heap grows (read them after any call that may allocate). */
    HEAP16: Int16Array;
    HEAPU32: Uint32Array;
    HEAP32: Int32Array;
    _malloc(bytes: number): number;
    _free(ptr: number): void;
    /** SpeexResamplerState *speex_resampler_init(nb_channels, in_rate, out_rate, quality, int *err) */
    _speex_resampler_init(channels: number, inRate: number, outRate: number, quality: number, errPtr: number): number;
    _speex_resampler_destroy(state: number): void;
    /** int speex_resampler_process_int(st, channel_index, const short *in, uint *in_len, short *out, uint *out_len) */
    _speex_resampler_process_int(state: number, channel: number, inPtr: number, inLenPtr: number, outPtr: number, outLenPtr: number): number;
    _speex_resampler_reset_mem(state: number): number;
    _speex_resampler_get_output_latency(state: number): number;
    _speex_resampler_get_input_latency(state: number): number;
  }
  export type SpeexResamplerFactory = (moduleArg?: object) => Promise<SpeexResamplerModule>;
  const factory: SpeexResamplerFactory;
  export default factory;
}

declare module '@echogarden/speex-resampler-wasm/simd' {
  import type { SpeexResamplerFactory } from '@echogarden/speex-resampler-wasm';
  const factory: SpeexResamplerFactory;
  export default factory;
}
