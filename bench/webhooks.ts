/**
 * bench/webhooks: what the webhook outbox costs (docs/webhooks.md).
 *
 * 1. Delivery rate: events delivered per second through the outbox, signed, by a daemon
 *    (bin/callbridge.js start as npm start runs it: --single-threaded-gc, MALLOC_ARENA_MAX=2; SIP
 *    off, webhooks.allow_private_destinations true, webhooks.max_in_flight
 *    BENCH_WEBHOOKS_MAX_IN_FLIGHT (16)) to a receiver in this process that answers 200 at once.
 *    A child (bench/lib/webhooks-fill.ts) first writes BENCH_WEBHOOKS_CALLS (2,000) calls through
 *    the store into the daemon's data directory, each as the daemon writes one (insert, answered,
 *    end: three outbox rows for the one subscribed endpoint); then the daemon starts and its
 *    deliverer drains the outbox. Baseline: the same bodies POSTed unsigned to the same receiver
 *    by a child process with the same concurrency, the deliverer's own HTTP code and the same node
 *    flags, without the store (bench/lib/webhooks-plain-sender.ts). Rate = requests / time from
 *    the receiver's first request to its last; also the sender's CPU per event (the daemon's whole
 *    process against the plain sender's). BENCH_WEBHOOKS_ROUNDS (3) rounds, each with a fresh
 *    fill, the order of the two flipping every round; figures are the best round of each (on a
 *    shared machine the best is the one least disturbed).
 *    Validity (else run() throws): every event arrives, once, its signature verified with the npm
 *    library standardwebhooks (as a receiver would); per call, started, answered, ended in order.
 * 2. Call cost: a call's three transactions with one subscribed endpoint against none, per call
 *    (bench/lib/webhooks-call-cost.ts, BENCH_WEBHOOKS_COST_CALLS (400) calls per round): SQLite
 *    CPU and wall time, and PostgreSQL wall time on a throwaway server (test/helpers/postgres.ts)
 *    when one is installed and BENCH_WEBHOOKS_POSTGRES is not 0.
 *
 * Reported, not asserted.
 */
import http from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Webhook } from 'standardwebhooks';
import { formatValue, printFigures, table, type Figure } from './lib/result.ts';
import { envNumber } from './lib/env.ts';
import { freePort } from './lib/free-port.ts';
import { ROOT, cpuSeconds, startChild, stopChild, waitForLine, type Child } from './lib/child.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../test/helpers/postgres.ts';
import type { WebhooksFill } from './lib/webhooks-fill.ts';
import type { CallCost } from './lib/webhooks-call-cost.ts';

const HOST = '127.0.0.1';
/** How long one delivery run may take before the bench gives up on it. */
const RUN_TIMEOUT_MS = 5 * 60_000;

const log = (s: string) => process.stdout.write(s);
const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');

interface Request {
  headers: Record<string, string>;
  body: string;
}

/** One run's requests as the receiver saw them. */
interface Reception {
  requests: Request[];
  /** performance.now() of the first and the last request's end. */
  first: number;
  last: number;
  /** The sender's CPU seconds at the first and the last request. */
  cpuFirst: number;
  cpuLast: number;
}

/**
 * The receiver: answers 200 with no body as soon as a request's body is in, keeps the request
 * for the checks after the run (nothing is verified while it is timed).
 */
class Receiver {
  readonly #server = http.createServer((req, res) => this.#onRequest(req, res));
  #run: { expected: number; senderPid: number | undefined; reception: Reception; done: (r: Reception) => void } | undefined;
  url = '';

  async listen(): Promise<void> {
    // A keep-alive longer than the senders' idle sockets: the server must not close one under them.
    this.#server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => this.#server.listen(0, HOST, resolve));
    this.url = `http://${HOST}:${(this.#server.address() as AddressInfo).port}/hooks`;
  }

  /** Resolves once `expected` requests have arrived. */
  expect(expected: number, senderPid: number | undefined): Promise<Reception> {
    return new Promise<Reception>((done) => {
      this.#run = { expected, senderPid, done, reception: { requests: [], first: Number.NaN, last: Number.NaN, cpuFirst: Number.NaN, cpuLast: Number.NaN } };
    });
  }

  #onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      res.writeHead(200, { 'content-length': '0' }).end();
      const run = this.#run;
      if (!run) return;
      const r = run.reception;
      const now = performance.now();
      if (r.requests.length === 0) {
        r.first = now;
        r.cpuFirst = cpuSeconds(run.senderPid);
      }
      r.requests.push({ headers: req.headers as Record<string, string>, body: Buffer.concat(chunks).toString('utf8') });
      if (r.requests.length === run.expected) {
        r.last = now;
        r.cpuLast = cpuSeconds(run.senderPid);
        this.#run = undefined;
        run.done(r);
      }
    });
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

interface Rate {
  perSec: number;
  cpuUsPerEvent: number;
}

