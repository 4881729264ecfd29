/**
 * Child process of store-memory.test.ts: writes `calls` call records the way a bridged call does
 * (insert, answered, ended) into a fresh store, with the store's page-cache bound (`bounded`) or
 * better-sqlite3's default (16,000 KiB, set back after opening), and prints one JSON line: how much the main thread's malloc heap
 * ([heap] in /proc/self/smaps, where SQLite's page cache lives) grew, KiB. A child of its own so
 * that the heap is this store's alone.
 *
 *   node --import tsx store-memory-child.ts <dir> <calls> <bounded|default>
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { openStore } from '../../src/store/index.ts';

const [dir, callsArg, mode] = process.argv.slice(2);

/** Resident KiB of the brk heap (the main thread's malloc arena). */
function heapKiB(): number {
  const smaps = readFileSync('/proc/self/smaps', 'utf8');
  const at = smaps.indexOf('[heap]');
  if (at < 0) return 0;
  return Number(/Rss:\s+(\d+) kB/.exec(smaps.slice(at))?.[1] ?? 0);
}

const store = openStore(dir!, '');
// The store bounds its page cache when it opens; `default` undoes that to measure the old behaviour.
if (mode === 'default') store.db.pragma('cache_size = -16000');
const { org } = store.organizations.createKey('memory');
const agentId = randomUUID();
store.agents.insert({ id: agentId, org_id: org.id, name: 'agent', status: 'active', phone_number_id: null, settings: {} as never, created_at: new Date().toISOString() });
// The first records settle SQLite's own structures (schema, statements) and fill a 2 MB page cache.
const write = (i: number) => {
  const id = randomUUID();
  const now = () => new Date().toISOString();
  store.calls.insert({ id, org_id: org.id, agent_id: agentId, sip_trunk_id: null, direction: 'inbound', from: `+1555200${String(i % 10_000).padStart(4, '0')}`, to: '+15550004000', created_at: now() } as never);
  store.calls.markAnswered(id, now());
  store.calls.end(id, { ended_at: now(), termination_reason: 'caller side ended: remote_bye' } as never);
};
const WARM = 1500;
for (let i = 0; i < WARM; i++) write(i);
const before = heapKiB();
const calls = Number(callsArg);
for (let i = 0; i < calls; i++) write(WARM + i);
const after = heapKiB();
store.close();
process.stdout.write(`${JSON.stringify({ growthKiB: after - before, cacheSize: mode })}\n`);
