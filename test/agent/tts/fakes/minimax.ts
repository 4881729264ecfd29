/**
 * A fake MiniMax T2A WebSocket (`/ws/v1/t2a_v2`) on 127.0.0.1, speaking the protocol of MiniMax's
 * T2A WebSocket reference (JSON text frames):
 *
 * - on connect `{event: connected_success, session_id, trace_id, base_resp: {status_code: 0,
 *   status_msg: success}}`; with a wrong `Authorization: Bearer` key, `task_failed` with status
 *   1004 instead, then the socket closes;
 * - `task_start` (model, voice_setting.voice_id, audio_setting {format, sample_rate}) is answered
 *   `task_started`; `task_continue` before it is answered task_failed 2013 (invalid params);
 * - each `task_continue` {text} is spoken in turn: `{event: task_continued, data: {audio: <hex
 *   PCM16 LE>}, is_final: false, ...}` messages (a tone of `hz`, `samplesPerChar` samples per
 *   character at the requested rate, `pacing.chunkMs` per message after `pacing.firstChunkMs`),
 *   then `is_final: true` with `extra_info` and empty audio;
 * - `task_finish`: `task_finished` once the queue is done, then the server closes;
 * - `fault` makes the next generation fail after some chunks: task_failed or a dropped socket.
 *
 * Records messages, and whether a task_continue came while another was still being spoken.
 */
import type { IncomingHttpHeaders, Server } from 'node:http';
import { WebSocketServer, type WebSocket } from 'ws';
import { audioChunks, createServer, listen, REALISTIC, sleep, toneBytes, type Pacing } from './common.ts';

export interface MinimaxConnection {
  headers: IncomingHttpHeaders;
  messages: Record<string, unknown>[];
  /** A task_continue arrived while the previous one's audio was still streaming. */
  overlapped: boolean;
  closed: boolean;
}

export interface FakeMinimax {
  url: string;
  key: string;
  hz: number;
  samplesPerChar: number;
  pacing: Pacing;
  fault: { afterChunks: number; kind: 'error' | 'drop' } | undefined;
  connections: MinimaxConnection[];
  /** Called as each sentence's text arrives (bench/session times the vendor from there). */
  onText?: (text: string) => void;
  close(): Promise<void>;
}

const OK = { status_code: 0, status_msg: 'success' };

export async function startFakeMinimax(key: string): Promise<FakeMinimax> {
  const wss = new WebSocketServer({ noServer: true });
  const server: Server = createServer((_req, res) => res.writeHead(404).end());
  const fake: FakeMinimax = {
    url: '',
    key,
    hz: 500,
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
    if (new URL(req.url ?? '/', 'http://x').pathname !== '/ws/v1/t2a_v2') {
      socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => serve(ws, req.headers));
  });

  function serve(ws: WebSocket, headers: IncomingHttpHeaders): void {
    const conn: MinimaxConnection = { headers, messages: [], overlapped: false, closed: false };
    fake.connections.push(conn);
    const ids = { session_id: `sess-${fake.connections.length}`, trace_id: `trace-${Date.now()}` };
    const send = (m: Record<string, unknown>): void => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ ...ids, ...m }));
    };
    let dead = false;
    ws.on('close', () => {
      conn.closed = true;
      dead = true;
    });
    if (headers.authorization !== `Bearer ${fake.key}`) {
      send({ event: 'task_failed', base_resp: { status_code: 1004, status_msg: "login fail: Please carry the API secret key in the 'Authorization' field of the request header" } });
      ws.close(1000);
      return;
    }
    send({ event: 'connected_success', base_resp: OK });
    let rate = 0;
    let speaking = 0;
    let chain = Promise.resolve();
    const failTask = (code: number, words: string): void => {
      send({ event: 'task_failed', base_resp: { status_code: code, status_msg: words } });
      ws.close(1000);
      dead = true;
    };

    ws.on('message', (data) => {
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(data.toString()) as Record<string, unknown>;
      } catch {
        return failTask(2013, 'invalid params: not JSON');
      }
      conn.messages.push(msg);
      switch (msg.event) {
        case 'task_start': {
          const voice = msg.voice_setting as { voice_id?: unknown } | undefined;
          const audio = msg.audio_setting as { format?: unknown; sample_rate?: unknown } | undefined;
          if (typeof msg.model !== 'string' || typeof voice?.voice_id !== 'string' || voice.voice_id === '') return failTask(2013, 'invalid params: model and voice_setting.voice_id are required');
          if (audio?.format !== 'pcm') return failTask(2013, 'invalid params: this fake speaks pcm only');
          rate = typeof audio.sample_rate === 'number' ? audio.sample_rate : 32000;
          send({ event: 'task_started', base_resp: OK });
          return;
        }
        case 'task_continue': {
          if (rate === 0) return failTask(2013, 'invalid params: task not started');
          if (speaking > 0) conn.overlapped = true;
          speaking++;
          const text = String(msg.text ?? '');
          fake.onText?.(text);
          chain = chain.then(async () => {
            await speak(text);
            speaking--;
          });
          return;
        }
        case 'task_finish':
          chain = chain.then(() => {
            send({ event: 'task_finished', base_resp: OK });
            ws.close(1000);
          });
          return;
        default:
          return failTask(2013, `invalid params: unknown event ${String(msg.event)}`);
      }
    });

    async function speak(text: string): Promise<void> {
      const samples = Math.round((text.trim().length * fake.samplesPerChar * rate) / 24000);
      const bytes = toneBytes(samples, fake.hz, rate);
      const chunks = audioChunks(bytes, rate, fake.pacing.chunkMs);
      await sleep(fake.pacing.firstChunkMs);
      const fault = fake.fault;
      fake.fault = undefined;
      for (let i = 0; i < chunks.length; i++) {
        if (dead) return;
        if (fault !== undefined && i === fault.afterChunks) {
          if (fault.kind === 'drop') ws.terminate();
          else failTask(1000, 'unknown error');
          dead = true;
          return;
        }
        if (i > 0) await sleep(fake.pacing.gapMs);
        if (dead) return;
        send({ event: 'task_continued', data: { audio: chunks[i]!.toString('hex') }, is_final: false, base_resp: OK });
      }
      send({
        event: 'task_continued',
        data: { audio: '' },
        is_final: true,
        extra_info: { audio_format: 'pcm', audio_sample_rate: rate, audio_channel: 1, audio_size: bytes.length, audio_length: Math.round((samples * 1000) / rate), usage_characters: text.length },
        base_resp: OK,
      });
    }
  }

  fake.url = `http://127.0.0.1:${await listen(server)}`;
  return fake;
}
