/**
 * bench/console: what an open operator console costs the daemon under load. The console's
 * live-calls page polls GET /v1/calls/live every 1.5 s while visible (web/pages/calls.js); this
 * measures the daemon's CPU with such a page open against the same load with no page open.
 *
 *   1. a daemon as `npm start` runs it (bin/callbridge.js start, --single-threaded-gc,
 *      MALLOC_ARENA_MAX=2), its own process, on a fresh data directory: its initial key, an agent
 *      of default settings (local STT, eSpeak-NG TTS, local/echo), an ACL trunk to it;
 *   2. SIPp places BENCH_CONSOLE_CALLS (40) calls at BENCH_CONSOLE_RATE (10) calls/s, each
 *      playing a 3 s cycle of PCMU (0.5 s tone, 2.5 s near-silence) looped on its own RTP socket,
 *      held for the whole run; the bench waits until GET /v1/calls/live lists all N;
 *   3. phases alternate closed, open, closed, open... (BENCH_CONSOLE_ROUNDS (2) pairs), each
 *      BENCH_CONSOLE_PHASE_SECS (20) s after a 2 s settle: closed = no page; open = a headless
 *      Chromium page signed in with the API key (the console's sign-in form, key kept in
 *      sessionStorage) on the calls page, opened during the settle, closed after the window.
 *
 * Per phase window: the daemon's CPU (utime + stime of /proc/<pid>/stat, all its threads) in ms
 * per second of wall time; its event-loop lag p50/p99 (prom-client's histogram, reset by the
 * /metrics scrape at the window's start and read at its end: both phases scrape the same); GET
 * /v1/calls/live requests the daemon counted (callbridge_http_requests_total, minus the bench's
 * own two checks) per second; in open phases each poll's duration as the page saw it (Resource
 * Timing) and the daemon's own time per request (its latency histogram, sum / count); after each
 * closed window, 5 sequential GETs of the same from the bench (the response time's baseline).
 * Figures: console_daemon_cpu_open (mean over open phases; baseline: mean over closed),
 * console_live_requests_per_sec (open; baseline: closed), console_live_response_ms_p50 (the
 * page's polls; baseline: the bench's GETs with no page open), console_live_daemon_ms_per_request
 * (no baseline), console_loop_lag_p99_open_ms (baseline: closed).
 *
 * Valid or it throws: all N calls live at the start and end of every phase, SIPp still running,
 * and every open phase saw the page poll (at least one request per 3 s of window, each a 200).
 * Reported, never asserted: the machine is shared, so read the closed phases' spread beside the
 * difference.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'puppeteer-core';
import { formatValue, printFigures, table, type Figure } from './lib/result.ts';
import { envNumber } from './lib/env.ts';
import { freePort } from './lib/free-port.ts';
import { cpuSeconds, ROOT, startChild, stopChild, type Child } from './lib/child.ts';
import { spawnCallerSipp, type CallerSipp } from './lib/caller-sipp.ts';
import { freeSipPort, sippAvailable, ulawTone } from '../test/interop/sipp.ts';
import { chromiumAvailable, launchBrowser, type TestBrowser } from '../test/helpers/browser.ts';

const HOST = '127.0.0.1';
const NUMBER = '+15550007001';
const SETTLE_MS = 2000;
const LIVE = '/v1/calls/live';
const PROBES = 5;

interface Daemon {
  child: Child;
  url: string;
  sipPort: number;
  key: string;
}

async function api(d: { url: string; key: string }, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(d.url + path, { method, headers: { authorization: `Bearer ${d.key}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : undefined;
}

async function startDaemon(dataDir: string): Promise<Daemon> {
  const [httpPort, sipPort] = [await freePort(), await freeSipPort()];
  // Its own RTP range, away from SIPp's -mp (20000-24000) and other benches' daemons.
  const rtpMin = 26000 + 2 * Math.floor(Math.random() * 1500);
  const child = startChild('console bench daemon', ['--single-threaded-gc', join(ROOT, 'bin', 'callbridge.js'), 'start'], {
    MALLOC_ARENA_MAX: '2',
    CALLBRIDGE_DATA_DIR: dataDir,
    CALLBRIDGE_HTTP_HOST: HOST,
    CALLBRIDGE_HTTP_PORT: String(httpPort),
    CALLBRIDGE_SIP_HOST: HOST,
    CALLBRIDGE_SIP_PORT: String(sipPort),
    CALLBRIDGE_SIP_TRANSPORTS: 'udp',
    CALLBRIDGE_RTP_ADDRESS: HOST,
    CALLBRIDGE_RTP_PORT_MIN: String(rtpMin),
    CALLBRIDGE_RTP_PORT_MAX: String(rtpMin + 999),
    CALLBRIDGE_LOG_LEVEL: 'warn',
  });
  const url = `http://${HOST}:${httpPort}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.proc.exitCode !== null) throw new Error(`daemon exited:\n${child.output()}`);
    if (await fetch(`${url}/readyz`).then((r) => r.status === 200, () => false)) break;
    if (Date.now() > deadline) throw new Error(`daemon not ready within 90 s:\n${child.output()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const key = readFileSync(join(dataDir, 'initial-api-key'), 'utf8').trim();
  return { child, url, sipPort, key };
}

/** The callers' audio: 0.5 s of tone then 2.5 s of near-silence, looped by SIPp. */
function callerAudio(): Buffer {
  return Buffer.concat([ulawTone(0.5, 440, 8000), ulawTone(2.5, 440, 8)]);
}

