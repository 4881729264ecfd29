/**
 * Streaming speech-to-text over one WebSocket per session, speaking Deepgram's live
 * transcription protocol (`GET /v1/listen`, developers.deepgram.com/reference/speech-to-text/
 * listen-streaming), which Deepgram and compatible self-hosted servers answer:
 *
 *   client -> server  binary: raw audio as declared in the query (linear16, 24000 Hz, mono)
 *                     text:   {"type":"Finalize"}     flush: turn buffered audio into a final
 *                             {"type":"KeepAlive"}    no audio for a while; the server closes an
 *                                                     idle stream after 10 s (NET-0001)
 *                             {"type":"CloseStream"}  finish and close
 *   server -> client  {"type":"Results","channel":{"alternatives":[{"transcript":"..."}]},
 *                      "is_final":bool,"speech_final":bool,...}
 *                     {"type":"Metadata"|"SpeechStarted"|"UtteranceEnd",...}   (ignored here)
 *
 * Keyterms go as one `keyterm=` query parameter each (Keyterm Prompting, Nova-3; `language=multi`
 * supports them too). Every written frame is sent, so the vendor's own endpointing sees all
 * audio; the VAD's `speechEnded()` sends Finalize so the final arrives without waiting for the
 * vendor's endpointing. `speechStarted()` needs nothing on this protocol.
 *
 * Interim results (`is_final: false`) are delivered with `isFinal: false`, except empty ones
 * (silence). Finals are delivered even when empty: Finalize of a silent turn answers one.
 */
import WebSocket from 'ws';
import { SttError } from '../../errors.ts';
import {
  RUNTIME_SAMPLE_RATE,
  type SttHandlers,
  type SttOptions,
  type SttProvider,
  type SttStream,
} from '../types.ts';
import { pcm16ToLittleEndian } from './wav.ts';

export interface StreamingWsSttOptions {
  /** e.g. https://api.deepgram.com (only scheme and host are used: the path is /v1/listen). */
  baseUrl: string;
  /** Sent as `Authorization: Token <apiKey>` when not empty (Deepgram's scheme, not Bearer). */
  apiKey: string;
  /** e.g. nova-3 */
  model: string;
  /** KeepAlive period when no audio was sent (default 5000 ms; Deepgram asks for 3-5 s). */
  keepAliveMs?: number;
  /** Frames kept while the socket connects (default 250 = 5 s); the oldest are dropped beyond. */
  maxPendingFrames?: number;
  /** Opening handshake deadline (default 10 s) -> VENDOR_UNREACHABLE. */
  connectTimeoutMs?: number;
  /** Gets exceptions thrown by handlers (they are never thrown back into the socket). */
  onHandlerError?: (err: unknown) => void;
}

export class StreamingWsSttProvider implements SttProvider {
  readonly name = 'stream';
  constructor(private readonly options: StreamingWsSttOptions) {}

  open(options: SttOptions, handlers: SttHandlers): SttStream {
    return new StreamingWsSttStream(this.options, options, handlers);
  }
}

/** The `/v1/listen` URL: wss for https/wss base URLs, ws for http/ws; the query as documented. */
export function listenUrl(baseUrl: string, model: string, options: SttOptions): string {
  const base = new URL(baseUrl);
  const scheme = base.protocol === 'https:' || base.protocol === 'wss:' ? 'wss:' : 'ws:';
  const params: Array<[string, string]> = [];
  if (model) params.push(['model', model]);
  params.push(['encoding', 'linear16'], ['sample_rate', String(RUNTIME_SAMPLE_RATE)], ['channels', '1']);
  params.push(['interim_results', 'true']);
  if (options.language) params.push(['language', options.language]);
  for (const term of options.keyterms) {
    if (term.trim()) params.push(['keyterm', term.trim()]);
  }
  // encodeURIComponent rather than URLSearchParams: spaces in keyterms become %20, not '+'.
  const query = params.map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&');
  return `${scheme}//${base.host}/v1/listen?${query}`;
}

const KEEP_ALIVE = JSON.stringify({ type: 'KeepAlive' });
const FINALIZE = JSON.stringify({ type: 'Finalize' });
const CLOSE_STREAM = JSON.stringify({ type: 'CloseStream' });

interface ResultsMessage {
  type: 'Results';
  channel?: { alternatives?: Array<{ transcript?: unknown }> };
  is_final?: unknown;
}

class StreamingWsSttStream implements SttStream {
  private readonly ws: WebSocket;
  private readonly host: string;
  /** Audio (Buffer) and control messages (string) written before the socket opened. */
  private pending: Array<Buffer | string> = [];
  private keepAlive: NodeJS.Timeout | undefined;
  private audioSinceTick = false;
  private closed = false;
  private failed = false;

