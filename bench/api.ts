/**
 * bench/api: requests per second and p50/p99 latency of the REST API for `GET` and `PATCH
 * /v1/agents/:id`, beside a baseline measured in the same run: a bare Fastify route returning a
 * constant of the same size (bench/baseline-server.ts).
 *
 * Both servers run as child processes on 127.0.0.1; the load comes from this process.
 *   1. saturation: autocannon, BENCH_CONNECTIONS connections (10), pipelining 1, for
 *      BENCH_DURATION_SECS (8) each after a short warm-up: daemon GET, baseline GET, daemon PATCH,
 *      interleaved in BENCH_ROUNDS (2) rounds (PATCH's baseline is the baseline's GET: there is
 *      no cheaper "bare" write to compare with).
 *   2. fixed rate: BENCH_RATE (1000) GET requests per second, open loop and evenly spaced,
 *      against the daemon then the baseline; p50/p99 latency.
 *
 * Targets: agent GET >= half the baseline's throughput; p99 < 5 ms at 1,000 req/s.
 * Any non-2xx response or connection error invalidates the run: reported, then run() throws.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer, type AddressInfo } from 'node:net';
import { createSocket } from 'node:dgram';
import http from 'node:http';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { EventEmitter } from 'node:events';
import { formatValue, printFigures, ratio, table, type Figure } from './lib/result.ts';
import { envNumber } from './lib/env.ts';
import { cpuSeconds, ROOT, startChild, stopChild, waitUntil, type Child } from './lib/child.ts';

const HOST = '127.0.0.1';

// ---------------------------------------------------------------------------------------------
// autocannon (CommonJS, no bundled types): the part of its API used here.

interface AutocannonOptions {
  url: string;
  connections?: number;
  pipelining?: number;
  duration?: number;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  overallRate?: number;
}
interface AutocannonHistogram {
  average: number;
  total: number;
  p50: number;
  p99: number;
}
interface AutocannonResult {
  requests: AutocannonHistogram;
  latency: AutocannonHistogram;
  duration: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  statusCodeStats: Record<string, { count: number }>;
}
type AutocannonInstance = EventEmitter & PromiseLike<AutocannonResult>;
const autocannon = createRequire(import.meta.url)('autocannon') as (opts: AutocannonOptions) => AutocannonInstance;

/** A port free on 127.0.0.1 for TCP (and UDP when asked), found by binding port 0 and closing. */
async function freePort(udpToo = false): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = await new Promise<number>((resolve, reject) => {
      const srv = createServer();
      srv.once('error', reject);
      srv.listen(0, HOST, () => {
        const p = (srv.address() as AddressInfo).port;
        srv.close(() => resolve(p));
      });
    });
    if (!udpToo) return port;
    const udpFree = await new Promise<boolean>((resolve) => {
      const sock = createSocket('udp4');
      sock.once('error', () => resolve(false));
      sock.bind(port, HOST, () => sock.close(() => resolve(true)));
    });
    if (udpFree) return port;
  }
  throw new Error('no free port found on 127.0.0.1');
}

// ---------------------------------------------------------------------------------------------
// Load and its figures.

interface Target {
  url: string;
  /** The server process, whose CPU time per request is measured (Linux /proc). */
  pid?: number;
  method: 'GET' | 'PATCH';
  headers?: Record<string, string>;
  body?: string;
}

interface Measurement {
  label: string;
  rps: number;
  p50: number;
  p99: number;
  completed: number;
  non2xx: number;
  errors: number;
  /** CPU time (user + system) the server process spent per completed request, microseconds. */
  cpuUsPerReq?: number;
  /** Fixed-rate runs: the rate asked for, and p99 / max delay of a send behind its schedule. */
  askedRate?: number;
  sendLagP99Ms?: number;
  sendLagMaxMs?: number;
}

/** Nearest-rank percentile of ascending samples. */
function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i] as number;
}