/** A metric's value from the daemon's /metrics text, summed over the lines that match. */
function metric(text: string, name: string, labelMatch = ''): number {
  let sum = 0;
  let seen = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
    if (labelMatch && !line.includes(labelMatch)) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    seen = true;
  }
  return seen ? sum : Number.NaN;
}

const scrape = (d: Daemon): Promise<string> => fetch(`${d.url}/metrics`).then((r) => r.text());
const liveRequests = (text: string) => metric(text, 'callbridge_http_requests_total', `route="${LIVE}"`) || 0;

async function liveCount(d: Daemon): Promise<number> {
  return ((await api(d, 'GET', LIVE)) as { calls: unknown[] }).calls.length;
}

async function openConsole(browser: TestBrowser, d: Daemon): Promise<{ page: Page; errors: string[] }> {
  const { page, record } = await browser.newPage();
  await page.goto(`${d.url}/console/`);
  await page.waitForSelector('#api-key');
  await page.type('#api-key', d.key);
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-testid=call-history]');
  return { page, errors: record.errors };
}

/** Durations (ms) of the page's GET /v1/calls/live requests since the last call, as Resource Timing saw them. */
async function pollDurations(page: Page): Promise<number[]> {
  // A string: it runs in the page, whose DOM types this program does not compile against.
  return page.evaluate(
    `(() => { const d = performance.getEntriesByType('resource').filter((e) => e.name.includes('${LIVE}')).map((e) => e.duration); performance.clearResourceTimings(); return d; })()`,
  ) as Promise<number[]>;
}

interface Phase {
  kind: 'closed' | 'open';
  cpuMsPerSec: number;
  liveReqPerSec: number;
  lagP50Ms: number;
  lagP99Ms: number;
  pollsMs: number[];
  /** The daemon's own time per live-calls request in the window (its latency histogram's sum / count), ms. */
  serverMs: number;
  /** Closed phases: PROBES sequential GET /v1/calls/live from this process after the window, ms each. */
  probesMs: number[];
}

