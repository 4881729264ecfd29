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
 * Send-side timing (`send`): RtpSession.prototype.send is wrapped. Every call of it with
 * timestampIncrement > 0 (audio: agent frames and the encoded silence the bridge sends while the
 * agent is quiet; RFC 4733 telephone-events are sent by sendDtmf, not send(), and would carry
 * increment 0) is one frame of that RtpSession (one per call), stamped with performance.now()
 * just before the original send runs. Per session, in a WeakMap; S and ref start over with the
 * session's first frame of each window (below), pos never does:
 *   pos    the frame's position: the sum of the increments of the session's earlier frames
 *          divided by this frame's increment (0, 1, 2, ... for 20 ms PCMU at 160 per frame)
 *   S      frames the schedule moved on by at stalls (below); the frame's index is i = pos + S
 *   ref    the earliest (t - 20 ms * i) seen so far in this window: the start of the call's 20 ms
 *          schedule (the forward pass of analyse() in bench/bridge.ts). Per window because a
 *          call's place in its media tick shifts while the other calls are being set up: a
 *          one-time constant shift, which a caller's jitter buffer never notices, would count
 *          every later frame late.
 * Frame i is due at ref + 20 ms * i; its lateness = (t - 20 ms * i) - ref, after lowering ref
 * when this frame is the earliest yet (lateness 0); on time = lateness <= 5 ms. Lateness goes
 * into a 1 us histogram (p50/p99/max in ms; over 50 ms counts in the top bucket, max is exact).
 * Skipped frames (each a gap the caller hears) are counted three ways, all in `skipped`:
 *   - a position jump: pos advancing by more than 1 between consecutive frames (the timestamp
 *     went on over frames never sent), the jump minus 1;
 *   - a stall: a frame k = floor((lateness + 5 ms) / 20 ms) >= 1 whole frames behind (at least
 *     15 ms late). The bridge's pacer never sends a backlog of stale frames: after a stall it
 *     skips ticks (src/media/playout-queue.ts Pacer, maxLateMs) and the next frame carries the
 *     ordinary increment, so the position does not show the skip; or it catches up in a burst,
 *     and the caller still hears the stall as a gap. Either way the schedule moves on: S += k
 *     (ref lowered if the frame is then early), so one stall is counted once and does not make
 *     every later frame of the call late. The frame itself is judged on its full lateness;
 *   - a frame send() refused (returned false: closed, no remote, muted by DTMF): it advances
 *     the position but is not on the wire, so it is counted skipped, not in frames.
 * Counted in the window (reset at each SIGUSR2): frames (frames sent), onTime, skipped, calls
 * (sessions with at least one frame in the window). `underruns`: per OutboundPath (WeakMap), the
 * time of its last agent frame (OutboundPath.prototype.encodeAndSend, whose marker is true on the
 * first frame of a talk spurt); a spurt starting within 300 ms of the previous agent frame is an
 * underrun: the agent's audio ran dry mid-reply (e.g. a reply's second TTS piece arrived late).
 * OutboundPath.prototype.clear (barge-in) forgets the last frame: audio after an interruption is
 * a new reply, not an underrun.
 *
 * The event loop's delay comes from monitorEventLoopDelay({ resolution: 5 }), which records the
 * whole interval between its 5 ms timer's firings (an idle loop shows ~5 ms): reported as
 * max(0, value - 5 ms) for p50, p99 and max, i.e. the delay beyond the timer's own period.
 *
 * Control: SIGUSR2 prints `STATS {json}` (the four histograms' count/p50/p99/max in ms, the
 * send-side figures `send: { frames, onTime, skipped, calls, p50, p99, max }` in ms, `underruns`,
 * the event loop's delay, calls bridged now, memory) for the time since the previous SIGUSR2 and
 * starts over. Prints `LISTENING <http url> <sip port>` once up; SIGTERM/SIGINT: drain (1 s) and
 * exit.
 */
import dgram from 'node:dgram';
import { monitorEventLoopDelay, performance, PerformanceObserver } from 'node:perf_hooks';
import WebSocket from 'ws';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startDaemon } from '../src/main.ts';
import { InboundPath } from '../src/media/inbound-path.ts';
import { OutboundPath } from '../src/media/outbound-path.ts';
import { initResamplers } from '../src/media/resampler.ts';
import { RtpSession, type SendOptions } from '../src/media/rtp-session.ts';

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

// out, encode+send; and agent-audio underruns (a talk spurt restarting soon after the last agent frame).
const UNDERRUN_MS = 300;
let underruns = 0;
const lastAgentFrame = new WeakMap<OutboundPath, number>();
const encodeAndSend = OutboundPath.prototype.encodeAndSend;
OutboundPath.prototype.encodeAndSend = function (this: OutboundPath, frame: Int16Array, marker: boolean) {
  const t0 = performance.now();
  encodeAndSend.call(this, frame, marker);
  const t1 = performance.now();
  h.sendOut.add(t1 - t0);
  if (marker) {
    const last = lastAgentFrame.get(this);
    if (last !== undefined && t0 - last < UNDERRUN_MS) underruns++;
  }
  lastAgentFrame.set(this, t0);
};
const outboundClear = OutboundPath.prototype.clear;
OutboundPath.prototype.clear = function (this: OutboundPath) {
  lastAgentFrame.delete(this);
  return outboundClear.call(this);
};