interface Slice {
  samples: number[];
  completed: number;
  seconds: number;
  non2xx: number;
  errors: number;
  /** CPU seconds of the server process during the slice; NaN where /proc is not there. */
  cpuSecs: number;
}

/**
 * One closed-loop slice at full speed with autocannon. Latencies come from autocannon's
 * per-response event (sub-millisecond; its own histogram keeps whole milliseconds).
 */
async function loadSlice(target: Target, connections: number, seconds: number): Promise<Slice> {
  const opts: AutocannonOptions = { url: target.url, method: target.method, connections, pipelining: 1, duration: seconds };
  if (target.headers) opts.headers = target.headers;
  if (target.body !== undefined) opts.body = target.body;
  const samples: number[] = [];
  const cpu0 = cpuSeconds(target.pid);
  const instance = autocannon(opts);
  instance.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) => {
    samples.push(ms);
  });
  const res = await instance;
  const cpuSecs = cpuSeconds(target.pid) - cpu0;
  return { samples, completed: res.requests.total, seconds: res.duration, non2xx: res.non2xx, errors: res.errors + res.timeouts, cpuSecs };
}

/**
 * Saturation of several targets, interleaved: each round gives every target one slice of
 * durationSecs / rounds, so a neighbour process that loads the machine for a while weighs on all
 * of them alike instead of on whichever ran then. Each target gets its warm-up first.
 */
async function saturate(
  runs: { label: string; target: Target; warmupSecs: number }[],
  connections: number,
  durationSecs: number,
  rounds: number,
  progress: (what: string) => void,
): Promise<Measurement[]> {
  for (const r of runs) {
    progress(`warm-up ${r.label} (${r.warmupSecs} s)`);
    if (r.warmupSecs > 0) await loadSlice(r.target, connections, r.warmupSecs);
  }
  const slices: Slice[][] = runs.map(() => []);
  const sliceSecs = Math.max(1, Math.round(durationSecs / rounds));
  for (let round = 1; round <= rounds; round++) {
    for (const [i, r] of runs.entries()) {
      progress(`${r.label}, saturated, round ${round}/${rounds} (${sliceSecs} s)`);
      slices[i]?.push(await loadSlice(r.target, connections, sliceSecs));
    }
  }
  return runs.map((r, i) => {
    const parts = slices[i] ?? [];
    const sum = (f: (s: Slice) => number) => parts.reduce((acc, s) => acc + f(s), 0);
    const sorted = Float64Array.from(parts.flatMap((s) => s.samples)).sort();
    return {
      label: r.label,
      rps: sum((s) => s.completed) / sum((s) => s.seconds),
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      completed: sum((s) => s.completed),
      non2xx: sum((s) => s.non2xx),
      errors: sum((s) => s.errors),
      cpuUsPerReq: (sum((s) => s.cpuSecs) * 1e6) / sum((s) => s.completed),
    };
  });
}

/**
 * Open loop at a fixed rate: request i is sent at start + i/rate whatever the earlier ones are
 * doing (autocannon's overallRate sends each second's quota in one burst at the start of the
 * second, which measures a burst, not a rate). Keep-alive sockets, as many as needed. Latency:
 * from the send to the end of the response body.
 */