async function runPhase(kind: Phase['kind'], d: Daemon, n: number, secs: number, browser: TestBrowser, sipp: CallerSipp): Promise<Phase> {
  const pid = d.child.proc.pid;
  let open: { page: Page; errors: string[] } | undefined;
  const settle = new Promise((r) => setTimeout(r, SETTLE_MS));
  if (kind === 'open') open = await openConsole(browser, d);
  await settle;
  const check = async (when: string) => {
    const live = await liveCount(d);
    if (live !== n || !sipp.running()) throw new Error(`${kind} phase ${when}: ${live} of ${n} calls live${sipp.running() ? '' : ', SIPp ended'}\n${sipp.describe()}`);
  };
  await check('start');
  if (open) await pollDurations(open.page);
  const m0 = await scrape(d);
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, secs * 1000));
  const cpu1 = cpuSeconds(pid);
  const wall = (performance.now() - t0) / 1000;
  const m1 = await scrape(d);
  await check('end');
  const polls = open ? await pollDurations(open.page) : [];
  const probesMs: number[] = [];
  for (let i = 0; open === undefined && i < PROBES; i++) {
    const t = performance.now();
    await liveCount(d);
    probesMs.push(performance.now() - t);
  }
  const histogram = (text: string, part: 'sum' | 'count') => metric(text, `callbridge_http_request_duration_seconds_${part}`, `route="${LIVE}"`) || 0;
  // The bench's own GET /v1/calls/live at the start falls before m0; none between m0 and m1.
  const liveReq = liveRequests(m1) - liveRequests(m0);
  if (open) {
    if (liveReq < secs / 3) throw new Error(`open phase: the page made ${liveReq} live-calls requests in ${secs} s (it polls every 1.5 s)`);
    if (open.errors.length > 0) throw new Error(`open phase: page errors: ${open.errors.join('; ')}`);
    await open.page.browserContext().close();
  } else if (liveReq !== 0) {
    throw new Error(`closed phase: ${liveReq} live-calls requests with no page open`);
  }
  return {
    kind,
    cpuMsPerSec: ((cpu1 - cpu0) * 1000) / wall,
    liveReqPerSec: liveReq / wall,
    lagP50Ms: metric(m1, 'callbridge_nodejs_eventloop_lag_p50_seconds') * 1000,
    lagP99Ms: metric(m1, 'callbridge_nodejs_eventloop_lag_p99_seconds') * 1000,
    pollsMs: polls,
    serverMs: (1000 * (histogram(m1, 'sum') - histogram(m0, 'sum'))) / (histogram(m1, 'count') - histogram(m0, 'count')),
    probesMs,
  };
}

const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s[Math.floor((s.length - 1) / 2)]!;
};

