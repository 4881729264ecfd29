/**
 * Call slots (src/store/call-slots.ts): the per-trunk and per-organization limits counted in the
 * database. On PostgreSQL two stores (two nodes) take slots from one database: a limit reached
 * on one node refuses the other's call, a freed slot admits again, and many admissions at once
 * from both nodes never exceed a limit (the advisory locks serialize count and insert).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import { slotLockKey, type SlotLimits } from '../../src/store/call-slots.ts';
import { forEachStoreBackend, openOtherNode, openTestStore, type TestStore } from '../helpers/store-backends.ts';

forEachStoreBackend((backend) =>
  describe('call slots', () => {
    let t: TestStore;
    let a: Store;
    /** Node b: a second store on the same database (PostgreSQL); the same store on SQLite. */
    let b: Store;
    beforeAll(async () => {
      t = await openTestStore(backend, undefined, { nodeId: 'node-a' });
      a = t.store;
      b = backend === 'postgres' ? await openOtherNode(t, 'node-b') : a;
    });
    afterAll(async () => {
      if (b !== a) await b?.close();
      await t?.dispose();
    });

    const take = (node: Store, nodeId: string, orgId: string, trunkId: string | null, limits: SlotLimits, id: string = randomUUID()) => node.callSlots.acquire({ id, nodeId, orgId, trunkId }, limits);

    it('per trunk: two calls on the trunk, the third (on the other node) refused; a freed slot admits again', async () => {
      const limits = { perOrg: 0, perTrunk: 2 };
      const org = randomUUID();
      expect(await take(a, 'node-a', org, 'trunk-1', limits, 's1')).toBeUndefined();
      expect(await take(b, 'node-b', org, 'trunk-1', limits, 's2')).toBeUndefined();
      expect(await take(b, 'node-b', org, 'trunk-1', limits)).toBe('trunk');
      expect(await b.callSlots.wouldRefuse({ orgId: org, trunkId: 'trunk-1' }, limits)).toBe('trunk');
      // Another trunk is not held up.
      expect(await take(b, 'node-b', org, 'trunk-2', limits, 's3')).toBeUndefined();
      await a.callSlots.release('s1');
      await a.callSlots.release('s1'); // twice: a no-op
      expect(await take(b, 'node-b', org, 'trunk-1', limits, 's4')).toBeUndefined();
      expect(await a.callSlots.count({ trunkId: 'trunk-1' })).toBe(2);
    });

    it('per organization: across trunks and nodes; another organization is not counted', async () => {
      const limits = { perOrg: 2, perTrunk: 0 };
      const [org, other] = [randomUUID(), randomUUID()];
      expect(await take(a, 'node-a', org, 'trunk-a', limits, 'o1')).toBeUndefined();
      expect(await take(b, 'node-b', org, null, limits)).toBeUndefined();
      expect(await take(b, 'node-b', org, 'trunk-b', limits)).toBe('org');
      expect(await take(a, 'node-a', other, 'trunk-a', limits)).toBeUndefined();
      await a.callSlots.release('o1');
      expect(await take(b, 'node-b', org, 'trunk-b', limits)).toBeUndefined();
      expect(await a.callSlots.count({ orgId: org })).toBe(2);
    });

    it('forced slots count without being refused; releaseNode frees one node\'s slots only', async () => {
      const org = randomUUID();
      for (let i = 0; i < 3; i++) expect(await take(a, 'node-gone', org, null, { perOrg: 0, perTrunk: 0 })).toBeUndefined();
      expect(await take(b, 'node-b', org, null, { perOrg: 1, perTrunk: 0 })).toBe('org');
      expect(await a.callSlots.releaseNode('node-gone')).toBe(3);
      expect(await take(b, 'node-b', org, null, { perOrg: 1, perTrunk: 0 })).toBeUndefined();
    });

    it('many admissions at once from both nodes never exceed the limits', async () => {
      const org = randomUUID();
      const limits = { perOrg: 5, perTrunk: 3 };
      const tries = Array.from({ length: 24 }, (_, i) => take(i % 2 === 0 ? a : b, i % 2 === 0 ? 'node-a' : 'node-b', org, i % 3 === 0 ? 'trunk-x' : 'trunk-y', limits));
      const results = await Promise.all(tries);
      expect(results.filter((r) => r === undefined)).toHaveLength(5);
      expect(await a.callSlots.count({ orgId: org })).toBe(5);
      expect(await a.callSlots.count({ trunkId: 'trunk-x' })).toBeLessThanOrEqual(3);
      expect(await a.callSlots.count({ trunkId: 'trunk-y' })).toBeLessThanOrEqual(3);
    });
  }),
);

describe('slot lock keys', () => {
  it('are signed 64-bit integers, stable, and differ by scope and id', () => {
    const k = slotLockKey('org', 'o-1');
    expect(BigInt(k)).toBeGreaterThanOrEqual(-(2n ** 63n));
    expect(BigInt(k)).toBeLessThan(2n ** 63n);
    expect(slotLockKey('org', 'o-1')).toBe(k);
    expect(slotLockKey('trunk', 'o-1')).not.toBe(k);
    expect(slotLockKey('org', 'o-2')).not.toBe(k);
  });
});
