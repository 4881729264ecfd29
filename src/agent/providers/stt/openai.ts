/**
 * Batch speech-to-text over an OpenAI-compatible transcription endpoint
 * (`POST {base_url}/audio/transcriptions`, multipart/form-data), which OpenAI's API and local
 * whisper servers (faster-whisper-server, whisper.cpp's server, LocalAI, ...) all speak.
 *
 * Between `speechStarted()` and `speechEnded()` the stream buffers the caller's frames, plus a
 * pre-roll of the last ~300 ms written before `speechStarted()`: the VAD only fires after
 * `start_secs` of speech, so the first syllable is already in the past by then. On
 * `speechEnded()` it posts the utterance as a WAV file and turns the `{ "text" }` answer into
 * one final transcript.
 *
 * It emits NO interim results: the endpoint transcribes whole files, so there is nothing to
 * refine while the caller speaks. An empty `text` is still delivered (a final with text "") so
 * the runtime always gets an answer for each turn.
 *
 * Requests of consecutive utterances run concurrently, but their results are delivered in the
 * order the utterances ended. A failed request calls `onError` (in that same order) and the
 * stream stops: per the SttHandlers contract it is unusable afterwards.
 */
import { SttError } from '../../errors.ts';
import {
  RUNTIME_SAMPLE_RATE,
  type SttHandlers,
  type SttOptions,
  type SttProvider,
  type SttStream,
} from '../types.ts';
import { pcm16ToWav } from './wav.ts';

