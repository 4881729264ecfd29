/**
 * The cost of writing a call record, for bench/calls: how many calls per CPU second CallRepo.insert
 * writes (one transaction per call, as the daemon does: the row, its trigram index entry, the
 * counters of call_counts and of call_gram_counts, the postings of call_short_grams), against the
 * same inserts with the triggers of the 1-2 character search dropped, its counters' and its
 * postings' (the baseline: what a call cost before them). Run as a child:
 *
 *   node --import tsx bench/lib/calls-insert-rate.ts <scratch dir> <calls per round> <result.json>
 *
 * synchronous is OFF in both: with the daemon's FULL, a commit's fsync (the same in both, and at
 * the mercy of the disk's other writers) would drown what the triggers cost in CPU. Two fresh
 * data directories, one per variant; rounds alternate between them (6 each, which goes first
 * flipping every round) so that
 * the machine's other work weighs on both alike; each variant's figure is its median round. CPU
 * time (this process's user + system), not wall time, is the figure: on a machine shared with
 * other work, wall time is mostly waiting for a core (both are printed).
 * Party numbers as bench/lib/calls-fill.ts draws them (70 % E.164, 30 % `user-<n>`).
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { openStore, type Store } from '../../src/store/index.ts';
import { prng } from '../../test/helpers/prng.ts';

export interface InsertRate {
  /** calls per CPU second of this process with every trigger of the schema. */
  withGrams: number;
  /** calls per CPU second with the triggers of call_gram_counts and call_short_grams dropped. */
  withoutGrams: number;
  /** The same two in calls per second of wall time. */
  wallWithGrams: number;
  wallWithoutGrams: number;
}

/** Rounds per variant and order: 2 x ROUNDS in all per variant. */
const ROUNDS = 3;
/** The triggers of the 1-2 character search: its counters (migration 10) and postings (migration 12). */
const GRAM_TRIGGERS = ['calls_grams_ai', 'calls_grams_ad', 'calls_grams_au', 'calls_short_grams_ai', 'calls_short_grams_ad', 'calls_short_grams_au'];

async function rate(dir: string, perRound: number): Promise<InsertRate> {
  const open = async (name: string, dropGrams: boolean): Promise<{ store: Store; org: string }> => {
    const d = join(dir, name);
    mkdirSync(d, { recursive: true });
    const store = await openStore(d, '');
    store.sqlite?.pragma('synchronous = OFF');
    if (dropGrams) for (const t of GRAM_TRIGGERS) await store.client.exec(`DROP TRIGGER IF EXISTS ${t}`);
    return { store, org: (await store.organizations.createKey(name)).org.id };
  };
  const variants = [await open('with', false), await open('without', true)];
  const rand = prng(perRound);
  let seq = 0;
  const round = async (v: { store: Store; org: string }): Promise<[number, number]> => {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < perRound; i++) {
      const web = rand() < 0.3;
      const number = () => `+1${String(2_000_000_000 + Math.floor(rand() * 7_999_999_999))}`;
      await v.store.calls.insert({
        id: randomUUID(),
        org_id: v.org,
        agent_id: null,
        sip_trunk_id: null,
        direction: web ? 'web' : 'inbound',
        from: web ? `user-${Math.floor(rand() * 100_000)}` : number(),
        to: web ? 'agent' : number(),
        created_at: new Date(Date.UTC(2025, 0, 1) + seq++ * 1000).toISOString(),
      });
    }
    const cpu = process.cpuUsage(cpu0);
    return [perRound / ((cpu.user + cpu.system) / 1e6), perRound / ((performance.now() - t0) / 1000)];
  };
  const samples: Array<Array<[number, number]>> = [[], []];
  // The order flips every round: whichever variant went first measured ~5 % slower in a control
  // run where both were the same.
  for (let r = 0; r < 2 * ROUNDS; r++) for (const k of r % 2 === 0 ? [0, 1] : [1, 0]) samples[k]!.push(await round(variants[k]!));
  for (const v of variants) await v.store.close();
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
  const of = (k: number, i: 0 | 1) => median(samples[k]!.map((x) => x[i]));
  return { withGrams: of(0, 0), withoutGrams: of(1, 0), wallWithGrams: of(0, 1), wallWithoutGrams: of(1, 1) };
}

// A script: bench/calls.ts runs it as a child (and imports only its types).
const [dir, count, out] = process.argv.slice(2);
if (!dir || !count || !out || !Number.isInteger(Number(count)) || Number(count) <= 0) {
  process.stderr.write('usage: node --import tsx bench/lib/calls-insert-rate.ts <scratch dir> <calls per round> <result.json>\n');
  process.exit(2);
}
writeFileSync(out, JSON.stringify(await rate(dir, Number(count))));
process.stdout.write('MEASURED\n');
