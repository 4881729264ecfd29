/**
 * Fake TTS vendors on 127.0.0.1 (OS-chosen ports), for the adapters of src/agent/providers/tts:
 *
 * - startFakeSpeechServer(): an OpenAI-compatible `POST /v1/audio/speech` that streams raw PCM16
 *   in chunks of configurable (odd) byte sizes, optionally pausing mid-body until released, or
 *   answering an error status, or dropping the connection mid-body;
 * - startFakeStreamTtsServer(): a `ws` server speaking ElevenLabs' stream-input protocol: it
 *   records every client message, answers `{"text":""}` with base64 audio messages and
 *   `{"isFinal":true}`, and can refuse the upgrade, send an error message or drop mid-stream.
 *
 * Both record what they receive so tests can assert the wire exchange.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';

/** PCM16 LE bytes of a sine (a stand-in for speech with an easily checked shape). */
export function sineBytes(samples: number, amplitude = 8000, period = 48): Uint8Array {
  const out = new Uint8Array(samples * 2);
  const view = new DataView(out.buffer);
  for (let i = 0; i < samples; i++) view.setInt16(i * 2, Math.round(amplitude * Math.sin((2 * Math.PI * i) / period)), true);
  return out;
}

/** The samples those bytes encode (to compare with what an adapter yields). */
export function samplesOf(bytes: Uint8Array): Int16Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Int16Array(bytes.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(i * 2, true);
  return out;
}

/** Cuts bytes into chunks of the given sizes, cycling through them. */
function cut(bytes: Uint8Array, sizes: number[]): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  for (let at = 0, k = 0; at < bytes.length; k++) {
    const n = sizes[k % sizes.length]!;
    chunks.push(bytes.subarray(at, at + n));
    at += n;
  }
  return chunks;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function listen(server: Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

/** A gate the server waits on mid-stream; the test opens it. */
export class Gate {
  private resolve!: () => void;
  readonly opened = new Promise<void>((r) => (this.resolve = r));
  open(): void {
    this.resolve();
  }
}

// --- OpenAI-compatible HTTP ---------------------------------------------------------------------

export interface SpeechRequestRecord {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: any;
  /** The response was fully written. */
  ended: boolean;
  /** The client went away before the response ended. */
  clientClosed: boolean;
}

export interface FakeSpeechServer {
  /** Base URL to configure: `http://127.0.0.1:<port>/v1`. */
  url: string;
  requests: SpeechRequestRecord[];
  /** What the next responses stream. */
  audio: Uint8Array;
  /** Body chunk sizes in bytes (cycled); odd sizes split samples. */
  chunkBytes: number[];
  /** Pause between chunks. */
  chunkDelayMs: number;
  /** Pause before the first chunk (after the headers): the vendor's time to first audio. */
  firstChunkDelayMs?: number;
  /** When set, the server writes this many chunks, then waits for the gate before the rest. */
  pause?: { afterChunks: number; gate: Gate };
  /** When set, the server destroys the connection after this many chunks. */
  dropAfterChunks?: number;
  /** The next request is answered with this status and body. */
  failNext(status: number, body?: string, contentType?: string): void;
  close(): Promise<void>;
}

export async function startFakeSpeechServer(): Promise<FakeSpeechServer> {
  let failure: { status: number; body: string; contentType: string } | undefined;
  const fake: FakeSpeechServer = {
    url: '',
    requests: [],
    audio: sineBytes(2400),
    chunkBytes: [1001, 999, 777],
    chunkDelayMs: 5,
    failNext(status, body = '{"error":{"message":"nope","type":"invalid_request_error","code":"bad_thing"}}', contentType = 'application/json') {
      failure = { status, body, contentType };
    },
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections(); // fetch keeps connections alive for seconds otherwise
      }),
  };
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const text = Buffer.concat(parts).toString();
      let body: any;
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
      const record: SpeechRequestRecord = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body, ended: false, clientClosed: false };
      fake.requests.push(record);
      res.on('close', () => {
        if (!record.ended) record.clientClosed = true;
      });
      if (failure !== undefined) {
        const f = failure;
        failure = undefined;
        res.writeHead(f.status, { 'content-type': f.contentType }).end(f.body);
        record.ended = true;
        return;
      }
      if (req.method !== 'POST' || req.url !== '/v1/audio/speech') {
        res.writeHead(404).end();
        return;
      }
      void (async () => {
        res.writeHead(200, { 'content-type': 'audio/pcm', 'transfer-encoding': 'chunked' });
        const chunks = cut(fake.audio, fake.chunkBytes);
        if (fake.firstChunkDelayMs) await sleep(fake.firstChunkDelayMs);
        for (let i = 0; i < chunks.length; i++) {
          if (record.clientClosed) return;
          if (fake.dropAfterChunks !== undefined && i === fake.dropAfterChunks) {
            res.socket?.destroy();
            return;
          }
          if (fake.pause !== undefined && i === fake.pause.afterChunks) await fake.pause.gate.opened;
          if (record.clientClosed) return;
          res.write(chunks[i]);
          await sleep(fake.chunkDelayMs);
        }
        record.ended = true;
        res.end();
      })();
    });
  });
  fake.url = `http://127.0.0.1:${await listen(server)}/v1`;
  return fake;
}

