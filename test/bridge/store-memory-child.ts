/**
 * Child process of store-memory.test.ts: writes `calls` call records the way a bridged call does
 * (insert, answered, ended) into a fresh store, with the store's page-cache bound (`bounded`) or
 * better-sqlite3's default (16,000 KiB, set back after opening), and prints one JSON line: how much
 * the process's anonymous resident memory grew, KiB, each side measured after a full V8 GC. A child
 * of its own so that the growth is this store's alone.
 *
 * Anonymous RSS and not the brk heap ([heap] in smaps): SQLite's page cache is malloc'd, and glibc
 * puts the main thread's allocations in [heap] only while brk can grow; when a mapping sits right
 * above it (address-space randomisation decides), the arena goes on in anonymous mmaps and [heap]
 * stays still (CI once measured 0 KiB there for the 16 MB cache). Anonymous RSS counts it wherever it
 * lands; what V8 adds to it is the same in both modes, and the test compares the two.
 *
 *   node --expose-gc --import tsx store-memory-child.ts <dir> <calls> <bounded|default>
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { openStore } from '../../src/store/index.ts';

const [dir, callsArg, mode] = process.argv.slice(2);

declare const gc: () => void;

/**
 * Anonymous resident KiB (RssAnon: malloc's arenas, V8's heap) after a full GC, less V8's
 * committed heap: V8 grows or gives back its own pages between the two samples as it likes (a CI
 * run once measured the 16 MB cache's 3,000 calls as 1 MB, V8 having shrunk meanwhile), and the
 * store's memory is malloc's.
 */
function anonKiB(): number {
  gc();
  const kib = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  if (kib === undefined) throw new Error('no RssAnon in /proc/self/status');
  return Number(kib) - Math.round(process.memoryUsage().heapTotal / 1024);
}

const store = await openStore(dir!, '');
// The store bounds its page cache when it opens; `default` undoes that to measure the old behaviour.
if (mode === 'default') store.sqlite!.pragma('cache_size = -16000');
const { org } = await store.organizations.createKey('memory');
const agentId = randomUUID();
await store.agents.insert({ id: agentId, org_id: org.id, name: 'agent', status: 'active', phone_number_id: null, settings: {} as never, created_at: new Date().toISOString() });
// The first records settle SQLite's own structures (schema, statements) and fill a 2 MB page cache.
const write = async (i: number) => {
  const id = randomUUID();
  const now = () => new Date().toISOString();
  await store.calls.insert({ id, org_id: org.id, agent_id: agentId, sip_trunk_id: null, direction: 'inbound', from: `+1555200${String(i % 10_000).padStart(4, '0')}`, to: '+15550004000', created_at: now() } as never);
  await store.calls.markAnswered(id, now());
  await store.calls.end(id, { ended_at: now(), termination_reason: 'caller side ended: remote_bye' } as never);
};
const WARM = 1500;
for (let i = 0; i < WARM; i++) await write(i);
const before = anonKiB();
const calls = Number(callsArg);
for (let i = 0; i < calls; i++) await write(WARM + i);
const after = anonKiB();
await store.close();
process.stdout.write(`${JSON.stringify({ growthKiB: after - before, beforeKiB: before, cacheSize: mode })}\n`);
