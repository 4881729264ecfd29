/**
 * Hume's Octave streaming TTS, JSON flavour: `POST {base_url}/v0/tts/stream/json` with
 * `X-Hume-Api-Key`, answered by newline-delimited JSON objects, each a chunk of the audio:
 *
 *   POST /v0/tts/stream/json   X-Hume-Api-Key: <key>
 *   {"utterances": [{"text": "Hello there.", "voice": {"id": "<uuid>"} | {"name": "...", "provider": "HUME_AI"},
 *                    "speed"?: 1.1}],
 *    "format": {"type": "pcm"}, "strip_headers": true, "instant_mode": true,
 *    "context"?: {"generation_id": "<the turn's previous sentence>"}}
 *   200  {"type": "audio", "audio": "<base64 PCM16 LE 48 kHz>", "chunk_index": 0, "generation_id": "...",
 *         "is_last_chunk": false, ...}\n ...
 *
 * Hume's PCM is 48 kHz mono (the rate Hume's own examples and integrations use; the request has
 * no rate field), so each request resamples once to 24 kHz. HTTP has no sentence continuation on
 * one stream, but the sentences of a turn (same AbortSignal) are chained by `context.generation_id`
 * so the voice carries on from the last sentence completed before it, and they share a keep-alive TCP/TLS
 * connection (http-post.ts). Barge-in aborts the request, which closes that connection.
 *
 * Hume has no volume parameter: `volume` is applied here as a gain, as for the other vendors
 * without one. The docs do not describe an error sent inside a 200 stream; a line that carries
 * `error` or `type: "error"` instead of audio is taken as one, and a body that breaks off is
 * VENDOR_UNREACHABLE.
 */
import { TtsError } from '../../errors.ts';
import { createResampler, initResamplers } from '../../../media/resampler.ts';
import type { Resampler } from '../../../media/types.ts';
import { httpPost, type HttpPostResponse } from '../http-post.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from '../types.ts';
import { applyGain, Pcm16Decoder, volumeGain } from './pcm.ts';
import { stallError, StallTimer } from './stall-timer.ts';
import { clamp, tuning } from './tuning.ts';
import { vendorSettings, type VendorOptions, type VendorSettings } from './vendor-options.ts';
import { refusalError } from './vendor-url.ts';

/** The rate of Hume's PCM output. */
export const HUME_SAMPLE_RATE = 48_000;
/** utterance.speed range of the Octave API. */
const SPEED_RANGE = [0.5, 2] as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A JSON line longer than this is not a chunk of a sentence's audio. */
const MAX_LINE = 16 * 1024 * 1024;

export interface HumeOptions extends VendorOptions {
  /** e.g. `https://api.hume.ai` (http(s)). */
  baseUrl: string;
  /** Octave version ("1" or "2"); unset lets Hume choose. */
  model?: string;
}

interface Chunk {
  type?: unknown;
  audio?: unknown;
  generation_id?: unknown;
  error?: unknown;
  message?: unknown;
}

