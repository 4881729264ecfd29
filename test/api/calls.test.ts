/**
 * Call history. The call bridge (issue 6) will write records through CallRepo.insert; here the
 * test writes them the same way and reads them over HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

describe('GET /v1/calls', () => {
  let d: TestDaemon;
  let a1: any;
  let a2: any;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    d = await startTestDaemon();
    a1 = (await d.api('POST', '/v1/agents', { name: 'One' })).body;
    a2 = (await d.api('POST', '/v1/agents', { name: 'Two' })).body;
    const orgId = d.daemon.store.organizations.byApiKey(d.key)!.id;
    const rows: Array<[string, any, 'inbound' | 'outbound', string, string]> = [
      ['in1', a1, 'inbound', 'completed', '2026-11-01T10:00:00.000Z'],
      ['out1', a1, 'outbound', 'no_answer', '2026-11-02T10:00:00.000Z'],
      ['in2', a2, 'inbound', 'completed', '2026-11-03T10:00:00.000Z'],
      ['in3', a2, 'inbound', 'in_progress', '2026-11-04T10:00:00.000Z'],
    ];
    for (const [name, agent, direction, status, started_at] of rows) {
      ids[name] = randomUUID();
      d.daemon.store.calls.insert({ id: ids[name], org_id: orgId, agent_id: agent.id, sip_trunk_id: null, direction, status, from: '+15550001111', to: '+15550002222', started_at });
    }
    const other = d.daemon.store.organizations.byApiKey(d.newOrgKey('other'))!.id;
    ids.foreign = randomUUID();
    d.daemon.store.calls.insert({ id: ids.foreign, org_id: other, agent_id: null, sip_trunk_id: null, direction: 'inbound', status: 'completed', from: 'x', to: 'y', started_at: '2026-11-05T00:00:00.000Z' });
  });
  afterAll(() => d.close());

  const list = async (q = '') => (await d.api('GET', `/v1/calls${q}`)).body.map((c: any) => c.id);

  it('lists the organization’s calls newest first, with the record fields', async () => {
    expect(await list()).toEqual([ids.in3, ids.in2, ids.out1, ids.in1]);
    const r = await d.api('GET', `/v1/calls/${ids.in1}`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: ids.in1, agent_id: a1.id, direction: 'inbound', status: 'completed', from: '+15550001111', to: '+15550002222', answered_at: null, ended_at: null, transcript: [], has_recording: false });
  });

  it('filters by agent_ids, status, direction and date range, and paginates', async () => {
    expect(await list(`?agent_ids=${a1.id}`)).toEqual([ids.out1, ids.in1]);
    expect(await list(`?agent_ids=${a1.id},${a2.id}&status=completed`)).toEqual([ids.in2, ids.in1]);
    expect(await list('?direction=outbound')).toEqual([ids.out1]);
    expect(await list('?from=2026-11-02T00:00:00Z&to=2026-11-04T00:00:00Z')).toEqual([ids.in2, ids.out1]);
    expect(await list('?limit=2&offset=1')).toEqual([ids.in2, ids.out1]);
  });

  it('400 for bad filters, 404 for another organization’s or a missing call', async () => {
    for (const q of ['?agent_ids=nope', '?direction=sideways', '?from=yesterday', '?limit=0', '?limit=100000']) {
      expect((await d.api('GET', `/v1/calls${q}`)).status, q).toBe(400);
    }
    expect((await d.api('GET', `/v1/calls/${ids.foreign}`)).status).toBe(404);
    expect((await d.api('GET', `/v1/calls/${randomUUID()}`)).status).toBe(404);
    expect((await d.api('GET', '/v1/calls/123')).status).toBe(400);
    expect(await list()).not.toContain(ids.foreign);
  });

  it('keeps the history when the agent is deleted', async () => {
    await d.api('DELETE', `/v1/agents/${a1.id}`);
    const r = await d.api('GET', `/v1/calls/${ids.in1}`);
    expect(r.status).toBe(200);
    expect(r.body.agent_id).toBeNull();
  });
});
