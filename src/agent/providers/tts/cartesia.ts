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
 *   (idle: no sentence for idleCloseMs)  {...transcript: "", continue: false}   closes the context, then the socket
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
 * The docs do not say how long an idle context lives on the server; closing it ourselves after
 * idleCloseMs (default 3 s) keeps us from continuing one the server has dropped. A sentence after
 * that opens a new socket and context (the turn's prosody restarts there).
 */
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';
import { TtsError } from '../../errors.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from '../types.ts';
import { AudioChannel, failHead, type QueuedSentence } from './audio-channel.ts';
import { Pcm16Decoder } from './pcm.ts';
import { DEFAULT_STALL_MS, StallTimer } from './stall-timer.ts';
import { clamp, tuning } from './tuning.ts';
import { endpointUrl, refusalError } from './vendor-url.ts';

export const CARTESIA_DEFAULT_MODEL = 'sonic-3';
/** The API version this adapter was written against (Cartesia-Version header). */
export const CARTESIA_VERSION = '2025-04-16';
/** generation_config ranges (docs: "Volume, Speed, and Emotion", sonic-3). */
const SPEED_RANGE = [0.6, 1.5] as const;
const VOLUME_RANGE = [0.5, 2] as const;
const DEFAULT_IDLE_CLOSE_MS = 3000;

export interface CartesiaOptions {
  /** e.g. `https://api.cartesia.ai` (http(s) or ws(s)). */
  baseUrl: string;
  apiKey?: string;
  model?: string;
  /** Provider name (the config slot); default 'cartesia'. */
  name?: string;
  /** Closes a turn's context after this long without a sentence to speak; default 3000 ms. */
  idleCloseMs?: number;
  /** A sentence fails with VENDOR_TIMEOUT when the server says nothing for this long; default 10 s. */
  stallMs?: number;
}

export class CartesiaTtsProvider implements TtsProvider {
  readonly name: string;
  readonly #url: URL;
  readonly #apiKey: string | undefined;
  readonly #model: string;
  readonly #idleCloseMs: number;
  readonly #stallMs: number;
  /** The open turn of each turn signal (a closed one is replaced by the next sentence). */
  readonly #turns = new WeakMap<AbortSignal, CartesiaTurn>();

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: CartesiaOptions) {
    this.name = options.name ?? 'cartesia';
    this.#url = endpointUrl(options.baseUrl, '/tts/websocket', true);
    this.#apiKey = options.apiKey === '' ? undefined : options.apiKey;
    this.#model = options.model !== undefined && options.model !== '' ? options.model : CARTESIA_DEFAULT_MODEL;
    this.#idleCloseMs = options.idleCloseMs ?? DEFAULT_IDLE_CLOSE_MS;
    this.#stallMs = options.stallMs ?? DEFAULT_STALL_MS;
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
    const sentence: QueuedSentence = { text: request.text, channel: new AudioChannel(), moved: false };
    this.#turnFor(signal, this.#fields(request)).speak(sentence);
    yield* sentence.channel.drain(signal);
  }

  /** The turn's open socket and context, a new one when there is none. */
  #turnFor(signal: AbortSignal, fields: Record<string, unknown>): CartesiaTurn {
    const open = this.#turns.get(signal);
    if (open !== undefined && !open.closed) return open;
    const turn = new CartesiaTurn(this.name, this.#url, this.#apiKey, { idleCloseMs: this.#idleCloseMs, stallMs: this.#stallMs }, fields, signal, (orphans) => {
      if (signal.aborted) return;
      const next = this.#turnFor(signal, fields);
      for (const s of orphans) next.speak(s);
    });
    this.#turns.set(signal, turn);
    return turn;
  }

  /** The fields every message of a context repeats unchanged (the docs require it). */
  #fields(request: TtsRequest): Record<string, unknown> {
    const fields: Record<string, unknown> = {
      model_id: this.#model,
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

/** One turn: its socket, its context and its sentences still being spoken, oldest first. */
class CartesiaTurn {
  closed = false;
  readonly #name: string;
  readonly #ws: WebSocket;
  readonly #contextId = randomUUID();
  readonly #fields: Record<string, unknown>;
  readonly #idleCloseMs: number;
  readonly #signal: AbortSignal;
  readonly #pending: QueuedSentence[] = [];
  /** Takes the sentences queued behind a failed one, to speak them on a new socket. */
  readonly #onOrphans: (sentences: QueuedSentence[]) => void;
  /** Messages written before the socket opened. */
  readonly #outbox: string[] = [];
  /** The sentence being spoken's bytes to samples (a new one per sentence). */
  #decoder = new Pcm16Decoder();
  #idleTimer: NodeJS.Timeout | undefined;
  readonly #stall: StallTimer;

  constructor(name: string, url: URL, apiKey: string | undefined, timing: { idleCloseMs: number; stallMs: number }, fields: Record<string, unknown>, signal: AbortSignal, onOrphans: (sentences: QueuedSentence[]) => void) {
    this.#name = name;
    this.#fields = fields;
    this.#onOrphans = onOrphans;
    this.#idleCloseMs = timing.idleCloseMs;
    this.#stall = new StallTimer(timing.stallMs, () => this.#fail(new TtsError('VENDOR_TIMEOUT', `${name}: no answer for ${timing.stallMs} ms`)));
    this.#signal = signal;
    const headers: Record<string, string> = { 'Cartesia-Version': CARTESIA_VERSION };
    if (apiKey !== undefined) headers['X-API-Key'] = apiKey;
    this.#ws = new WebSocket(url, { headers });
    signal.addEventListener('abort', this.#onAbort, { once: true });
    this.#ws.on('unexpected-response', (_req, res) => {
      res.resume(); // the refusal's body is not needed (it may quote the key); release the socket
      this.#fail(refusalError(this.#name, 'upgrade', res.statusCode ?? 0));
    });
    this.#ws.on('open', () => {
      for (const m of this.#outbox.splice(0)) this.#ws.send(m);
    });
    this.#ws.on('message', (data, isBinary) => this.#onMessage(data, isBinary));
    this.#ws.on('error', (err) => this.#fail(new TtsError('VENDOR_UNREACHABLE', `${this.#name}: socket error`, { cause: err })));
    this.#ws.on('close', (code) => this.#fail(new TtsError('VENDOR_UNREACHABLE', `${this.#name}: socket closed (${code}) mid-sentence`)));
  }

  /** Sends one sentence as a continuation of the turn's context, then its flush. */
  speak(sentence: QueuedSentence): void {
    const { text } = sentence;
    clearTimeout(this.#idleTimer);
    this.#pending.push(sentence);
    this.#stall.touch();
    // Transcripts of a context are joined verbatim: the trailing space separates the sentences.
    this.#send({ ...this.#fields, context_id: this.#contextId, transcript: `${text.trim()} `, continue: true });
    this.#send({ ...this.#fields, context_id: this.#contextId, transcript: '', continue: true, flush: true });
  }

  #send(message: Record<string, unknown>): void {
    const text = JSON.stringify(message);
    if (this.#ws.readyState === WebSocket.OPEN) this.#ws.send(text);
    else this.#outbox.push(text);
  }

  #onMessage(data: WebSocket.RawData, isBinary: boolean): void {
    if (this.closed) return;
    let msg: ServerMessage;
    try {
      if (isBinary) throw new Error('binary frame');
      msg = JSON.parse(data.toString()) as ServerMessage;
      if (typeof msg !== 'object' || msg === null) throw new Error('not an object');
    } catch (err) {
      this.#fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.#name}: malformed server message`, { cause: err }));
      return;
    }
    if (msg.context_id !== undefined && msg.context_id !== this.#contextId) return; // not ours
    if (this.#pending.length > 0) this.#stall.touch();
    switch (msg.type) {
      case 'chunk': {
        const head = this.#pending[0];
        if (typeof msg.data !== 'string') return;
        const samples = this.#decoder.push(Buffer.from(msg.data, 'base64'));
        head?.channel.push(samples); // audio after every sentence ended (a cancelled one's tail) is dropped
        return;
      }
      case 'flush_done':
        if (this.#decoder.pending) {
          this.#fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.#name}: a sentence's audio ended on half a sample`));
          return;
        }
        this.#decoder = new Pcm16Decoder();
        this.#pending.shift()?.channel.end();
        if (this.#pending.length === 0) {
          this.#stall.stop();
          this.#armIdle();
        }
        return;
      case 'done':
        // The context is over (closed by us, or ended by the server): what is pending is complete.
        for (const s of this.#pending.splice(0)) s.channel.end();
        this.#close(false);
        return;
      case 'error':
        this.#fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.#name}: server error: ${describeError(msg)}`));
        return;
      default:
        return; // timestamps and whatever later versions add
    }
  }

  #armIdle(): void {
    clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() => {
      if (this.closed || this.#pending.length > 0) return;
      this.#send({ ...this.#fields, context_id: this.#contextId, transcript: '', continue: false });
      this.#close(false);
    }, this.#idleCloseMs);
    this.#idleTimer.unref();
  }

  /** The sentence being spoken fails with `err`, those behind it move; the turn's socket is done. */
  #fail(err: TtsError): void {
    if (this.closed) return;
    const orphans = failHead(this.#pending.splice(0), err);
    this.#close(true);
    if (orphans.length > 0) this.#onOrphans(orphans);
  }

  readonly #onAbort = (): void => {
    if (this.closed) return;
    // Barge-in: the server stops generating for the context; the socket goes with the turn.
    if (this.#ws.readyState === WebSocket.OPEN) this.#ws.send(JSON.stringify({ context_id: this.#contextId, cancel: true }));
    for (const s of this.#pending.splice(0)) s.channel.end();
    this.#close(false);
  };

  #close(broken: boolean): void {
    this.closed = true;
    clearTimeout(this.#idleTimer);
    this.#stall.stop();
    this.#signal.removeEventListener('abort', this.#onAbort);
    if (broken || this.#ws.readyState === WebSocket.CONNECTING) this.#ws.terminate();
    else if (this.#ws.readyState === WebSocket.OPEN) this.#ws.close(1000);
  }
}

/** The vendor's words: `error` (older versions) or `title: message` (newer), trimmed. */
function describeError(msg: ServerMessage): string {
  const parts = [msg.error, msg.title, msg.message].filter((p) => p != null).map((p) => (typeof p === 'string' ? p : JSON.stringify(p)));
  const status = typeof msg.status_code === 'number' ? ` (${msg.status_code})` : '';
  return `${parts.join(': ').slice(0, 200)}${status}`;
}
