/**
 * MiniMax's T2A WebSocket (`/ws/v1/t2a_v2`), one socket and one task per agent turn (the
 * sentences of a turn share the turn's AbortSignal, which keys the socket):
 *
 *   client                                               server
 *   GET /ws/v1/t2a_v2  Authorization: Bearer <key>  --->
 *                                                    <---  {event: connected_success, session_id, trace_id, base_resp: {status_code: 0}}
 *   {event: task_start, model, voice_setting: {voice_id, speed?, vol?},
 *    audio_setting: {sample_rate: 24000, format: pcm, channel: 1}}
 *                                                    <---  {event: task_started, base_resp}
 *   {event: task_continue, text: "Hello there."}      sentence 1
 *                                                    <---  {event: task_continued, data: {audio: <hex PCM16 LE>}, is_final: false, base_resp} ...
 *                                                    <---  {..., is_final: true, extra_info}     sentence 1 complete
 *   {event: task_continue, text: "..."}               sentence 2, only now
 *   (idle: no sentence for idleCloseMs)  {event: task_finish}, then the socket is closed
 *                                                    <---  {event: task_failed, base_resp: {status_code, status_msg}}
 *
 * Sentences are sent one at a time, each after the previous one's `is_final`: the reference
 * says the server queues task_continue events but not that their audio can be told apart, and
 * `is_final` is what ends a sentence. The protocol has no cancel (MiniMax's own comparison with
 * its bidirectional endpoint: "interruption not supported, must close the connection"), so
 * barge-in closes the socket. The docs' example plays `data.audio` of every message including
 * the final one, so a final message's audio is taken as the last chunk, not a repeat of the whole.
 * A `base_resp.status_code` other than 0 is an error (1004: authentication failed). When the
 * socket breaks, the sentence being spoken fails and those waiting move, once, to a new socket.
 */
import WebSocket from 'ws';
import { TtsError } from '../../errors.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from '../types.ts';
import { AudioChannel, failHead, type QueuedSentence } from './audio-channel.ts';
import { Pcm16Decoder } from './pcm.ts';
import { DEFAULT_STALL_MS, StallTimer } from './stall-timer.ts';
import { clamp, tuning } from './tuning.ts';
import { endpointUrl, refusalError } from './vendor-url.ts';

export const MINIMAX_DEFAULT_MODEL = 'speech-2.6-turbo';
/** voice_setting ranges of the T2A reference: speed 0.5-2, vol (0, 10]. */
const SPEED_RANGE = [0.5, 2] as const;
const VOL_RANGE = [0.01, 10] as const;
/** MiniMax's status code of a refused key. */
const AUTH_FAILED = 1004;
const DEFAULT_IDLE_CLOSE_MS = 3000;

export interface MinimaxOptions {
  /** e.g. `https://api.minimax.io` (http(s) or ws(s)). */
  baseUrl: string;
  apiKey?: string;
  model?: string;
  /** Provider name (the config slot); default 'minimax'. */
  name?: string;
  /** Finishes a turn's task after this long without a sentence to speak; default 3000 ms. */
  idleCloseMs?: number;
  /** A sentence fails with VENDOR_TIMEOUT when the server says nothing for this long; default 10 s. */
  stallMs?: number;
}

