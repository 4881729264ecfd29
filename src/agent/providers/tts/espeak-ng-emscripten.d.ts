/**
 * Types for @echogarden/espeak-ng-emscripten, which ships none: an Emscripten module factory
 * exposing eSpeak-NG through the WebIDL-bound `eSpeakNGWorker` class of espeak-ng's own
 * emscripten glue (espeakng_glue.cpp + post.js). Only what local-espeak.ts's worker (plain JS)
 * and the tests use is declared; it documents the calls the worker makes.
 */
declare module '@echogarden/espeak-ng-emscripten' {
  export interface EspeakWorker {
    /** Output rate of synthesize(): 22050 for every eSpeak-NG voice. */
    get_samplerate(): number;
    /** Words per minute; eSpeak clamps to 80..450 itself, the binding does not. */
    set_rate(wpm: number): void;
    /**
     * espeak_SetVoiceByProperties with `name` and `languages` (a BCP 47-ish tag: `en-us`, `es`).
     * Returns the espeak_ERROR code: 0 ok, 2 (EE_NOT_FOUND) for an unknown voice.
     */
    set_voice(name: string, language?: string): number;
    /**
     * Synthesizes synchronously (AUDIO_OUTPUT_SYNCHRONOUS): the callback gets each buffer of
     * PCM16 (a copy, ~100 ms) as espeak produces it, the last one empty; returning true aborts.
     */
    synthesize(text: string, callback: (samples: Int16Array, events: unknown[]) => boolean | number): void;
  }
  export interface EspeakModule {
    eSpeakNGWorker: new () => EspeakWorker;
  }
  const factory: (moduleArg?: object) => Promise<EspeakModule>;
  export default factory;
}
