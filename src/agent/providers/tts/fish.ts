/**
 * Fish Audio's live TTS WebSocket (`/v1/tts/live`), MessagePack frames both ways:
 *
 *   client                                                         server
 *   GET /v1/tts/live  Authorization: Bearer <key>  model: <model>  --->
 *                                                                  <---  101 (401/403: key refused)
 *   {event: "start", request: {text: "", format: "pcm", sample_rate: 24000, reference_id,
 *                              latency: "balanced", prosody?: {speed, volume}}}
 *   {event: "text", text: "Hello there. "}
 *   {event: "flush"}                  synthesize what is buffered now
 *   {event: "stop"}                   no more text: finish and end the session
 *                                                                  <---  {event: "audio", audio: <bin: PCM16 LE 24 kHz>} ...
 *                                                                  <---  {event: "finish", reason: "stop" | "error"}
 *
 * One socket per sentence: the audio events carry nothing that says which text they speak, and
 * the docs name no event that marks the end of a flush, so a socket shared by two sentences
 * could not tell where the first one's audio ends. Barge-in closes the socket (the protocol has
 * no cancel event). The docs do not describe what accompanies `finish` with reason `error`; a
 * `message` or `error` field, when present, is quoted.
 */
import { decode, encode } from '@msgpack/msgpack';
import WebSocket from 'ws';
import { TtsError } from '../../errors.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from '../types.ts';
import { AudioChannel } from './audio-channel.ts';
import { Pcm16Decoder } from './pcm.ts';
import { stallError, StallTimer } from './stall-timer.ts';
import { clamp, tuning } from './tuning.ts';
import { vendorSettings, type VendorOptions, type VendorSettings } from './vendor-options.ts';
import { refusalError } from './vendor-url.ts';

/** The model the docs name as the default of the TTS API (the `model` header is required). */
export const FISH_DEFAULT_MODEL = 's2-pro';
/** prosody.speed range (Fish Audio's SDKs and integrations: 0.5-2.0). */
const SPEED_RANGE = [0.5, 2] as const;
/** prosody.volume is in dB, -20..20 (0: unchanged). */
const VOLUME_DB_RANGE = [-20, 20] as const;

/** baseUrl e.g. `https://api.fish.audio`; model is sent as the `model` header. */
export type FishOptions = VendorOptions;

interface ServerEvent {
  event?: unknown;
  audio?: unknown;
  reason?: unknown;
  message?: unknown;
  error?: unknown;
}

export class FishTtsProvider implements TtsProvider {
  readonly name: string;
  readonly #vendor: VendorSettings;

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: FishOptions) {
    this.#vendor = vendorSettings(options, { type: 'fish', path: '/v1/tts/live', websocket: true, defaultModel: FISH_DEFAULT_MODEL });
    this.name = this.#vendor.name;
  }

  /**
   * @throws TtsError VENDOR_HTTP_STATUS when the upgrade is refused (401/403: the key),
   *   VENDOR_UNREACHABLE when the socket fails or closes before `finish`, VENDOR_BAD_RESPONSE on
   *   `finish` with reason error or a malformed frame, VENDOR_TIMEOUT when the server goes
   *   silent. An abort closes the socket quietly.
   */
  async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
    const { signal } = request;
    if (signal.aborted || request.text.trim() === '') return;
    const channel = new AudioChannel();
    const decoder = new Pcm16Decoder();
    const { url, apiKey, model, stallMs } = this.#vendor;
    const headers: Record<string, string> = { model };
    if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;
    const ws = new WebSocket(url, { headers });
    let finished = false;
    const stall = new StallTimer(stallMs, () => fail(stallError(this.name, stallMs)));
    stall.touch();
    const fail = (err: TtsError): void => {
      if (finished || signal.aborted) return; // an abort's close is no failure
      finished = true;
      stall.stop();
      channel.fail(err);
      ws.terminate();
    };
    const onAbort = (): void => {
      finished = true;
      // No cancel event in the protocol: closing the socket is how generation stops.
      if (ws.readyState === WebSocket.OPEN) ws.close(1000);
      else ws.terminate();
    };
    signal.addEventListener('abort', onAbort, { once: true });

    ws.on('unexpected-response', (_req, res) => {
      res.resume(); // the refusal's body is not needed; release the socket
      fail(refusalError(this.name, 'upgrade', res.statusCode ?? 0));
    });
    ws.on('open', () => {
      for (const event of [
        { event: 'start', request: this.#startRequest(request) },
        { event: 'text', text: `${request.text.trim()} ` },
        { event: 'flush' },
        { event: 'stop' },
      ]) {
        ws.send(encode(event));
      }
    });
    ws.on('message', (data, isBinary) => {
      if (finished) return;
      stall.touch();
      let msg: ServerEvent;
      try {
        if (!isBinary) throw new Error('text frame (MessagePack expected)');
        msg = decode(data as Buffer) as ServerEvent;
        if (typeof msg !== 'object' || msg === null) throw new Error('not a map');
      } catch (err) {
        fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: malformed server event`, { cause: err }));
        return;
      }
      if (msg.event === 'audio') {
        if (!(msg.audio instanceof Uint8Array)) {
          fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: audio event without binary audio`));
          return;
        }
        channel.push(decoder.push(msg.audio));
      } else if (msg.event === 'finish') {
        if (msg.reason !== 'stop') {
          fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: server finished with reason ${String(msg.reason)}${describe(msg)}`));
          return;
        }
        if (decoder.pending) {
          fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: audio ended on half a sample`));
          return;
        }
        finished = true;
        stall.stop();
        channel.end();
        ws.close(1000);
      }
      // other events (logs) carry nothing for us
    });
    ws.on('error', (err) => fail(new TtsError('VENDOR_UNREACHABLE', `${this.name}: socket error`, { cause: err })));
    ws.on('close', (code, reason) => {
      const why = reason.length > 0 ? `: ${reason.toString('utf8').slice(0, 200)}` : '';
      fail(new TtsError('VENDOR_UNREACHABLE', `${this.name}: socket closed (${code}) before finish${why}`));
    });

    try {
      yield* channel.drain(signal);
    } finally {
      signal.removeEventListener('abort', onAbort);
      stall.stop();
      if (!finished) onAbort(); // the consumer stopped early: stop the generation
    }
  }

  /** The start event's request: the TTS API's parameters, text sent afterwards. */
  #startRequest(request: TtsRequest): Record<string, unknown> {
    const body: Record<string, unknown> = { text: '', format: 'pcm', sample_rate: RUNTIME_SAMPLE_RATE, latency: 'balanced' };
    if (request.voiceId !== '') body.reference_id = request.voiceId;
    const prosody: Record<string, number> = {};
    const speed = tuning(request.speed);
    if (speed !== undefined) prosody.speed = clamp(speed, SPEED_RANGE);
    const volume = tuning(request.volume);
    // voice_settings.volume is a gain factor (1 = unchanged); Fish takes decibels
    if (volume !== undefined && volume !== 1) prosody.volume = Math.round(clamp(20 * Math.log10(volume), VOLUME_DB_RANGE) * 10) / 10;
    if (Object.keys(prosody).length > 0) body.prosody = prosody;
    return body;
  }
}

/** The vendor's words accompanying a failed finish, if any. */
function describe(msg: ServerEvent): string {
  const words = [msg.message, msg.error].find((w) => typeof w === 'string' && w !== '') as string | undefined;
  return words === undefined ? '' : `: ${words.slice(0, 200)}`;
}