export class HumeTtsProvider implements TtsProvider {
  readonly name: string;
  /** model: the Octave version, undefined when unset. */
  readonly #vendor: VendorSettings<undefined>;
  /** The last generation of each turn, continued by the turn's next sentence. */
  readonly #lastGeneration = new WeakMap<AbortSignal, string>();

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: HumeOptions) {
    this.#vendor = vendorSettings(options, { type: 'hume', path: '/v0/tts/stream/json', websocket: false, defaultModel: undefined });
    this.name = this.#vendor.name;
  }

  /**
   * @throws TtsError VENDOR_HTTP_STATUS on an error status (401/403: the key), VENDOR_UNREACHABLE
   *   when the request or the stream breaks, VENDOR_BAD_RESPONSE on an error line or malformed
   *   JSON/audio, VENDOR_TIMEOUT when the server goes silent, LOCAL_ENGINE_FAILED when the
   *   resampler cannot load. An abort ends quietly.
   */
  async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
    const { signal } = request;
    if (signal.aborted || request.text.trim() === '') return;
    try {
      await initResamplers();
    } catch (err) {
      throw new TtsError('LOCAL_ENGINE_FAILED', `${this.name}: resampler failed to load`, { cause: err });
    }
    const { url, apiKey, stallMs } = this.#vendor;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (apiKey !== undefined) headers['x-hume-api-key'] = apiKey;
    // A silent server aborts the request through its own signal, told apart from a barge-in.
    const stalled = new AbortController();
    const stall = new StallTimer(stallMs, () => stalled.abort());
    const timeout = (): TtsError => stallError(this.name, stallMs);
    stall.touch();
    let response: HttpPostResponse;
    try {
      response = await httpPost(url, headers, JSON.stringify(this.#body(request)), AbortSignal.any([signal, stalled.signal]));
    } catch (err) {
      stall.stop();
      if (signal.aborted) return;
      if (stalled.signal.aborted) throw timeout();
      throw new TtsError('VENDOR_UNREACHABLE', `${this.name}: TTS endpoint unreachable`, { cause: err });
    }
    if (response.status < 200 || response.status > 299) stall.stop();
    if (response.status < 200 || response.status > 299) {
      response.discard(); // the body's text is not quoted: an auth error may echo the key
      throw refusalError(this.name, 'request', response.status);
    }

    const gain = volumeGain(request.volume);
    const decoder = new Pcm16Decoder();
    const resampler: Resampler = createResampler(HUME_SAMPLE_RATE, RUNTIME_SAMPLE_RATE);
    // process() returns a view it reuses: copy before yielding.
    const convert = (samples: Int16Array): Int16Array => applyGain(resampler.process(samples).slice(), gain);
    let partial = '';
    const generation: { id?: string } = {};
    try {
      try {
        for await (const bytes of response.body) {
          if (signal.aborted) return;
          stall.touch();
          partial += bytes.toString('utf8');
          if (partial.length > MAX_LINE) throw new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: a JSON line over ${MAX_LINE} bytes`);
          const lines = partial.split('\n');
          partial = lines.pop()!;
          for (const line of lines) {
            const samples = this.#audioOf(line, decoder, generation);
            if (samples !== undefined && samples.length > 0) yield convert(samples);
          }
        }
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof TtsError) throw err;
        if (stalled.signal.aborted) throw timeout();
        throw new TtsError('VENDOR_UNREACHABLE', `${this.name}: TTS stream broke`, { cause: err });
      }
      const last = this.#audioOf(partial, decoder, generation);
      if (last !== undefined && last.length > 0) yield convert(last);
      if (decoder.pending) throw new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: audio ended on half a sample`);
      // Only a complete generation is continued: whether a context may name one still streaming
      // (the next sentence starts while this one plays) is not documented.
      if (generation.id !== undefined) this.#lastGeneration.set(signal, generation.id);
      // The resampler's delay line still holds the last few ms of speech.
      const tail = convert(new Int16Array(Math.ceil((resampler.delaySamples * HUME_SAMPLE_RATE) / RUNTIME_SAMPLE_RATE) + 1));
      if (tail.length > 0 && !signal.aborted) yield tail;
    } finally {
      stall.stop();
      resampler.close();
    }
  }

  /** The samples of one JSON line (undefined for a blank line or one without audio). */
  #audioOf(line: string, decoder: Pcm16Decoder, generation: { id?: string }): Int16Array | undefined {
    const text = line.trim();
    if (text === '') return undefined;
    let chunk: Chunk;
    try {
      chunk = JSON.parse(text) as Chunk;
      if (typeof chunk !== 'object' || chunk === null) throw new Error('not an object');
    } catch (err) {
      throw new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: malformed JSON line`, { cause: err });
    }
    if (chunk.type === 'error' || chunk.error != null) {
      const words = [chunk.error, chunk.message].filter((w) => w != null).map((w) => (typeof w === 'string' ? w : JSON.stringify(w)));
      throw new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: server error: ${words.join(': ').slice(0, 200)}`);
    }
    if (typeof chunk.generation_id === 'string' && chunk.generation_id !== '') generation.id = chunk.generation_id;
    if (typeof chunk.audio !== 'string' || chunk.audio === '') return undefined;
    return decoder.push(Buffer.from(chunk.audio, 'base64'));
  }

  #body(request: TtsRequest): Record<string, unknown> {
    const id = request.voiceId.trim();
    const utterance: Record<string, unknown> = {
      text: request.text.trim(),
      // A saved or library voice by id; anything else by its name in Hume's voice library.
      voice: UUID.test(id) ? { id } : { name: id, provider: 'HUME_AI' },
    };
    const speed = tuning(request.speed);
    if (speed !== undefined) utterance.speed = clamp(speed, SPEED_RANGE);
    const body: Record<string, unknown> = { utterances: [utterance], format: { type: 'pcm' }, strip_headers: true, instant_mode: true };
    if (this.#vendor.model !== undefined) body.version = this.#vendor.model;
    const previous = this.#lastGeneration.get(request.signal);
    if (previous !== undefined) body.context = { generation_id: previous };
    return body;
  }
}
