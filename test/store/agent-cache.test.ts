/** The agent read cache must never serve what SQLite does not hold. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/index.ts';
import { settingsForCreate, type AgentDefaults } from '../../src/domain/agent.ts';
import { agentDefaults } from '../../src/api/routes/agents.ts';
import { loadConfig } from '../../src/config.ts';

describe('AgentRepo cache', () => {
  let dir: string;
  let store: Store;
  let orgId: string;
  const defaults: AgentDefaults = agentDefaults(loadConfig({}, {}));
  const settings = settingsForCreate(defaults, {});

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'agent-cache-'));
    store = openStore(dir, '');
    orgId = store.organizations.createKey('o').org.id;
    store.agents.insert({ id: 'a1', org_id: orgId, name: 'before', status: 'active', phone_number_id: null, settings, created_at: '2026-01-01T00:00:00.000Z' });
  });
  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const update = (name: string) =>
    store.agents.update({ id: 'a1', org_id: orgId, name, status: 'active', phone_number_id: null, settings, updated_at: new Date().toISOString() });

  it('a rolled-back write is never cached', () => {
    expect(store.agents.get(orgId, 'a1')!.name).toBe('before');
    expect(() =>
      store.tx(() => {
        update('uncommitted');
        expect(store.agents.get(orgId, 'a1')!.name).toBe('uncommitted');
        throw new Error('roll back');
      }),
    ).toThrow('roll back');
    expect(store.agents.get(orgId, 'a1')!.name).toBe('before');
  });

  it('a committed write is seen at once; delete is seen at once; another org never hits', () => {
    store.agents.get(orgId, 'a1');
    update('after');
    expect(store.agents.get(orgId, 'a1')!.name).toBe('after');
    expect(store.agents.get('other-org', 'a1')).toBeUndefined();
    store.agents.delete(orgId, 'a1');
    expect(store.agents.get(orgId, 'a1')).toBeUndefined();
  });

  it('hands out frozen objects, so a caller cannot change the cached copy', () => {
    const a = store.agents.get(orgId, 'a1')!;
    expect(() => {
      (a.vad_settings as { stop_secs: number }).stop_secs = 99;
    }).toThrow(TypeError);
    expect(store.agents.get(orgId, 'a1')!.vad_settings.stop_secs).toBe(0.8);
  });
});
