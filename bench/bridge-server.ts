/**
 * The daemon of `bench/bridge`, as its own process so that its CPU (/proc/<pid>/stat) and memory
 * (VmRSS) are the bridge's alone: `startDaemon` as main.ts composes it, SIP on 127.0.0.1, RTP on
 * 127.0.0.1 ports BENCH_BRIDGE_RTP_MIN..+3999, log level warn, no call limit, and
 * bridge.upstream_url = BENCH_BRIDGE_UPSTREAM (the voice server, another process: see bench/bridge.ts
 * for why) with key BENCH_BRIDGE_UPSTREAM_KEY. HTTP on a free loopback port chosen before the
 * start, http.public_url = that address (the carrier media-stream phase signs and connects to it),
 * telco.api_base_url a closed loopback port (no carrier API request leaves the machine). The
 * media-stream calls are not in the probe's figures below (they send no RTP): bench/bridge times
 * them at the load generator.
 *
 * Instrumentation (bench/lib/bridge-probe.ts, installed on the main thread and, with media threads,
 * on each of them; src/ is unchanged; the main thread merges the windows). The bridge's per-frame processing is
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
 * Control: SIGUSR2 prints `STATS <n> {json}` (n: the request's number, 1, 2, ...) (the four histograms' count/p50/p99/max in ms, the
 * send-side figures `send: { frames, onTime, skipped, calls, p50, p99, max }` in ms, `underruns`,
 * the event loop's delay, calls bridged now, memory) for the time since the previous SIGUSR2 and
 * starts over. Prints `LISTENING <http url> <sip port>` once up; SIGTERM/SIGINT: drain (1 s) and
 * exit.
 */
import { writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import pino from 'pino';
import { BroadcastChannel } from 'node:worker_threads';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startDaemon } from '../src/main.ts';
import { initResamplers } from '../src/media/resampler.ts';
import { installBridgeProbe, lateOverlapping, mergeHistograms, PROBE_CHANNEL, quantiles, type ProbeSnapshot } from './lib/bridge-probe.ts';

const dataDir = process.env.BENCH_BRIDGE_DATA_DIR;
const upstream = process.env.BENCH_BRIDGE_UPSTREAM;
const upstreamKey = process.env.BENCH_BRIDGE_UPSTREAM_KEY;
const rtpMin = Number(process.env.BENCH_BRIDGE_RTP_MIN ?? 30000);
// Unset: the daemon's defaults (rtp.media_threads, rtp.media_thread_nice, rtp.media_thread_realtime, rtp.main_thread_realtime, rtp.media_thread_young_gen_mb); set: these.
const mediaEnv = {
  ...(process.env.BENCH_BRIDGE_MEDIA_THREADS ? { media_threads: Number(process.env.BENCH_BRIDGE_MEDIA_THREADS) } : {}),
  ...(process.env.BENCH_BRIDGE_MEDIA_NICE ? { media_thread_nice: Number(process.env.BENCH_BRIDGE_MEDIA_NICE) } : {}),
  ...(process.env.BENCH_BRIDGE_MEDIA_REALTIME ? { media_thread_realtime: Number(process.env.BENCH_BRIDGE_MEDIA_REALTIME) } : {}),
  ...(process.env.BENCH_BRIDGE_MAIN_REALTIME ? { main_thread_realtime: Number(process.env.BENCH_BRIDGE_MAIN_REALTIME) } : {}),
  ...(process.env.BENCH_BRIDGE_MEDIA_YOUNG_GEN_MB ? { media_thread_young_gen_mb: Number(process.env.BENCH_BRIDGE_MEDIA_YOUNG_GEN_MB) } : {}),
};
if (!dataDir || !upstream || !upstreamKey) throw new Error('BENCH_BRIDGE_DATA_DIR, BENCH_BRIDGE_UPSTREAM and BENCH_BRIDGE_UPSTREAM_KEY are required');

// The media workers' clocks (performance.timeOrigin by thread index), for handoffIn.
const workerOrigins = new Map<number, number>();
const probe = installBridgeProbe(rtpMin, workerOrigins);
const channel = new BroadcastChannel(PROBE_CHANNEL);
channel.unref();
/** One media thread's figures as its probe posted them (late frames on the shared clock, to match against the main thread's GC). */
type ThreadFigures = { index: number; loop: ProbeSnapshot['loop']; gc: ProbeSnapshot['gc']; lateAbs: number[] };
const waiting = new Map<number, { snaps: ProbeSnapshot[]; threads: ThreadFigures[]; done: () => void }>();
channel.onmessage = (event) => {
  const m = (event as MessageEvent).data as { t: string; id: number; index: number; timeOrigin: number; snap: ProbeSnapshot };
  if (m.t === 'hello') workerOrigins.set(m.index, m.timeOrigin);
  if (m.t === 'snapshot') {
    const w = waiting.get(m.id);
    if (w === undefined) return;
    w.snaps.push(m.snap);
    w.threads.push({ index: m.index, loop: m.snap.loop, gc: m.snap.gc, lateAbs: m.snap.lateAbs });
    if (w.snaps.length === config.rtp.media_threads) w.done();
  }
};
// The workers load their probe as they start (DaemonOptions.mediaWorkerPreload below).
const probeModule = new URL('./lib/bridge-probe-worker.ts', import.meta.url);

