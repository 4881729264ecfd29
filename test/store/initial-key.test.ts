/**
 * The first start's organization and key (OrganizationRepo.createInitialKey, used by
 * ensureInitialKey in src/main.ts) on real databases: nodes starting together on one PostgreSQL
 * database create ONE organization and key between them; once a key exists nothing is created.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import { forEachStoreBackend, openOtherNode, openTestStore, type TestStore } from '../helpers/store-backends.ts';

forEachStoreBackend((backend) =>
  describe('the first start creates one key', () => {
    let t: TestStore;
    const others: Store[] = [];
    beforeAll(async () => {
      t = await openTestStore(backend);
      // PostgreSQL: four "nodes" (four pools) on one database; SQLite: one store, racing itself.
      if (backend === 'postgres') for (const id of ['n2', 'n3', 'n4']) others.push(await openOtherNode(t, id));
    });
    afterAll(async () => {
      for (const s of others) await s.close();
      await t?.dispose();
    });

    it('of many creations at once exactly one creates; the others find its key', async () => {
      const stores = [t.store, ...others];
      const attempts = stores.flatMap((s) => [s, s].map((x) => x.organizations.createInitialKey('default')));
      const results = await Promise.all(attempts);
      const created = results.filter((r) => r !== undefined);
      expect(created).toHaveLength(1);
      expect(await t.store.organizations.activeKeyCount()).toBe(1);
      const orgs = await t.store.client.all<{ n: number }>('SELECT COUNT(*) AS n FROM organizations');
      expect(orgs[0]!.n).toBe(1);
      // The key made works from every node.
      for (const s of stores) expect((await s.organizations.byApiKey(created[0]!.key))?.id).toBe(created[0]!.org.id);
      // And with a key in place nothing more is created.
      expect(await t.store.organizations.createInitialKey('default')).toBeUndefined();
    });
  }),
);