export class MinimaxTtsProvider implements TtsProvider {
  readonly name: string;
  readonly #url: URL;
  readonly #apiKey: string | undefined;
  readonly #model: string;
  readonly #idleCloseMs: number;
  readonly #stallMs: number;
  readonly #turns = new WeakMap<AbortSignal, MinimaxTurn>();

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: MinimaxOptions) {
    this.name = options.name ?? 'minimax';
    this.#url = endpointUrl(options.baseUrl, '/ws/v1/t2a_v2', true);
    this.#apiKey = options.apiKey === '' ? undefined : options.apiKey;
    this.#model = options.model !== undefined && options.model !== '' ? options.model : MINIMAX_DEFAULT_MODEL;
    this.#idleCloseMs = options.idleCloseMs ?? DEFAULT_IDLE_CLOSE_MS;
    this.#stallMs = options.stallMs ?? DEFAULT_STALL_MS;
  }

  /**
   * @throws TtsError VENDOR_HTTP_STATUS when the upgrade is refused, VENDOR_BAD_RESPONSE on
   *   task_failed (or any non-zero status: 1004 says the key was rejected) or malformed data,
   *   VENDOR_UNREACHABLE when the socket fails or closes mid-sentence, VENDOR_TIMEOUT when the
   *   server goes silent. An abort closes quietly.
   */
  async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
    const { signal } = request;
    if (signal.aborted || request.text.trim() === '') return;
    const sentence: QueuedSentence = { text: request.text.trim(), channel: new AudioChannel(), moved: false };
    this.#turnFor(signal, this.#taskStart(request)).speak(sentence);
    yield* sentence.channel.drain(signal);
  }

  /** The turn's open socket and task, a new one when there is none. */
  #turnFor(signal: AbortSignal, taskStart: Record<string, unknown>): MinimaxTurn {
    const open = this.#turns.get(signal);
    if (open !== undefined && !open.closed) return open;
    const turn = new MinimaxTurn(this.name, this.#url, this.#apiKey, { idleCloseMs: this.#idleCloseMs, stallMs: this.#stallMs }, taskStart, signal, (orphans) => {
      if (signal.aborted) return;
      const next = this.#turnFor(signal, taskStart);
      for (const s of orphans) next.speak(s);
    });
    this.#turns.set(signal, turn);
    return turn;
  }

  #taskStart(request: TtsRequest): Record<string, unknown> {
    const voice: Record<string, unknown> = { voice_id: request.voiceId };
    const speed = tuning(request.speed);
    if (speed !== undefined) voice.speed = clamp(speed, SPEED_RANGE);
    const volume = tuning(request.volume);
    if (volume !== undefined) voice.vol = clamp(volume, VOL_RANGE);
    return {
      event: 'task_start',
      model: this.#model,
      voice_setting: voice,
      audio_setting: { sample_rate: RUNTIME_SAMPLE_RATE, format: 'pcm', channel: 1 },
    };
  }
}

interface ServerMessage {
  event?: unknown;
  data?: { audio?: unknown } | null;
  is_final?: unknown;
  base_resp?: { status_code?: unknown; status_msg?: unknown } | null;
}

/** One turn: its socket and task, the sentence being spoken and those waiting. */
class MinimaxTurn {
  closed = false;
  readonly #name: string;
  readonly #ws: WebSocket;
  readonly #taskStart: Record<string, unknown>;
  readonly #idleCloseMs: number;
  readonly #signal: AbortSignal;
  /** [0] is in flight once `#started`; the others wait for its is_final. */
  readonly #queue: QueuedSentence[] = [];
  /** Takes the sentences waiting behind a failed one, to speak them on a new socket. */
  readonly #onOrphans: (sentences: QueuedSentence[]) => void;
  #started = false;
  #inFlight = false;
  #decoder = new Pcm16Decoder();
  #idleTimer: NodeJS.Timeout | undefined;
  readonly #stall: StallTimer;

