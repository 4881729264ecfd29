/**
 * bridge.max_calls_per_org on the carrier's voice path, with the organization's one call held by
 * another node on the same PostgreSQL store (a slot row of that node): the voice webhook answers
 * <Reject reason="busy"/> with a log line naming the setting, and a dial from the carrier number
 * is refused 429; once the other node's call ends (its slot goes), the webhook connects a stream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { incomingCallParams, postVoiceWebhook, sid } from './fake-twilio.ts';

const ACCOUNT = sid('AC');
const AUTH_TOKEN = 'twilio-auth-token-' + sid('');
const NUMBER = '+15550107001';
const PUBLIC_URL = 'http://127.0.0.1:9';
const pg = postgresAvailability();

describe.skipIf(pg.skip)(`bridge.max_calls_per_org on the carrier path, across nodes${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => {
  let server: PostgresServer;
  let carrier: FakeCarrier;
  let d: TestDaemon;
  const logLines: string[] = [];
  let orgId = '';
  let agentId = '';

  beforeAll(async () => {
    server = await startPostgres();
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, NUMBER);
    d = await startTestDaemon(
      {
        store: { url: await server.createDatabase('org_limit'), pool_size: 4 },
        security: { encryption_key: Buffer.alloc(32, 0x31).toString('base64'), token_secret: Buffer.alloc(32, 0x32).toString('base64') },
        telco: { api_base_url: carrier.url },
        bridge: { max_calls_per_org: 1 },
        // The carrier's call API is used for dials only with a public URL (its callbacks); nothing calls it here.
        http: { host: '127.0.0.1', port: 0, public_url: PUBLIC_URL },
      },
      undefined,
      {},
      logLines,
    );
    const imported = await d.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
    expect(imported.status, imported.text).toBe(201);
    const agent = await d.api('POST', '/v1/agents', { name: 'Desk', phone_number_id: imported.body.id });
    expect(agent.status, agent.text).toBe(201);
    agentId = agent.body.id;
    orgId = (await d.daemon.store.client.get<{ org_id: string }>('SELECT org_id FROM agents WHERE id = ?', [agentId]))!.org_id;
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
    await server?.stop();
  });

  it('another node holds the organization\'s one call: webhook busy, dial 429; its slot gone: the webhook connects', async () => {
    // The other node's call, as its admission left it in the shared store.
    expect(await d.daemon.store.callSlots.acquire({ id: 'other-call', nodeId: 'node-other', orgId, trunkId: null }, { perOrg: 1, perTrunk: 0 })).toBeUndefined();
    const params = () => incomingCallParams({ accountSid: ACCOUNT, callSid: sid('CA'), from: '+15559990701', to: NUMBER });
    const webhook = `${d.url}/v1/telco/twilio/voice`;
    // The carrier signs the public URL it was given.
    const signedFor = `${PUBLIC_URL}/v1/telco/twilio/voice`;
    const busy = await postVoiceWebhook(webhook, params(), AUTH_TOKEN, undefined, signedFor);
    expect(busy.status, busy.text).toBe(200);
    expect(busy.reject).toBe('busy');
    expect(busy.stream).toBeUndefined();
    expect(logLines.some((l) => l.includes('call rejected busy: the concurrent call limit bridge.max_calls_per_org is reached'))).toBe(true);
    const dial = await d.api('POST', `/v1/agents/${agentId}/dial?number=${encodeURIComponent('+15559990702')}`);
    expect(dial.status, dial.text).toBe(429);
    expect(carrier.requests.filter((r) => r.method === 'POST' && r.path.includes('/Calls'))).toEqual([]);

    await d.daemon.store.callSlots.release('other-call');
    const ok = await postVoiceWebhook(webhook, params(), AUTH_TOKEN, undefined, signedFor);
    expect(ok.status, ok.text).toBe(200);
    expect(ok.stream).toBeDefined();
  });
});
