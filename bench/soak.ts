/**
 * bench/soak: does the daemon's memory stay flat under hours of call churn?
 *
 *   npm run bench -- soak                  # 60 minutes
 *   npm run bench -- soak --minutes 8      # a shorter run (CI smoke); or BENCH_SOAK_MINUTES=8
 *   npm run bench -- soak --floods 3       # the diagnosis instead: floods of calls, memory after each
 *
 * Processes (all on 127.0.0.1), bench/bridge's set-up:
 *   SIPp (UAC, plays the callers' RTP) --SIP+RTP--> the daemon measured: bench/soak-server.ts, a
 *                                                   bridge (SIP, RTP on 2 media threads, the
 *                                                   voice sockets), no agent runtime of its own
 *                                                      |  bridge.upstream_url
 *                                                      v
 *                                     the voice server: bench/session-server.ts (local STT,
 *                                     local/echo, energy VAD; TTS = the fake of
 *                                     bench/session-tts-server.ts, a tone at once)
 * Why two daemons: the growth across call floods was measured on bench/bridge's bridge daemon (idle 178 MB, as here),
 * so the proof measures that process; its RSS is then the bridge's alone. eSpeak's synthesis for
 * 100 calls would take most of a CPU on this 2-core machine shared with other work (one-daemon
 * floods of 100-200 calls had sessions miss their 10 s start when the machine was busy), and the
 * agent's side is measured anyway: the voice server's RSS is sampled too (soak_voice_rss_slope).
 * BENCH_SOAK_UPSTREAM=0 runs one daemon instead, bridge and sessions with the built-in runtime
 * (eSpeak-NG, local/echo), as a default deployment; its RSS then includes its database's memory
 * map, which grows with every transcript stored (docs/benchmarks.md).
 *
 * SIPp places the calls to an ACL trunk (127.0.0.1/32) and plays each caller's RTP itself
 * (rtp_stream, PCMU, looped from the answer to the BYE); the bridge sends RTP back all the time
 * (agent audio and encoded silence), so RTP flows both ways. The caller's audio: a
 * BENCH_SOAK_CYCLE_SECS (6) cycle of 0.6 s speech-like audio and line noise, so the agent answers
 * ("You said: ...") once per cycle and every call carries speech both ways.
 *
 * Soak (the default): BENCH_SOAK_CALLS (100) concurrent calls with churn. Each call lasts a
 * seeded-random 20-120 s (uniform, BENCH_SOAK_SEED, 1: the same durations every run), placed
 * at calls / mean duration per second (one every 700 ms for 100 calls), so ~100 are up once the
 * first 120 s have passed (Little's law). Calls are placed for the run's minutes; the last ones
 * end up to 120 s later. Every BENCH_SOAK_SAMPLE_SECS (10) the bench reads the daemon's memory
 * (/proc VmRSS and RssAnon, and every thread's V8 heap through the daemon's debug endpoint; no
 * forced GC), and once a minute prints the anonymous memory by kind (WASM, the main malloc heap,
 * the other threads' malloc arenas, the rest) and each thread's heap. After a warm-up (a third of
 * the run, at least 5 minutes: the churn reaches its steady state after the longest call, 120 s,
 * V8 its young generations' size, and the allocators their high-water mark, which in the hour
 * runs took ~20 minutes: the main malloc heap and the arenas stop growing at minute 20-23, while
 * the concurrency's wander around 100 sets new peaks), a least-squares line
 * through each minute's lowest sample (a JS heap is a sawtooth between collections) gives the
 * slopes in MB per hour. Every BENCH_SOAK_GC_MINUTES (5) a sample is taken right after a full
 * GC of every thread (the debug endpoint's gc=1): between collections V8 keeps the pages it grew
 * into committed, so the floors above also follow V8's heap sizing; after a full GC only what
 * is still held stays (a leak shows there). Figures (RESULT lines):
 *   soak_rss_after_gc_slope MB/h  the daemon's VmRSS right after each forced full GC, after the
 *                                 warm-up; baseline: the target, 5 MB/h (the verdict's figure)
 *   soak_rss_after_gc_slope_early MB/h  the same from the early mark (10 % of the run, at least
 *                                 5 min): includes the allocators' climb; baseline 5 (no verdict)
 *   soak_heap_after_gc_slope MB/h its JS heaps in use after each forced full GC; baseline 5
 *   soak_rss_slope          MB/h  the daemon's VmRSS (minute floors, no forced GC); baseline 5
 *   soak_heap_slope         MB/h  its JS heaps in use (main + media threads); baseline: 5 MB/h
 *   soak_rss_anon_slope     MB/h  its anonymous RSS (no code, no memory-mapped files); baseline 5
 *   soak_voice_rss_slope    MB/h  the voice server's VmRSS (two daemons only); baseline 5
 *   soak_calls_failed       calls SIPp's failed calls + calls the daemon could not bridge;
 *                                 baseline 1, so the ratio is the count (target 0)
 *   soak_frames_late_share  share of the frames sent to callers more than 5 ms late, from the
 *                                 daemon's /metrics (callbridge_bridge_frames_{late,sent}_total,
 *                                 counted as calls end) after the warm-up; baseline: the same
 *                                 share during the warm-up (a daemon that degrades over time
 *                                 shows a ratio above 1)
 *   soak_calls_completed    calls SIPp completed; baseline: calls placed
 * The run throws (the measurement is invalid) when the daemon dies, SIPp does not run, no call
 * is bridged, or fewer than 10 samples fall after the warm-up.
 *
 * Floods (--floods N or BENCH_SOAK_FLOODS): N floods of BENCH_SOAK_FLOOD_CALLS (400) calls,
 * BENCH_SOAK_FLOOD_AT_ONCE (200) up at a time, each held BENCH_SOAK_FLOOD_HOLD_SECS (12) s, placed
 * at BENCH_SOAK_FLOOD_RATE (40) a second; after each flood, once every call has ended and
 * BENCH_SOAK_SETTLE_SECS (3; 35-40 lets the SIP transactions that outlive their calls by 32 s
 * go) have passed, a full GC on every thread and the memory of every thread: what a flood leaves
 * behind. RSS that climbs flood after flood with the JS heaps flat is memory outside V8 (WASM,
 * native, malloc): the table splits it by kind.
 *
 * Diagnostics: BENCH_SOAK_SMAPS_DIR=<dir> (the daemon's /proc/<pid>/smaps after each flood),
 * BENCH_SOAK_SNAPSHOT_DIR=<dir> (heap snapshots of the daemon's main thread after the second and
 * the last flood; the snapshot itself leaves ~100 MB in the main malloc heap, so the flood after
 * it is not comparable), BENCH_SOAK_LOG=<file> (the daemon's log at info level),
 * BENCH_CHILD_LOG_DIR (bench/lib/child.ts), BENCH_SOAK_DAEMON_ENV (JSON: more environment for the
 * daemon alone, e.g. heaptrack's {"LD_PRELOAD": "/usr/lib/heaptrack/libheaptrack_preload.so",
 * "DUMP_HEAPTRACK_OUTPUT": "<fifo>"} with `heaptrack_interpret < <fifo> | zstd > out.zst`
 * reading it), BENCH_SOAK_SQLITE_CACHE_KIB (bench/soak-server.ts). Knobs:
 * BENCH_SOAK_MEDIA_THREADS (the daemon's rtp.media_threads; unset: its default, 2),
 * BENCH_SOAK_MEDIA_YOUNG_GEN_MB (its rtp.media_thread_young_gen_mb; unset: its default). The
 * daemon reads no CALLBRIDGE_* variable (BENCH_SOAK_DAEMON_ENV passes the process environment
 * only, such as malloc's). The daemons
 * run under node --single-threaded-gc (as npm start runs them); the measured one also with
 * --expose-gc (used only by the flood mode's collections).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT, running, startChild, stopChild, waitForLine, type Child } from './lib/child.ts';
import { envNumber } from './lib/env.ts';
import { printFigures, table, type Figure } from './lib/result.ts';
import { processMemory, type ProcessMemory, type ThreadMemory } from './lib/memory-probe.ts';
import { createCodec } from '../src/media/codecs.ts';
import { openStore } from '../src/store/index.ts';
import { exitMeaning, freeSipPort, freeUdpPort, sippAvailable } from '../test/interop/sipp.ts';
import { prng } from '../test/helpers/prng.ts';
import { uacScenario } from './lib/sipp-uac-scenario.ts';

const HOST = '127.0.0.1';
const NUMBER = '+15550004000';
const MIN_CALL_MS = 20_000;
const MAX_CALL_MS = 120_000;
const TARGET_MB_PER_HOUR = 5;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const log = (s: string) => process.stdout.write(s + '\n');

/** `--name value` / `--name=value` from the command line (the runner leaves options in argv), else env, else fallback. */
export function option(name: string, env: string, fallback: number): number {
  const argv = process.argv;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    let raw: string | undefined;
    if (a === `--${name}`) raw = argv[i + 1];
    else if (a.startsWith(`--${name}=`)) raw = a.slice(name.length + 3);
    if (raw !== undefined) {
      const n = Number(raw);
      if (!Number.isFinite(n) || n <= 0) throw new RangeError(`--${name} must be a positive number, got "${raw}"`);
      return n;
    }
  }
  return envNumber(env, fallback);
}