  constructor(
    private readonly config: StreamingWsSttOptions,
    options: SttOptions,
    private readonly handlers: SttHandlers,
  ) {
    const url = listenUrl(config.baseUrl, config.model, options);
    this.host = new URL(url).host;
    const headers: Record<string, string> = {};
    if (config.apiKey) headers.authorization = `Token ${config.apiKey}`;
    this.ws = new WebSocket(url, { headers, handshakeTimeout: config.connectTimeoutMs ?? 10_000 });
    this.ws.on('open', () => this.onOpen());
    this.ws.on('message', (data, isBinary) => this.onMessage(data, isBinary));
    this.ws.on('unexpected-response', (_req, res) => {
      res.resume();
      const status = res.statusCode ?? 0;
      this.fail(new SttError('VENDOR_HTTP_STATUS', `streaming STT ${this.host} refused the upgrade: HTTP ${status}`, { status }));
    });
    this.ws.on('error', (err) => {
      this.fail(new SttError('VENDOR_UNREACHABLE', `streaming STT ${this.host} unreachable: ${err.message}`, { cause: err }));
    });
    this.ws.on('close', (code, reason) => {
      const why = reason.length > 0 ? `: ${reason.toString('utf8').slice(0, 200)}` : '';
      this.fail(new SttError('VENDOR_UNREACHABLE', `streaming STT ${this.host} closed the stream (code ${code}${why})`));
    });
  }

  write(frame: Int16Array): void {
    if (this.closed || this.failed) return;
    this.send(pcm16ToLittleEndian(frame));
  }

  speechStarted(): void {
    // Nothing to tell: the vendor hears all audio and runs its own endpointing.
  }

  speechEnded(): void {
    if (this.closed || this.failed) return;
    this.send(FINALIZE);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.stopKeepAlive();
    this.pending = [];
    if (this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(CLOSE_STREAM);
      this.ws.close(1000);
    } else {
      this.ws.terminate(); // connecting: nothing to flush
    }
  }

  private send(message: Buffer | string): void {
    if (this.ws.readyState === WebSocket.OPEN) {
      if (typeof message !== 'string') this.audioSinceTick = true;
      this.ws.send(message);
      return;
    }
    if (this.ws.readyState !== WebSocket.CONNECTING) return;
    this.pending.push(message);
    if (this.pending.length > (this.config.maxPendingFrames ?? 250)) this.pending.shift();
  }

  private onOpen(): void {
    if (this.closed || this.failed) return;
    const pending = this.pending;
    this.pending = [];
    for (const m of pending) this.send(m);
    const period = this.config.keepAliveMs ?? 5_000;
    this.keepAlive = setInterval(() => {
      if (!this.audioSinceTick && this.ws.readyState === WebSocket.OPEN) this.ws.send(KEEP_ALIVE);
      this.audioSinceTick = false;
    }, period);
    this.keepAlive.unref(); // the socket keeps the process alive while the session lasts
  }

  private onMessage(data: WebSocket.RawData, isBinary: boolean): void {
    if (this.closed || this.failed || isBinary) return;
    let msg: unknown;
    try {
      msg = JSON.parse(rawToString(data));
    } catch (err) {
      this.fail(new SttError('VENDOR_BAD_RESPONSE', `streaming STT ${this.host} sent a message that is not JSON`, { cause: err }));
      this.ws.terminate();
      return;
    }
    if (typeof msg !== 'object' || msg === null || (msg as { type?: unknown }).type !== 'Results') return;
    const results = msg as ResultsMessage;
    const transcript = results.channel?.alternatives?.[0]?.transcript;
    const text = typeof transcript === 'string' ? transcript.trim() : '';
    const isFinal = results.is_final === true;
    if (!isFinal && text === '') return;
    this.call(() => this.handlers.onTranscript({ text, isFinal }));
  }

  /** The first failure wins and ends the stream; later socket events are its echoes. */
  private fail(err: SttError): void {
    if (this.closed || this.failed) return;
    this.failed = true;
    this.stopKeepAlive();
    this.pending = [];
    if (this.ws.readyState !== WebSocket.CLOSED) this.ws.terminate();
    this.call(() => this.handlers.onError(err));
  }

  private stopKeepAlive(): void {
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive);
    this.keepAlive = undefined;
  }

  private call(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.config.onHandlerError?.(err);
    }
  }
}

function rawToString(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString('utf8');
  return data.toString('utf8');
}
