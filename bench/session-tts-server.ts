/**
 * The zero-latency TTS of `bench/session`: an OpenAI-compatible `POST /v1/audio/speech` that
 * answers every request at once, in one write, with raw PCM16 24 kHz (a 440 Hz tone at about
 * -12 dBFS). The voice id says how long: `tone-<ms>` (default 500 ms); `tone-<ms>-wait-<ms>`
 * also holds the answer back that long, a vendor's time to first byte (bench/session's sentence
 * gaps). Its own process, so neither the daemon's nor the load generator's CPU pays for it.
 *
 * It records when each request's body was complete, on the machine-wide monotonic clock
 * (`process.hrtime`, CLOCK_MONOTONIC on Linux, the clock the bench's client uses too), so the
 * bench can split a reply's latency into "until the TTS request" and "after it".
 * `GET /stats` returns `[{ at, input }]` (at in ms) and forgets them.
 *
 * Run as its own process: `node --import tsx bench/session-tts-server.ts`. Prints
 * `LISTENING <port>` on stdout once it listens on 127.0.0.1; stops on SIGTERM or SIGINT.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const SAMPLE_RATE = 24_000;
const tones = new Map<number, Buffer>();

function tone(ms: number): Buffer {
  let buf = tones.get(ms);
  if (buf === undefined) {
    const n = Math.round((SAMPLE_RATE * ms) / 1000);
    buf = Buffer.alloc(n * 2);
    for (let i = 0; i < n; i++) buf.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / SAMPLE_RATE)), i * 2);
    tones.set(ms, buf);
  }
  return buf;
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
let log: { at: number; input: string }[] = [];

const server = createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (c: Buffer) => parts.push(c));
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/stats') {
      const body = JSON.stringify(log);
      log = [];
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      return;
    }
    if (req.method !== 'POST' || req.url !== '/v1/audio/speech') {
      res.writeHead(404).end();
      return;
    }
    const at = nowMs();
    let body: { voice?: unknown; input?: unknown } = {};
    try {
      body = JSON.parse(Buffer.concat(parts).toString('utf8')) as typeof body;
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"code":"bad_json"}}');
      return;
    }
    const m = /^tone-(\d+)(?:-wait-(\d+))?$/.exec(typeof body.voice === 'string' ? body.voice : '');
    const audio = tone(m ? Math.min(60_000, Number(m[1])) : 500);
    const waitMs = m?.[2] !== undefined ? Math.min(10_000, Number(m[2])) : 0;
    if (log.length < 100_000) log.push({ at, input: typeof body.input === 'string' ? body.input : '' });
    const answer = () => res.writeHead(200, { 'content-type': 'audio/pcm', 'content-length': String(audio.length) }).end(audio);
    if (waitMs > 0) setTimeout(answer, waitMs);
    else answer();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`LISTENING ${(server.address() as AddressInfo).port}\n`);
});
const stop = () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