/** Least-squares slope of y over x. NaN with fewer than 2 distinct x. */
export function slope(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  if (n < 2) return Number.NaN;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
  }
  return sxx === 0 ? Number.NaN : sxy / sxx;
}

/** The caller's audio: one cycle of PCMU, `speechSecs` of speech-like harmonics, then line noise. */
function callerAudio(cycleSecs: number, speechSecs = 0.6): Buffer {
  const n = Math.round(cycleSecs * 8000);
  const speech = Math.round(speechSecs * 8000);
  const pcm = new Int16Array(n);
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff) * 2 - 1;
  for (let i = 0; i < n; i++) {
    const t = i / 8000;
    if (i < speech) {
      const f0 = 125 + 15 * Math.sin(2 * Math.PI * 1.3 * t);
      let x = 0;
      for (let k = 1; k <= 25 && k * f0 <= 3400; k++) {
        const fk = k * f0;
        const w = Math.exp(-(((fk - 500) / 300) ** 2)) + 0.6 * Math.exp(-(((fk - 1500) / 400) ** 2)) + 0.3 * Math.exp(-(((fk - 2500) / 500) ** 2));
        x += w * Math.sin(2 * Math.PI * fk * t + k);
      }
      pcm[i] = Math.max(-32768, Math.min(32767, Math.round(4200 * (0.55 + 0.45 * Math.sin(2 * Math.PI * 4 * t)) * x)));
    } else {
      pcm[i] = Math.round(10 * rand());
    }
  }
  const codec = createCodec('PCMU');
  const out = Buffer.alloc(n - (n % 160));
  for (let at = 0; at + 160 <= n; at += 160) codec.encode(pcm.subarray(at, at + 160), out.subarray(at, at + 160));
  return out;
}

