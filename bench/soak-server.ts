/**
 * The daemon of `bench/soak`, as its own process so that its memory (VmRSS) is the daemon's
 * alone: `startDaemon` as main.ts composes it, with its default agent runtime (the embedded
 * eSpeak-NG voice, local/echo, local STT, energy VAD): one process bridges the calls and runs
 * their voice sessions, as a default deployment does. SIP on 127.0.0.1 (UDP), RTP on 127.0.0.1
 * ports BENCH_SOAK_RTP_MIN..+3999, log level warn (BENCH_SOAK_LOG=<file>: info into that file),
 * no call limit, rtp.media_threads from BENCH_SOAK_MEDIA_THREADS and rtp.media_thread_young_gen_mb
 * from BENCH_SOAK_MEDIA_YOUNG_GEN_MB (unset: the defaults).
 * With BENCH_SOAK_UPSTREAM_URL (and BENCH_SOAK_UPSTREAM_KEY) it is a bridge only, as bench/bridge's
 * daemon A: bridge.upstream_url points at that voice server and no agent runtime runs here.
 *
 * BENCH_SOAK_SQLITE_CACHE_KIB=<n> (diagnostics): the store's SQLite page cache limited to n KiB.
 *
 * Diagnostics over a second HTTP server on 127.0.0.1 (its port in the LISTENING line), which the
 * bench polls:
 *   GET /memory[?gc=1][&detail=1]  { process: { rss, anon, file[, wasm, brk, other] } MB (the
 *                       breakdown of the anonymous memory with gc or detail), threads: [main, media-0, ...] (heap,
 *                       external, arrayBuffers, the WASM heaps; bench/lib/memory-probe.ts),
 *                       bridged, sessions }; gc=1 runs a full GC on every thread first (start
 *                       node with --expose-gc; else no collection, and `gc: false` says so)
 *   GET /snapshot       a full GC, then a heap snapshot of the main thread into
 *                       BENCH_SOAK_SNAPSHOT_DIR (else the data directory); answers its path
 *                       (diagnostics; pauses the daemon for seconds)
 * Prints `LISTENING <http url> <sip port> <debug port>` once up; SIGTERM/SIGINT: drain (1 s), exit.
 */
import { createServer } from 'node:http';
import { join } from 'node:path';
import { writeHeapSnapshot } from 'node:v8';
import pino from 'pino';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startDaemon } from '../src/main.ts';
import { createMemoryCollector, processMemory, threadMemory } from './lib/memory-probe.ts';

const dataDir = process.env.BENCH_SOAK_DATA_DIR;
if (!dataDir) throw new Error('BENCH_SOAK_DATA_DIR is required');
const rtpMin = Number(process.env.BENCH_SOAK_RTP_MIN ?? 30000);
const mediaThreads = process.env.BENCH_SOAK_MEDIA_THREADS;
const youngGenMb = process.env.BENCH_SOAK_MEDIA_YOUNG_GEN_MB;
// BENCH_SOAK_UPSTREAM_URL (+ _KEY): a bridge only, its sessions on that voice server (bench/bridge's A).
const upstream = process.env.BENCH_SOAK_UPSTREAM_URL;
const upstreamKey = process.env.BENCH_SOAK_UPSTREAM_KEY ?? '';

// The media workers load the memory probe as they start (DaemonOptions.mediaWorkerPreload below).
const memoryProbe = new URL('./lib/memory-probe-worker.ts', import.meta.url);

const config = loadConfig(
  {
    data_dir: dataDir,
    http: { host: '127.0.0.1', port: 0 },
    sip: { host: '127.0.0.1', port: 0, transports: 'udp' },
    rtp: {
      address: '127.0.0.1',
      port_min: rtpMin,
      port_max: rtpMin + 3999,
      ...(mediaThreads ? { media_threads: Number(mediaThreads) } : {}),
      ...(youngGenMb ? { media_thread_young_gen_mb: Number(youngGenMb) } : {}),
    },
    log_level: process.env.BENCH_SOAK_LOG ? 'info' : 'warn',
    drain: { deadline_secs: 1 },
    bridge: { max_calls: 0, ...(upstream ? { upstream_url: upstream, upstream_api_key: upstreamKey } : {}) },
  },
  {},
);
const logFile = process.env.BENCH_SOAK_LOG;
const logger = logFile ? createLogger('info', pino.destination({ dest: logFile, sync: false })) : createLogger('warn');
// Upstream: no agent runtime here (startDaemon then loads only the resamplers the bridge needs).
const daemon = await startDaemon(config, logger, () => {}, { mediaWorkerPreload: [memoryProbe], ...(upstream ? { runtimeFactory: null } : {}) });
// Diagnostics: BENCH_SOAK_SQLITE_CACHE_KIB=<n> sets the store's page cache limit (PRAGMA cache_size = -n).
if (process.env.BENCH_SOAK_SQLITE_CACHE_KIB) daemon.store.sqlite!.pragma(`cache_size = -${Number(process.env.BENCH_SOAK_SQLITE_CACHE_KIB)}`);

const workers = createMemoryCollector(() => config.rtp.media_threads);
const debug = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://x');
  const answer = (body: unknown) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(body));
  };
  if (url.pathname === '/memory') {
    const gc = url.searchParams.get('gc') === '1';
    void workers(gc).then((media) => {
      const main = threadMemory('main', gc);
      answer({
        gc: gc && typeof (globalThis as { gc?: unknown }).gc === 'function',
        process: processMemory('self', gc || url.searchParams.get('detail') === '1'),
        threads: [main, ...media],
        bridged: daemon.bridge.active,
        sessions: daemon.app.voiceSessions.activeCount(),
      });
    });
    return;
  }
  if (url.pathname === '/snapshot') {
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    answer({ file: writeHeapSnapshot(join(process.env.BENCH_SOAK_SNAPSHOT_DIR || dataDir, `soak-${Date.now()}.heapsnapshot`)) });
    return;
  }
  res.statusCode = 404;
  res.end();
});
await new Promise<void>((resolve) => debug.listen(0, '127.0.0.1', resolve));
const debugPort = (debug.address() as { port: number }).port;
process.stdout.write(`LISTENING ${daemon.url} ${daemon.sip!.port} ${debugPort}\n`);

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  debug.close();
  daemon.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
