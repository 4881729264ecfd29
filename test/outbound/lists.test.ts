/**
 * The outbound list and run routes (docs/outbound.md) without calls: creation and its
 * validation, contacts as JSON and as CSV (with their own time zones), duplicates reported and not added twice, paging,
 * deleting a contact, run settings' validation, one open run per list, the GET /v1/calls filters,
 * and another organization's lists being "not found". The dialer is off (outbound.enabled false):
 * nothing here places a call.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const RUN = { max_concurrent: 2, retry: { max_attempts: 2, backoff_secs: 60, on: ['busy'] } };

describe('outbound lists and runs over REST', () => {
  let d: TestDaemon;
  let agentId: string;
  let trunkId: string;
  beforeAll(async () => {
    d = await startTestDaemon({ outbound: { enabled: false } });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Lists' })).body.id;
    trunkId = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'out', inbound_auth_type: 'none', outbound_host: '127.0.0.1:5999' })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: '7100' })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
  });

  const newList = (body: Record<string, unknown>) => d.api('POST', '/v1/outbound-lists', { name: 'L', agent_id: agentId, sip_trunk_id: trunkId, ...body });

  it('creates a list; duplicates within the request are added once and reported; numbers are normalized', async () => {
    const r = await newList({ contacts: [{ phone_number: '+1 (555) 010-0001', variables: [{ key: 'name', value: 'Ada' }] }, { phone_number: '+15550100001' }, { phone_number: '*72#' }] });
    expect(r.status, r.text).toBe(201);
    expect(r.body).toMatchObject({ name: 'L', agent_id: agentId, sip_trunk_id: trunkId, contact_count: 2, duplicates: ['+15550100001'] });
    const contacts = (await d.api('GET', `/v1/outbound-lists/${r.body.id}/contacts`)).body;
    expect(contacts.map((c: any) => c.phone_number)).toEqual(['+15550100001', '*72#']);
    expect(contacts[0].variables).toEqual([{ key: 'name', value: 'Ada' }]);
    expect((await d.api('GET', `/v1/outbound-lists/${r.body.id}`)).body).toMatchObject({ id: r.body.id, contact_count: 2 });
    expect((await d.api('GET', '/v1/outbound-lists')).body.some((l: any) => l.id === r.body.id)).toBe(true);
  });

  it('refuses bad lists with a 400 or 404 naming the problem', async () => {
    const cases: Array<[Record<string, unknown>, number, RegExp]> = [
      [{ contacts: [{ phone_number: 'call me' }] }, 400, /contacts\[0\]\.phone_number/],
      [{ sip_trunk_id: undefined }, 400, /exactly one of sip_trunk_id and from_number/],
      [{ from_number: '+15550009999' }, 400, /exactly one/],
      [{ agent_id: '00000000-0000-4000-8000-000000000000' }, 404, /agent not found/],
      [{ sip_trunk_id: '00000000-0000-4000-8000-000000000000' }, 404, /sip trunk not found/],
      [{ colour: 'red' }, 400, /colour/],
      [{ contacts: [{ phone_number: '+15550100002', variables: [{ key: 'k' }] }] }, 400, /value/],
      [{ contacts: [{ phone_number: '+15550100002' }, { phone_number: '+15550100003', timezone: 'Mars/Olympus' }] }, 400, /contacts\[1\]\.timezone: "Mars\/Olympus" is not an IANA time zone/],
    ];
    for (const [body, status, error] of cases) {
      const r = await newList(body);
      expect(r.status, `${JSON.stringify(body)}: ${r.text}`).toBe(status);
      expect(r.body.error).toMatch(error);
    }
    const tooMany = Array.from({ length: 10_001 }, (_, i) => ({ phone_number: `+1555${String(i).padStart(7, '0')}` }));
    const r = await d.api('POST', '/v1/outbound-lists', { name: 'big', agent_id: agentId, sip_trunk_id: trunkId, contacts: tooMany });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/contacts/);
  });

  it('adds contacts as CSV (variables from the columns) and as JSON; numbers the list has are duplicates', async () => {
    const listId = (await newList({ contacts: [{ phone_number: '+15550200001' }] })).body.id;
    const csv = 'phone_number,name,"note, quoted"\r\n+15550200001,Old,x\r\n+15550200002,Bea,"says ""hi"""\r\n+15550200003,Cy,\r\n';
    const r = await d.api('POST', `/v1/outbound-lists/${listId}/contacts`, undefined, { rawBody: csv, headers: { 'content-type': 'text/csv' } });
    expect(r.status, r.text).toBe(201);
    expect(r.body).toEqual({ added: 2, duplicates: ['+15550200001'], contact_count: 3 });
    const contacts = (await d.api('GET', `/v1/outbound-lists/${listId}/contacts?limit=2&offset=1`)).body;
    expect(contacts).toHaveLength(2);
    expect(contacts[0]).toMatchObject({ phone_number: '+15550200002', variables: [{ key: 'name', value: 'Bea' }, { key: 'note, quoted', value: 'says "hi"' }] });
    expect(contacts[1].variables).toEqual([{ key: 'name', value: 'Cy' }, { key: 'note, quoted', value: '' }]);
    const json = await d.api('POST', `/v1/outbound-lists/${listId}/contacts`, { contacts: [{ phone_number: '+15550200004' }, { phone_number: '+15550200002' }] });
    expect(json.status, json.text).toBe(201);
    expect(json.body).toEqual({ added: 1, duplicates: ['+15550200002'], contact_count: 4 });
    for (const [body, error] of [
      ['name\r\nAda\r\n', /phone_number column/],
      ['phone_number,name\r\n+15550200005\r\n', /row 2/],
      ['phone_number\r\nnot-a-number\r\n', /phone_number/],
      ['phone_number,name\r\n"+1555', /quoted/],
    ] as const) {
      const bad = await d.api('POST', `/v1/outbound-lists/${listId}/contacts`, undefined, { rawBody: body, headers: { 'content-type': 'text/csv' } });
      expect(bad.status, bad.text).toBe(400);
      expect(bad.body.error).toMatch(error);
    }
    expect((await d.api('GET', `/v1/outbound-lists/${listId}`)).body.contact_count).toBe(4);
  });

  it('a contact may carry its own time zone (JSON or a CSV timezone column, not a variable); a run copies it', async () => {
    const listId = (await newList({ contacts: [{ phone_number: '+15550250001', timezone: 'Asia/Tokyo' }, { phone_number: '+15550250002' }] })).body.id;
    const csv = 'phone_number,timezone,name\r\n+15550250003,America/Chicago,Di\r\n+15550250004,,Ed\r\n';
    const r = await d.api('POST', `/v1/outbound-lists/${listId}/contacts`, undefined, { rawBody: csv, headers: { 'content-type': 'text/csv' } });
    expect(r.status, r.text).toBe(201);
    const contacts = (await d.api('GET', `/v1/outbound-lists/${listId}/contacts`)).body;
    expect(contacts.map((c: any) => [c.phone_number, c.timezone ?? null, c.variables])).toEqual([
      ['+15550250001', 'Asia/Tokyo', []],
      ['+15550250002', null, []],
      ['+15550250003', 'America/Chicago', [{ key: 'name', value: 'Di' }]],
      ['+15550250004', null, [{ key: 'name', value: 'Ed' }]],
    ]);
    const bad = await d.api('POST', `/v1/outbound-lists/${listId}/contacts`, undefined, { rawBody: 'phone_number,timezone\r\n+15550250005,Europe/Atlantis\r\n', headers: { 'content-type': 'text/csv' } });
    expect(bad.status, bad.text).toBe(400);
    expect(bad.body.error).toMatch(/\[0\]\.timezone: "Europe\/Atlantis"/);
    const run = await d.api('POST', `/v1/outbound-lists/${listId}/runs`, RUN);
    expect(run.status, run.text).toBe(201);
    const runContacts = (await d.api('GET', `/v1/outbound-lists/${listId}/runs/${run.body.id}/contacts`)).body;
    expect(runContacts.map((c: any) => c.timezone ?? null)).toEqual(['Asia/Tokyo', null, 'America/Chicago', null]);
  });

  it('deletes a contact; a run copies the contacts, and a deleted contact is canceled in it', async () => {
    const listId = (await newList({ contacts: [{ phone_number: '+15550300001' }, { phone_number: '+15550300002' }] })).body.id;
    const [first] = (await d.api('GET', `/v1/outbound-lists/${listId}/contacts`)).body;
    const run = await d.api('POST', `/v1/outbound-lists/${listId}/runs`, RUN);
    expect(run.status, run.text).toBe(201);
    expect(run.body).toMatchObject({ list_id: listId, status: 'scheduled', max_concurrent: 2, retry: RUN.retry, counts: { pending: 2, completed: 0 } });
    expect((await d.api('DELETE', `/v1/outbound-lists/${listId}/contacts/${first.id}`)).status).toBe(204);
    expect((await d.api('DELETE', `/v1/outbound-lists/${listId}/contacts/${first.id}`)).status).toBe(404);
    expect((await d.api('GET', `/v1/outbound-lists/${listId}/runs/${run.body.id}`)).body.counts).toMatchObject({ pending: 1, canceled: 1 });
    // One open run per list.
    const second = await d.api('POST', `/v1/outbound-lists/${listId}/runs`, RUN);
    expect(second.status).toBe(409);
    expect(second.body.error).toMatch(/open run/);
    expect((await d.api('GET', `/v1/outbound-lists/${listId}/runs`)).body.map((r: any) => r.id)).toEqual([run.body.id]);
  });

  it('refuses bad run settings with a 400 naming the field', async () => {
    const listId = (await newList({})).body.id;
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ ...RUN, max_concurrent: 0 }, /max_concurrent/],
      [{ ...RUN, retry: { ...RUN.retry, on: ['busy', 'later'] } }, /on/],
      [{ ...RUN, retry: { ...RUN.retry, max_attempts: 0 } }, /max_attempts/],
      [{ ...RUN, window: { timezone: 'Mars/Olympus', days: ['mon'], start: '09:00', end: '17:00' } }, /timezone/],
      [{ ...RUN, window: { timezone: 'UTC', days: ['monday'], start: '09:00', end: '17:00' } }, /days/],
      [{ ...RUN, window: { timezone: 'UTC', days: ['mon'], start: '9am', end: '17:00' } }, /start/],
      [{ ...RUN, machine_detection: { mode: 'sometimes' } }, /mode/],
      [{ ...RUN, pace: 3 }, /pace/],
    ];
    for (const [body, error] of cases) {
      const r = await d.api('POST', `/v1/outbound-lists/${listId}/runs`, body);
      expect(r.status, `${JSON.stringify(body)}: ${r.text}`).toBe(400);
      expect(r.body.error).toMatch(error);
    }
    const ok = await d.api('POST', `/v1/outbound-lists/${listId}/runs`, { ...RUN, calls_per_minute: 30, window: { timezone: 'America/New_York', days: ['mon', 'fri'], start: '22:00', end: '02:00' }, machine_detection: { mode: 'leave_message', message: 'Call us back.' } });
    expect(ok.status, ok.text).toBe(201);
    expect(ok.body).toMatchObject({ calls_per_minute: 30, window: { timezone: 'America/New_York', start: '22:00' }, machine_detection: { mode: 'leave_message' }, counts: { pending: 0 } });
  });

  it('another organization sees none of it; unknown ids are 404, malformed ones 400', async () => {
    const listId = (await newList({ contacts: [{ phone_number: '+15550400001' }] })).body.id;
    const runId = (await d.api('POST', `/v1/outbound-lists/${listId}/runs`, RUN)).body.id;
    const other = await d.newOrgKey('other');
    const key = { key: other };
    expect((await d.api('GET', `/v1/outbound-lists/${listId}`, undefined, key)).status).toBe(404);
    expect((await d.api('GET', `/v1/outbound-lists/${listId}/contacts`, undefined, key)).status).toBe(404);
    expect((await d.api('POST', `/v1/outbound-lists/${listId}/contacts`, { contacts: [{ phone_number: '+15550400002' }] }, key)).status).toBe(404);
    expect((await d.api('GET', `/v1/outbound-lists/${listId}/runs/${runId}`, undefined, key)).status).toBe(404);
    expect((await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/cancel`, undefined, key)).status).toBe(404);
    expect((await d.api('GET', '/v1/outbound-lists', undefined, key)).body).toEqual([]);
    expect((await d.api('POST', '/v1/outbound-lists', { name: 'x', agent_id: agentId, sip_trunk_id: trunkId }, key)).status).toBe(404);
    expect((await d.api('GET', '/v1/outbound-lists/not-a-uuid')).status).toBe(400);
    expect((await d.api('GET', `/v1/calls?outbound_list_run_id=nope`)).status).toBe(400);
    const calls = await d.api('GET', `/v1/calls?outbound_list_run_id=${runId}&outbound_contact_id=${runId}`);
    expect(calls.status, calls.text).toBe(200);
    expect(calls.body.calls).toEqual([]);
    // Canceled by its organization: 200, then 409.
    expect((await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/cancel`)).body.counts).toMatchObject({ canceled: 1 });
    expect((await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/cancel`)).status).toBe(409);
  });
});
