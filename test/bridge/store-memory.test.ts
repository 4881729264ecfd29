/**
 * The bridge daemon's RSS grew after every flood of calls. Part of it was
 * SQLite's page cache: better-sqlite3 builds SQLite with 16,000 KiB per connection, and the
 * cache keeps every page each call's record wrote (row, indexes, counters, search index), ~1.5 KiB
 * of the main thread's malloc heap per call, never returned until 16 MB. The store now bounds
 * it (PAGE_CACHE_KIB, store/db.ts); reads go through the memory map anyway.
 *
 * The growth is measured in a child process (store-memory-child.ts) whose memory is the store's
 * alone: anonymous RSS less V8's heap after a full GC, 3,000 calls' records after 1,500 that settle the store, with
 * the bound and with better-sqlite3's default. What the bound saves is the difference of the two.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PAGE_CACHE_KIB } from '../../src/store/db.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const CHILD = fileURLToPath(new URL('./store-memory-child.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function anonGrowthKiB(mode: 'bounded' | 'default', calls: number): number {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-store-memory-'));
  try {
    const out = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', CHILD, dir, String(calls), mode], { encoding: 'utf8', cwd: ROOT, timeout: 60_000 });
    return (JSON.parse(out.trim().split('\n').pop()!) as { growthKiB: number }).growthKiB;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe.skipIf(process.platform !== 'linux')('call records and the daemon\'s native memory', () => {
  let d: TestDaemon;
  beforeAll(async () => {
    d = await startTestDaemon({ sip: { enabled: false } });
  });
  afterAll(async () => {
    await d?.close();
  });

  it('the daemon bounds its store\'s SQLite page cache', () => {
    expect(PAGE_CACHE_KIB).toBeLessThanOrEqual(2048);
    expect(d.daemon.store.sqlite!.pragma('cache_size', { simple: true })).toBe(-PAGE_CACHE_KIB);
  });

  it('3,000 calls\' records cost ~1.5 KiB a call more native memory without the bound than with it', () => {
    const bounded = anonGrowthKiB('bounded', 3000);
    const unbounded = anonGrowthKiB('default', 3000);
    // Measured on Node 20 (V8's own heap left out, with the schema of migration 13): bounded
    // 40-70 KiB, default 4,780-4,850 KiB: the 16 MB cache's pages.
    const figures = `bounded ${bounded} KiB, default ${unbounded} KiB`;
    expect(unbounded - bounded, figures).toBeGreaterThan(3 * 1024);
    expect(bounded, figures).toBeLessThan(unbounded / 2);
  });
});
