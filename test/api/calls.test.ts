/**
 * GET /v1/calls and /v1/calls/{id} as the service's OpenAPI document has them: `{ calls,
 * pagination }`, `page` / `page_size`, every filter of the document, the Call record with its
 * enums (each response validated against the document's schema), scoped to the key's
 * organization. The records are written through the store as the session server and the call
 * bridge write them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { loadServiceDocument, ServiceContract } from '../helpers/openapi.ts';
import { failedDialEnd, transcriptFromRuntime } from '../../src/domain/call.ts';

const contract = new ServiceContract(loadServiceDocument());

describe('GET /v1/calls', () => {
  let d: TestDaemon;
  let a1: any;
  let a2: any;
  let orgId: string;
  let otherKey: string;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    d = await startTestDaemon();
    a1 = (await d.api('POST', '/v1/agents', { name: 'One' })).body;
    a2 = (await d.api('POST', '/v1/agents', { name: 'Two' })).body;
    orgId = (await d.daemon.store.organizations.byApiKey(d.key))!.id;
    const calls = d.daemon.store.calls;
    const at = (day: number, h = 10) => `2026-11-${String(day).padStart(2, '0')}T${String(h).padStart(2, '0')}:00:00.000Z`;
    const add = (name: string, agent: any, direction: 'inbound' | 'outbound' | 'web', day: number, from: string, to: string) => {
      ids[name] = randomUUID();
      calls.insert({ id: ids[name], org_id: orgId, agent_id: agent?.id ?? null, sip_trunk_id: null, direction, from, to, created_at: at(day) });
      return ids[name];
    };
    // in1: inbound, answered, ended by the caller, tagged, with a transcript and a summary.
    add('in1', a1, 'inbound', 1, '+15550001111', '+15550009999');
    calls.markAnswered(ids.in1!, at(1, 10).replace(':00:00', ':00:02'));
    calls.end(ids.in1!, {
      ended_at: at(1, 10).replace(':00:00', ':01:32'),
      termination_reason: 'client_closed',
      transcript: transcriptFromRuntime([
        { role: 'agent', text: 'Hello!', at: at(1), turn_id: 't1' },
        { role: 'user', text: 'Hi', at: at(1) },
        { role: 'tool', text: 'lookup: found', at: at(1) },
        { role: 'agent', text: 'Let me', at: at(1), turn_id: 't2', interrupted: true },
      ]).entries,
    });
    calls.setAnalysis(ids.in1!, { summary: 'A short call.', extracted_variables: [{ name: 'outcome', type: 'extracted', description: 'how it ended', dataType: 'string', value: null }] }, at(1, 10).replace(':00:00', ':01:40'));
    calls.addTags(ids.in1!, ['vip', 'callback']);
    // out1: outbound, busy (never answered).
    add('out1', a1, 'outbound', 2, '+15550001111', '+15557770001');
    calls.end(ids.out1!, { ended_at: at(2), ...failedDialEnd('busy', 486) });
    // out2: outbound, the trunk refused our credentials.
    add('out2', a2, 'outbound', 3, '+15550001111', '+15557770002');
    calls.end(ids.out2!, { ended_at: at(3), ...failedDialEnd('auth_failed', 403) });
    // web1: a web session, transferred.
    add('web1', a2, 'web', 4, 'api-client', 'Two');
    calls.markAnswered(ids.web1!, at(4));
    calls.end(ids.web1!, { ended_at: at(4, 11), termination_reason: 'transfer' });
    calls.addTags(ids.web1!, ['vip']);
    // in2: inbound, still running; in3: inbound, not yet answered, agent deleted later.
    add('in2', a2, 'inbound', 5, '+15550002222', '+15550009999');
    calls.markAnswered(ids.in2!, at(5));
    add('in3', a1, 'inbound', 6, '+15550003333', '+15550009999');
    // agent_hangup
    add('in4', a2, 'inbound', 7, '+15550004444', '+15550009999');
    calls.markAnswered(ids.in4!, at(7));
    calls.end(ids.in4!, { ended_at: at(7, 11), termination_reason: 'agent_hangup' });

    // Another organization: never seen, whatever the query says.
    otherKey = await d.newOrgKey('other');
    const other = (await d.daemon.store.organizations.byApiKey(otherKey))!.id;
    ids.foreign = randomUUID();
    calls.insert({ id: ids.foreign, org_id: other, agent_id: null, sip_trunk_id: null, direction: 'inbound', from: '+15550001111', to: 'y', created_at: at(8) });
    calls.addTags(ids.foreign, ['vip']);
  });
  afterAll(() => d.close());

  const get = async (q = '', key?: string) => {
    const r = await d.api('GET', `/v1/calls${q}`, undefined, key ? { key } : {});
    expect(r.status, `${q}: ${r.text}`).toBe(200);
    expect(contract.validateResponse(contract.byId('listCalls'), 200, r.body), q).toEqual([]);
    return r.body as { calls: any[]; pagination: any };
  };
  const list = async (q = '') => (await get(q)).calls.map((c) => c.id);
  const newestFirst = () => ['in4', 'in3', 'in2', 'web1', 'out2', 'out1', 'in1'].map((n) => ids[n]);

  it('answers { calls, pagination }, newest first, default page 1 of 20', async () => {
    const body = await get();
    expect(body.calls.map((c) => c.id)).toEqual(newestFirst());
    expect(body.pagination).toEqual({ page: 1, page_size: 20, total: 7, total_pages: 1, has_next: false, has_prev: false });
  });

  it('paginates: total, total_pages, has_next / has_prev, a page past the end is empty', async () => {
    const all = newestFirst();
    const p1 = await get('?page_size=3');
    expect(p1.calls.map((c) => c.id)).toEqual(all.slice(0, 3));
    expect(p1.pagination).toEqual({ page: 1, page_size: 3, total: 7, total_pages: 3, has_next: true, has_prev: false });
    const p2 = await get('?page=2&page_size=3');
    expect(p2.calls.map((c) => c.id)).toEqual(all.slice(3, 6));
    expect(p2.pagination).toEqual({ page: 2, page_size: 3, total: 7, total_pages: 3, has_next: true, has_prev: true });
    const p3 = await get('?page=3&page_size=3');
    expect(p3.calls.map((c) => c.id)).toEqual(all.slice(6));
    expect(p3.pagination).toEqual({ page: 3, page_size: 3, total: 7, total_pages: 3, has_next: false, has_prev: true });
    const past = await get('?page=9&page_size=3');
    expect(past).toEqual({ calls: [], pagination: { page: 9, page_size: 3, total: 7, total_pages: 3, has_next: false, has_prev: true } });
    const max = await get('?page_size=100');
    expect(max.pagination.page_size).toBe(100);
  });

  it('the Call record: the document’s fields and enums, nothing null, ours beside them', async () => {
    const r = await d.api('GET', `/v1/calls/${ids.in1}`);
    expect(r.status).toBe(200);
    expect(contract.validateResponse(contract.byId('getCall'), 200, r.body)).toEqual([]);
    expect(r.body).toEqual({
      id: ids.in1,
      agent_id: a1.id,
      organization_id: orgId,
      party_number: '+15550001111',
      status: 'ended',
      source: 'sip',
      termination_reason: 'client_closed',
      // The post-call analysis: null is the value of a field whose answer was none of its choices.
      extracted_variables: [{ name: 'outcome', type: 'extracted', description: 'how it ended', dataType: 'string', value: null }],
      outbound: false,
      created_at: '2026-11-01T10:00:00.000Z',
      connected_at: '2026-11-01T10:00:02.000Z',
      started_at: '2026-11-01T10:00:02.000Z',
      ended_at: '2026-11-01T10:01:32.000Z',
      duration_seconds: 90,
      summary: 'A short call.',
      transcript: {
        entries: [
          { index: 0, role: 'assistant', message: 'Hello!', type: 'message', createdAt: '2026-11-01T10:00:00.000Z', turnId: 't1' },
          { index: 1, role: 'user', message: 'Hi', type: 'message', createdAt: '2026-11-01T10:00:00.000Z' },
          { index: 2, message: 'lookup: found', type: 'tool_call', toolCall: { toolName: 'lookup', output: 'found' }, createdAt: '2026-11-01T10:00:00.000Z' },
          { index: 3, role: 'assistant', message: 'Let me', type: 'message', createdAt: '2026-11-01T10:00:00.000Z', turnId: 't2', interrupted: true },
        ],
      },
      tags: ['callback', 'vip'],
      direction: 'inbound',
      from: '+15550001111',
      to: '+15550009999',
      end_status: 'completed',
      outcome: 'ended_by_user',
      has_recording: false,
      analyzed_at: '2026-11-01T10:01:40.000Z',
      // Ours, on this route only: no agent turn was recorded for this call.
      latency: { turns: [], summary: { turns: 0, stages: {}, voice_to_voice_ms: null } },
    });
    // A call still ringing: no started_at, ended_at, termination_reason, duration; nothing null.
    const ringing = (await d.api('GET', `/v1/calls/${ids.in3}`)).body;
    expect(ringing).toMatchObject({ status: 'started', source: 'sip', outbound: false, transcript: { entries: [] }, tags: [] });
    for (const k of ['connected_at', 'started_at', 'ended_at', 'termination_reason', 'duration_seconds', 'summary', 'end_status', 'outcome', 'sip_trunk_id', 'graph_version_id', 'analyzed_at']) {
      expect(ringing, k).not.toHaveProperty(k);
    }
    expect(Object.values(ringing)).not.toContain(null);
    expect((await d.api('GET', `/v1/calls/${ids.in2}`)).body).toMatchObject({ status: 'in_progress', started_at: '2026-11-05T10:00:00.000Z' });
    expect((await d.api('GET', `/v1/calls/${ids.out1}`)).body).toMatchObject({ status: 'ended', end_status: 'busy', termination_reason: 'busy (486)', outbound: true, party_number: '+15557770001' });
    expect((await d.api('GET', `/v1/calls/${ids.out2}`)).body).toMatchObject({ status: 'auth_failed', end_status: 'failed', termination_reason: 'auth_failed (403)' });
    expect((await d.api('GET', `/v1/calls/${ids.web1}`)).body).toMatchObject({ source: 'api', direction: 'web', party_number: 'api-client', outcome: 'transferred' });
  });

  it('filters: agent_ids, status, source, dates, outbound, search, tag, outcome', async () => {
    expect(await list(`?agent_ids=${a1.id}`)).toEqual([ids.in3, ids.out1, ids.in1]);
    expect(await list(`?agent_ids=${a1.id},${a2.id.toUpperCase()}&status=ended`)).toEqual([ids.in4, ids.web1, ids.out1, ids.in1]);
    expect(await list('?status=started')).toEqual([ids.in3]);
    expect(await list('?status=in_progress')).toEqual([ids.in2]);
    expect(await list('?status=auth_failed')).toEqual([ids.out2]);
    expect(await list('?status=connected')).toEqual([]);
    expect(await list('?source=api')).toEqual([ids.web1]);
    expect(await list('?source=sip')).toEqual(newestFirst().filter((id) => id !== ids.web1));
    expect(await list('?source=twilio')).toEqual([]);
    // Inclusive at both ends; a date alone is the whole day (UTC).
    expect(await list('?date_from=2026-11-02T10:00:00Z&date_to=2026-11-04T10:00:00Z')).toEqual([ids.web1, ids.out2, ids.out1]);
    expect(await list('?date_from=2026-11-02T10:00:00.001Z&date_to=2026-11-04T09:59:59.999Z')).toEqual([ids.out2]);
    expect(await list('?date_from=2026-11-03&date_to=2026-11-04')).toEqual([ids.web1, ids.out2]);
    expect(await list('?date_from=2026-11-06T12:00:00%2B02:00')).toEqual([ids.in4, ids.in3]);
    expect(await list('?outbound=true')).toEqual([ids.out2, ids.out1]);
    expect(await list('?outbound=false')).toEqual([ids.in4, ids.in3, ids.in2, ids.web1, ids.in1]);
    // search: a substring of party_number (the callee of outbound calls, the caller otherwise).
    expect(await list('?search=0001111')).toEqual([ids.in1]);
    expect(await list('?search=777')).toEqual([ids.out2, ids.out1]);
    expect(await list('?search=9999')).toEqual([]);
    expect(await list('?search=api')).toEqual([ids.web1]);
    expect(await list('?search=4')).toEqual([ids.in4]);
    expect(await list('?tag=vip')).toEqual([ids.web1, ids.in1]);
    expect(await list('?tag=callback')).toEqual([ids.in1]);
    expect(await list('?tag=nope')).toEqual([]);
    expect(await list('?outcome=transferred')).toEqual([ids.web1]);
    expect(await list('?outcome=ended_by_agent')).toEqual([ids.in4]);
    expect(await list('?outcome=ended_by_user')).toEqual([ids.in1]);
    const combined = await get(`?agent_ids=${a2.id}&tag=vip&outcome=transferred&source=api&outbound=false&date_from=2026-11-04&search=client`);
    expect(combined.calls.map((c) => c.id)).toEqual([ids.web1]);
    expect(combined.pagination.total).toBe(1);
    // Filtered totals count the filter's calls, not the organization's.
    expect((await get('?outbound=true&page_size=1')).pagination).toEqual({ page: 1, page_size: 1, total: 2, total_pages: 2, has_next: true, has_prev: false });
    // Empty values are no filter.
    expect(await list('?search=&tag=&agent_ids=')).toEqual(newestFirst());
  });

  it('another organization’s calls never appear; organization_id does not widen the scope', async () => {
    const other = (await d.daemon.store.organizations.byApiKey(otherKey))!.id;
    expect(await list()).not.toContain(ids.foreign);
    expect(await list(`?organization_id=${other}`)).toEqual(newestFirst());
    expect(await list('?tag=vip')).not.toContain(ids.foreign);
    expect(await list('?search=0001111')).not.toContain(ids.foreign);
    expect(await list('?date_from=2026-11-08')).toEqual([]);
    const theirs = await get(`?organization_id=${orgId}`, otherKey);
    expect(theirs.calls.map((c) => c.id)).toEqual([ids.foreign]);
    expect(theirs.pagination.total).toBe(1);
    expect((await d.api('GET', `/v1/calls/${ids.foreign}`)).status).toBe(404);
    expect((await d.api('GET', `/v1/calls/${ids.in1}`, undefined, { key: otherKey })).status).toBe(404);
  });

  it('400 naming the parameter for bad enums, uuids, dates, pages and unknown parameters', async () => {
    const cases: Array<[string, RegExp]> = [
      ['?agent_ids=nope', /agent_ids.*"nope" is not a uuid/],
      [`?agent_ids=${a1.id},zzz`, /agent_ids.*"zzz"/],
      ['?status=completed', /status must be one of/],
      ['?status=pending', /status/],
      ['?source=web', /source must be one of/],
      ['?outcome=busy', /outcome must be one of/],
      ['?outbound=yes', /outbound must be one of/],
      ['?date_from=yesterday', /date_from must be an RFC 3339/],
      ['?date_to=2026-02-30', /date_to/],
      ['?date_from=1769850000', /date_from/],
      ['?page=0', /page must be >= 1/],
      ['?page=abc', /page/],
      ['?page_size=0', /page_size/],
      ['?page_size=101', /page_size must be <= 100/],
      ['?organization_id=acme', /organization_id must be a uuid/],
      [`?search=${'1'.repeat(257)}`, /search/],
      [`?tag=${'t'.repeat(129)}`, /tag/],
      ['?limit=10', /limit is not a known field/],
      ['?direction=outbound', /direction is not a known field/],
      [`?agent_ids=${Array.from({ length: 101 }, () => randomUUID()).join(',')}`, /more than 100/],
    ];
    for (const [q, error] of cases) {
      const r = await d.api('GET', `/v1/calls${q}`);
      expect(r.status, q).toBe(400);
      expect(r.body.error, q).toMatch(error);
      expect(contract.validateResponse(contract.byId('listCalls'), 400, r.body), q).toEqual([]);
    }
    expect((await d.api('GET', `/v1/calls/${randomUUID()}`)).status).toBe(404);
    expect((await d.api('GET', '/v1/calls/123')).status).toBe(400);
    expect((await d.api('GET', '/v1/calls', undefined, { key: null })).status).toBe(401);
  });

  it('keeps the history when the agent is deleted: agent_id is then absent', async () => {
    expect((await d.api('DELETE', `/v1/agents/${a1.id}`)).status).toBe(204);
    const r = await d.api('GET', `/v1/calls/${ids.in1}`);
    expect(r.status).toBe(200);
    expect(r.body).not.toHaveProperty('agent_id');
    expect(r.body.status).toBe('ended');
    expect(contract.validateResponse(contract.byId('getCall'), 200, r.body)).toEqual([]);
  });
});
