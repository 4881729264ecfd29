/**
 * One request's audio on its way from a vendor socket's message handler (push, end, fail) to the
 * synthesize() generator that yields it (drain). The adapters that share one socket among the
 * sentences of a turn (Cartesia, MiniMax) keep one channel per sentence; the socket's handler
 * decides which sentence a message belongs to.
 */
import type { TtsError } from '../../errors.ts';

export class AudioChannel {
  readonly #chunks: Int16Array[] = [];
  #ended = false;
  #error: TtsError | undefined;
  #wake: (() => void) | undefined;

  /** Whether the request has ended (all audio pushed, or failed). */
  get ended(): boolean {
    return this.#ended;
  }

  push(samples: Int16Array): void {
    if (this.#ended || samples.length === 0) return;
    this.#chunks.push(samples);
    this.#notify();
  }

  /** No more audio. */
  end(): void {
    this.#ended = true;
    this.#notify();
  }

  /** The request failed: drain() throws `err` once the audio before it is yielded. */
  fail(err: TtsError): void {
    if (this.#ended) return;
    this.#error = err;
    this.#ended = true;
    this.#notify();
  }

  /** Yields the audio as it comes; ends quietly (dropping the rest) when `signal` aborts. */
  async *drain(signal: AbortSignal): AsyncGenerator<Int16Array> {
    const onAbort = (): void => this.#notify();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      for (;;) {
        if (signal.aborted) return;
        const chunk = this.#chunks.shift();
        if (chunk !== undefined) {
          yield chunk;
          continue;
        }
        if (this.#error !== undefined) throw this.#error;
        if (this.#ended) return;
        await new Promise<void>((resolve) => (this.#wake = resolve));
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}

/**
 * A sentence waiting on a connection shared by a turn. When that connection breaks, the sentence
 * it was speaking fails; the ones queued behind it got no audio yet, so they move once to a new
 * connection (`moved`) instead of failing with it: one vendor error costs one sentence.
 */
export interface QueuedSentence {
  text: string;
  channel: AudioChannel;
  moved: boolean;
}

/**
 * Splits the sentences of a broken connection: the first one fails with `err`, the others are
 * returned to be moved, except those moved once already, which fail too.
 */
export function failHead(sentences: QueuedSentence[], err: TtsError): QueuedSentence[] {
  const [head, ...rest] = sentences;
  head?.channel.fail(err);
  const movable: QueuedSentence[] = [];
  for (const s of rest) {
    if (s.moved) s.channel.fail(err);
    else movable.push({ ...s, moved: true });
  }
  return movable;
}
