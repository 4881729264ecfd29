/**
 * Types for @echogarden/rnnoise-wasm, which ships none: an Emscripten module factory (ESM,
 * default export) exposing RNNoise's C API (rnnoise.h) over the WASM heap. Only what
 * rnnoise.ts uses is declared. Pointers are byte offsets into the heap.
 */
declare module '@echogarden/rnnoise-wasm' {
  export interface RnnoiseModule {
    /** View of the heap; replaced when the heap grows (read it after any call that may allocate). */
    HEAPF32: Float32Array;
    /** Byte view of the heap; its length is the heap size. */
    HEAPU8: Uint8Array;
    _malloc(bytes: number): number;
    _free(ptr: number): void;
    /** int rnnoise_get_frame_size(void): 480 (10 ms at 48 kHz). */
    _rnnoise_get_frame_size(): number;
    /** DenoiseState *rnnoise_create(RNNModel *model): model 0 = the built-in model. */
    _rnnoise_create(model: number): number;
    _rnnoise_destroy(state: number): void;
    /**
     * float rnnoise_process_frame(DenoiseState *st, float *out, const float *in): one frame of
     * 480 floats scaled like int16; returns the frame's voice probability 0..1.
     */
    _rnnoise_process_frame(state: number, outPtr: number, inPtr: number): number;
  }
  export type RnnoiseFactory = (moduleArg?: object) => Promise<RnnoiseModule>;
  const factory: RnnoiseFactory;
  export default factory;
}
