/**
 * OpenAI-compatible speech endpoint (`POST {base_url}/audio/speech`), as served by OpenAI and by
 * the many local servers that copy its shape. `response_format: 'pcm'` is raw PCM16 LE mono at
 * 24 kHz, the runtime's own format, streamed as it is generated (chunked transfer): every body
 * chunk is passed on as soon as it arrives, no container to parse, no resampling.
 */
import { TtsError } from '../../errors.ts';
import { httpPost, type HttpPostResponse } from '../http-post.ts';
import type { TtsProvider, TtsRequest } from '../types.ts';
import { applyGain, Pcm16Decoder, volumeGain } from './pcm.ts';

export const OPENAI_DEFAULT_MODEL = 'tts-1';
/** Used when the agent's voice_settings.id is empty. */
export const OPENAI_DEFAULT_VOICE = 'alloy';
/** The endpoint's documented range of `speed`. */
const MIN_SPEED = 0.25;
const MAX_SPEED = 4;

export interface OpenAiSpeechOptions {
  /** e.g. `https://api.openai.com/v1` (the path up to, not including, `/audio/speech`). */
  baseUrl: string;
  apiKey?: string;
  model?: string;
  /** Provider name (the config slot); default 'openai'. */
  name?: string;
}

export class OpenAiSpeechProvider implements TtsProvider {
  readonly name: string;
  private readonly url: URL;
  private readonly apiKey: string | undefined;
  private readonly model: string;

  /** @throws TypeError when baseUrl is not a URL. */
  constructor(options: OpenAiSpeechOptions) {
    this.name = options.name ?? 'openai';
    this.url = new URL(`${options.baseUrl.replace(/\/+$/, '')}/audio/speech`);
    this.apiKey = options.apiKey === '' ? undefined : options.apiKey;
    this.model = options.model !== undefined && options.model !== '' ? options.model : OPENAI_DEFAULT_MODEL;
  }

  /**
   * @throws TtsError VENDOR_HTTP_STATUS (with `status`) on an error response, VENDOR_UNREACHABLE
   *   when the request or the body stream fails, VENDOR_BAD_RESPONSE on a JSON body or an odd
   *   byte count. An abort ends the iteration quietly.
   */
  async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
    const { signal } = request;
    if (signal.aborted || request.text.trim() === '') return;
    const body: Record<string, unknown> = {
      model: this.model,
      input: request.text,
      voice: request.voiceId !== '' ? request.voiceId : OPENAI_DEFAULT_VOICE,
      response_format: 'pcm',
    };
    if (request.speed !== undefined && Number.isFinite(request.speed) && request.speed > 0) {
      body.speed = Math.min(MAX_SPEED, Math.max(MIN_SPEED, request.speed));
    }
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;

    let response: HttpPostResponse;
    try {
      response = await httpPost(this.url, headers, JSON.stringify(body), signal);
    } catch (err) {
      if (signal.aborted) return;
      throw new TtsError('VENDOR_UNREACHABLE', `${this.name}: speech endpoint unreachable`, { cause: err });
    }
    if (response.status < 200 || response.status > 299) throw await statusError(this.name, response);
    if (response.header('content-type').includes('application/json')) {
      response.discard();
      throw new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: JSON instead of PCM audio (response_format unsupported?)`);
    }

    const gain = volumeGain(request.volume);
    const decoder = new Pcm16Decoder();
    try {
      // Breaking out of this loop (consumer stopped, abort) destroys the body, closing the request.
      for await (const bytes of response.body) {
        if (signal.aborted) return;
        const samples = decoder.push(bytes);
        if (samples.length > 0) yield applyGain(samples, gain);
      }
    } catch (err) {
      if (signal.aborted) return;
      throw new TtsError('VENDOR_UNREACHABLE', `${this.name}: speech stream broke`, { cause: err });
    }
    if (decoder.pending) throw new TtsError('VENDOR_BAD_RESPONSE', `${this.name}: PCM stream ended on half a sample`);
  }
}

/**
 * The error of a non-2xx answer. The message names the status and, when the body is the usual
 * `{ error: { code | type } }`, that short code; never the body's free text, which for a bad key
 * quotes part of the key.
 */
async function statusError(name: string, response: HttpPostResponse): Promise<TtsError> {
  let code = '';
  try {
    const parsed = JSON.parse(await response.text()) as { error?: { code?: unknown; type?: unknown } };
    const c = parsed.error?.code ?? parsed.error?.type;
    if (typeof c === 'string' && /^[\w.-]{1,64}$/.test(c)) code = ` (${c})`;
  } catch {
    // not JSON, or the body broke: the status alone says enough
  }
  return new TtsError('VENDOR_HTTP_STATUS', `${name}: speech endpoint answered HTTP ${response.status}${code}`, {
    status: response.status,
  });
}
