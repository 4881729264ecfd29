/**
 * Cartesia's TTS WebSocket (`/tts/websocket`), one socket and one context per agent turn, as
 * Cartesia advises for voice agents ("each turn in a conversation should correspond to a
 * context"). The runtime hands over one sentence per synthesize() call, all calls of a turn
 * sharing the turn's AbortSignal; that signal is what ties them to the same socket and context:
 *
 *   client                                                       server
 *   GET /tts/websocket  X-API-Key: <key>  Cartesia-Version: <v>  --->
 *                                                                <---  101 (401: key refused)
 *   {model_id, transcript: "Hello there. ", voice: {mode: id, id}, language, context_id,
 *    output_format: {container: raw, encoding: pcm_s16le, sample_rate: 24000},
 *    generation_config?: {speed, volume}, continue: true}                 sentence 1
 *   {...the same fields, transcript: "", continue: true, flush: true}   its end
 *   {...sentence 2...} {...flush...}                                    sent while 1 still plays
 *                                                                <---  {type: chunk, data: <base64 PCM16>, context_id, ...} ...
 *                                                                <---  {type: flush_done, flush_id, context_id}   sentence 1 complete
 *                                                                <---  chunks of sentence 2, flush_done
 *   (a sentence > CONTEXT_CONTINUE_MS after the last audio)  {...context_id: <new>, ...}   a new context
 *   (idle: no sentence for idleCloseMs)  {...transcript: "", continue: false}   closes a live context, then the socket
 *   (barge-in)                           {context_id, cancel: true}             then the socket is closed
 *                                                                <---  {type: error, done: true, error | title+message, status_code, context_id}
 *
 * Continuations keep the prosody of the turn across sentences; the flush after each sentence
 * makes the server finish that sentence's audio and say so (flush_done), which is how audio is
 * split back into sentences. The docs number flushes (flush_id on chunks and on flush_done) but
 * leave open whether a sentence's chunks carry the id of the flush that ends it or the one
 * before; since one context's audio arrives in order, chunks go to the oldest unfinished
 * sentence and each flush_done ends it, whatever the numbering.
 *
 * When the socket breaks (error message, drop, silence), the sentence being spoken fails; those
 * sent after it had no audio yet and are sent again, once, on a new socket and context.
 *
 * A context expires on the server 1 s after its last audio output (Cartesia's contexts guide:
 * sending to it after that "is not supported"; the server answers with an error). A sentence of
 * the turn is therefore a continuation only while audio of the context is still pending or came
 * less than CONTEXT_CONTINUE_MS ago; later, it starts a new context on the same socket (the turn's
 * prosody restarts there). The margin below the documented second covers the trip of the last
 * audio to us and of the sentence back. After idleCloseMs (default 3 s) without a sentence the
 * socket is closed, ending the context first (`continue: false`) only if it is still alive; a
 * sentence after that opens a new socket and context.
 */
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { TtsError } from '../../errors.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from '../types.ts';
import type { QueuedSentence } from './audio-channel.ts';
import { Pcm16Decoder } from './pcm.ts';
import { TurnSocket, TurnSockets, type TurnLink } from './turn-socket.ts';
import { clamp, tuning } from './tuning.ts';
import { turnSocketSettings, type TurnSocketOptions, type TurnSocketSettings } from './vendor-options.ts';

export const CARTESIA_DEFAULT_MODEL = 'sonic-3';
/** The API version this adapter was written against (Cartesia-Version header). */
export const CARTESIA_VERSION = '2025-04-16';
/** generation_config ranges (docs: "Volume, Speed, and Emotion", sonic-3). */
const SPEED_RANGE = [0.6, 1.5] as const;
const VOLUME_RANGE = [0.5, 2] as const;
/** Cartesia expires a context this long after its last audio output (its contexts guide). */
export const CARTESIA_CONTEXT_EXPIRY_MS = 1000;
/**
 * A sentence continues the context only this soon after the context's last output reached us:
 * the rest of CARTESIA_CONTEXT_EXPIRY_MS is the margin for the output's trip to us and the
 * sentence's trip back (a loaded link's round trip), so the server never sees a continuation of
 * a context it has expired.
 */
export const CONTEXT_CONTINUE_MS = 600;

/**
 * baseUrl e.g. `https://api.cartesia.ai`; idleCloseMs closes a turn's socket (default 3000 ms).
 * The context's own lifetime is Cartesia's, not configurable (CONTEXT_CONTINUE_MS).
 */
export type CartesiaOptions = TurnSocketOptions;

export class CartesiaTtsProvider implements TtsProvider {
  readonly name: string;
  readonly #vendor: TurnSocketSettings;
  readonly #turns = new TurnSockets<CartesiaTurn>();

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: CartesiaOptions) {
    this.#vendor = turnSocketSettings(options, { type: 'cartesia', path: '/tts/websocket', defaultModel: CARTESIA_DEFAULT_MODEL });
    this.name = this.#vendor.name;
  }

  /**
   * @throws TtsError VENDOR_HTTP_STATUS when the upgrade is refused (401/403: the key),
   *   VENDOR_UNREACHABLE when the socket fails or closes mid-sentence, VENDOR_BAD_RESPONSE on an
   *   error message or malformed JSON, VENDOR_TIMEOUT when the server goes silent. An abort
   *   cancels the context and ends quietly.
   */
  async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
    const { signal } = request;
    if (signal.aborted || request.text.trim() === '') return;
    const fields = this.#fields(request);
    yield* this.#turns.speak(request.text, signal, (turn) => new CartesiaTurn(this.#vendor, fields, turn));
  }

  /** The fields every message of a context repeats unchanged (the docs require it). */
  #fields(request: TtsRequest): Record<string, unknown> {
    const fields: Record<string, unknown> = {
      model_id: this.#vendor.model,
      voice: { mode: 'id', id: request.voiceId },
      output_format: { container: 'raw', encoding: 'pcm_s16le', sample_rate: RUNTIME_SAMPLE_RATE },
    };
    const language = request.language.trim();
    if (language !== '' && language !== 'multi') fields.language = language;
    const config: Record<string, number> = {};
    const speed = tuning(request.speed);
    if (speed !== undefined) config.speed = clamp(speed, SPEED_RANGE);
    const volume = tuning(request.volume);
    if (volume !== undefined) config.volume = clamp(volume, VOLUME_RANGE);
    if (Object.keys(config).length > 0) fields.generation_config = config;
    return fields;
  }
}

