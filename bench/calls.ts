/**
 * bench/calls: GET /v1/calls page latency (p50/p99) with 1,000,000 calls in the database, for no
 * filter, a page deep in the list, each filter of the service document, search (the trigram index;
 * 1-2 characters, common and rare) and a combination; baseline: the same requests against a
 * database of 1,000 calls filled the same way, in the same run.
 *
 *   1. two data directories are filled by bench/lib/calls-fill.ts (a child running the daemon's
 *      store code: migrations, triggers, indexes; one transaction, prepared statements): BENCH_CALLS
 *      (1,000,000) and BENCH_CALLS_BASELINE (1,000) calls over 4 organizations; the bench reads
 *      the largest (half of the calls);
 *   2. a daemon per directory (bin/callbridge.js start, SIP off), as an operator starts it;
 *   3. a warm-up (every query 20 times on both daemons), then per query BENCH_CALLS_REQUESTS
 *      (200) requests one after another on one
 *      keep-alive connection (fewer, but at least 50, once BENCH_CALLS_QUERY_SECS (6) have
 *      passed), against the large database then the baseline; latency from the send to the end
 *      of the body.
 *
 * Before the fills, calls_insert_per_cpu_sec: calls written by CallRepo.insert (a transaction per
 * call, synchronous off) per CPU second with every trigger, against the same inserts with the triggers of the 1-2 character
 * search dropped, its counters' (call_gram_counts) and its postings' (call_short_grams)
 * (bench/lib/calls-insert-rate.ts, BENCH_CALLS_INSERTS per round).
 *
 * Every response must be a 200 with `{ calls, pagination }` and the same page size on both
 * databases (a full page where the filter matches enough calls): otherwise run() throws.
 * Target: a page of the call history stays fast at 1,000,000 calls; reported, not asserted.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { formatValue, printFigures, table, type Figure } from './lib/result.ts';
import { envNumber } from './lib/env.ts';
import { freePort } from './lib/free-port.ts';
import { ROOT, startChild, stopChild, waitForLine, type Child } from './lib/child.ts';
import type { FillResult } from './lib/calls-fill.ts';
import type { InsertRate } from './lib/calls-insert-rate.ts';

const HOST = '127.0.0.1';
const MIN_SAMPLES = 50;
const WARMUP_ROUNDS = 20;

interface Db {
  label: string;
  dir: string;
  fill: FillResult;
  base: string;
  daemon?: Child;
}

/** bench/lib/calls-insert-rate.ts in a child: calls/s written with and without the 1-2 character search's triggers. */
async function insertRate(perRound: number, log: (s: string) => void): Promise<InsertRate> {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-bench-calls-insert-'));
  try {
    const out = join(dir, 'rate.json');
    const child = startChild('insert-rate', ['--import', 'tsx', join(ROOT, 'bench', 'lib', 'calls-insert-rate.ts'), dir, String(perRound), out], {});
    await waitForLine(child, /^MEASURED$/m, 10 * 60_000);
    await child.exited;
    const r = JSON.parse(readFileSync(out, 'utf8')) as InsertRate;
    log(`  inserts: ${formatValue(r.withGrams)} calls per CPU second (${formatValue(r.wallWithGrams)}/s of wall time), ${formatValue(r.withoutGrams)} (${formatValue(r.wallWithoutGrams)}/s) without the 1-2 character search's triggers (counters, postings)\n`);
    return r;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Fills a data directory in a child process; resolves with what it wrote. */
async function fillDir(label: string, n: number, log: (s: string) => void): Promise<Db> {
  const dir = mkdtempSync(join(tmpdir(), `callbridge-bench-calls-${label}-`));
  const out = join(dir, '..', `${dir.split('/').pop()}.fill.json`);
  const child = startChild(`fill-${label}`, ['--import', 'tsx', join(ROOT, 'bench', 'lib', 'calls-fill.ts'), dir, String(n), out], {});
  const t0 = performance.now();
  await waitForLine(child, /^FILLED$/m, 30 * 60_000);
  await child.exited;
  const fill = JSON.parse(readFileSync(out, 'utf8')) as FillResult;
  rmSync(out, { force: true });
  const bytes = ['callbridge.sqlite', 'callbridge.sqlite-wal'].reduce((sum, f) => sum + (statSync(join(dir, f), { throwIfNoEntry: false })?.size ?? 0), 0);
  log(`  ${label}: ${n.toLocaleString('en')} calls (${fill.orgCalls.toLocaleString('en')} in the measured organization) in ${((performance.now() - t0) / 1000).toFixed(1)} s, database ${(bytes / 1e6).toFixed(0)} MB\n`);
  return { label, dir, fill, base: '' };
}

async function startDaemon(db: Db): Promise<void> {
  const port = await freePort();
  db.daemon = startChild(`daemon-${db.label}`, [join(ROOT, 'bin', 'callbridge.js'), 'start'], {
    CALLBRIDGE_DATA_DIR: db.dir,
    CALLBRIDGE_HTTP_HOST: HOST,
    CALLBRIDGE_HTTP_PORT: String(port),
    CALLBRIDGE_SIP_ENABLED: 'false',
    CALLBRIDGE_LOG_LEVEL: 'warn',
  });
  db.base = `http://${HOST}:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (db.daemon.proc.exitCode !== null) throw new Error(`daemon ${db.label} exited:\n${db.daemon.output()}`);
    const ok = await fetch(`${db.base}/readyz`).then((r) => r.status === 200, () => false);
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`daemon ${db.label} not ready within 60 s:\n${db.daemon.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface Answer {
  ms: number;
  status: number;
  body: string;
}

function get(agent: http.Agent, url: string, key: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.get(url, { agent, headers: { authorization: `Bearer ${key}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.once('error', reject);
      res.once('end', () => resolve({ ms: performance.now() - t0, status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.setTimeout(30_000, () => req.destroy(new Error(`timeout: ${url}`)));
    req.once('error', reject);
  });
}

/** Nearest-rank percentile of ascending samples. */
const percentile = (sorted: number[], q: number): number => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;

interface Measured {
  p50: number;
  p99: number;
  /** pagination.total and the page's length, from the first answer. */
  total: number;
  page: number;
}

/** Requests one after another: n of them, or fewer when they take more than budgetMs (at least MIN_SAMPLES). */
async function measure(agent: http.Agent, db: Db, query: string, n: number, budgetMs: number): Promise<Measured> {
  const url = `${db.base}/v1/calls${query}`;
  const first = await get(agent, url, db.fill.key);
  if (first.status !== 200) throw new Error(`GET ${url} (${db.label}): ${first.status} ${first.body.slice(0, 300)}`);
  const body = JSON.parse(first.body) as { calls: unknown[]; pagination: { total: number } };
  for (let i = 0; i < 4; i++) await get(agent, url, db.fill.key);
  const samples: number[] = [];
  const until = performance.now() + budgetMs;
  for (let i = 0; i < n && (i < MIN_SAMPLES || performance.now() < until); i++) {
    const a = await get(agent, url, db.fill.key);
    if (a.status !== 200) throw new Error(`GET ${url} (${db.label}): ${a.status} ${a.body.slice(0, 300)}`);
    samples.push(a.ms);
  }
  samples.sort((x, y) => x - y);
  return { p50: percentile(samples, 0.5), p99: percentile(samples, 0.99), total: body.pagination.total, page: body.calls.length };
}

export async function run(): Promise<void> {
  const n = Math.round(envNumber('BENCH_CALLS', 1_000_000));
  const baseN = Math.round(envNumber('BENCH_CALLS_BASELINE', 1000));
  const requests = Math.round(envNumber('BENCH_CALLS_REQUESTS', 200));
  const budgetMs = envNumber('BENCH_CALLS_QUERY_SECS', 6) * 1000;
  const insertsPerRound = Math.round(envNumber('BENCH_CALLS_INSERTS', 10_000));
  const log = (s: string) => process.stdout.write(s);
  log(`machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
  log(`filling: ${n.toLocaleString('en')} calls, and ${baseN.toLocaleString('en')} for the baseline\n`);
  const dbs: Db[] = [];
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    log(`inserting: ${insertsPerRound.toLocaleString('en')} calls per round through CallRepo.insert, 6 rounds per variant\n`);
    const inserts = await insertRate(insertsPerRound, log);
    const base = await fillDir('baseline', baseN, log);
    dbs.push(base);
    const big = await fillDir('large', n, log);
    dbs.push(big);
    await startDaemon(big);
    await startDaemon(base);

    // The same queries on both; ids and numbers come from each database's own fill.
    const queries = (f: FillResult): Array<[string, string, string]> => {
      const month = (m: number, d: number) => new Date(Date.UTC(2025, m, d)).toISOString();
      const digits = f.samplePartyNumber.slice(-7);
      return [
        ['none', '', 'no filter (total: a counter)'],
        ['deep_page', `?page=${Math.max(1, Math.floor(f.orgCalls / 20 / 2))}`, 'the middle page of the list'],
        ['agent', `?agent_ids=${f.agentIds[1]}`, 'one agent'],
        ['agents3', `?agent_ids=${f.agentIds.slice(0, 3).join(',')}`, 'three agents, the busiest among them'],
        ['status_ended', '?status=ended', 'status ended'],
        ['status_in_progress', '?status=in_progress', 'status in_progress (the newest calls)'],
        ['source', '?source=api', 'source api'],
        ['dates', `?date_from=${month(2, 1)}&date_to=${month(2, 31)}`, 'one month of twelve (counted on the index)'],
        ['outbound', '?outbound=true', 'outbound'],
        ['tag', '?tag=vip', 'tag vip (counted on the index)'],
        ['outcome', '?outcome=transferred', 'outcome transferred'],
        ['search', `?search=${encodeURIComponent(digits)}`, `search "${digits}" (7 digits: trigram index)`],
        ['search_short', '?search=12', 'search "12" (2 characters, common)'],
        ['search_short_1', '?search=7', 'search "7" (1 character, common)'],
        ['search_short_rare', `?search=${encodeURIComponent('#')}`, 'search "#" (1 character, rare: guests)'],
        ['search_short_rare2', '?search=gu', 'search "gu" (2 characters, rare: guests)'],
        // Offset at 4 % of the organization's calls: page 1000 at half a million, page 1 at 1,000.
        ['search_short_deep', `?search=12&page=${Math.max(1, Math.floor((f.orgCalls * 0.04) / 20))}`, 'search "12", page 1000 (1 on the baseline)'],
        // A short digit string with another filter: no counter or postings serve it; counted on the other filter's index.
        ['search_short_status', '?search=12&status=ended', 'search "12" + status ended (counted on the status index)'],
        ['search_short_agent', `?search=12&agent_ids=${f.agentIds[0]}`, 'search "12" + one agent (counted on the agent index)'],
        ['combined', `?agent_ids=${f.agentIds[0]}&status=ended&outcome=ended_by_user&date_from=${month(2, 1)}&date_to=${month(5, 30)}`, 'agent + status + outcome + 4 months (counted on the index)'],
      ];
    };
    const bigQ = queries(big.fill);
    const baseQ = queries(base.fill);
    log(`measuring: ${requests} sequential requests per query and database (fewer, at least ${MIN_SAMPLES}, past ${budgetMs / 1000} s), one keep-alive connection\n`);
    // The daemons' JIT and caches warm up on every query first, so the first query measured
    // does not pay for it.
    for (const [i, [, q]] of bigQ.entries()) {
      for (let k = 0; k < WARMUP_ROUNDS; k++) {
        await get(agent, `${big.base}/v1/calls${q}`, big.fill.key);
        await get(agent, `${base.base}/v1/calls${baseQ[i]![1]}`, base.fill.key);
      }
    }
    const rows = [['query', 'p50 ms', 'p99 ms', 'total', 'share', 'baseline p50', 'baseline p99', 'baseline total', 'what']];
    const figures: Figure[] = [
      { name: 'calls_insert_per_cpu_sec', value: inserts.withGrams, unit: 'calls/cpu-s', baseline: inserts.withoutGrams, note: "CallRepo.insert, a transaction per call, synchronous off; baseline: the 1-2 character search's triggers (counters, postings) dropped" },
    ];
    for (const [i, [name, q, what]] of bigQ.entries()) {
      log(`  ${name}...\n`);
      const l = await measure(agent, big, q, requests, budgetMs);
      const b = await measure(agent, base, baseQ[i]![1], requests, budgetMs);
      // A query that found nothing, or pages of different sizes, would measure something else.
      if (l.total === 0 || b.total === 0 || l.page !== Math.min(20, l.total) || b.page !== Math.min(20, b.total)) {
        throw new Error(`${name}: unexpected answer (large: total ${l.total}, page ${l.page}; baseline: total ${b.total}, page ${b.page})`);
      }
      const share = `${formatValue((100 * l.total) / big.fill.orgCalls)}%`;
      rows.push([name, formatValue(l.p50), formatValue(l.p99), String(l.total), share, formatValue(b.p50), formatValue(b.p99), String(b.total), what]);
      figures.push({ name: `calls_list_${name}_p50`, value: l.p50, unit: 'ms', baseline: b.p50, note: `${what}; baseline ${baseN} calls` });
      figures.push({ name: `calls_list_${name}_p99`, value: l.p99, unit: 'ms', baseline: b.p99, note: `${what}; baseline ${baseN} calls` });
    }
    log(`\n${table(rows)}\n`);
    printFigures(`GET /v1/calls with ${n.toLocaleString('en')} calls (baseline: ${baseN.toLocaleString('en')})`, figures);
    const worst = Math.max(...figures.filter((f) => f.name.endsWith('_p99')).map((f) => f.value));
    log(`\nworst p99: ${formatValue(worst)} ms\n`);
  } finally {
    agent.destroy();
    for (const db of dbs) {
      if (db.daemon) await stopChild(db.daemon);
      rmSync(db.dir, { recursive: true, force: true });
    }
  }
}
