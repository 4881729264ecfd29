/**
 * Streaming WebSocket TTS, speaking ElevenLabs' `stream-input` protocol (also offered by
 * compatible vendors). One socket per request, since the runtime hands over one sentence or
 * clause at a time:
 *
 *   client                                              server
 *   GET /v1/text-to-speech/{voice}/stream-input?model_id=..&output_format=pcm_24000[&language_code=..]
 *       xi-api-key: <key>                        --->
 *                                                <---   101 (or 401/403/...: refused)
 *   {"text":" ","voice_settings":{..},"xi_api_key":".."}   opens the context; settings once
 *   {"text":"<text> ","try_trigger_generation":true}        the text (trailing space: a word end)
 *   {"text":""}                                             end of input: flush and finish
 *                                                <---   {"audio":"<base64 PCM16 LE 24 kHz>","isFinal":false,..}  ...
 *                                                <---   {"isFinal":true}   then the server closes
 *
 * The key goes in both places: the handshake header lets the server refuse the upgrade with a
 * status we can report; the first message is where the protocol originally carried it.
 */
import WebSocket from 'ws';
import { TtsError } from '../../errors.ts';
import type { TtsProvider, TtsRequest } from '../types.ts';
import { applyGain, Pcm16Decoder, volumeGain } from './pcm.ts';

export const STREAM_DEFAULT_MODEL = 'eleven_flash_v2_5';

export interface StreamingWsTtsOptions {
  /** e.g. `https://api.elevenlabs.io` (http(s) or ws(s); a trailing `/v1` is tolerated). */
  baseUrl: string;
  apiKey?: string;
  model?: string;
  /** Provider name (the config slot); default 'stream'. */
  name?: string;
}

/** What a server message may carry (ElevenLabs also sends alignment data, unused here). */
interface ServerMessage {
  audio?: unknown;
  isFinal?: unknown;
  error?: unknown;
  message?: unknown;
}

export class StreamingWsTtsProvider implements TtsProvider {
  readonly name: string;
  private readonly base: URL;
  private readonly apiKey: string | undefined;
  private readonly model: string;

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: StreamingWsTtsOptions) {
    this.name = options.name ?? 'stream';
    const base = new URL(options.baseUrl);
    base.protocol = base.protocol === 'http:' || base.protocol === 'ws:' ? 'ws:' : 'wss:';
    base.pathname = base.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
    base.search = '';
    this.base = base;
    this.apiKey = options.apiKey === '' ? undefined : options.apiKey;
    this.model = options.model !== undefined && options.model !== '' ? options.model : STREAM_DEFAULT_MODEL;
  }

  /** The socket URL of one request. */
  urlFor(request: Pick<TtsRequest, 'voiceId' | 'language'>): string {
    const url = new URL(this.base);
    url.pathname = `${url.pathname.replace(/\/+$/, '')}/v1/text-to-speech/${encodeURIComponent(request.voiceId)}/stream-input`;
    url.searchParams.set('model_id', this.model);
    url.searchParams.set('output_format', 'pcm_24000');
    const lang = request.language.trim();
    if (lang !== '' && lang !== 'multi') url.searchParams.set('language_code', lang);
    return url.toString();
  }

  /**
   * @throws TtsError VENDOR_HTTP_STATUS when the upgrade is refused, VENDOR_UNREACHABLE on a
   *   socket error or a close before `isFinal`, VENDOR_BAD_RESPONSE on an error message or
   *   malformed JSON/audio. An abort closes the socket and ends the iteration quietly.
   */
  async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
    const { signal } = request;
    if (signal.aborted || request.text.trim() === '') return;
    const queue: Int16Array[] = [];
    let finished = false;
    let failure: TtsError | undefined;
    let wake: (() => void) | undefined;
    const notify = (): void => {
      wake?.();
      wake = undefined;
    };
    const fail = (err: TtsError): void => {
      if (finished || failure !== undefined || signal.aborted) return; // an abort's close is no failure
      failure = err;
      ws.terminate();
      notify();
    };

    const headers: Record<string, string> = {};
    if (this.apiKey !== undefined) headers['xi-api-key'] = this.apiKey;
    const ws = new WebSocket(this.urlFor(request), { headers });
    const gain = volumeGain(request.volume);
    const decoder = new Pcm16Decoder();
    const onAbort = (): void => {
      ws.terminate();
      notify();
    };
    signal.addEventListener('abort', onAbort, { once: true });

    ws.on('unexpected-response', (_req, res) => {
      res.resume(); // the refusal's body is not needed; drain it so the socket is released
      fail(new TtsError('VENDOR_HTTP_STATUS', `${this.name}: upgrade refused with HTTP ${res.statusCode}`, { status: res.statusCode }));
    });
    ws.on('open', () => {
      ws.send(JSON.stringify(this.openingMessage(request)));
      ws.send(JSON.stringify({ text: `${request.text} `, try_trigger_generation: true }));
      ws.send('{"text":""}');
    });
    ws.on('message', (data, isBinary) => {
      if (finished || failure !== undefined) return;
      let msg: ServerMessage;
      try {
        if (isBinary) throw new Error('binary frame');
        msg = JSON.parse(data.toString()) as ServerMessage;
        if (typeof msg !== 'object' || msg === null) throw new Error('not an object');
      } catch (err) {
        fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: malformed server message`, { cause: err }));
        return;
      }
      if (msg.error != null || (typeof msg.message === 'string' && msg.audio == null && msg.isFinal == null)) {
        fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: server error: ${describeError(msg)}`));
        return;
      }
      if (typeof msg.audio === 'string' && msg.audio !== '') {
        const samples = decoder.push(Buffer.from(msg.audio, 'base64'));
        if (samples.length > 0) queue.push(applyGain(samples, gain));
      }
      if (msg.isFinal === true) {
        if (decoder.pending) {
          fail(new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: audio ended on half a sample`));
          return;
        }
        finished = true;
        ws.close(1000);
      }
      notify();
    });
    ws.on('error', (err) => fail(new TtsError('VENDOR_UNREACHABLE', `${this.name}: socket error`, { cause: err })));
    ws.on('close', (code) => fail(new TtsError('VENDOR_UNREACHABLE', `${this.name}: socket closed (${code}) before the final message`)));

    try {
      for (;;) {
        if (signal.aborted) return;
        const chunk = queue.shift();
        if (chunk !== undefined) {
          yield chunk;
          continue;
        }
        if (failure !== undefined) throw failure;
        if (finished) return;
        await new Promise<void>((resolve) => (wake = resolve));
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      if (ws.readyState !== WebSocket.CLOSED && !finished) ws.terminate();
    }
  }

  /** The first message: opens the context with the settings that are set and the key. */
  private openingMessage(request: TtsRequest): Record<string, unknown> {
    const settings: Record<string, number> = {};
    const set = (key: string, value: number | undefined): void => {
      if (value !== undefined && Number.isFinite(value) && value !== 0) settings[key] = value;
    };
    set('stability', request.stability);
    set('similarity_boost', request.similarityBoost);
    set('speed', request.speed);
    const msg: Record<string, unknown> = { text: ' ' };
    if (Object.keys(settings).length > 0) msg.voice_settings = settings;
    if (this.apiKey !== undefined) msg.xi_api_key = this.apiKey;
    return msg;
  }
}

/** A short, printable description of a server error message (the vendor's own words). */
function describeError(msg: ServerMessage): string {
  const parts = [msg.error, msg.message].filter((p) => p != null).map((p) => (typeof p === 'string' ? p : JSON.stringify(p)));
  return parts.join(': ').slice(0, 200);
}
