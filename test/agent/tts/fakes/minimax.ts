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
 *   then `is_final: true` with `extra_info` (`audio_size`: the sentence's audio in bytes). The
 *   reference's example final message carries audio but does not say which: `finalAudio` picks
 *   `empty` (default), `last-chunk` (the final message carries the sentence's last chunk) or
 *   `whole` (it repeats the sentence's whole audio, after the chunks);
 * - `task_finish`: `task_finished` once the queue is done, then the server closes;
 * - `fault` makes the next generation fail after some chunks: task_failed or a dropped socket.
 *
 * Records messages, and whether a task_continue came while another was still being spoken.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { WebSocket } from 'ws';
import { chunksOf, listenWebSocket, streamChunks, toneFor, vendorFake, type VendorFake } from './vendor-fake.ts';

export interface MinimaxConnection {
  headers: IncomingHttpHeaders;
  messages: Record<string, unknown>[];
  /** A task_continue arrived while the previous one's audio was still streaming. */
  overlapped: boolean;
  closed: boolean;
}

/** What the `is_final` message's `data.audio` holds. */
export type FinalAudio = 'empty' | 'last-chunk' | 'whole';

export interface FakeMinimax extends VendorFake {
  connections: MinimaxConnection[];
  finalAudio: FinalAudio;
}

const OK = { status_code: 0, status_msg: 'success' };

export async function startFakeMinimax(key: string): Promise<FakeMinimax> {
  const fake: FakeMinimax = { ...vendorFake(key, 500), connections: [], finalAudio: 'empty' };

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
      const bytes = toneFor(fake, text, rate);
      const samples = bytes.length / 2;
      const chunks = chunksOf(fake, bytes, rate);
      // last-chunk: the final message carries the last chunk instead of a message of its own.
      const last = fake.finalAudio === 'last-chunk' ? chunks.pop() : undefined;
      const finalAudio = fake.finalAudio === 'whole' ? bytes : (last ?? Buffer.alloc(0));
      const sent = await streamChunks(fake, chunks, {
        gone: () => dead,
        send: (chunk) => send({ event: 'task_continued', data: { audio: chunk.toString('hex') }, is_final: false, base_resp: OK }),
        inject: (kind) => {
          if (kind === 'drop') ws.terminate();
          else failTask(1000, 'unknown error');
          dead = true;
        },
      });
      if (!sent) return;
      send({
        event: 'task_continued',
        data: { audio: finalAudio.toString('hex') },
        is_final: true,
        extra_info: { audio_format: 'pcm', audio_sample_rate: rate, audio_channel: 1, audio_size: bytes.length, audio_length: Math.round((samples * 1000) / rate), usage_characters: text.length },
        base_resp: OK,
      });
    }
  }

  // A wrong key is refused inside the protocol (task_failed 1004), not at the upgrade.
  await listenWebSocket(fake, { path: '/ws/v1/t2a_v2', notFound: '', serve });
  return fake;
}
