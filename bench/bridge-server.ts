/**
 * The daemon of `bench/bridge`, as its own process so that its CPU (/proc/<pid>/stat) and memory
 * (VmRSS) are the bridge's alone: `startDaemon` as main.ts composes it, SIP on 127.0.0.1, RTP on
 * 127.0.0.1 ports BENCH_BRIDGE_RTP_MIN..+3999, log level warn, no call limit, and
 * bridge.upstream_url = BENCH_BRIDGE_UPSTREAM (the voice server, another process: see bench/bridge.ts
 * for why) with key BENCH_BRIDGE_UPSTREAM_KEY.
 *
 * Instrumentation (this process only; src/ is unchanged). The bridge's per-frame processing is
 * timed with performance.now() by wrapping, from outside, the methods every frame goes through.
 * Everything between the two stamps of one measurement runs synchronously, so each sample is the
 * handler's own time, never a wait:
 *   in, RTP receive   dgram 'message' dispatch on an RTP socket: RtpSession parse, RTCP stats,
 *                     the bridge's listener, InboundPath.push (jitter buffer insert)
 *   in, tick          InboundPath.tick (playout, decode, 8k->24k) up to the end of the
 *                     WebSocket send of its `input_audio` string (base64, ws framing, socket write)
 *   out, message      the client WebSocket's 'message' dispatch of a `response_audio`: JSON.parse,
 *                     base64 decode, OutboundPath.push (queue)
 *   out, encode+send  OutboundPath.encodeAndSend (24k->8k, G.711 encode, RTP header, UDP send)
 * Each goes into a histogram of 1 us buckets up to 50 ms. A per-call hook in call-bridge.ts would
 * do the same without wrapping (docs/benchmarks.md).
 *
 * Control: SIGUSR2 prints `STATS {json}` (the four histograms' count/p50/p99/max in ms, the event
 * loop's delay, calls bridged now, memory) for the time since the previous SIGUSR2 and starts
 * over. Prints `LISTENING <http url> <sip port>` once up; SIGTERM/SIGINT: drain (1 s) and exit.
 */
import dgram from 'node:dgram';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startDaemon } from '../src/main.ts';
import { InboundPath } from '../src/media/inbound-path.ts';
import { OutboundPath } from '../src/media/outbound-path.ts';
import { initResamplers } from '../src/media/resampler.ts';

const dataDir = process.env.BENCH_BRIDGE_DATA_DIR;
const upstream = process.env.BENCH_BRIDGE_UPSTREAM;
const upstreamKey = process.env.BENCH_BRIDGE_UPSTREAM_KEY;
const rtpMin = Number(process.env.BENCH_BRIDGE_RTP_MIN ?? 30000);
if (!dataDir || !upstream || !upstreamKey) throw new Error('BENCH_BRIDGE_DATA_DIR, BENCH_BRIDGE_UPSTREAM and BENCH_BRIDGE_UPSTREAM_KEY are required');