async function fixedRate(label: string, target: Target, rate: number, durationSecs: number, agent: http.Agent): Promise<Measurement> {
  const url = new URL(target.url);
  const total = Math.round(rate * durationSecs);
  const samples = new Float64Array(total);
  let completed = 0;
  let non2xx = 0;
  let errors = 0;
  let sent = 0;
  const lags = new Float64Array(total);
  const start = performance.now();
  let finished!: () => void;
  const done = new Promise<void>((resolve) => (finished = resolve));
  const settle = () => {
    if (sent === total && completed + errors === total) finished();
  };
  /** Sends request i (0-based), due at start + i / rate. Each request ends once: response or error. */
  const fire = (i: number) => {
    const t0 = performance.now();
    lags[i] = t0 - (start + (i * 1000) / rate);
    let ended = false;
    const fail = () => {
      if (ended) return;
      ended = true;
      errors++;
      settle();
    };
    const req = http.request({ agent, host: url.hostname, port: url.port, path: url.pathname, method: target.method, headers: target.headers }, (res) => {
      res.resume();
      res.once('error', fail);
      res.once('end', () => {
        if (ended) return;
        ended = true;
        samples[completed++] = performance.now() - t0;
        if ((res.statusCode ?? 0) < 200 || (res.statusCode ?? 0) > 299) non2xx++;
        settle();
      });
    });
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
    req.once('error', fail);
    req.end(target.body);
  };
  const tick = () => {
    const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    while (sent < due) fire(sent++);
    if (sent < total) setTimeout(tick, 1);
  };
  tick();
  await done;
  const elapsed = (performance.now() - start) / 1000;
  const sorted = samples.subarray(0, completed).sort();
  lags.sort();
  return {
    label,
    rps: completed / elapsed,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    completed,
    non2xx,
    errors,
    askedRate: rate,
    sendLagP99Ms: percentile(lags, 0.99),
    sendLagMaxMs: lags[lags.length - 1] ?? 0,
  };
}

// ---------------------------------------------------------------------------------------------