// ---------------------------------------------------------------------------------------------
// SIPp: a UAC placing calls to the ACL trunk, playing the caller's RTP itself; each call holds
// for the duration in its CSV line (field1, ms), then sends BYE. Written into SIPp's working
// directory at run time; 127.0.0.1 only; stopped by PID.

const SCENARIO = uacScenario({
  name: 'callbridge bench soak UAC',
  sdpSessionId: 4001,
  mediaLine: 'm=audio [rtpstream_audio_port] RTP/AVP 0 101',
  duringCall: `  <nop>
    <action>
      <exec rtp_stream="caller.ulaw,-1,0"/>
      <assignstr assign_to="hold_text" value="[field1]"/>
      <todouble assign_to="hold" variable="hold_text"/>
    </action>
  </nop>
  <pause variable="hold"/>`,
});

interface SippRun {
  pid(): number | undefined;
  running(): boolean;
  /** Waits for SIPp to exit: its exit code and the final screen's successful and failed calls. */
  done(): Promise<{ code: number | null; successful: number; failed: number }>;
  /** SIGTERM (SIGKILL 2 s later) by PID if still running; removes the working directory. */
  stop(): Promise<void>;
  describe(): string;
}

/** SIPp placing `holdsMs.length` calls, one every periodMs, at most `limit` up at once. */
async function startSipp(o: { bin: string; sipPort: number; audio: Buffer; holdsMs: number[]; periodMs: number; limit: number; timeoutMs: number }): Promise<SippRun> {
  const workDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-soak-sipp-'));
  writeFileSync(join(workDir, 'soak-uac.xml'), SCENARIO);
  writeFileSync(join(workDir, 'caller.ulaw'), o.audio);
  writeFileSync(join(workDir, 'calls.csv'), `SEQUENTIAL\n${o.holdsMs.map((ms, i) => `+1555200${String(i % 10_000).padStart(4, '0')};${Math.round(ms)}`).join('\n')}\n`);
  // Whole calls/s or a period: -r 1 -rp <period ms> places one call per period.
  const args = [
    `${HOST}:${o.sipPort}`, '-sf', 'soak-uac.xml', '-inf', 'calls.csv', '-s', NUMBER,
    '-t', 'u1', '-i', HOST, '-p', String(await freeSipPort()), '-bind_local',
    '-ci', HOST, '-cp', String(await freeUdpPort()),
    // SIPp's RTP sockets from -mp: below the ephemeral range (32768-) and the daemon's ports.
    '-mi', HOST, '-mp', String(16000 + 2 * Math.floor(Math.random() * 2000)),
    '-m', String(o.holdsMs.length), '-l', String(o.limit), '-r', '1', '-rp', String(Math.max(1, Math.round(o.periodMs))),
    '-nostdin', '-recv_timeout', '20000', '-timeout', `${Math.ceil(o.timeoutMs / 1000)}s`, '-timeout_error',
    '-trace_err', '-error_file', 'errors.log',
  ];
  const proc = spawn(o.bin, args, { cwd: workDir, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let code: number | null | undefined;
  const exited = new Promise<number | null>((resolve) => {
    proc.once('close', (c) => {
      code = c;
      resolve(c);
    });
    proc.once('error', (e) => {
      out += `\nspawn failed: ${e.message}`;
      code = null;
      resolve(null);
    });
  });
  proc.stdout.setEncoding('utf8').on('data', (d: string) => (out = (out + d).slice(-20_000)));
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (out = (out + d).slice(-20_000)));
  const last = (label: string) => {
    const all = [...out.matchAll(new RegExp(`^\\s*${label}\\s*\\|[^|]*\\|\\s*(\\d+)`, 'gm'))];
    return all.length ? Number(all[all.length - 1]![1]) : Number.NaN;
  };
  const read = (name: string) => (existsSync(join(workDir, name)) ? readFileSync(join(workDir, name), 'latin1') : '');
  return {
    pid: () => proc.pid,
    running: () => code === undefined,
    async done() {
      const c = await exited;
      const failed = last('Failed call');
      return { code: c, successful: last('Successful call'), failed: Number.isNaN(failed) ? (c === 0 ? 0 : o.holdsMs.length) : failed };
    },
    async stop() {
      if (code === undefined && proc.pid !== undefined) {
        proc.kill('SIGTERM');
        const t = setTimeout(() => {
          if (code === undefined) proc.kill('SIGKILL');
        }, 2000);
        await exited;
        clearTimeout(t);
      }
      if (process.env.BENCH_SOAK_KEEP_LOGS !== '1') rmSync(workDir, { recursive: true, force: true });
    },
    describe() {
      return `SIPp ${code === undefined ? 'running' : exitMeaning(code ?? null)} in ${workDir}\n${read('errors.log').slice(-3000)}\n${out.slice(-3000)}`;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The daemon

interface Memory {
  gc: boolean;
  process: ProcessMemory;
  threads: ThreadMemory[];
  bridged: number;
  sessions: number;
}

interface Daemon {
  child: Child;
  /** Upstream mode: the voice server the sessions run on (its RSS is sampled too). */
  voice?: Child;
  url: string;
  debug: string;
  sipPort: number;
  /** gc: a full GC on every thread first; detail: the anonymous memory by kind (smaps). */
  memory(gc?: boolean, detail?: boolean): Promise<Memory>;
  /** A counter (summed over its labels) from the daemon's /metrics. */
  metric(name: string): Promise<number>;
}

async function api(base: string, key: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(base + path, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** bench/bridge's voice server: its fake TTS and bench/session-server.ts; the agent on it. */
async function startUpstream(dataDir: string, children: Child[]): Promise<{ url: string; key: string; agent: Record<string, any>; child: Child }> {
  const tts = startChild('fake TTS', ['--import', 'tsx', join(ROOT, 'bench', 'session-tts-server.ts')], {});
  children.push(tts);
  const ttsUrl = `http://${HOST}:${await waitForLine(tts, /LISTENING (\d+)/, 30_000)}/v1`;
  const b = startChild('voice server', ['--single-threaded-gc', '--import', 'tsx', join(ROOT, 'bench', 'session-server.ts')], { BENCH_SESSION_DATA_DIR: dataDir, BENCH_SESSION_TTS_URL: ttsUrl });
  children.push(b);
  const url = await waitForLine(b, /LISTENING (\S+)/, 60_000);
  const key = readFileSync(join(dataDir, 'initial-api-key'), 'utf8').trim();
  const agent = await api(url, key, 'POST', '/v1/agents', {
    name: 'bench soak echo',
    first_message: 'Hello, you are through to the soak test.',
    vad_settings: { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 0 },
    voice_settings: { id: 'tone-800', provider: 'provider_1' },
  });
  return { url, key, agent, child: b };
}

async function startDaemon(dataDir: string, children: Child[], upstreamDir?: string): Promise<Daemon> {
  let up: Awaited<ReturnType<typeof startUpstream>> | undefined;
  if (upstreamDir !== undefined) {
    up = await startUpstream(upstreamDir, children);
    // The bridge's store before it starts: its organization and key, and the agent under the
    // upstream's id (deployments keep agents in sync by id: docs/bridge.md).
    const store = await openStore(dataDir, '');
    const { org, key } = await store.organizations.createKey('bench');
    const { id, name, status, phone_number_id: _p, created_at, updated_at: _u, ...settings } = up.agent;
    await store.agents.insert({ id, org_id: org.id, name, status, phone_number_id: null, settings: settings as any, created_at });
    await store.close();
    writeFileSync(join(dataDir, 'initial-api-key'), key + '\n', { mode: 0o600 });
  }
  const child = startChild('soak daemon', ['--single-threaded-gc', '--expose-gc', '--import', 'tsx', join(ROOT, 'bench', 'soak-server.ts')], {
    ...(up ? { BENCH_SOAK_UPSTREAM_URL: up.url, BENCH_SOAK_UPSTREAM_KEY: up.key } : {}),
    BENCH_SOAK_DATA_DIR: dataDir,
    BENCH_SOAK_RTP_MIN: String(20000 + 2 * Math.floor(Math.random() * 3000)),
    // As deployed (npm start, the Docker image): two malloc arenas (docs/media-workers.md "Memory").
    MALLOC_ARENA_MAX: '2',
    // Diagnostics: more environment for the daemon alone, e.g. heaptrack's LD_PRELOAD, or
    // {"MALLOC_ARENA_MAX": ""} for glibc's default (8 arenas per core).
    ...(process.env.BENCH_SOAK_DAEMON_ENV ? (JSON.parse(process.env.BENCH_SOAK_DAEMON_ENV) as Record<string, string>) : {}),
  });
  children.push(child);
  const [url, sip, debugPort] = (await waitForLine(child, /LISTENING (\S+ \d+ \d+)/, 90_000)).split(' ');
  const debug = `http://${HOST}:${debugPort}`;
  const key = readFileSync(join(dataDir, 'initial-api-key'), 'utf8').trim();
  const agent =
    up?.agent ??
    (await api(url!, key, 'POST', '/v1/agents', {
      name: 'bench soak echo',
      first_message: 'Hello, you are through to the soak test.',
      vad_settings: { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 0 },
    }));
  const trunk = await api(url!, key, 'POST', '/v1/sip-trunks', { pbx: 'generic', name: 'bench soak acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] });
  await api(url!, key, 'POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER });
  return {
    child,
    ...(up ? { voice: up.child } : {}),
    url: url!,
    debug,
    sipPort: Number(sip),
    async memory(gc = false, detail = false) {
      const res = await fetch(`${debug}/memory?gc=${gc ? 1 : 0}&detail=${detail ? 1 : 0}`);
      return (await res.json()) as Memory;
    },
    async metric(name) {
      const text = await (await fetch(`${url}/metrics`)).text();
      let sum = 0;
      for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))) sum += Number(m[1]);
      return sum;
    },
  };
}

const heapOf = (m: Memory) => m.threads.reduce((a, t) => a + t.heapUsed, 0);
const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

function memoryLine(m: Memory): string {
  const threads = m.threads.map((t) => `${t.thread} heap ${fmt(t.heapUsed)}/${fmt(t.heapTotal)} (young ${fmt(t.newSpace)}) ext ${fmt(t.external)} ab ${fmt(t.arrayBuffers)}${t.speexHeap ? ` speex ${fmt(t.speexHeap, 2)}` : ''}${t.rnnoiseHeap ? ` rnnoise ${fmt(t.rnnoiseHeap, 2)}` : ''}`).join('; ');
  const p = m.process;
  const detail = p.wasm !== undefined ? `: WASM ${fmt(p.wasm)}, brk ${fmt(p.brk ?? Number.NaN)}, arenas ${fmt(p.arenas ?? Number.NaN)}, other ${fmt(p.other ?? Number.NaN)}` : '';
  return `RSS ${fmt(p.rss)} MB (anon ${fmt(p.anon)}${detail}; file ${fmt(p.file)}); ${threads}`;
}

// ---------------------------------------------------------------------------------------------
// Floods: what a flood of calls leaves behind

async function floods(d: Daemon, sippBin: string, audio: Buffer, count: number): Promise<void> {
  const calls = envNumber('BENCH_SOAK_FLOOD_CALLS', 400);
  const atOnce = envNumber('BENCH_SOAK_FLOOD_AT_ONCE', 200);
  const holdMs = envNumber('BENCH_SOAK_FLOOD_HOLD_SECS', 12) * 1000;
  const rate = envNumber('BENCH_SOAK_FLOOD_RATE', 40);
  log(`floods: ${count} x ${calls} calls, ${atOnce} at a time, each held ${holdMs / 1000} s, placed at ${rate}/s`);
  const rows: Memory[] = [];
  const settle = async (): Promise<Memory> => {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const m = await d.memory();
      if ((m.bridged === 0 && m.sessions === 0) || Date.now() > deadline) break;
      await sleep(500);
    }
    // SIP transactions outlive their calls (an INVITE server transaction 32 s after its 2xx).
    await sleep(envNumber('BENCH_SOAK_SETTLE_SECS', 3) * 1000);
    await d.memory(true);
    return d.memory(true);
  };
  const idle = await settle();
  rows.push(idle);
  log(`  idle: ${memoryLine(idle)}`);
  let failed = 0;
  for (let f = 1; f <= count; f++) {
    if (!running(d.child)) throw new Error(`the daemon exited:\n${d.child.output()}`);
    const sipp = await startSipp({ bin: sippBin, sipPort: d.sipPort, audio, holdsMs: Array(calls).fill(holdMs), periodMs: 1000 / rate, limit: atOnce, timeoutMs: (calls / atOnce + 2) * (holdMs + 30_000) });
    let peak = 0;
    let peakRss = 0;
    while (sipp.running()) {
      const m = await d.memory();
      peak = Math.max(peak, m.bridged);
      peakRss = Math.max(peakRss, m.process.rss);
      await sleep(1000);
    }
    const res = await sipp.done();
    if (res.successful === 0) throw new Error(`flood ${f}: no call completed:\n${sipp.describe()}\n${d.child.output().slice(-3000)}`);
    failed += res.failed;
    await sipp.stop();
    const m = await settle();
    rows.push(m);
    // BENCH_SOAK_SMAPS_DIR: the daemon's /proc/<pid>/smaps after each flood (which mappings grew).
    if (process.env.BENCH_SOAK_SMAPS_DIR && d.child.proc.pid !== undefined) writeFileSync(join(process.env.BENCH_SOAK_SMAPS_DIR, `smaps-${f}.txt`), readFileSync(`/proc/${d.child.proc.pid}/smaps`));
    if (process.env.BENCH_SOAK_SNAPSHOT_DIR && (f === 2 || f === count)) {
      const { file } = (await (await fetch(`${d.debug}/snapshot`)).json()) as { file: string };
      log(`  heap snapshot of the main thread: ${file}`);
    }
    log(`  flood ${f}: ${res.successful} completed, ${res.failed} failed, up to ${peak} bridged at once, RSS peak ${fmt(peakRss)} MB; after GC: ${memoryLine(m)}`);
  }
  const header = ['after', 'rss', 'anon', 'wasm', 'brk', 'arenas', 'other', 'file', ...idle.threads.flatMap((t) => [`${t.thread} heap`, `${t.thread} total`, `${t.thread} young`, `${t.thread} ext`, ...(t.speexHeap ? [`${t.thread} speex`] : [])]), 'rnnoise'];
  const body = rows.map((m, i) => [
    i === 0 ? 'idle' : `flood ${i}`, fmt(m.process.rss), fmt(m.process.anon), fmt(m.process.wasm ?? Number.NaN), fmt(m.process.brk ?? Number.NaN), fmt(m.process.arenas ?? Number.NaN), fmt(m.process.other ?? Number.NaN), fmt(m.process.file),
    ...m.threads.flatMap((t) => [fmt(t.heapUsed), fmt(t.heapTotal), fmt(t.newSpace), fmt(t.external), ...(idle.threads.find((x) => x.thread === t.thread)?.speexHeap ? [fmt(t.speexHeap, 2)] : [])]),
    fmt(m.threads[0]?.rnnoiseHeap ?? 0, 2),
  ]);
  log(`\nmemory after each flood, every call ended, full GC on every thread (MB)\n${table([header, ...body])}`);
  const rss = rows.map((m) => m.process.rss);
  const growth = rss.length > 2 ? (rss[rss.length - 1]! - rss[1]!) / (rss.length - 2) : Number.NaN;
  const figures: Figure[] = [
    { name: 'soak_flood_rss_growth', value: growth, unit: 'MB', baseline: rss[1]! - rss[0]!, note: `RSS growth per flood after the first (mean); baseline: the first flood's rise over idle (the allocators' high-water mark)` },
    { name: 'soak_flood_heap_growth', value: rows.length > 2 ? (heapOf(rows[rows.length - 1]!) - heapOf(rows[1]!)) / (rows.length - 2) : Number.NaN, unit: 'MB', baseline: heapOf(rows[1]!) - heapOf(rows[0]!), note: 'the JS heaps (every thread), the same way' },
    { name: 'soak_flood_calls_failed', value: failed, unit: 'calls', baseline: 1, note: 'SIPp failed calls over all floods (baseline 1: the ratio is the count)' },
  ];
  printFigures('bench/soak floods', figures);
}

// ---------------------------------------------------------------------------------------------
// Soak: ~N calls with churn for M minutes

export interface Sample {
  /** Seconds since the first call was placed. */
  t: number;
  rss: number;
  /** Anonymous RSS (no file-backed pages: code, the database's memory map). */
  anon: number;
  heap: number;
  bridged: number;
  /** Upstream mode: the voice server's RSS. */
  voiceRss: number;
}

/** Per series, each minute's lowest sample (its time and value). */
export function minuteFloors(samples: readonly Sample[]): Record<keyof Sample, { t: number; v: number }[]> {
  const keys = ['t', 'rss', 'anon', 'heap', 'bridged', 'voiceRss'] as const;
  const out = Object.fromEntries(keys.map((k) => [k, [] as { t: number; v: number }[]])) as Record<keyof Sample, { t: number; v: number }[]>;
  const byMinute = new Map<number, Sample[]>();
  for (const s of samples) {
    const m = Math.floor(s.t / 60);
    byMinute.set(m, [...(byMinute.get(m) ?? []), s]);
  }
  for (const group of byMinute.values()) {
    for (const k of keys) {
      const low = group.reduce((a, b) => (b[k] < a[k] ? b : a));
      if (Number.isFinite(low[k])) out[k].push({ t: low.t, v: low[k] });
    }
  }
  return out;
}

async function soak(d: Daemon, sippBin: string, audio: Buffer, minutes: number): Promise<void> {
  const concurrent = envNumber('BENCH_SOAK_CALLS', 100);
  const seed = envNumber('BENCH_SOAK_SEED', 1);
  const sampleMs = envNumber('BENCH_SOAK_SAMPLE_SECS', 10) * 1000;
  const gcEveryMs = envNumber('BENCH_SOAK_GC_MINUTES', 5) * 60_000;
  const meanMs = (MIN_CALL_MS + MAX_CALL_MS) / 2;
  const periodMs = meanMs / concurrent;
  const runMs = minutes * 60_000;
  const calls = Math.floor(runMs / periodMs);
  const rand = prng(seed);
  const holds = Array.from({ length: calls }, () => MIN_CALL_MS + rand() * (MAX_CALL_MS - MIN_CALL_MS));
  const warmupMs = Math.max(runMs / 3, 300_000);
  // The early mark (10 % of the run, at least 5 min): the after-GC slope from there shows the
  // allocators' climb to their high-water mark, reported beside the verdict's figure.
  const earlyMs = Math.max(0.1 * runMs, 300_000);
  if (warmupMs + 120_000 > runMs) throw new RangeError(`--minutes ${minutes}: the run must outlast the warm-up (${warmupMs / 60_000} min) by 2 minutes; use at least 7 minutes`);
  log(`soak: ${minutes} min, ${calls} calls of ${MIN_CALL_MS / 1000}-${MAX_CALL_MS / 1000} s (uniform, seed ${seed}), one placed every ${periodMs} ms: ~${concurrent} up at a time; warm-up ${(warmupMs / 60_000).toFixed(1)} min; memory sampled every ${sampleMs / 1000} s`);
  const before = await d.memory();
  log(`  idle: ${memoryLine(before)}`);
  const setupFailuresBefore = await d.metric('callbridge_bridge_call_failures_total');
  const sipp = await startSipp({ bin: sippBin, sipPort: d.sipPort, audio, holdsMs: holds, periodMs, limit: concurrent * 3, timeoutMs: runMs + MAX_CALL_MS + 120_000 });
  const t0 = Date.now();
  const samples: Sample[] = [];
  /** Samples taken right after a full GC of every thread. */
  const afterGc: { t: number; rss: number; heap: number }[] = [];
  let nextGc = gcEveryMs;
  let atWarm: { sent: number; late: number } | undefined;
  let nextLog = 0;
  let lastMemory: Memory | undefined;
  try {
    while (sipp.running()) {
      if (!running(d.child)) throw new Error(`the daemon exited:\n${d.child.output()}`);
      const m = await d.memory();
      lastMemory = m;
      const t = (Date.now() - t0) / 1000;
      samples.push({ t, rss: m.process.rss, anon: m.process.anon, heap: heapOf(m), bridged: m.bridged, voiceRss: d.voice?.proc.pid !== undefined ? processMemory(d.voice.proc.pid).rss : Number.NaN });
      if (atWarm === undefined && t * 1000 >= warmupMs) {
        atWarm = { sent: await d.metric('callbridge_bridge_frames_sent_total'), late: await d.metric('callbridge_bridge_frames_late_total') };
        log(`  warm-up over at ${fmt(t / 60)} min: ${memoryLine(m)}`);
      }
      if (t * 1000 >= nextGc) {
        nextGc += gcEveryMs;
        const g = await d.memory(true);
        afterGc.push({ t: (Date.now() - t0) / 1000, rss: g.process.rss, heap: heapOf(g) });
        log(`  ${fmt(t / 60)} min, after a full GC: RSS ${fmt(g.process.rss)} MB, JS heaps ${fmt(heapOf(g))} MB (${g.threads.map((x) => `${x.thread} ${fmt(x.heapUsed)}/${fmt(x.heapTotal)} code ${fmt(x.codeUsed)}`).join(', ')})`);
      }
      if (t >= nextLog) {
        nextLog += 60;
        // Once a minute the anonymous memory by kind (/proc smaps): which of them grows.
        const p = (await d.memory(false, true)).process;
        const voice = d.voice?.proc.pid !== undefined ? processMemory(d.voice.proc.pid) : undefined;
        log(`  ${fmt(t / 60)} min: ${m.bridged} bridged, RSS ${fmt(m.process.rss)} MB (WASM ${fmt(p.wasm ?? Number.NaN)}, brk ${fmt(p.brk ?? Number.NaN)}, arenas ${fmt(p.arenas ?? Number.NaN)}, other ${fmt(p.other ?? Number.NaN)}, file ${fmt(p.file)}), JS heaps ${fmt(heapOf(m))} MB (${m.threads.map((x) => `${x.thread} ${fmt(x.heapUsed)}/${fmt(x.heapTotal)}`).join(', ')})${voice ? `; voice server RSS ${fmt(voice.rss)} MB (file ${fmt(voice.file)})` : ''}`);
      }
      await sleep(sampleMs - ((Date.now() - t0) % sampleMs));
    }
  } finally {
    await sipp.stop().catch(() => {});
  }
  const res = await sipp.done();
  if (lastMemory === undefined || samples.every((s) => s.bridged === 0)) throw new Error(`no call was bridged:\n${sipp.describe()}\n${d.child.output().slice(-3000)}`);
  // The calls' figures are counted as they end: let the last BYEs finish.
  await sleep(3000);
  const end = { sent: await d.metric('callbridge_bridge_frames_sent_total'), late: await d.metric('callbridge_bridge_frames_late_total') };
  const setupFailures = (await d.metric('callbridge_bridge_call_failures_total')) - setupFailuresBefore;
  const after = await d.memory();
  log(`  done: ${res.successful} calls completed, ${res.failed} failed (SIPp ${exitMeaning(res.code)}), ${setupFailures} refused by the daemon; ${memoryLine(after)}`);
  // Only the samples while calls were still being placed: the last 2 minutes drain.
  const steady = samples.filter((s) => s.t * 1000 >= warmupMs && s.t * 1000 <= runMs);
  if (steady.length < 10) throw new Error(`only ${steady.length} memory samples after the warm-up`);
  // Each minute's lowest sample of each series: a JS heap is a sawtooth between collections (a
  // sample at its top says when V8 last collected, not what it holds), RSS follows it a little.
  const floors = minuteFloors(steady);
  const fit = (k: keyof Sample) => slope(floors[k].map((p) => p.t / 3600), floors[k].map((p) => p.v));
  const rssSlope = fit('rss');
  const heapSlope = fit('heap');
  const anonSlope = fit('anon');
  const voiceSlope = fit('voiceRss');
  const gcSteady = afterGc.filter((g) => g.t * 1000 >= warmupMs && g.t * 1000 <= runMs);
  const gcFit = (k: 'rss' | 'heap') => (gcSteady.length >= 3 ? slope(gcSteady.map((g) => g.t / 3600), gcSteady.map((g) => g[k])) : Number.NaN);
  const rssAfterGcSlope = gcFit('rss');
  const gcEarly = afterGc.filter((g) => g.t * 1000 >= earlyMs && g.t * 1000 <= runMs);
  const rssAfterGcSlopeEarly = gcEarly.length >= 3 ? slope(gcEarly.map((g) => g.t / 3600), gcEarly.map((g) => g.rss)) : Number.NaN;
  const heapAfterGcSlope = gcFit('heap');
  const meanBridged = steady.reduce((a, s) => a + s.bridged, 0) / steady.length;
  const warm = atWarm ?? { sent: 0, late: 0 };
  const lateAfter = end.sent - warm.sent > 0 ? (end.late - warm.late) / (end.sent - warm.sent) : Number.NaN;
  const lateWarm = warm.sent > 0 ? warm.late / warm.sent : Number.NaN;
  const first = steady[0]!;
  const lastS = steady[steady.length - 1]!;
  log(`  after the warm-up: ${steady.length} samples over ${fmt((lastS.t - first.t) / 60)} min, ${fmt(meanBridged)} calls bridged on average; RSS ${fmt(first.rss)} -> ${fmt(lastS.rss)} MB (min ${fmt(Math.min(...steady.map((s) => s.rss)))}, max ${fmt(Math.max(...steady.map((s) => s.rss)))}), JS heaps ${fmt(first.heap)} -> ${fmt(lastS.heap)} MB`);
  log(`  frames sent to callers: ${end.sent - warm.sent} after the warm-up, ${fmt(100 * lateAfter, 3)} % over 5 ms late (warm-up: ${warm.sent}, ${fmt(100 * lateWarm, 3)} %)`);
  const figures: Figure[] = [
    { name: 'soak_rss_after_gc_slope', value: rssAfterGcSlope, unit: 'MB/h', baseline: TARGET_MB_PER_HOUR, note: `least-squares slope of the RSS right after each forced full GC after the warm-up (${gcSteady.length} samples, every ${gcEveryMs / 60_000} min); baseline: the target` },
    { name: 'soak_rss_after_gc_slope_early', value: rssAfterGcSlopeEarly, unit: 'MB/h', baseline: TARGET_MB_PER_HOUR, note: `the same from minute ${fmt(earlyMs / 60_000)} (${gcEarly.length} samples): with the allocators' climb to their high-water mark; baseline: the target` },
    { name: 'soak_heap_after_gc_slope', value: heapAfterGcSlope, unit: 'MB/h', baseline: TARGET_MB_PER_HOUR, note: 'the same for the JS heaps in use (every thread); baseline: the target' },
    { name: 'soak_rss_slope', value: rssSlope, unit: 'MB/h', baseline: TARGET_MB_PER_HOUR, note: `least-squares slope of each minute's lowest RSS after the warm-up (${floors.rss.length} minutes, ${fmt(meanBridged)} calls up on average); baseline: the target` },
    { name: 'soak_heap_slope', value: heapSlope, unit: 'MB/h', baseline: TARGET_MB_PER_HOUR, note: 'the same for the JS heaps in use (main + media threads, no forced GC); baseline: the target' },
    { name: 'soak_rss_anon_slope', value: anonSlope, unit: 'MB/h', baseline: TARGET_MB_PER_HOUR, note: 'the same for the anonymous RSS only (heaps, malloc, WASM; not code or the database\'s memory map); baseline: the target' },
    ...(d.voice ? [{ name: 'soak_voice_rss_slope', value: voiceSlope, unit: 'MB/h', baseline: TARGET_MB_PER_HOUR, note: 'the voice server\'s RSS slope (its sessions; with its database\'s memory map, which grows with the transcripts stored); baseline: the target' }] : []),
    { name: 'soak_calls_failed', value: res.failed + setupFailures, unit: 'calls', baseline: 1, note: `SIPp failed calls + calls the daemon could not bridge; baseline 1 (the ratio is the count), target 0` },
    { name: 'soak_frames_late_share', value: lateAfter, unit: 'share', baseline: lateWarm, note: 'frames sent > 5 ms late after the warm-up (/metrics); baseline: the same during the warm-up' },
    { name: 'soak_calls_completed', value: res.successful, unit: 'calls', baseline: calls, note: 'calls SIPp completed; baseline: calls placed' },
  ];
  printFigures(`bench/soak (${minutes} min, ~${concurrent} calls with churn, ${d.voice ? 'the bridge daemon, sessions on a voice server' : 'one daemon: bridge + eSpeak + local/echo'})`, figures);
  const verdict = (v: number) => (v < TARGET_MB_PER_HOUR ? 'met' : 'NOT MET');
  log(`target: RSS slope under ${TARGET_MB_PER_HOUR} MB/h after a full GC: ${verdict(rssAfterGcSlope)} (${fmt(rssAfterGcSlope, 2)}; minute floors without a forced GC: ${fmt(rssSlope, 2)}, ${verdict(rssSlope)}); calls failed 0: ${res.failed + setupFailures === 0 ? 'met' : 'NOT MET'}`);
}

export async function run(): Promise<void> {
  const sipp = sippAvailable();
  if (!sipp.ok) throw new Error(`bench/soak needs SIPp: ${sipp.reason}`);
  const floodCount = option('floods', 'BENCH_SOAK_FLOODS', 0);
  const minutes = option('minutes', 'BENCH_SOAK_MINUTES', 60);
  const cycleSecs = envNumber('BENCH_SOAK_CYCLE_SECS', 6);
  log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? '?'}, node ${process.version}, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}; ${sipp.version}`);
  log(`daemon: bench/soak-server.ts (${process.env.BENCH_SOAK_UPSTREAM !== '0' ? "a bridge only, as bench/bridge's A: sessions on bench/session-server.ts with its fake TTS (BENCH_SOAK_UPSTREAM=0: one daemon)" : 'bridge + sessions: eSpeak-NG, local/echo (BENCH_SOAK_UPSTREAM=0)'}), rtp.media_threads ${process.env.BENCH_SOAK_MEDIA_THREADS || 'default'} (BENCH_SOAK_MEDIA_THREADS), rtp.media_thread_young_gen_mb ${process.env.BENCH_SOAK_MEDIA_YOUNG_GEN_MB || 'default'} (BENCH_SOAK_MEDIA_YOUNG_GEN_MB); callers: SIPp plays a ${cycleSecs} s cycle (0.6 s speech) looped`);
  const dataDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-soak-'));
  const upstreamDir = process.env.BENCH_SOAK_UPSTREAM !== '0' ? mkdtempSync(join(tmpdir(), 'callbridge-bench-soak-b-')) : undefined;
  const children: Child[] = [];
  let daemon: Daemon | undefined;
  try {
    daemon = await startDaemon(dataDir, children, upstreamDir);
    const audio = callerAudio(cycleSecs);
    // A short warm-up: JIT, pools, eSpeak's first syntheses.
    log('warm-up: 20 calls for 15 s ...');
    const warm = await startSipp({ bin: sipp.bin, sipPort: daemon.sipPort, audio, holdsMs: Array(20).fill(15_000), periodMs: 100, limit: 20, timeoutMs: 120_000 });
    const w = await warm.done();
    await warm.stop();
    if (w.successful === 0) throw new Error(`warm-up: no call completed:\n${warm.describe()}\n${daemon.child.output().slice(-3000)}`);
    if (floodCount > 0) await floods(daemon, sipp.bin, audio, Math.round(floodCount));
    else await soak(daemon, sipp.bin, audio, minutes);
  } finally {
    for (const c of children.reverse()) await stopChild(c);
    rmSync(dataDir, { recursive: true, force: true });
    if (upstreamDir) rmSync(upstreamDir, { recursive: true, force: true });
  }
}
