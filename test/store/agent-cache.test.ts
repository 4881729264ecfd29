/** The agent read cache must never serve what the database does not hold (both store backends). */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import { settingsForCreate, type AgentDefaults } from '../../src/domain/agent.ts';
import { agentDefaults } from '../../src/api/routes/agents.ts';
import { loadConfig } from '../../src/config.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';

forEachStoreBackend((backend) => describe('AgentRepo cache', () => {
  let t: TestStore;
  let store: Store;
  let orgId: string;
  const defaults: AgentDefaults = agentDefaults(loadConfig({}, {}));
  const settings = settingsForCreate(defaults, {});

  beforeEach(async () => {
    t = await openTestStore(backend);
    store = t.store;
    orgId = (await store.organizations.createKey('o')).org.id;
    await store.agents.insert({ id: 'a1', org_id: orgId, name: 'before', status: 'active', phone_number_id: null, settings, created_at: '2026-01-01T00:00:00.000Z' });
  });
  afterEach(() => t?.dispose());

  const update = (name: string, s: Store = store) =>
    s.agents.update({ id: 'a1', org_id: orgId, name, status: 'active', phone_number_id: null, settings, updated_at: new Date().toISOString() });

  it('a rolled-back write is never cached', async () => {
    expect((await store.agents.get(orgId, 'a1'))!.name).toBe('before');
    await expect(
      store.tx(async (tx) => {
        await update('uncommitted', tx);
        expect((await tx.agents.get(orgId, 'a1'))!.name).toBe('uncommitted');
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect((await store.agents.get(orgId, 'a1'))!.name).toBe('before');
  });

  it('a committed write is seen at once; delete is seen at once; another org never hits', async () => {
    await store.agents.get(orgId, 'a1');
    await update('after');
    expect((await store.agents.get(orgId, 'a1'))!.name).toBe('after');
    expect(await store.agents.get('other-org', 'a1')).toBeUndefined();
    await store.agents.delete(orgId, 'a1');
    expect(await store.agents.get(orgId, 'a1')).toBeUndefined();
  });

  it("a transaction's committed write is seen after it, though the old row was cached before", async () => {
    expect((await store.agents.get(orgId, 'a1'))!.name).toBe('before');
    await store.tx(async (tx) => {
      await update('in a transaction', tx);
      expect((await tx.agents.get(orgId, 'a1'))!.name).toBe('in a transaction');
    });
    expect((await store.agents.get(orgId, 'a1'))!.name).toBe('in a transaction');
  });

  it('hands out frozen objects, so a caller cannot change the cached copy', async () => {
    const a = (await store.agents.get(orgId, 'a1'))!;
    expect(() => {
      (a.vad_settings as { stop_secs: number }).stop_secs = 99;
    }).toThrow(TypeError);
    expect((await store.agents.get(orgId, 'a1'))!.vad_settings.stop_secs).toBe(0.8);
  });
}));