  constructor(name: string, url: URL, apiKey: string | undefined, timing: { idleCloseMs: number; stallMs: number }, taskStart: Record<string, unknown>, signal: AbortSignal, onOrphans: (sentences: QueuedSentence[]) => void) {
    this.#name = name;
    this.#taskStart = taskStart;
    this.#onOrphans = onOrphans;
    this.#idleCloseMs = timing.idleCloseMs;
    this.#stall = new StallTimer(timing.stallMs, () => this.#fail(new TtsError('VENDOR_TIMEOUT', `${name}: no answer for ${timing.stallMs} ms`)));
    this.#signal = signal;
    const headers: Record<string, string> = {};
    if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;
    this.#ws = new WebSocket(url, { headers });
    signal.addEventListener('abort', this.#onAbort, { once: true });
    this.#ws.on('unexpected-response', (_req, res) => {
      res.resume();
      this.#fail(refusalError(this.#name, 'upgrade', res.statusCode ?? 0));
    });
    this.#ws.on('message', (data, isBinary) => this.#onMessage(data, isBinary));
    this.#ws.on('error', (err) => this.#fail(new TtsError('VENDOR_UNREACHABLE', `${this.#name}: socket error`, { cause: err })));
    this.#ws.on('close', (code) => this.#fail(new TtsError('VENDOR_UNREACHABLE', `${this.#name}: socket closed (${code}) mid-sentence`)));
  }

  speak(sentence: QueuedSentence): void {
    clearTimeout(this.#idleTimer);
    this.#queue.push(sentence);
    this.#stall.touch();
    this.#next();
  }

  /** Sends the oldest waiting sentence when the task is started and nothing is in flight. */
  #next(): void {
    if (!this.#started || this.#inFlight || this.closed) return;
    const head = this.#queue[0];
    if (head === undefined) {
      this.#stall.stop();
      this.#armIdle();
      return;
    }
    this.#inFlight = true;
    this.#decoder = new Pcm16Decoder();
    this.#ws.send(JSON.stringify({ event: 'task_continue', text: head.text }));
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
    if (this.#queue.length > 0) this.#stall.touch();
    const status = msg.base_resp?.status_code;
    if (msg.event === 'task_failed' || (typeof status === 'number' && status !== 0)) {
      this.#fail(statusError(this.#name, msg));
      return;
    }
    switch (msg.event) {
      case 'connected_success':
        this.#ws.send(JSON.stringify(this.#taskStart));
        return;
      case 'task_started':
        this.#started = true;
        this.#next();
        return;
      case 'task_finished':
        this.#close(false);
        return;
      default:
        break; // audio messages (task_continued)
    }
    const head = this.#queue[0];
    if (!this.#inFlight || head === undefined) return;
    const audio = msg.data?.audio;
    if (typeof audio === 'string' && audio !== '') {
      if (audio.length % 2 !== 0 || !/^[0-9a-f]*$/i.test(audio)) {
        this.#fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.#name}: audio is not hex`));
        return;
      }
      head.channel.push(this.#decoder.push(Buffer.from(audio, 'hex')));
    }
    if (msg.is_final === true) {
      if (this.#decoder.pending) {
        this.#fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.#name}: audio ended on half a sample`));
        return;
      }
      this.#queue.shift();
      head.channel.end();
      this.#inFlight = false;
      this.#next();
    }
  }

  #armIdle(): void {
    clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() => {
      if (this.closed || this.#queue.length > 0) return;
      // Nothing is queued, so the server has nothing left to finish: say so and close.
      this.#ws.send(JSON.stringify({ event: 'task_finish' }));
      this.#close(false);
    }, this.#idleCloseMs);
    this.#idleTimer.unref();
  }

  #fail(err: TtsError): void {
    if (this.closed) return;
    const orphans = failHead(this.#queue.splice(0), err);
    this.#close(true);
    if (orphans.length > 0) this.#onOrphans(orphans);
  }

  readonly #onAbort = (): void => {
    if (this.closed) return;
    for (const s of this.#queue.splice(0)) s.channel.end();
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

/** A failed task's error: MiniMax's status code and message (1004: the key). */
function statusError(name: string, msg: ServerMessage): TtsError {
  const code = msg.base_resp?.status_code;
  const words = typeof msg.base_resp?.status_msg === 'string' ? msg.base_resp.status_msg.slice(0, 200) : '';
  const hint = code === AUTH_FAILED ? ': the API key was rejected (check api_key)' : '';
  return new TtsError('VENDOR_BAD_RESPONSE', `${name}: task failed (${String(code)}${words === '' ? '' : ` ${words}`})${hint}`);
}