/** Durations in 1 us buckets up to 50 ms (the last bucket takes everything above). */
class Histogram {
  readonly #b = new Uint32Array(50_001);
  #n = 0;
  #max = 0;
  add(ms: number): void {
    const us = Math.round(ms * 1000);
    this.#b[us > 50_000 ? 50_000 : us < 0 ? 0 : us]!++;
    this.#n++;
    if (ms > this.#max) this.#max = ms;
  }
  #q(p: number): number {
    if (this.#n === 0) return Number.NaN;
    const rank = Math.ceil(p * this.#n);
    let seen = 0;
    for (let i = 0; i < this.#b.length; i++) {
      seen += this.#b[i]!;
      if (seen >= rank) return i / 1000;
    }
    return this.#max;
  }
  snapshot(): { n: number; p50: number; p99: number; p999: number; max: number } {
    const s = { n: this.#n, p50: this.#q(0.5), p99: this.#q(0.99), p999: this.#q(0.999), max: Number(this.#max.toFixed(4)) };
    this.#b.fill(0);
    this.#n = 0;
    this.#max = 0;
    return s;
  }
}

const h = { rtpIn: new Histogram(), tickIn: new Histogram(), msgOut: new Histogram(), sendOut: new Histogram() };

// in, RTP receive: dgram 'message' dispatch on RTP sockets (bound in the RTP range).
const rtpSockets = new WeakMap<dgram.Socket, boolean>();
const socketEmit = dgram.Socket.prototype.emit as (this: dgram.Socket, event: string | symbol, ...args: unknown[]) => boolean;
dgram.Socket.prototype.emit = function (this: dgram.Socket, event: string | symbol, ...args: unknown[]): boolean {
  if (event !== 'message') return socketEmit.call(this, event, ...args);
  let rtp = rtpSockets.get(this);
  if (rtp === undefined) {
    let port = -1;
    try {
      port = this.address().port;
    } catch {
      // not bound
    }
    rtp = port >= rtpMin && port < rtpMin + 4000 && port % 2 === 0;
    rtpSockets.set(this, rtp);
  }
  if (!rtp) return socketEmit.call(this, event, ...args);
  const t0 = performance.now();
  const r = socketEmit.call(this, event, ...args);
  h.rtpIn.add(performance.now() - t0);
  return r;
} as typeof dgram.Socket.prototype.emit;

// in, tick: InboundPath.tick starts it, the input_audio send ends it (same synchronous turn).
let tickStart = -1;
const inboundTick = InboundPath.prototype.tick;
InboundPath.prototype.tick = function (this: InboundPath, nowMs: number) {
  tickStart = performance.now();
  return inboundTick.call(this, nowMs);
};
const wsSend = WebSocket.prototype.send;
WebSocket.prototype.send = function (this: WebSocket, data: unknown, ...rest: unknown[]) {
  const r = (wsSend as (...a: unknown[]) => void).call(this, data, ...rest);
  if (tickStart >= 0 && typeof data === 'string' && data.startsWith('{"type":"input_audio"')) {
    h.tickIn.add(performance.now() - tickStart);
    tickStart = -1;
  }
  return r;
} as typeof wsSend;

// out, message: the bridge's client socket handling a response_audio message.
const wsEmit = WebSocket.prototype.emit;
WebSocket.prototype.emit = function (this: WebSocket & { _isServer?: boolean }, event: string | symbol, ...args: unknown[]): boolean {
  if (event !== 'message' || this._isServer) return wsEmit.call(this, event, ...args);
  const raw = args[0] as Buffer | Buffer[] | ArrayBuffer;
  // `{"type":"response_audio"` within the first bytes (the server builds it that way).
  const head = Buffer.isBuffer(raw) ? raw.toString('latin1', 0, 32) : '';
  const t0 = performance.now();
  const r = wsEmit.call(this, event, ...args);
  if (head.includes('response_audio')) h.msgOut.add(performance.now() - t0);
  return r;
} as typeof wsEmit;

// out, encode+send.
const encodeAndSend = OutboundPath.prototype.encodeAndSend;
OutboundPath.prototype.encodeAndSend = function (this: OutboundPath, frame: Int16Array, marker: boolean) {
  const t0 = performance.now();
  encodeAndSend.call(this, frame, marker);
  h.sendOut.add(performance.now() - t0);
};

const config = loadConfig(
  {
    data_dir: dataDir,
    http: { host: '127.0.0.1', port: 0 },
    sip: { host: '127.0.0.1', port: 0, transports: 'udp' },
    rtp: { address: '127.0.0.1', port_min: rtpMin, port_max: rtpMin + 3999 },
    log_level: 'warn',
    drain: { deadline_secs: 1 },
    bridge: { max_calls: 0, upstream_url: upstream, upstream_api_key: upstreamKey },
  },
  {},
);
const logger = createLogger('warn');
// No agent runtime here (sessions are the upstream's); startDaemon loads the resamplers only with
// its default runtime (prepareAgentRuntime), and the bridge needs them: load them here.
await initResamplers();
const daemon = await startDaemon(config, logger, () => {}, { runtimeFactory: null });
process.stdout.write(`LISTENING ${daemon.url} ${daemon.sip!.port}\n`);

const loop = monitorEventLoopDelay({ resolution: 5 });
loop.enable();
process.on('SIGUSR2', () => {
  const ms = (ns: number) => Number((ns / 1e6).toFixed(2));
  const mem = process.memoryUsage();
  const stats = {
    rtpIn: h.rtpIn.snapshot(),
    tickIn: h.tickIn.snapshot(),
    msgOut: h.msgOut.snapshot(),
    sendOut: h.sendOut.snapshot(),
    loop: { p50: ms(loop.percentile(50)), p99: ms(loop.percentile(99)), max: ms(loop.max) },
    active: daemon.bridge.active,
    heapUsedMb: Number((mem.heapUsed / 2 ** 20).toFixed(1)),
    externalMb: Number((mem.external / 2 ** 20).toFixed(1)),
  };
  loop.reset();
  process.stdout.write(`STATS ${JSON.stringify(stats)}\n`);
});

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  daemon.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
