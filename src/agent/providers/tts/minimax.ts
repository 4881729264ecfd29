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
 * barge-in closes the socket. The reference's example final message (`is_final: true`) carries
 * `data.audio` and `extra_info.audio_size` (the sentence's audio in bytes) but does not say
 * whether that audio is the last chunk or the whole sentence again, and its example plays every
 * message's audio. Every byte counts once either way: the final audio is the last chunk unless the
 * bytes already received make up audio_size, in which case it repeats them and is dropped.
 * A `base_resp.status_code` other than 0 is an error (1004: authentication failed). When the
 * socket breaks, the sentence being spoken fails and those waiting move, once, to a new socket.
 */
import { TtsError } from '../../errors.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from '../types.ts';
import { Pcm16Decoder } from './pcm.ts';
import { TurnSocket, TurnSockets, type TurnLink } from './turn-socket.ts';
import { clamp, tuning } from './tuning.ts';
import { turnSocketSettings, type TurnSocketOptions, type TurnSocketSettings } from './vendor-options.ts';

export const MINIMAX_DEFAULT_MODEL = 'speech-2.6-turbo';
/** voice_setting ranges of the T2A reference: speed 0.5-2, vol (0, 10]. */
const SPEED_RANGE = [0.5, 2] as const;
const VOL_RANGE = [0.01, 10] as const;
/** MiniMax's status code of a refused key. */
const AUTH_FAILED = 1004;

/** baseUrl e.g. `https://api.minimax.io`; idleCloseMs finishes a turn's task (default 3000 ms). */
export type MinimaxOptions = TurnSocketOptions;

export class MinimaxTtsProvider implements TtsProvider {
  readonly name: string;
  readonly #vendor: TurnSocketSettings;
  readonly #turns = new TurnSockets<MinimaxTurn>();

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: MinimaxOptions) {
    this.#vendor = turnSocketSettings(options, { type: 'minimax', path: '/ws/v1/t2a_v2', defaultModel: MINIMAX_DEFAULT_MODEL });
    this.name = this.#vendor.name;
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
    const taskStart = this.#taskStart(request);
    yield* this.#turns.speak(request.text.trim(), signal, (turn) => new MinimaxTurn(this.#vendor, taskStart, turn));
  }

  #taskStart(request: TtsRequest): Record<string, unknown> {
    const voice: Record<string, unknown> = { voice_id: request.voiceId };
    const speed = tuning(request.speed);
    if (speed !== undefined) voice.speed = clamp(speed, SPEED_RANGE);
    const volume = tuning(request.volume);
    if (volume !== undefined) voice.vol = clamp(volume, VOL_RANGE);
    return {
      event: 'task_start',
      model: this.#vendor.model,
      voice_setting: voice,
      audio_setting: { sample_rate: RUNTIME_SAMPLE_RATE, format: 'pcm', channel: 1 },
    };
  }
}

interface ServerMessage {
  event?: unknown;
  data?: { audio?: unknown } | null;
  is_final?: unknown;
  extra_info?: { audio_size?: unknown } | null;
  base_resp?: { status_code?: unknown; status_msg?: unknown } | null;
}

/** One turn: its socket and task; the base's sentences[0] is in flight once started, the others wait for its is_final. */
class MinimaxTurn extends TurnSocket<ServerMessage> {
  readonly #taskStart: Record<string, unknown>;
  #started = false;
  #inFlight = false;
  #decoder = new Pcm16Decoder();
  /** Bytes of audio the sentence in flight has delivered so far. */
  #received = 0;

  constructor(vendor: TurnSocketSettings, taskStart: Record<string, unknown>, turn: TurnLink) {
    const headers: Record<string, string> = {};
    if (vendor.apiKey !== undefined) headers.authorization = `Bearer ${vendor.apiKey}`;
    super(vendor, headers, turn);
    this.#taskStart = taskStart;
  }

  protected send(): void {
    this.#next();
  }

  /** Sends the oldest waiting sentence when the task is started and nothing is in flight. */
  #next(): void {
    if (!this.#started || this.#inFlight || this.closed) return;
    const head = this.sentences[0];
    if (head === undefined) {
      this.stall.stop();
      this.armIdle();
      return;
    }
    this.#inFlight = true;
    this.#decoder = new Pcm16Decoder();
    this.#received = 0;
    this.ws.send(JSON.stringify({ event: 'task_continue', text: head.text }));
  }

  protected onMessage(msg: ServerMessage): void {
    if (this.sentences.length > 0) this.stall.touch();
    const status = msg.base_resp?.status_code;
    if (msg.event === 'task_failed' || (typeof status === 'number' && status !== 0)) {
      this.fail(statusError(this.name, msg));
      return;
    }
    switch (msg.event) {
      case 'connected_success':
        this.ws.send(JSON.stringify(this.#taskStart));
        return;
      case 'task_started':
        this.#started = true;
        this.#next();
        return;
      case 'task_finished':
        this.close(false);
        return;
      default:
        break; // audio messages (task_continued)
    }
    const head = this.sentences[0];
    if (!this.#inFlight || head === undefined) return;
    const audio = msg.data?.audio;
    if (typeof audio === 'string' && audio !== '' && !(msg.is_final === true && this.#repeatsSentence(msg))) {
      if (audio.length % 2 !== 0 || !/^[0-9a-f]*$/i.test(audio)) {
        this.fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: audio is not hex`));
        return;
      }
      const bytes = Buffer.from(audio, 'hex');
      this.#received += bytes.length;
      head.channel.push(this.#decoder.push(bytes));
    }
    if (msg.is_final === true) {
      if (this.#decoder.pending) {
        this.fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: audio ended on half a sample`));
        return;
      }
      this.sentences.shift();
      head.channel.end();
      this.#inFlight = false;
      this.#next();
    }
  }

  /**
   * Whether a final message's audio repeats the sentence: the chunks before it already hold all
   * of the sentence's audio_size bytes. Without audio_size it is taken as the last chunk.
   */
  #repeatsSentence(msg: ServerMessage): boolean {
    const size = msg.extra_info?.audio_size;
    return typeof size === 'number' && size > 0 && this.#received >= size;
  }

  /** Idle: nothing is queued, so the server has nothing left to finish: say so (the socket closes next). */
  protected sendEnd(): void {
    this.ws.send(JSON.stringify({ event: 'task_finish' }));
  }
}

/** A failed task's error: MiniMax's status code and message (1004: the key). */
function statusError(name: string, msg: ServerMessage): TtsError {
  const code = msg.base_resp?.status_code;
  const words = typeof msg.base_resp?.status_msg === 'string' ? msg.base_resp.status_msg.slice(0, 200) : '';
  const hint = code === AUTH_FAILED ? ': the API key was rejected (check api_key)' : '';
  return new TtsError('VENDOR_BAD_RESPONSE', `${name}: task failed (${String(code)}${words === '' ? '' : ` ${words}`})${hint}`);
}
