/**
 * Times a TTS provider's first audio: from the request (synthesize() called) to its first
 * non-empty chunk, the wait a caller hears as silence before each sentence the agent speaks.
 * A decorator, so every adapter (local, the OpenAI-compatible one, the streaming WebSockets and
 * the vendors to come) is timed the same way, by the same code, without knowing it.
 *
 * A request that ends or fails before any audio (barge-in, a vendor error) is not observed: it
 * has no first byte, and its error is reported where the turn handles it.
 */
import type { TtsProvider, TtsRequest } from '../types.ts';

/** Receives each first-byte time, seconds. */
export type FirstByteObserver = (seconds: number) => void;

export function withFirstByteTiming(provider: TtsProvider, observe: FirstByteObserver, now: () => number = () => performance.now()): TtsProvider {
  return {
    name: provider.name,
    async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
      const startedAt = now();
      let timed = false;
      for await (const chunk of provider.synthesize(request)) {
        if (!timed && chunk.length > 0) {
          timed = true;
          observe((now() - startedAt) / 1000);
        }
        yield chunk;
      }
    },
  };
}