export async function run(): Promise<void> {
  const n = Math.round(envNumber('BENCH_CONSOLE_CALLS', 40));
  const rate = envNumber('BENCH_CONSOLE_RATE', 10);
  const secs = envNumber('BENCH_CONSOLE_PHASE_SECS', 20);
  const rounds = Math.round(envNumber('BENCH_CONSOLE_ROUNDS', 2));
  const log = (s: string) => process.stdout.write(s);
  const sipp = sippAvailable();
  if (!sipp.ok) throw new Error(`bench/console needs SIPp: ${sipp.reason}`);
  const chromium = chromiumAvailable();
  if (!chromium.ok) throw new Error(`bench/console needs chromium: ${chromium.reason}`);
  log(`machine: ${cpus().length} CPUs, node ${process.version}, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
  log(`${n} calls (BENCH_CONSOLE_CALLS) at ${rate}/s (BENCH_CONSOLE_RATE); ${rounds} x (closed, open) (BENCH_CONSOLE_ROUNDS), ${secs} s each (BENCH_CONSOLE_PHASE_SECS) after ${SETTLE_MS} ms settle\n`);
  const dataDir = mkdtempSync(join(tmpdir(), 'callbridge-bench-console-'));
  let daemon: Daemon | undefined;
  let callers: CallerSipp | undefined;
  let browser: TestBrowser | undefined;
  try {
    daemon = await startDaemon(dataDir);
    const agent = await api(daemon, 'POST', '/v1/agents', { name: 'bench console', first_message: 'Hello, you are through to the console bench.' });
    const trunk = await api(daemon, 'POST', '/v1/sip-trunks', { pbx: 'generic', name: 'bench console acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] });
    await api(daemon, 'POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER });
    browser = await launchBrowser('bench-console');
    const phases = 2 * rounds;
    const holdMs = Math.ceil((n / rate) * 1000 + 20_000 + phases * (secs * 1000 + SETTLE_MS + 8000));
    callers = spawnCallerSipp({
      bin: sipp.bin, realtime: 0, remote: `${HOST}:${daemon.sipPort}`, number: NUMBER, media: callerAudio(),
      csv: Array.from({ length: n }, (_, i) => `+1555300${String(i).padStart(4, '0')};0`),
      calls: n, periodMs: 1000 / rate, holdMs, timeoutMs: holdMs + 60_000,
    });
    const upBy = Date.now() + (n / rate) * 1000 + 30_000;
    while ((await liveCount(daemon)) < n) {
      if (!callers.running()) throw new Error(`SIPp ended before all calls were up:\n${callers.describe()}`);
      if (Date.now() > upBy) throw new Error(`not all ${n} calls up in time (${await liveCount(daemon)}):\n${callers.describe()}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    log(`all ${n} calls up; measuring\n`);
    const results: Phase[] = [];
    for (let i = 0; i < phases; i++) {
      const p = await runPhase(i % 2 === 0 ? 'closed' : 'open', daemon, n, secs, browser, callers);
      results.push(p);
      log(`  ${p.kind}: ${p.cpuMsPerSec.toFixed(1)} ms CPU/s, ${p.liveReqPerSec.toFixed(2)} live req/s, loop lag p50 ${p.lagP50Ms.toFixed(1)} p99 ${p.lagP99Ms.toFixed(1)} ms${p.pollsMs.length ? `, poll p50 ${median(p.pollsMs).toFixed(1)} ms (${p.pollsMs.length}), daemon ${p.serverMs.toFixed(2)} ms per request` : `, probe p50 ${median(p.probesMs).toFixed(1)} ms`}\n`);
    }
    const open = results.filter((p) => p.kind === 'open');
    const closed = results.filter((p) => p.kind === 'closed');
    const rows = [['phase', 'cpu ms/s', 'live req/s', 'lag p50 ms', 'lag p99 ms', 'GET p50 ms', 'daemon ms/req']];
    for (const p of results) {
      const get = p.pollsMs.length ? median(p.pollsMs) : median(p.probesMs);
      rows.push([p.kind, formatValue(p.cpuMsPerSec), formatValue(p.liveReqPerSec), formatValue(p.lagP50Ms), formatValue(p.lagP99Ms), formatValue(get), p.kind === 'open' ? formatValue(p.serverMs) : '-']);
    }
    log(`\n${table(rows)}\n`);
    const polls = open.flatMap((p) => p.pollsMs);
    const figures: Figure[] = [
      { name: 'console_daemon_cpu_open', value: mean(open.map((p) => p.cpuMsPerSec)), unit: 'ms/s', baseline: mean(closed.map((p) => p.cpuMsPerSec)), note: `daemon CPU with the live-calls page open, ${n} calls; baseline: no page` },
      { name: 'console_live_requests_per_sec', value: mean(open.map((p) => p.liveReqPerSec)), unit: 'req/s', baseline: mean(closed.map((p) => p.liveReqPerSec)), note: 'GET /v1/calls/live counted by the daemon; baseline: no page' },
      { name: 'console_live_response_ms_p50', value: median(polls), unit: 'ms', baseline: median(closed.flatMap((p) => p.probesMs)), note: `the page's polls (Resource Timing), ${polls.length}; baseline: ${PROBES} GETs from the bench per closed phase` },
      { name: 'console_live_daemon_ms_per_request', value: mean(open.map((p) => p.serverMs)), unit: 'ms', baseline: mean(open.map((p) => p.serverMs)), note: "the daemon's own time per poll (its latency histogram); no baseline" },
      { name: 'console_loop_lag_p99_open_ms', value: mean(open.map((p) => p.lagP99Ms)), unit: 'ms', baseline: mean(closed.map((p) => p.lagP99Ms)), note: "daemon event-loop lag p99 (prom-client), mean of phases; baseline: no page" },
    ];
    printFigures(`bench/console (${n} calls, ${rounds} x closed/open, ${secs} s each)`, figures);
  } finally {
    if (browser) await browser.close().catch(() => {});
    if (callers) await callers.stop();
    if (daemon) await stopChild(daemon.child);
    rmSync(dataDir, { recursive: true, force: true });
  }
}