export interface OpenAiTranscriptionOptions {
  /** e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1 */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>` when not empty. */
  apiKey: string;
  /** e.g. whisper-1, gpt-4o-transcribe, Systran/faster-whisper-small */
  model: string;
  /** Audio kept from before speechStarted (default 300 ms). */
  preRollMs?: number;
  /** Longest audio posted for one utterance (default 60 s); later frames are dropped. */
  maxUtteranceSecs?: number;
  /** Deadline of one transcription request (default 30 s) -> VENDOR_TIMEOUT. */
  timeoutMs?: number;
  /** Gets exceptions thrown by handlers (they are never thrown back into the stream). */
  onHandlerError?: (err: unknown) => void;
}

type Outcome = { text: string } | { error: SttError };

export class OpenAiTranscriptionProvider implements SttProvider {
  readonly name = 'openai';
  constructor(private readonly options: OpenAiTranscriptionOptions) {}

  open(options: SttOptions, handlers: SttHandlers): SttStream {
    return new OpenAiTranscriptionStream(this.options, options, handlers);
  }
}

class OpenAiTranscriptionStream implements SttStream {
  private readonly url: string;
  private readonly preRollSamples: number;
  private readonly maxSamples: number;
  private readonly abort = new AbortController();
  /** Frames of the current utterance (pre-roll first), or the pre-roll ring outside one. */
  private frames: Int16Array[] = [];
  private samples = 0;
  private speaking = false;
  private closed = false;
  private failed = false;
  /** Delivery of results in utterance order: each result waits for the previous one. */
  private delivery: Promise<void> = Promise.resolve();

  constructor(
    private readonly config: OpenAiTranscriptionOptions,
    private readonly options: SttOptions,
    private readonly handlers: SttHandlers,
  ) {
    this.url = `${config.baseUrl.replace(/\/+$/, '')}/audio/transcriptions`;
    this.preRollSamples = Math.round(((config.preRollMs ?? 300) * RUNTIME_SAMPLE_RATE) / 1000);
    this.maxSamples = Math.round((config.maxUtteranceSecs ?? 60) * RUNTIME_SAMPLE_RATE);
  }

  write(frame: Int16Array): void {
    if (this.closed || this.failed) return;
    if (this.speaking) {
      if (this.samples + frame.length > this.maxSamples) return;
      this.push(frame);
      return;
    }
    if (this.preRollSamples <= 0) return;
    this.push(frame);
    // Keep the newest frames that cover the pre-roll, drop older ones.
    while (this.frames.length > 1 && this.samples - this.frames[0]!.length >= this.preRollSamples) {
      this.samples -= this.frames.shift()!.length;
    }
  }

  speechStarted(): void {
    if (this.closed || this.failed) return;
    this.speaking = true; // the pre-roll ring becomes the head of the utterance
  }

  speechEnded(): void {
    if (this.closed || this.failed || !this.speaking) return;
    this.speaking = false;
    const audio = new Int16Array(this.samples);
    let offset = 0;
    for (const f of this.frames) {
      audio.set(f, offset);
      offset += f.length;
    }
    // The audio now transcribed must not be the next utterance's pre-roll too.
    this.frames = [];
    this.samples = 0;
    const outcome = this.transcribe(audio);
    this.delivery = this.delivery.then(async () => this.deliver(await outcome));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.frames = [];
    this.samples = 0;
    this.abort.abort();
  }

  private push(frame: Int16Array): void {
    this.frames.push(frame.slice()); // the runtime may reuse its frame buffers
    this.samples += frame.length;
  }

  private deliver(outcome: Outcome): void {
    if (this.closed || this.failed) return;
    try {
      if ('error' in outcome) {
        this.failed = true;
        this.handlers.onError(outcome.error);
      } else {
        this.handlers.onTranscript({ text: outcome.text, isFinal: true });
      }
    } catch (err) {
      this.config.onHandlerError?.(err);
    }
  }

  /** Never rejects: failures become an Outcome so they are delivered in order too. */
  private async transcribe(audio: Int16Array): Promise<Outcome> {
    const form = new FormData();
    form.append('file', new Blob([pcm16ToWav(audio, RUNTIME_SAMPLE_RATE)], { type: 'audio/wav' }), 'audio.wav');
    form.append('model', this.config.model);
    // `multi` is the agent's "detect the language" setting; whisper detects when none is given.
    if (this.options.language && this.options.language !== 'multi') form.append('language', this.options.language);
    // Whisper has no keyword boosting; its documented way is a prompt that spells the terms.
    const terms = this.options.keyterms.map((t) => t.trim()).filter((t) => t.length > 0);
    if (terms.length > 0) form.append('prompt', terms.join(', '));
    form.append('response_format', 'json');

    const headers: Record<string, string> = {};
    if (this.config.apiKey) headers.authorization = `Bearer ${this.config.apiKey}`;
    const timeout = AbortSignal.timeout(this.config.timeoutMs ?? 30_000);
    let status: number;
    let body: string;
    try {
      const res = await fetch(this.url, {
        method: 'POST',
        headers,
        body: form,
        signal: AbortSignal.any([this.abort.signal, timeout]),
      });
      status = res.status;
      body = await res.text();
    } catch (err) {
      if (timeout.aborted && !this.abort.signal.aborted) {
        return { error: new SttError('VENDOR_TIMEOUT', `transcription endpoint ${this.url} did not answer in time`) };
      }
      return {
        error: new SttError('VENDOR_UNREACHABLE', `transcription endpoint ${this.url} unreachable`, { cause: err }),
      };
    }
    if (status < 200 || status > 299) {
      return {
        error: new SttError(
          'VENDOR_HTTP_STATUS',
          `transcription endpoint answered HTTP ${status}: ${this.snippet(body)}`,
          { status },
        ),
      };
    }
    let text: unknown;
    try {
      text = (JSON.parse(body) as { text?: unknown } | null)?.text;
    } catch (err) {
      return { error: new SttError('VENDOR_BAD_RESPONSE', 'transcription response is not JSON', { cause: err }) };
    }
    if (typeof text !== 'string') {
      return { error: new SttError('VENDOR_BAD_RESPONSE', 'transcription response has no "text" string') };
    }
    return { text: text.trim() };
  }

  /** A short piece of the error body for humans; the key is cut out should a server echo it. */
  private snippet(body: string): string {
    // Redact before cutting, or a key straddling the cut would leave its first characters.
    const clean = this.config.apiKey ? body.split(this.config.apiKey).join('[redacted]') : body;
    return clean.replace(/\s+/g, ' ').trim().slice(0, 200) || '(empty body)';
  }
}