export async function run(): Promise<void> {
  const durationSecs = envNumber('BENCH_DURATION_SECS', 8);
  const connections = Math.round(envNumber('BENCH_CONNECTIONS', 10));
  const rate = Math.round(envNumber('BENCH_RATE', 1000));
  const rounds = Math.round(envNumber('BENCH_ROUNDS', 2));
  const warmupSecs = Math.min(2, durationSecs);

  const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');
  process.stdout.write(`machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}, load average ${load()}\n`);
  const dataDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-'));
  const children: Child[] = [];
  const killAll = () => {
    for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null && c.proc.pid !== undefined) process.kill(c.proc.pid, 'SIGKILL');
  };
  process.once('exit', killAll);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  try {
    // The daemon, as an operator starts it.
    const port = await freePort();
    const sipPort = await freePort(true);
    const daemon = startChild('daemon', [join(ROOT, 'bin', 'callbridge.js'), 'start'], {
      CALLBRIDGE_DATA_DIR: dataDir,
      CALLBRIDGE_HTTP_HOST: HOST,
      CALLBRIDGE_HTTP_PORT: String(port),
      CALLBRIDGE_SIP_HOST: HOST,
      CALLBRIDGE_SIP_PORT: String(sipPort),
      CALLBRIDGE_LOG_LEVEL: 'warn',
    });
    children.push(daemon);
    const base = `http://${HOST}:${port}`;
    await waitUntil(daemon, 'GET /readyz 200', 30_000, async () => (await fetch(`${base}/readyz`)).status === 200);
    const key = readFileSync(join(dataDir, 'initial-api-key'), 'utf8').trim();
    const auth = { authorization: `Bearer ${key}` };
    const created = await fetch(`${base}/v1/agents`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bench' }) });
    if (created.status !== 201) throw new Error(`POST /v1/agents: ${created.status} ${await created.text()}`);
    const agentJson = await created.text();
    const agentId = (JSON.parse(agentJson) as { id: string }).id;
    const agentUrl = `${base}/v1/agents/${agentId}`;

    // The baseline returns the very agent JSON the daemon serves, so both move the same bytes.
    const baseline = startChild('baseline', ['--import', 'tsx', join(ROOT, 'bench', 'baseline-server.ts')], {
      BENCH_BASELINE_HOST: HOST,
      BENCH_BASELINE_PORT: '0',
      BENCH_BASELINE_BODY: agentJson,
    });
    children.push(baseline);
    let baselinePort = 0;
    baseline.proc.stdout?.on('data', (chunk: Buffer) => {
      const m = /LISTENING (\d+)/.exec(chunk.toString('utf8'));
      if (m) baselinePort = Number(m[1]);
    });
    await waitUntil(baseline, 'LISTENING line', 30_000, async () => baselinePort > 0);
    const baselineUrl = `http://${HOST}:${baselinePort}/v1/agents/${agentId}`;

    const check = await fetch(agentUrl, { headers: auth });
    const checkBody = await check.text();
    const baseBody = await (await fetch(baselineUrl)).text();
    if (check.status !== 200) throw new Error(`GET ${agentUrl}: ${check.status} ${checkBody}`);
    process.stdout.write(
      `daemon pid ${daemon.proc.pid} on ${base}, baseline pid ${baseline.proc.pid} on port ${baselinePort}; ` +
        `response bodies ${Buffer.byteLength(checkBody)} B (daemon) and ${Buffer.byteLength(baseBody)} B (baseline)\n` +
        `saturation: ${connections} connections, pipelining 1, ${durationSecs} s each in ${rounds} interleaved rounds after a warm-up; ` +
        `fixed rate: ${rate} req/s for ${durationSecs} s after 1 s warm-up\n`,
    );

    const get: Target = { url: agentUrl, method: 'GET', headers: auth, pid: daemon.proc.pid };
    const patch: Target = {
      url: agentUrl,
      method: 'PATCH',
      pid: daemon.proc.pid,
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'You are the benchmark agent. Answer in one short sentence.' }),
    };
    const bare: Target = { url: baselineUrl, method: 'GET', pid: baseline.proc.pid };

    const progress = (what: string) => process.stdout.write(`  measuring ${what}...\n`);
    const [getSat, baseSat, patchSat] = (await saturate(
      [
        { label: 'daemon GET', target: get, warmupSecs },
        { label: 'baseline GET', target: bare, warmupSecs },
        { label: 'daemon PATCH', target: patch, warmupSecs: Math.min(1, warmupSecs) },
      ],
      connections,
      durationSecs,
      rounds,
      progress,
    )) as [Measurement, Measurement, Measurement];
    progress(`daemon GET at ${rate} req/s`);
    await fixedRate('warm-up', get, rate, 1, agent);
    const getRate = await fixedRate(`daemon GET @${rate}/s`, get, rate, durationSecs, agent);
    progress(`baseline GET at ${rate} req/s`);
    await fixedRate('warm-up', bare, rate, 1, agent);
    const baseRate = await fixedRate(`baseline GET @${rate}/s`, bare, rate, durationSecs, agent);

    const all = [getSat, baseSat, patchSat, getRate, baseRate];
    const rows = [['run', 'req/s', 'p50 ms', 'p99 ms', 'server CPU us/req', 'completed', 'non-2xx', 'errors', 'send lag p99/max ms']];
    for (const m of all) {
      rows.push([m.label, formatValue(m.rps), formatValue(m.p50), formatValue(m.p99), m.cpuUsPerReq === undefined ? '' : formatValue(m.cpuUsPerReq), String(m.completed), String(m.non2xx), String(m.errors), m.sendLagMaxMs === undefined ? '' : `${formatValue(m.sendLagP99Ms ?? 0)} / ${formatValue(m.sendLagMaxMs)}`]);
    }
    process.stdout.write(`\n${table(rows)}\n`);

    const measured: Figure[] = [
      { name: 'api_get_rps', value: getSat.rps, unit: 'req/s', baseline: baseSat.rps, note: `GET agent, ${connections} connections` },
      { name: 'api_get_p50', value: getSat.p50, unit: 'ms', baseline: baseSat.p50, note: 'GET agent, saturated' },
      { name: 'api_get_p99', value: getSat.p99, unit: 'ms', baseline: baseSat.p99, note: 'GET agent, saturated' },
      { name: 'api_get_cpu_per_req', value: getSat.cpuUsPerReq ?? Number.NaN, unit: 'us', baseline: baseSat.cpuUsPerReq ?? Number.NaN, note: 'server CPU time per GET, saturated' },
      { name: 'api_patch_rps', value: patchSat.rps, unit: 'req/s', baseline: baseSat.rps, note: 'PATCH agent; baseline = bare GET' },
      { name: 'api_patch_p50', value: patchSat.p50, unit: 'ms', baseline: baseSat.p50, note: 'PATCH agent, saturated; baseline = bare GET' },
      { name: 'api_patch_p99', value: patchSat.p99, unit: 'ms', baseline: baseSat.p99, note: 'PATCH agent, saturated; baseline = bare GET' },
      { name: 'api_patch_cpu_per_req', value: patchSat.cpuUsPerReq ?? Number.NaN, unit: 'us', baseline: baseSat.cpuUsPerReq ?? Number.NaN, note: 'server CPU time per PATCH; baseline = bare GET' },
      { name: `api_get_p50_at_${rate}rps`, value: getRate.p50, unit: 'ms', baseline: baseRate.p50, note: `GET agent at a fixed ${rate} req/s` },
      { name: `api_get_p99_at_${rate}rps`, value: getRate.p99, unit: 'ms', baseline: baseRate.p99, note: `GET agent at a fixed ${rate} req/s` },
    ];

    // CPU figures need Linux /proc; a figure that could not be measured is left out, not printed as NaN.
    const figures = measured.filter((f) => Number.isFinite(f.value) && Number.isFinite(f.baseline));

    const getRatio = ratio(getSat.rps, baseSat.rps);
    const verdict = (ok: boolean) => (ok ? 'met' : 'NOT MET');
    process.stdout.write(
      `\ntargets:\n` +
        `  GET throughput >= 0.5 x baseline: ${verdict(getRatio >= 0.5)} (ratio ${getRatio})\n` +
        `  GET p99 < 5 ms at 1000 req/s: ${rate === 1000 ? `${verdict(getRate.p99 < 5)} (${formatValue(getRate.p99)} ms)` : `not measured (BENCH_RATE=${rate})`}\n`,
    );
    for (const m of [getRate, baseRate]) {
      if (m.askedRate !== undefined && m.rps < m.askedRate * 0.95) {
        process.stdout.write(`  WARNING: ${m.label} completed only ${formatValue(m.rps)} req/s of ${m.askedRate} asked: the server (or this load generator) could not keep the rate\n`);
      }
    }

    for (const m of [getRate, baseRate]) {
      if ((m.sendLagP99Ms ?? 0) > 2) {
        process.stdout.write(`  WARNING: ${m.label}: sends ran late behind schedule (p99 ${formatValue(m.sendLagP99Ms ?? 0)} ms): this process was short of CPU, so the machine was busy; treat the fixed-rate latencies as suspect and rerun on a quiet machine\n`);
      }
    }
    process.stdout.write(`  load average after the run: ${load()}\n`);

    const bad = all.filter((m) => m.non2xx > 0 || m.errors > 0);
    for (const m of bad) process.stdout.write(`\nWARNING: ${m.label}: ${m.non2xx} non-2xx responses, ${m.errors} connection errors or timeouts; the figures are not valid\n`);
    process.stdout.write(`non-2xx responses: ${all.reduce((s, m) => s + m.non2xx, 0)}, connection errors: ${all.reduce((s, m) => s + m.errors, 0)}\n`);

    printFigures('bench/api figures (ratio = value / baseline; for latency lower is better)', figures);
    if (bad.length > 0) throw new Error(`bench/api: non-2xx responses or errors in ${bad.map((m) => m.label).join(', ')}`);
  } finally {
    agent.destroy();
    for (const c of children.reverse()) await stopChild(c).catch(() => undefined);
    process.removeListener('exit', killAll);
    rmSync(dataDir, { recursive: true, force: true });
  }
}