// The media-stream phase (bench/lib/media-stream-callers.ts) needs http.public_url: the carrier
// signs the webhook URL it was given, and the TwiML's stream URL is built from it. So the HTTP
// port is chosen here (a free loopback port) and public_url is that address. The carrier REST API
// (telco.api_base_url: hang-up and transfer of stream calls ended on our side) points at a closed
// loopback port: nothing of the bench leaves the machine (the load generator ends its calls with
// `stop`, which needs no API request).
const httpPort = await new Promise<number>((resolve, reject) => {
  const srv = createServer();
  srv.once('error', reject);
  srv.listen(0, '127.0.0.1', () => {
    const port = (srv.address() as AddressInfo).port;
    srv.close(() => resolve(port));
  });
});
const config = loadConfig(
  {
    data_dir: dataDir,
    http: { host: '127.0.0.1', port: httpPort, public_url: `http://127.0.0.1:${httpPort}` },
    telco: { api_base_url: 'http://127.0.0.1:9' },
    sip: { host: '127.0.0.1', port: 0, transports: 'udp' },
    rtp: { address: '127.0.0.1', port_min: rtpMin, port_max: rtpMin + 3999, ...mediaEnv },
    log_level: process.env.BENCH_BRIDGE_LOG ? 'info' : 'warn',
    drain: { deadline_secs: 1 },
    bridge: { max_calls: 0, upstream_url: upstream, upstream_api_key: upstreamKey },
  },
  {},
);
// BENCH_BRIDGE_LOG=<file>: the daemon's log at info level into that file (diagnostics: why calls ended).
const logFile = process.env.BENCH_BRIDGE_LOG;
const logger = logFile ? createLogger('info', pino.destination({ dest: logFile, sync: false })) : createLogger('warn');
// No agent runtime here (sessions are the upstream's); startDaemon loads the resamplers only with
// its default runtime (prepareAgentRuntime), and the bridge needs them: load them here.
await initResamplers();
const daemon = await startDaemon(config, logger, () => {}, { runtimeFactory: null, mediaWorkerPreload: [probeModule] });
process.stdout.write(`LISTENING ${daemon.url} ${daemon.sip!.port}\n`);

let nextTake = 1;
/** Every media worker's figures for the window (up to 2 s of waiting; a worker that does not answer is missing). */
async function takeWorkers(): Promise<{ snaps: ProbeSnapshot[]; threads: ThreadFigures[] }> {
  if (config.rtp.media_threads === 0) return { snaps: [], threads: [] };
  const id = nextTake++;
  const entry = { snaps: [] as ProbeSnapshot[], threads: [] as ThreadFigures[], done: () => {} };
  const done = new Promise<void>((resolve) => {
    entry.done = resolve;
    setTimeout(resolve, 2000);
  });
  waiting.set(id, entry);
  channel.postMessage({ t: 'take', id });
  await done;
  waiting.delete(id);
  return entry;
}

let statsSeq = 0;

function writeLateFrames(seq: number, lateAbs: number[]): string {
  const file = join(dataDir!, `late-frames-${seq}.json`);
  writeFileSync(file, JSON.stringify(lateAbs));
  return file;
}
process.on('SIGUSR2', () => {
  const seq = ++statsSeq;
  const own = probe.take();
  void takeWorkers().then(({ snaps, threads }) => {
    const all = [own, ...snaps];
    const merged = (k: 'rtpIn' | 'tickIn' | 'handoffIn' | 'msgOut' | 'sendOut' | 'sendLate') => quantiles(mergeHistograms(all.map((x) => x[k])));
    const late = merged('sendLate');
    const sum = (f: (x: ProbeSnapshot) => number) => all.reduce((n, x) => n + f(x), 0);
    const mem = process.memoryUsage();
    const stats = {
      rtpIn: merged('rtpIn'),
      tickIn: merged('tickIn'),
      handoffIn: merged('handoffIn'),
      msgOut: merged('msgOut'),
      sendOut: merged('sendOut'),
      send: { frames: sum((x) => x.send.frames), onTime: sum((x) => x.send.onTime), skipped: sum((x) => x.send.skipped), calls: sum((x) => x.send.calls), p50: late.p50, p99: late.p99, p999: late.p999, max: late.max },
      underruns: sum((x) => x.underruns),
      // The main thread's event loop and GC; media threads' beside them.
      loop: own.loop,
      gc: own.gc,
      // Per media thread: its late frames that overlap a GC pause of the main thread (a stall shared across threads?).
      mediaThreads: threads.sort((a, b) => a.index - b.index).map(({ lateAbs, ...t }) => ({ ...t, duringMainGc: lateOverlapping(lateAbs, own.gcAbs).frames })),
      // Every thread's late frames on the shared clock, [due, sent] pairs, for the bench to match
      // against the CPU stalls it saw: in a file beside the daemon's data (too long for a line of
      // the output, which the bench keeps as a bounded tail).
      lateFile: writeLateFrames(seq, all.flatMap((x) => x.lateAbs)),
      mediaThreadsAnswered: snaps.length,
      active: daemon.bridge.active,
      heapUsedMb: Number((mem.heapUsed / 2 ** 20).toFixed(1)),
      externalMb: Number((mem.external / 2 ** 20).toFixed(1)),
    };
    process.stdout.write(`STATS ${seq} ${JSON.stringify(stats)}\n`);
  });
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