// --- ElevenLabs stream-input over WebSocket -----------------------------------------------------

export interface StreamConnectionRecord {
  path: string;
  query: Record<string, string>;
  headers: IncomingHttpHeaders;
  /** Client messages, parsed, in order. */
  messages: any[];
  /** The socket closed (by either side). */
  closed: boolean;
}

export interface FakeStreamTtsServer {
  /** Base URL to configure: `http://127.0.0.1:<port>`. */
  url: string;
  connections: StreamConnectionRecord[];
  audio: Uint8Array;
  /** Bytes of PCM per audio message (cycled); odd sizes split samples across messages. */
  chunkBytes: number[];
  chunkDelayMs: number;
  pause?: { afterChunks: number; gate: Gate };
  /** Refuse the next upgrade with this HTTP status. */
  refuseNext(status: number): void;
  /** Answer the next connection's text with this JSON message instead of audio. */
  errorNext(message: object): void;
  /** Drop (terminate) the next connection after this many audio messages. */
  dropNextAfter(chunks: number): void;
  close(): Promise<void>;
}

export async function startFakeStreamTtsServer(): Promise<FakeStreamTtsServer> {
  let refuse: number | undefined;
  let errorMsg: object | undefined;
  let dropAfter: number | undefined;
  const wss = new WebSocketServer({ noServer: true });
  const server = createServer((_req, res) => res.writeHead(426).end());
  const fake: FakeStreamTtsServer = {
    url: '',
    connections: [],
    audio: sineBytes(2400),
    chunkBytes: [1001, 999, 777],
    chunkDelayMs: 5,
    refuseNext: (status) => void (refuse = status),
    errorNext: (message) => void (errorMsg = message),
    dropNextAfter: (chunks) => void (dropAfter = chunks),
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };

  server.on('upgrade', (req, socket, head) => {
    if (refuse !== undefined) {
      const status = refuse;
      refuse = undefined;
      socket.end(`HTTP/1.1 ${status} Refused\r\nContent-Type: application/json\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{"detail":"nope"}`);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const url = new URL(req.url ?? '/', 'http://x');
      const record: StreamConnectionRecord = {
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        headers: req.headers,
        messages: [],
        closed: false,
      };
      fake.connections.push(record);
      const plan = { error: errorMsg, dropAfter };
      errorMsg = undefined;
      dropAfter = undefined;
      ws.on('close', () => (record.closed = true));
      ws.on('message', (data) => {
        const msg = JSON.parse(data.toString());
        record.messages.push(msg);
        if (msg.text === '') void respond(ws, record, plan);
      });
    });
  });

  async function respond(ws: WebSocket, record: StreamConnectionRecord, plan: { error?: object; dropAfter?: number }): Promise<void> {
    if (plan.error !== undefined) {
      ws.send(JSON.stringify(plan.error));
      return;
    }
    const chunks = cut(fake.audio, fake.chunkBytes);
    for (let i = 0; i < chunks.length; i++) {
      if (record.closed) return;
      if (plan.dropAfter !== undefined && i === plan.dropAfter) {
        ws.terminate();
        return;
      }
      if (fake.pause !== undefined && i === fake.pause.afterChunks) await fake.pause.gate.opened;
      if (record.closed) return;
      ws.send(JSON.stringify({ audio: Buffer.from(chunks[i]!).toString('base64'), isFinal: false, normalizedAlignment: null, alignment: null }));
      await sleep(fake.chunkDelayMs);
    }
    ws.send(JSON.stringify({ isFinal: true }));
    ws.close(1000);
  }

  fake.url = `http://127.0.0.1:${await listen(server)}`;
  return fake;
}
