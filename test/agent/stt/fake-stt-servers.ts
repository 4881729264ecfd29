/**
 * Fake speech-to-text vendors on 127.0.0.1 (OS-chosen ports), speaking the real wire protocols
 * of the adapters in src/agent/providers/stt/:
 *
 * - an OpenAI-compatible transcription endpoint: `POST /v1/audio/transcriptions`, a
 *   multipart/form-data body (`file` WAV, `model`, `language`, `prompt`, `response_format`),
 *   answering `{ "text" }`. It parses the real multipart bytes and the WAV inside.
 * - a Deepgram-compatible live transcription WebSocket: `GET /v1/listen?...`, binary audio in,
 *   JSON control messages (Finalize, KeepAlive, CloseStream) in, `Results` JSON out.
 *
 * Both record what they received and take scripted replies, delays and failures.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';

/** Polls `check` until it returns true (or a value other than undefined/false). */
export async function waitUntil<T>(check: () => T | undefined | false, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error('waitUntil: condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

// --- WAV ------------------------------------------------------------------------------------

export interface ParsedWav {
  format: number;
  channels: number;
  sampleRate: number;
  byteRate: number;
  blockAlign: number;
  bitsPerSample: number;
  samples: Int16Array;
}

/** A strict RIFF/WAVE reader: every size field must agree with the bytes. @throws Error */
export function parseWav(bytes: Buffer): ParsedWav {
  const fail = (why: string): never => {
    throw new Error(`bad WAV: ${why}`);
  };
  if (bytes.length < 12 || bytes.toString('ascii', 0, 4) !== 'RIFF' || bytes.toString('ascii', 8, 12) !== 'WAVE') {
    fail('no RIFF/WAVE header');
  }
  if (bytes.readUInt32LE(4) !== bytes.length - 8) fail(`RIFF size ${bytes.readUInt32LE(4)} != ${bytes.length - 8}`);
  let fmt: Omit<ParsedWav, 'samples'> | undefined;
  let offset = 12;
  while (offset + 8 <= bytes.length) {
    const id = bytes.toString('ascii', offset, offset + 4);
    const size = bytes.readUInt32LE(offset + 4);
    const body = offset + 8;
    if (body + size > bytes.length) fail(`chunk ${id} overruns the file`);
    if (id === 'fmt ') {
      fmt = {
        format: bytes.readUInt16LE(body),
        channels: bytes.readUInt16LE(body + 2),
        sampleRate: bytes.readUInt32LE(body + 4),
        byteRate: bytes.readUInt32LE(body + 8),
        blockAlign: bytes.readUInt16LE(body + 12),
        bitsPerSample: bytes.readUInt16LE(body + 14),
      };
    } else if (id === 'data') {
      if (!fmt) return fail('data before fmt');
      if (size % 2 !== 0) fail('odd data size');
      const samples = new Int16Array(size / 2);
      for (let i = 0; i < samples.length; i++) samples[i] = bytes.readInt16LE(body + i * 2);
      return { ...fmt, samples };
    }
    offset = body + size + (size % 2);
  }
  return fail('no data chunk');
}

// --- OpenAI-compatible transcription endpoint -------------------------------------------------

export interface TranscriptionRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** Text fields of the multipart body. */
  fields: Record<string, string>;
  file?: { name: string; type: string; bytes: Buffer };
  /** The parsed `file`, or why it could not be parsed. */
  wav?: ParsedWav;
  wavError?: string;
  /** The client went away before the answer (e.g. an aborted request). */
  aborted: boolean;
}

export interface TranscriptionReply {
  status?: number;
  /** An object is sent as JSON; a string as is. Default `{ text: 'hello' }`. */
  body?: unknown;
  delayMs?: number;
}

export interface FakeTranscriptionServer {
  /** Base URL for the provider, ending in /v1. */
  baseUrl: string;
  requests: TranscriptionRequest[];
  /** Replies for the next requests, in arrival order; afterwards `defaultReply`. */
  replies: TranscriptionReply[];
  defaultReply: TranscriptionReply;
  close(): Promise<void>;
}

export async function startFakeTranscriptionServer(): Promise<FakeTranscriptionServer> {
  const requests: TranscriptionRequest[] = [];
  const state = { replies: [] as TranscriptionReply[], defaultReply: { body: { text: 'hello' } } as TranscriptionReply };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const record: TranscriptionRequest = {
          method: req.method ?? '',
          path: req.url ?? '',
          headers: req.headers,
          fields: {},
          aborted: false,
        };
        requests.push(record);
        res.on('close', () => {
          if (!res.writableFinished) record.aborted = true;
        });
        const reply = state.replies.shift() ?? state.defaultReply;
        if (req.method !== 'POST' || req.url !== '/v1/audio/transcriptions') {
          res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
          return;
        }
        try {
          // The real multipart parser of undici, over the bytes exactly as received.
          const form = await new Request('http://fake/', {
            method: 'POST',
            headers: { 'content-type': req.headers['content-type'] ?? '' },
            body: Buffer.concat(chunks),
          }).formData();
          for (const [name, value] of form) {
            if (typeof value === 'string') record.fields[name] = value;
            else record.file = { name: value.name, type: value.type, bytes: Buffer.from(await value.arrayBuffer()) };
          }
        } catch (err) {
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: `bad multipart: ${(err as Error).message}` } }));
          return;
        }
        if (record.file) {
          try {
            record.wav = parseWav(record.file.bytes);
          } catch (err) {
            record.wavError = (err as Error).message;
          }
        }
        if (reply.delayMs) await new Promise((r) => setTimeout(r, reply.delayMs));
        if (res.destroyed) return;
        const body = reply.body ?? { text: 'hello' };
        const text = typeof body === 'string' ? body : JSON.stringify(body);
        res.writeHead(reply.status ?? 200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    get replies() {
      return state.replies;
    },
    set replies(r) {
      state.replies = r;
    },
    get defaultReply() {
      return state.defaultReply;
    },
    set defaultReply(r) {
      state.defaultReply = r;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

// --- Deepgram-compatible live transcription WebSocket -----------------------------------------

export interface ListenConnection {
  path: string;
  /** The raw query string (after `?`), to check encodings. */
  rawQuery: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  /** Binary messages, as received. */
  audio: Buffer[];
  audioBytes: number;
  /** `type` of every text message, in order (Finalize, KeepAlive, CloseStream, ...). */
  controls: string[];
  /** Set when the socket closed, with the close code the client sent. */
  closeCode?: number;
  /** Sends a Results message as Deepgram does (transcript in channel.alternatives[0]). */
  sendResults(transcript: string, opts: { isFinal: boolean; speechFinal?: boolean; fromFinalize?: boolean }): void;
  /** Sends any message (object as JSON, string as is). */
  send(message: unknown): void;
  /** Drops the TCP connection without a close frame. */
  drop(): void;
}

export interface FakeListenServer {
  /** Base URL for the provider (http://127.0.0.1:port). */
  baseUrl: string;
  connections: ListenConnection[];
  /** When set, upgrades without `Authorization: Token <apiKey>` are refused with 401. */
  apiKey?: string;
  /** When set, the next upgrade is refused with this HTTP status. */
  refuseNextWith?: number;
  /**
   * The final transcript answered to each Finalize (like Deepgram: `is_final: true`,
   * `from_finalize: true`); undefined sends nothing.
   */
  finalizeTranscript?: string;
  close(): Promise<void>;
}

export async function startFakeListenServer(): Promise<FakeListenServer> {
  const http = createServer((_req, res) => res.writeHead(426).end());
  const fake: FakeListenServer = {
    baseUrl: '',
    connections: [],
    close: () =>
      new Promise<void>((resolve) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
  const wss = new WebSocketServer({
    server: http,
    verifyClient: (info, done) => {
      const refuse = fake.refuseNextWith;
      fake.refuseNextWith = undefined;
      if (refuse !== undefined) return done(false, refuse, 'Refused');
      if (!(info.req.url ?? '').startsWith('/v1/listen?')) return done(false, 404, 'Not Found');
      if (fake.apiKey !== undefined && info.req.headers.authorization !== `Token ${fake.apiKey}`) {
        return done(false, 401, 'Unauthorized');
      }
      done(true);
    },
  });
  wss.on('connection', (ws: WebSocket, req) => {
    const url = req.url ?? '';
    const rawQuery = url.slice(url.indexOf('?') + 1);
    const conn: ListenConnection = {
      path: url.slice(0, url.indexOf('?')),
      rawQuery,
      query: new URLSearchParams(rawQuery),
      headers: req.headers,
      audio: [],
      audioBytes: 0,
      controls: [],
      sendResults(transcript, opts) {
        conn.send({
          type: 'Results',
          channel_index: [0, 1],
          duration: 1,
          start: 0,
          is_final: opts.isFinal,
          speech_final: opts.speechFinal ?? false,
          from_finalize: opts.fromFinalize ?? false,
          channel: { alternatives: [{ transcript, confidence: 0.9, words: [] }] },
          metadata: { request_id: 'fake', model_info: { name: 'fake', version: '0', arch: 'fake' } },
        });
      },
      send(message) {
        ws.send(typeof message === 'string' ? message : JSON.stringify(message));
      },
      drop() {
        ws.terminate();
      },
    };
    fake.connections.push(conn);
    ws.on('message', (data: Buffer, isBinary) => {
      if (isBinary) {
        conn.audio.push(Buffer.from(data));
        conn.audioBytes += data.length;
        return;
      }
      const msg = JSON.parse(data.toString('utf8')) as { type: string };
      conn.controls.push(msg.type);
      if (msg.type === 'Finalize' && fake.finalizeTranscript !== undefined) {
        conn.sendResults(fake.finalizeTranscript, { isFinal: true, speechFinal: false, fromFinalize: true });
      } else if (msg.type === 'CloseStream') {
        // Deepgram: flush, a summary Metadata, then close.
        conn.send({ type: 'Metadata', request_id: 'fake', duration: conn.audioBytes / 48_000, channels: 1 });
        ws.close(1000);
      }
    });
    ws.on('close', (code) => {
      conn.closeCode = code;
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  fake.baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  return fake;
}
