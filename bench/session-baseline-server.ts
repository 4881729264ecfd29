/**
 * The baseline of `bench/session`: the voice socket with no runtime behind it. A bare `ws`
 * server (the library @fastify/websocket wraps in the daemon) on node:http, on
 * `/v1/connection`, that does per message only what any server of the protocol must do: parse
 * the JSON and decode the base64 audio. No token, no store, no VAD/STT/LLM/TTS.
 *
 * It sends `session_started` on connect. A client frame carrying `"mark": N` (the bench puts it
 * on the frame where the daemon's VAD would end the caller's turn) is answered:
 *   N = 1   one response_audio of 40 ms (the size of the daemon's chunks), at once: the round
 *           trip of bench/session's latency baseline;
 *   N > 1   a reply turn shaped like the daemon's: response_text, then N chunks of 40 ms paced
 *           like src/agent/audio-pacer.ts (sent while less than 200 ms is queued ahead of the
 *           playhead), the last with is_final, and response_text is_final once it has played:
 *           the load of bench/session's concurrency baseline.
 *
 * Run as its own process: `node --import tsx bench/session-baseline-server.ts`. Prints
 * `LISTENING <port>` once it listens on 127.0.0.1; stops on SIGTERM or SIGINT.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { WebSocketServer, type WebSocket } from 'ws';

const CHUNK_MS = 40;
const LEAD_MS = 200;
const CHUNK_SAMPLES = 960;

const chunkPcm = Buffer.alloc(CHUNK_SAMPLES * 2);
for (let i = 0; i < CHUNK_SAMPLES; i++) chunkPcm.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 24_000)), i * 2);
const chunkB64 = chunkPcm.toString('base64');
/** The daemon's serialization of response_audio (src/session/protocol.ts), same bytes. */
const audioEvent = (turnId: string, isFinal: boolean) => `{"type":"response_audio","data":{"turn_id":${JSON.stringify(turnId)},"audio":"${chunkB64}","is_final":${isFinal}}}`;

function reply(ws: WebSocket, chunks: number): void {
  const turnId = randomUUID();
  if (chunks <= 1) {
    ws.send(audioEvent(turnId, true));
    return;
  }
  ws.send(JSON.stringify({ type: 'response_text', data: { turn_id: turnId, text: 'reply', is_final: false } }));
  let sent = 0;
  let playEnd = performance.now();
  const pump = () => {
    if (ws.readyState !== ws.OPEN) return;
    const now = performance.now();
    while (sent < chunks && playEnd - now < LEAD_MS) {
      sent++;
      ws.send(audioEvent(turnId, sent === chunks));
      playEnd = Math.max(playEnd, now) + CHUNK_MS;
    }
    if (sent < chunks) {
      setTimeout(pump, Math.max(1, playEnd - now - LEAD_MS));
      return;
    }
    setTimeout(() => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'response_text', data: { turn_id: turnId, text: 'reply', is_final: true } }));
    }, Math.max(0, playEnd - now));
  };
  pump();
}

const server = createServer((_req, res) => res.writeHead(426).end());
const wss = new WebSocketServer({ server, path: '/v1/connection', perMessageDeflate: false, maxPayload: 1024 * 1024 });
let decodedSamples = 0;
wss.on('connection', (ws) => {
  ws.send(JSON.stringify({ type: 'session_started', data: { id: randomUUID() } }));
  ws.on('message', (data) => {
    let msg: { type?: unknown; data?: { audio?: unknown }; mark?: unknown };
    try {
      msg = JSON.parse(data.toString()) as typeof msg;
    } catch {
      ws.close(1007, 'malformed JSON');
      return;
    }
    if (msg.type !== 'input_audio' || typeof msg.data?.audio !== 'string') return;
    const pcm = Buffer.from(msg.data.audio, 'base64');
    decodedSamples += pcm.length >> 1;
    if (typeof msg.mark === 'number' && msg.mark > 0) reply(ws, msg.mark);
  });
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`LISTENING ${(server.address() as AddressInfo).port}\n`);
});
const stop = () => {
  for (const c of wss.clients) c.terminate();
  wss.close();
  process.stdout.write(`decoded ${decodedSamples} samples\n`);
  server.close(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
