/**
 * What the outbox adds to a call's writes, for bench/webhooks: a call written as the daemon writes
 * it (bench/lib/webhooks-calls.ts: insert, markAnswered, end, three transactions) in an
 * organization with one endpoint subscribed to the three call events (each transaction also
 * reads the call back and writes an outbox row) against an organization without one (one indexed
 * read of its endpoints per transaction: the baseline). Run as a child:
 *
 *   node --import tsx bench/lib/webhooks-call-cost.ts <scratch dir> <calls per round> <result.json> [<postgres url with> <postgres url without>]
 *
 * Each backend has one store per variant (SQLite: a data directory each, synchronous OFF as in
 * bench/lib/calls-insert-rate.ts, so that a commit's fsync, the same count in both, does not
 * drown the CPU the outbox costs; PostgreSQL: a database each, the server's settings as they
 * are). Rounds alternate between the variants (6 each, which goes first flipping every round);
 * each variant's figure is its median round. SQLite: CPU time of this process per call (the
 * database runs in it; on a shared machine wall time is mostly waiting for a core) and wall time;
 * PostgreSQL: wall time only (the work is split with the server's processes). The deliverer does
 * not run: the subscribed variant's outbox grows as a receiver that is down would let it.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { randomBytes, randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { openStore, type Store } from '../../src/store/index.ts';
import { newWebhookSecret } from '../../src/events/standard-webhooks.ts';
import { writeCall } from './webhooks-calls.ts';

export interface CallCost {
  backend: 'sqlite' | 'postgres';
  /** Per call (its three transactions), µs: with one subscribed endpoint, and with none. */
  cpuUsWith: number;
  cpuUsWithout: number;
  wallUsWith: number;
  wallUsWithout: number;
}

/** Rounds per variant and order: 2 x ROUNDS in all per variant. */
const ROUNDS = 3;

interface Variant {
  store: Store;
  org: string;
  calls: number;
}

async function open(store: Store, subscribed: boolean): Promise<Variant> {
  store.sqlite?.pragma('synchronous = OFF');
  const { org } = await store.organizations.createKey(subscribed ? 'subscribed' : 'unsubscribed');
  if (subscribed) {
    await store.webhooks.insert({ id: randomUUID(), org_id: org.id, url: 'http://127.0.0.1:9/', events: ['call.started', 'call.answered', 'call.ended'], description: 'bench', secret: newWebhookSecret(), created_at: new Date().toISOString() });
  }
  return { store, org: org.id, calls: 0 };
}

async function cost(backend: CallCost['backend'], variants: [Variant, Variant], perRound: number): Promise<CallCost> {
  const round = async (v: Variant): Promise<[number, number]> => {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < perRound; i++) await writeCall(v.store, v.org, v.calls++);
    const cpu = process.cpuUsage(cpu0);
    return [(cpu.user + cpu.system) / perRound, ((performance.now() - t0) * 1000) / perRound];
  };
  // A first round each, not counted: the statements are prepared and the JIT has warmed up.
  for (const v of variants) await round(v);
  const samples: Array<Array<[number, number]>> = [[], []];
  for (let r = 0; r < 2 * ROUNDS; r++) for (const k of r % 2 === 0 ? [0, 1] : [1, 0]) samples[k]!.push(await round(variants[k]!));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
  const of = (k: number, i: 0 | 1) => median(samples[k]!.map((x) => x[i]));
  return { backend, cpuUsWith: of(0, 0), cpuUsWithout: of(1, 0), wallUsWith: of(0, 1), wallUsWithout: of(1, 1) };
}

async function measure(dir: string, perRound: number, pgUrls: string[]): Promise<CallCost[]> {
  const results: CallCost[] = [];
  const sqlite: [Variant, Variant] = [await open(await openStore(join(dir, 'with'), ''), true), await open(await openStore(join(dir, 'without'), ''), false)];
  try {
    results.push(await cost('sqlite', sqlite, perRound));
  } finally {
    for (const v of sqlite) await v.store.close();
  }
  if (pgUrls.length === 2) {
    const key = randomBytes(32).toString('base64');
    const pg: [Variant, Variant] = [await open(await openStore(join(dir, 'pg-with'), key, { url: pgUrls[0]! }), true), await open(await openStore(join(dir, 'pg-without'), key, { url: pgUrls[1]! }), false)];
    try {
      results.push(await cost('postgres', pg, perRound));
    } finally {
      for (const v of pg) await v.store.close();
    }
  }
  return results;
}

// A script: bench/webhooks.ts runs it as a child (and imports only its types).
const [dir, count, out, ...pgUrls] = process.argv.slice(2);
if (!dir || !count || !out || !Number.isInteger(Number(count)) || Number(count) <= 0 || (pgUrls.length !== 0 && pgUrls.length !== 2)) {
  process.stderr.write('usage: node --import tsx bench/lib/webhooks-call-cost.ts <scratch dir> <calls per round> <result.json> [<postgres url with> <postgres url without>]\n');
  process.exit(2);
}
mkdirSync(dir, { recursive: true });
writeFileSync(out, JSON.stringify(await measure(dir, Number(count), pgUrls)));
process.stdout.write('MEASURED\n');