// Send-side timing of every audio frame, per RtpSession (one per call): see the header.
const FRAME_MS = 20;
const ON_TIME_MS = 5;
interface SendSchedule {
  /** Sum of the increments of the frames so far (codec clock units). */
  units: number;
  /** Position of the previous frame (-1: none yet). */
  lastPos: number;
  /** Frames the schedule moved on by at stalls. */
  shift: number;
  /** Earliest (t - 20 ms * index) so far. */
  ref: number;
  /** The window this session last sent in (for `calls`). */
  window: number;
}
const schedules = new WeakMap<RtpSession, SendSchedule>();
const send = { late: new Histogram(), frames: 0, onTime: 0, skipped: 0, calls: 0, window: 0 };
const rtpSend = RtpSession.prototype.send;
RtpSession.prototype.send = function (this: RtpSession, payload: Uint8Array, options: SendOptions): boolean {
  const t = performance.now();
  const ok = rtpSend.call(this, payload, options);
  const inc = options.timestampIncrement;
  if (!(inc > 0)) return ok; // not an audio frame
  let s = schedules.get(this);
  if (s === undefined) {
    s = { units: 0, lastPos: -1, shift: 0, ref: Infinity, window: -1 };
    schedules.set(this, s);
  }
  const pos = s.units / inc;
  s.units += inc;
  if (s.lastPos >= 0 && pos - s.lastPos > 1) send.skipped += Math.round(pos - s.lastPos - 1);
  s.lastPos = pos;
  if (s.window !== send.window) {
    // A new window: the call's schedule starts over from what it sends in it. Its place in its
    // media tick moved while the other calls were being set up (a constant shift the caller's
    // jitter buffer never notices); lateness is judged against the steady state, with every
    // call up.
    s.window = send.window;
    s.ref = Infinity;
    s.shift = 0;
    send.calls++;
  }
  if (!ok) {
    send.skipped++;
    return ok;
  }
  let anchor = t - FRAME_MS * (pos + s.shift);
  if (anchor < s.ref) s.ref = anchor;
  const late = anchor - s.ref;
  send.late.add(late);
  send.frames++;
  if (late <= ON_TIME_MS) send.onTime++;
  const k = Math.floor((late + ON_TIME_MS) / FRAME_MS);
  if (k >= 1) {
    // A stall: the caller hears a gap of k frames; the schedule moves on by as many.
    send.skipped += k;
    s.shift += k;
    anchor -= FRAME_MS * k;
    if (anchor < s.ref) s.ref = anchor;
  }
  return ok;
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

// Garbage-collector pauses on the main thread (count, total, longest), per window: a long pause
// is a stall of every call's media.
const gc = { count: 0, totalMs: 0, maxMs: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gc.count++;
    gc.totalMs += e.duration;
    if (e.duration > gc.maxMs) gc.maxMs = e.duration;
  }
}).observe({ entryTypes: ['gc'] });

const LOOP_RESOLUTION_MS = 5;
const loop = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
loop.enable();
process.on('SIGUSR2', () => {
  // The histogram holds whole intervals between its timer's firings (~resolution when idle):
  // the delay is what exceeds the resolution.
  const delay = (ns: number) => Number(Math.max(0, ns / 1e6 - LOOP_RESOLUTION_MS).toFixed(2));
  const mem = process.memoryUsage();
  const late = send.late.snapshot();
  const stats = {
    rtpIn: h.rtpIn.snapshot(),
    tickIn: h.tickIn.snapshot(),
    msgOut: h.msgOut.snapshot(),
    sendOut: h.sendOut.snapshot(),
    send: { frames: send.frames, onTime: send.onTime, skipped: send.skipped, calls: send.calls, p50: late.p50, p99: late.p99, p999: late.p999, max: late.max },
    underruns,
    loop: { p50: delay(loop.percentile(50)), p99: delay(loop.percentile(99)), max: delay(loop.max) },
    gc: { count: gc.count, totalMs: Number(gc.totalMs.toFixed(1)), maxMs: Number(gc.maxMs.toFixed(2)) },
    active: daemon.bridge.active,
    heapUsedMb: Number((mem.heapUsed / 2 ** 20).toFixed(1)),
    externalMb: Number((mem.external / 2 ** 20).toFixed(1)),
  };
  loop.reset();
  send.frames = send.onTime = send.skipped = send.calls = 0;
  send.window++;
  underruns = 0;
  gc.count = gc.totalMs = gc.maxMs = 0;
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
