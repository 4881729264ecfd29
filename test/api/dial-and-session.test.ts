/**
 * Dial and session-token: every documented error. A valid dial answers 503 until the call bridge
 * exists (never a fake success); a valid session-token request answers its token.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier } from '../helpers/fake-carrier.ts';

const MISSING = '00000000-0000-4000-8000-000000000000';

describe('POST /v1/agents/{id}/dial', () => {
  let d: TestDaemon;
  let carrier: Awaited<ReturnType<typeof startFakeCarrier>>;
  let agent: any;
  let trunk: any;
  beforeAll(async () => {
    carrier = await startFakeCarrier();
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } });
    agent = (await d.api('POST', '/v1/agents', { name: 'Caller' })).body;
    trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'T', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.0/8'], outbound_host: '127.0.0.1:5090' })).body;
    expect(trunk.id).toBeDefined();
  });
  afterAll(async () => {
    await d.close();
    await carrier.close();
  });

  const dial = (query: string, body?: unknown, id = agent.id) => d.api('POST', `/v1/agents/${id}/dial${query}`, body);

  it('400 without a number, with a malformed one, or with number and destination disagreeing', async () => {
    for (const q of ['', '?number=', '?number=call-me', '?number=%2B1555&destination=%2B1666', '?number=%2B15551234567&bogus=1']) {
      const r = await dial(q);
      expect(r.status, q).toBe(400);
      expect(typeof r.body.error).toBe('string');
    }
  });

  it('404 for a missing or inactive agent, and for a missing trunk', async () => {
    expect((await dial('?number=%2B15551234567', undefined, MISSING)).status).toBe(404);
    const sleepy = (await d.api('POST', '/v1/agents', { name: 'Off', status: 'inactive' })).body;
    expect((await dial('?number=%2B15551234567', undefined, sleepy.id)).status).toBe(404);
    expect((await dial(`?number=%2B15551234567&sip_trunk_id=${MISSING}`)).status).toBe(404);
  });

  it('403 when the agent has no assignment on the trunk', async () => {
    const r = await dial(`?number=%2B15551234567&sip_trunk_id=${trunk.id}`);
    expect(r.status).toBe(403);
    expect(r.body.error).toMatch(/assignment/);
  });

  it('400 on the carrier route when the agent has no carrier number', async () => {
    const r = await dial('?destination=%2B15551234567');
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/carrier number/);
  });

  it('400 for malformed variables', async () => {
    for (const body of [{ variables: [{ key: 'a' }] }, { variables: [{ key: 'a', value: 1 }] }, { variables: {} }, { vars: [] }]) {
      expect((await dial(`?number=%2B15551234567&sip_trunk_id=${trunk.id}`, body)).status, JSON.stringify(body)).toBe(400);
    }
  });

  it('a valid trunk dial is placed (200, a started outbound call record); the carrier route answers 503 saying what is missing', async () => {
    const a = await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: '4000' });
    expect(a.status).toBe(201);
    const viaTrunk = await dial(`?number=%2B15551234567&sip_trunk_id=${trunk.id}&caller_id=%2B15550000000&first_message=Hi&prompt=Sell`, {
      variables: [{ key: 'name', value: 'Ada' }],
    });
    expect(viaTrunk.status, viaTrunk.text).toBe(200);
    expect(viaTrunk.body).toEqual({ success: true });
    // The record exists when the answer comes; nothing listens on the trunk's host, so it rings.
    const calls = await d.api('GET', `/v1/calls?outbound=true&agent_ids=${agent.id}`);
    expect(calls.status).toBe(200);
    const rec = calls.body.calls.find((c: any) => c.to === '+15551234567');
    expect(rec).toMatchObject({ direction: 'outbound', outbound: true, source: 'sip', party_number: '+15551234567', agent_id: agent.id, sip_trunk_id: trunk.id, from: '+15550000000', to: '+15551234567' });
    // Ringing (started), or already given up on if the loopback port refused it; never answered.
    expect(['started', 'ended']).toContain(rec.status);
    expect(rec).not.toHaveProperty('started_at');

    carrier.addNumber('AC1', 'tok', '+15557654321');
    const num = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15557654321', account_sid: 'AC1', auth_token: 'tok' });
    expect(num.status).toBe(201);
    await d.api('PATCH', `/v1/agents/${agent.id}`, { phone_number_id: num.body.id });
    const viaCarrier = await dial('?destination=%2B15551234567');
    expect(viaCarrier.status).toBe(503);
    expect(viaCarrier.body.error).toMatch(/carrier number \+15557654321 need a SIP trunk for its carrier account AC1: add it to telco.outbound_trunks, or pass sipTrunkId/);
  });

  it('400 when the trunk has no outbound_host to call through', async () => {
    const t = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'Inbound only', inbound_auth_type: 'acl', inbound_acl: ['10.0.0.0/8'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${t.id}/assignments`, { agent_id: agent.id, alternate_number: '4001' })).status).toBe(201);
    const r = await dial(`?number=%2B15551234567&sip_trunk_id=${t.id}`);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/no outbound_host/);
  });
});

describe('POST /v1/session-token', () => {
  let d: TestDaemon;
  let agent: any;
  beforeAll(async () => {
    d = await startTestDaemon();
    agent = (await d.api('POST', '/v1/agents', { name: 'Talker' })).body;
  });
  afterAll(() => d.close());

  const token = (body: unknown) => d.api('POST', '/v1/session-token', body);

  it('400 for a missing or malformed agent_id, bad fields, unknown fields', async () => {
    for (const body of [
      {},
      { agent_id: 'x' },
      { agent_id: agent.id, version_id: 'v1' },
      { agent_id: agent.id, chat_id: '1' },
      { agent_id: agent.id, transport: 'sip' },
      { agent_id: agent.id, chat: 'yes' },
      { agent_id: agent.id, variables: [{ key: 'k' }] },
      { agent_id: agent.id, caller_id: '' },
      { agent_id: agent.id, colour: 'red' },
    ]) {
      const r = await token(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
    }
  });

  it('404 for a missing or inactive agent, or a version that is not the agent’s', async () => {
    expect((await token({ agent_id: MISSING })).status).toBe(404);
    const off = (await d.api('POST', '/v1/agents', { name: 'Off', status: 'inactive' })).body;
    expect((await token({ agent_id: off.id })).status).toBe(404);
    const other = (await d.api('POST', '/v1/agents', { name: 'Other' })).body;
    const v = (await d.api('POST', `/v1/agents/${other.id}/versions`, { tag: 'x' })).body;
    expect((await token({ agent_id: agent.id, version_id: v.id })).status).toBe(404);
  });

  it('503 for webrtc with no media server configured', async () => {
    const r = await token({ agent_id: agent.id, transport: 'webrtc' });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatch(/webrtc/);
  });

  it('200 with a token for a valid request (details in test/session/)', async () => {
    const v = (await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 'x' })).body;
    for (const body of [
      { agent_id: agent.id },
      { agent_id: agent.id, version_id: v.id, caller_id: '+15551234567', transport: 'websocket', first_message: 'Hi', prompt: 'p', chat: true, variables: [{ key: 'a', value: 'b' }] },
    ]) {
      const r = await token(body);
      expect(r.status).toBe(200);
      expect(Object.keys(r.body)).toEqual(['token']);
      expect(r.body.token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    }
  });
});

describe('agent phone_number_id', () => {
  let d: TestDaemon;
  let carrier: Awaited<ReturnType<typeof startFakeCarrier>>;
  let number: any;
  beforeAll(async () => {
    carrier = await startFakeCarrier();
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } });
    carrier.addNumber('AC9', 'secret-token', '+4930123456');
    number = (await d.api('POST', '/v1/telco/numbers', { phone_number: '+4930123456', account_sid: 'AC9', auth_token: 'secret-token', label: 'Berlin' })).body;
  });
  afterAll(async () => {
    await d.close();
    await carrier.close();
  });

  it('assigns a number of the organization on create, clears it with null on PATCH', async () => {
    const a = await d.api('POST', '/v1/agents', { name: 'Numbered', phone_number_id: number.id });
    expect(a.status).toBe(201);
    expect(a.body.phone_number_id).toBe(number.id);
    const keep = await d.api('PATCH', `/v1/agents/${a.body.id}`, { prompt: 'x' });
    expect(keep.body.phone_number_id).toBe(number.id);
    const cleared = await d.api('PATCH', `/v1/agents/${a.body.id}`, { phone_number_id: null });
    expect(cleared.status).toBe(200);
    expect(cleared.body.phone_number_id).toBe('');
    expect((await d.api('GET', `/v1/agents/${a.body.id}`)).body.phone_number_id).toBe('');
  });

  it('400 for a number that does not exist or belongs to another organization', async () => {
    expect((await d.api('POST', '/v1/agents', { name: 'x', phone_number_id: MISSING })).status).toBe(400);
    const other = await d.newOrgKey('other');
    const r = await d.api('POST', '/v1/agents', { name: 'x', phone_number_id: number.id }, { key: other });
    expect(r.status).toBe(400);
    expect(r.body.error).toContain('phone_number_id');
  });

  it('409 when another agent already holds the number', async () => {
    const a = (await d.api('POST', '/v1/agents', { name: 'Holder', phone_number_id: number.id })).body;
    const b = (await d.api('POST', '/v1/agents', { name: 'Taker' })).body;
    const r = await d.api('PATCH', `/v1/agents/${b.id}`, { phone_number_id: number.id });
    expect(r.status).toBe(409);
    expect(r.body.error).toContain(a.id);
    expect((await d.api('GET', `/v1/agents/${b.id}`)).body.phone_number_id).toBe('');
    // Re-sending an agent's own number is not a conflict.
    expect((await d.api('PATCH', `/v1/agents/${a.id}`, { phone_number_id: number.id })).status).toBe(200);
  });
});