/** What a server message may carry. */
interface ServerMessage {
  type?: unknown;
  context_id?: unknown;
  data?: unknown;
  error?: unknown;
  title?: unknown;
  message?: unknown;
  status_code?: unknown;
}

/** One turn: its socket and its context (the sentences still being spoken are the base's). */
class CartesiaTurn extends TurnSocket<ServerMessage> {
  /** The context the turn's sentences continue; replaced when it has expired at the server. */
  #contextId = randomUUID();
  /** When the context's last output (a chunk or flush_done) arrived; undefined before any. */
  #lastOutputAt: number | undefined;
  readonly #fields: Record<string, unknown>;
  /** Messages written before the socket opened. */
  readonly #outbox: string[] = [];
  /** The sentence being spoken's bytes to samples (a new one per sentence). */
  #decoder = new Pcm16Decoder();

  constructor(vendor: TurnSocketSettings, fields: Record<string, unknown>, turn: TurnLink) {
    const headers: Record<string, string> = { 'Cartesia-Version': CARTESIA_VERSION };
    if (vendor.apiKey !== undefined) headers['X-API-Key'] = vendor.apiKey;
    super(vendor, headers, turn);
    this.#fields = fields;
    this.ws.on('open', () => {
      for (const m of this.#outbox.splice(0)) this.ws.send(m);
    });
  }

  /**
   * Sends one sentence as a continuation of the turn's context, then its flush; in a new context
   * when the current one has no audio pending (the sentence just queued is the only one) and
   * its last output is too old for the server to still have it.
   */
  protected send(sentence: QueuedSentence): void {
    if (this.sentences.length === 1 && !this.#contextAlive()) {
      this.#contextId = randomUUID();
      this.#lastOutputAt = undefined;
    }
    // Transcripts of a context are joined verbatim: the trailing space separates the sentences.
    this.#send({ ...this.#fields, context_id: this.#contextId, transcript: `${sentence.text.trim()} `, continue: true });
    this.#send({ ...this.#fields, context_id: this.#contextId, transcript: '', continue: true, flush: true });
  }

  /** Whether the server still keeps the context: no output yet, or the last one recent enough. */
  #contextAlive(): boolean {
    return this.#lastOutputAt === undefined || Date.now() - this.#lastOutputAt < CONTEXT_CONTINUE_MS;
  }

  #send(message: Record<string, unknown>): void {
    const text = JSON.stringify(message);
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(text);
    else this.#outbox.push(text);
  }

  protected onMessage(msg: ServerMessage): void {
    if (msg.context_id !== undefined && msg.context_id !== this.#contextId) return; // not ours
    if (this.sentences.length > 0) this.stall.touch();
    switch (msg.type) {
      case 'chunk': {
        this.#lastOutputAt = Date.now();
        const head = this.sentences[0];
        if (typeof msg.data !== 'string') return;
        const samples = this.#decoder.push(Buffer.from(msg.data, 'base64'));
        head?.channel.push(samples); // audio after every sentence ended (a cancelled one's tail) is dropped
        return;
      }
      case 'flush_done':
        this.#lastOutputAt = Date.now();
        if (this.#decoder.pending) {
          this.fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: a sentence's audio ended on half a sample`));
          return;
        }
        this.#decoder = new Pcm16Decoder();
        this.sentences.shift()?.channel.end();
        if (this.sentences.length === 0) {
          this.stall.stop();
          this.armIdle();
        }
        return;
      case 'done':
        // The context is over (closed by us, or ended by the server): what is pending is complete.
        for (const s of this.sentences.splice(0)) s.channel.end();
        this.close(false);
        return;
      case 'error':
        this.fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: server error: ${describeError(msg)}`));
        return;
      default:
        return; // timestamps and whatever later versions add
    }
  }

  /**
   * Idle: closes the context (`continue: false`) while the server still keeps it (an expired one
   * would only earn an error message); the socket follows.
   */
  protected sendEnd(): void {
    if (this.#contextAlive()) this.#send({ ...this.#fields, context_id: this.#contextId, transcript: '', continue: false });
  }

  /** Barge-in: the server stops generating for the context; the socket goes with the turn. */
  protected override cancel(): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ context_id: this.#contextId, cancel: true }));
  }
}

/** The vendor's words: `error` (older versions) or `title: message` (newer), trimmed. */
function describeError(msg: ServerMessage): string {
  const parts = [msg.error, msg.title, msg.message].filter((p) => p != null).map((p) => (typeof p === 'string' ? p : JSON.stringify(p)));
  const status = typeof msg.status_code === 'number' ? ` (${msg.status_code})` : '';
  return `${parts.join(': ').slice(0, 200)}${status}`;
}
