/**
 * A fake Fish Audio live TTS WebSocket (`/v1/tts/live`) on 127.0.0.1, speaking the protocol of
 * Fish Audio's WebSocket reference: MessagePack binary frames,
 *
 * - the upgrade needs `Authorization: Bearer <key>` (401 otherwise) and a `model` header (400);
 * - the first event must be `{event: start, request: {...}}` (`format` pcm, `sample_rate`
 *   defaulting to 44100 as the TTS API's does); `{event: text, text}` events are buffered;
 *   `{event: flush}` speaks the buffer; `{event: stop}` speaks what is left, then answers
 *   `{event: finish, reason: stop}`;
 * - audio is `{event: audio, audio: <bin PCM16 LE>}`: a tone of `hz`, `samplesPerChar` samples
 *   per character at the requested rate, in chunks of `pacing.chunkMs` after `pacing.firstChunkMs`;
 * - `fault` makes the next generation fail after some chunks: `{event: finish, reason: error}`
 *   or a dropped socket.
 *
 * Everything received is recorded, with whether the client closed before `finish`.
 */
import type { IncomingHttpHeaders, Server } from 'node:http';
import { decode, encode } from '@msgpack/msgpack';
import { WebSocketServer, type WebSocket } from 'ws';
import { audioChunks, createServer, listen, REALISTIC, sleep, toneBytes, type Pacing } from './common.ts';

export interface FishConnection {
  headers: IncomingHttpHeaders;
  events: Record<string, unknown>[];
  /** Every frame was binary MessagePack. */
  allBinary: boolean;
  finished: boolean;
  closed: boolean;
}

export interface FakeFish {
  url: string;
  key: string;
  hz: number;
  samplesPerChar: number;
  pacing: Pacing;
  fault: { afterChunks: number; kind: 'error' | 'drop' } | undefined;
  connections: FishConnection[];
  /** Called as each sentence's text arrives (bench/session times the vendor from there). */
  onText?: (text: string) => void;
  close(): Promise<void>;
}

export async function startFakeFish(key: string): Promise<FakeFish> {
  const wss = new WebSocketServer({ noServer: true });
  const server: Server = createServer((_req, res) => res.writeHead(404).end());
  const fake: FakeFish = {
    url: '',
    key,
    hz: 300,
    samplesPerChar: 240,
    pacing: { ...REALISTIC },
    fault: undefined,
    connections: [],
    close: async () => {
      for (const c of wss.clients) c.terminate();
      wss.close();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };

  server.on('upgrade', (req, socket, head) => {
    const refuse = (status: number, body: string): void => {
      socket.end(`HTTP/1.1 ${status} Refused\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    };
    if (new URL(req.url ?? '/', 'http://x').pathname !== '/v1/tts/live') return refuse(404, '{"message":"Not Found"}');
    if (req.headers.authorization !== `Bearer ${fake.key}`) return refuse(401, '{"status":401,"message":"Invalid api key"}');
    if (typeof req.headers.model !== 'string' || req.headers.model === '') return refuse(400, '{"status":400,"message":"model header required"}');
    wss.handleUpgrade(req, socket, head, (ws) => serve(ws, req.headers));
  });

  function serve(ws: WebSocket, headers: IncomingHttpHeaders): void {
    const conn: FishConnection = { headers, events: [], allBinary: true, finished: false, closed: false };
    fake.connections.push(conn);
    let rate = 0;
    let buffer = '';
    let chain = Promise.resolve();
    let dead = false;
    const send = (m: Record<string, unknown>): void => {
      if (ws.readyState === ws.OPEN) ws.send(encode(m));
    };
    ws.on('close', () => {
      conn.closed = true;
      dead = true;
    });
    ws.on('message', (data, isBinary) => {
      if (!isBinary) conn.allBinary = false;
      let ev: Record<string, unknown>;
      try {
        ev = decode(data as Buffer) as Record<string, unknown>;
      } catch {
        ws.close(1003, 'invalid msgpack');
        return;
      }
      conn.events.push(ev);
      if (ev.event === 'start') {
        const request = ev.request as { format?: unknown; sample_rate?: unknown } | undefined;
        if (request?.format !== 'pcm') {
          ws.close(1003, 'this fake speaks pcm only');
          return;
        }
        rate = typeof request.sample_rate === 'number' ? request.sample_rate : 44100;
        return;
      }
      if (rate === 0) {
        ws.close(1003, 'start event expected first');
        return;
      }
      if (ev.event === 'text' && typeof ev.text === 'string') {
        buffer += ev.text;
        fake.onText?.(ev.text);
      }
      if (ev.event === 'flush' || ev.event === 'stop') {
        const text = buffer;
        buffer = '';
        const stop = ev.event === 'stop';
        chain = chain.then(async () => {
          if (text.trim() !== '' && !(await speak(text))) return;
          if (stop && !dead) {
            conn.finished = true;
            send({ event: 'finish', reason: 'stop' });
          }
        });
      }
    });

    /** Streams one generation; false when it failed (fault) or the client went away. */
    async function speak(text: string): Promise<boolean> {
      const samples = Math.round((text.trim().length * fake.samplesPerChar * rate) / 24000);
      const chunks = audioChunks(toneBytes(samples, fake.hz, rate), rate, fake.pacing.chunkMs);
      await sleep(fake.pacing.firstChunkMs);
      const fault = fake.fault;
      fake.fault = undefined;
      for (let i = 0; i < chunks.length; i++) {
        if (dead) return false;
        if (fault !== undefined && i === fault.afterChunks) {
          if (fault.kind === 'drop') ws.terminate();
          else send({ event: 'finish', reason: 'error' });
          dead = true;
          return false;
        }
        if (i > 0) await sleep(fake.pacing.gapMs);
        if (dead) return false;
        send({ event: 'audio', audio: chunks[i]! });
      }
      return true;
    }
  }

  fake.url = `http://127.0.0.1:${await listen(server)}`;
  return fake;
}
