/**
 * The zero-configuration default STT provider. It is a PLACEHOLDER: it does not recognize
 * words. No speech recognizer model can be installed from npm alone, so instead of failing
 * sessions that have no STT service configured, this provider describes each utterance:
 * on every `speechEnded()` it emits one final transcript, exactly
 *
 *   (speech, N.N seconds)
 *
 * where N.N is the time between `speechStarted()` and `speechEnded()`, counted from the frames
 * written in between (480 samples at 24 kHz = 20 ms), with one decimal. It emits nothing else
 * (no interim results, no errors). That lets the whole pipeline, and the built-in `local/echo`
 * model, run end to end with no external service. Real transcripts need the `openai` provider
 * (an OpenAI-compatible transcription endpoint, e.g. a local whisper server) or the `stream`
 * provider (a Deepgram-compatible live WebSocket).
 */
import { RUNTIME_SAMPLE_RATE, type SttHandlers, type SttOptions, type SttProvider, type SttStream } from '../types.ts';

export class LocalUtteranceProvider implements SttProvider {
  readonly name = 'local';
  constructor(private readonly options: { onHandlerError?: (err: unknown) => void } = {}) {}

  open(_options: SttOptions, handlers: SttHandlers): SttStream {
    return new LocalUtteranceStream(handlers, this.options.onHandlerError);
  }
}

/** `(speech, N.N seconds)` for a number of samples at the runtime rate, rounded to 0.1 s. */
export function describeUtterance(samples: number): string {
  // Integer tenths, so 0.25 s does not depend on binary floating point rounding.
  const tenths = Math.round((samples * 10) / RUNTIME_SAMPLE_RATE);
  return `(speech, ${Math.floor(tenths / 10)}.${tenths % 10} seconds)`;
}

class LocalUtteranceStream implements SttStream {
  private speaking = false;
  private samples = 0;
  private closed = false;

  constructor(
    private readonly handlers: SttHandlers,
    private readonly onHandlerError?: (err: unknown) => void,
  ) {}

  write(frame: Int16Array): void {
    if (this.speaking && !this.closed) this.samples += frame.length;
  }

  speechStarted(): void {
    if (this.speaking || this.closed) return;
    this.speaking = true;
    this.samples = 0;
  }

  speechEnded(): void {
    if (!this.speaking || this.closed) return;
    this.speaking = false;
    const text = describeUtterance(this.samples);
    // Asynchronous like every real provider, so the runtime never sees a transcript re-entrantly
    // from inside its own speechEnded() call.
    queueMicrotask(() => {
      if (this.closed) return;
      try {
        this.handlers.onTranscript({ text, isFinal: true });
      } catch (err) {
        this.onHandlerError?.(err);
      }
    });
  }

  close(): void {
    this.closed = true;
  }
}
