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
import type { IncomingHttpHeaders } from 'node:http';
import { decode, encode } from '@msgpack/msgpack';
import type { WebSocket } from 'ws';
import { chunksOf, listenWebSocket, streamChunks, toneFor, vendorFake, type VendorFake } from './vendor-fake.ts';

export interface FishConnection {
  headers: IncomingHttpHeaders;
  events: Record<string, unknown>[];
  /** Every frame was binary MessagePack. */
  allBinary: boolean;
  finished: boolean;
  closed: boolean;
}

export interface FakeFish extends VendorFake {
  connections: FishConnection[];
}

export async function startFakeFish(key: string): Promise<FakeFish> {
  const fake: FakeFish = { ...vendorFake(key, 300), connections: [] };

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
      return streamChunks(fake, chunksOf(fake, toneFor(fake, text, rate), rate), {
        gone: () => dead,
        send: (chunk) => send({ event: 'audio', audio: chunk }),
        inject: (kind) => {
          if (kind === 'drop') ws.terminate();
          else send({ event: 'finish', reason: 'error' });
          dead = true;
        },
      });
    }
  }

  await listenWebSocket(fake, {
    path: '/v1/tts/live',
    notFound: '{"message":"Not Found"}',
    refusal: (headers) => {
      if (headers.authorization !== `Bearer ${fake.key}`) return [401, '{"status":401,"message":"Invalid api key"}'];
      if (typeof headers.model !== 'string' || headers.model === '') return [400, '{"status":400,"message":"model header required"}'];
      return undefined;
    },
    serve,
  });
  return fake;
}