const rateOf = (r: Reception): Rate => ({
  perSec: (r.requests.length - 1) / ((r.last - r.first) / 1000),
  cpuUsPerEvent: ((r.cpuLast - r.cpuFirst) * 1e6) / (r.requests.length - 1),
});

function withTimeout<T>(p: Promise<T>, what: string, child: Child): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${RUN_TIMEOUT_MS / 1000} s:\n${child.output()}`)), RUN_TIMEOUT_MS);
  });
  // A child that exits first fails the run (the receiver saw its last request before the sender
  // could exit, so a normal exit never wins the race); handled either way, never left unhandled.
  const exited = child.exited.then((code): never => {
    throw new Error(`${child.name} exited (${code}) before ${what} was done:\n${child.output()}`);
  });
  exited.catch(() => undefined);
  return Promise.race([p, timeout, exited]).finally(() => clearTimeout(timer));
}

/** Writes `calls` calls' events into a fresh data directory's outbox; returns the directory and what the fill wrote. */
async function fillOutbox(calls: number, url: string): Promise<{ dir: string; fillPath: string; fill: WebhooksFill }> {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-bench-webhooks-'));
  const fillPath = join(dir, 'fill.json');
  const child = startChild('webhooks-fill', ['--import', 'tsx', join(ROOT, 'bench', 'lib', 'webhooks-fill.ts'), join(dir, 'data'), String(calls), url, fillPath], {});
  await waitForLine(child, /^FILLED$/m, 10 * 60_000);
  await child.exited;
  return { dir, fillPath, fill: JSON.parse(readFileSync(fillPath, 'utf8')) as WebhooksFill };
}

/** The baseline: the bodies POSTed unsigned by a child without the store. */
async function plainRun(rx: Receiver, fillPath: string, expected: number, inFlight: number): Promise<Reception> {
  const child = startChild('webhooks-plain-sender', ['--single-threaded-gc', '--import', 'tsx', join(ROOT, 'bench', 'lib', 'webhooks-plain-sender.ts'), fillPath, rx.url, String(inFlight)], { MALLOC_ARENA_MAX: '2' });
  try {
    const reception = await withTimeout(rx.expect(expected, child.proc.pid), 'the plain sender', child);
    const failed = await waitForLine(child, /^SENT (\d+)$/m, 60_000);
    if (failed !== '0') throw new Error(`the plain sender got ${failed} answers that were not 2xx`);
    if (reception.requests.some((q) => q.headers['webhook-signature'] !== undefined)) throw new Error('the plain sender signed');
    return reception;
  } finally {
    await stopChild(child);
  }
}

/** The measured path: a daemon on the filled data directory drains its outbox. */
async function daemonRun(rx: Receiver, dataDir: string, expected: number, inFlight: number): Promise<Reception> {
  const daemon = startChild('daemon-webhooks', ['--single-threaded-gc', join(ROOT, 'bin', 'callbridge.js'), 'start'], {
    MALLOC_ARENA_MAX: '2',
    CALLBRIDGE_DATA_DIR: dataDir,
    CALLBRIDGE_HTTP_HOST: HOST,
    CALLBRIDGE_HTTP_PORT: String(await freePort()),
    CALLBRIDGE_SIP_ENABLED: 'false',
    CALLBRIDGE_LOG_LEVEL: 'warn',
    CALLBRIDGE_WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS: 'true',
    CALLBRIDGE_WEBHOOKS_MAX_IN_FLIGHT: String(inFlight),
  });
  try {
    return await withTimeout(rx.expect(expected, daemon.proc.pid), 'the daemon\'s deliveries', daemon);
  } finally {
    await stopChild(daemon);
  }
}

/** Every event once, signed with the endpoint's secret, and each call's events in their order. */
function checkDelivered(r: Reception, fill: WebhooksFill): void {
  const wh = new Webhook(fill.secret);
  const ids = new Set<string>();
  const seen = new Map<string, string[]>();
  for (const q of r.requests) {
    const event = wh.verify(q.body, q.headers) as { type: string; data: { call: { id: string } } };
    const id = q.headers['webhook-id']!;
    if (ids.has(id)) throw new Error(`event ${id} delivered twice`);
    ids.add(id);
    const types = seen.get(event.data.call.id) ?? [];
    types.push(event.type);
    seen.set(event.data.call.id, types);
  }
  if (ids.size !== fill.bodies.length) throw new Error(`${ids.size} events delivered of ${fill.bodies.length}`);
  for (const [call, types] of seen) {
    if (types.join() !== 'call.started,call.answered,call.ended') throw new Error(`call ${call}: events arrived as ${types.join(', ')}`);
  }
}

/** bench/lib/webhooks-call-cost.ts in a child (PostgreSQL: two databases on a throwaway server). */
async function callCost(perRound: number, pg: PostgresServer | undefined): Promise<CallCost[]> {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-bench-webhooks-cost-'));
  try {
    const pgUrls = pg ? [await pg.createDatabase('webhooks_with'), await pg.createDatabase('webhooks_without')] : [];
    const out = join(dir, 'cost.json');
    const child = startChild('webhooks-call-cost', ['--import', 'tsx', join(ROOT, 'bench', 'lib', 'webhooks-call-cost.ts'), join(dir, 'stores'), String(perRound), out, ...pgUrls], {});
    await waitForLine(child, /^MEASURED$/m, 10 * 60_000);
    await child.exited;
    return JSON.parse(readFileSync(out, 'utf8')) as CallCost[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function run(): Promise<void> {
  const calls = Math.round(envNumber('BENCH_WEBHOOKS_CALLS', 2000));
  const rounds = Math.round(envNumber('BENCH_WEBHOOKS_ROUNDS', 3));
  const inFlight = Math.round(envNumber('BENCH_WEBHOOKS_MAX_IN_FLIGHT', 16));
  const costCalls = Math.round(envNumber('BENCH_WEBHOOKS_COST_CALLS', 400));
  const wantPostgres = process.env.BENCH_WEBHOOKS_POSTGRES !== '0';
  const events = 3 * calls;
  log(`machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}, load average ${load()}\n`);
  log(`delivery: ${calls.toLocaleString('en')} calls = ${events.toLocaleString('en')} events per run, ${inFlight} in flight, ${rounds} round(s) of daemon (signed, outbox) and plain sender (unsigned, no store)\n`);

  const rx = new Receiver();
  await rx.listen();
  const samples: Record<'outbox' | 'plain', Rate[]> = { outbox: [], plain: [] };
  const rows = [['round', 'path', 'events/s', 'sender CPU µs/event', 'load average']];
  try {
    for (let round = 0; round < rounds; round++) {
      const { dir, fillPath, fill } = await fillOutbox(calls, rx.url);
      try {
        log(`  round ${round + 1}: outbox filled in ${fill.seconds.toFixed(1)} s\n`);
        for (const path of round % 2 === 0 ? (['plain', 'outbox'] as const) : (['outbox', 'plain'] as const)) {
          const r = path === 'plain' ? await plainRun(rx, fillPath, events, inFlight) : await daemonRun(rx, join(dir, 'data'), events, inFlight);
          if (path === 'outbox') checkDelivered(r, fill);
          const rate = rateOf(r);
          samples[path].push(rate);
          rows.push([String(round + 1), path, formatValue(rate.perSec), formatValue(rate.cpuUsPerEvent), load()]);
          log(`    ${path}: ${formatValue(rate.perSec)} events/s, ${formatValue(rate.cpuUsPerEvent)} µs of sender CPU per event\n`);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  } finally {
    await rx.close();
  }
  log(`\n${table(rows)}\n`);

  const pgAvail = postgresAvailability();
  const pg = wantPostgres && pgAvail.ok ? await startPostgres() : undefined;
  log(`\ncall cost: ${costCalls} calls per round (insert, answered, end), 1 warm-up + 6 rounds per variant, SQLite${pg ? ` and PostgreSQL ${pg.major}` : ` only (PostgreSQL: ${wantPostgres ? (pgAvail.reason ?? 'not available') : 'BENCH_WEBHOOKS_POSTGRES=0'})`}; load average ${load()}\n`);
  let costs: CallCost[];
  try {
    costs = await callCost(costCalls, pg);
  } finally {
    await pg?.stop();
  }

  const best = (xs: Rate[], k: keyof Rate, lowest: boolean) => (lowest ? Math.min : Math.max)(...xs.map((x) => x[k]));
  const figures: Figure[] = [
    {
      name: 'webhooks_delivered_per_sec',
      value: best(samples.outbox, 'perSec', false),
      unit: 'events/s',
      baseline: best(samples.plain, 'perSec', false),
      note: `daemon: outbox claim + sign + POST + outcome, ${inFlight} in flight; baseline: the same bodies POSTed unsigned, no store`,
    },
    {
      name: 'webhooks_sender_cpu_us_per_event',
      value: best(samples.outbox, 'cpuUsPerEvent', true),
      unit: 'us',
      baseline: best(samples.plain, 'cpuUsPerEvent', true),
      note: "the daemon's CPU per delivered event; baseline: the plain sender's",
    },
  ];
  for (const c of costs) {
    if (c.backend === 'sqlite') {
      figures.push({ name: 'webhooks_call_cpu_us_sqlite', value: c.cpuUsWith, unit: 'us', baseline: c.cpuUsWithout, note: 'CPU per call (3 transactions), 1 subscribed endpoint; baseline: none' });
    }
    figures.push({ name: `webhooks_call_wall_us_${c.backend}`, value: c.wallUsWith, unit: 'us', baseline: c.wallUsWithout, note: 'wall time per call (3 transactions), 1 subscribed endpoint; baseline: none' });
  }
  printFigures('Webhook outbox: delivery rate and what it adds to a call', figures);
  log(`load average at the end: ${load()}\n`);
}
