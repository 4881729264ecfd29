/**
 * The carrier voice webhook reserves the organization's call slot (bridge.max_calls_per_org) for
 * the call's media stream, across two nodes on one PostgreSQL store: a second webhook while the
 * first call's stream has not started yet is answered busy (the one slot is reserved), the stream
 * on the other node adopts the reservation (the slot moves to that node, and goes when the call
 * ends), and a reservation whose stream never comes is freed once the stream token has expired.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { delay, untilAsync } from '../helpers/until.ts';
import { FakeStream, incomingCallParams, postVoiceWebhook, sid } from './fake-twilio.ts';

const ACCOUNT = sid('AC');
const AUTH_TOKEN = 'twilio-auth-token-' + sid('');
const NUMBER = '+15550606001';
const PUBLIC_URL = 'http://127.0.0.1:9';
/** Node 1's stream tokens (and so its reservations, which last 5 s longer). */
const TOKEN_TTL_MS = 1500;
const pg = postgresAvailability();


describe.skipIf(pg.skip)(`the voice webhook reserves the call's slot for its stream, across nodes${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => {
  let server: PostgresServer;
  let carrier: FakeCarrier;
  let n1: TestDaemon;
  let n2: TestDaemon;

  beforeAll(async () => {
    server = await startPostgres();
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, NUMBER);
    const common = {
      store: { url: await server.createDatabase('webhook_slots'), pool_size: 4 },
      security: { encryption_key: Buffer.alloc(32, 0x41).toString('base64'), token_secret: Buffer.alloc(32, 0x42).toString('base64') },
      telco: { api_base_url: carrier.url },
      bridge: { max_calls_per_org: 1 },
      http: { host: '127.0.0.1', port: 0, public_url: PUBLIC_URL },
    };
    n1 = await startTestDaemon(common, undefined, { carrier: { streamTokenTtlMs: TOKEN_TTL_MS } });
    n2 = await startTestDaemon(common);
    const imported = await n1.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
    expect(imported.status, imported.text).toBe(201);
    const agent = await n1.api('POST', '/v1/agents', { name: 'Desk', phone_number_id: imported.body.id });
    expect(agent.status, agent.text).toBe(201);
  });
  afterAll(async () => {
    await n2?.close();
    await n1?.close();
    await carrier?.close();
    await server?.stop();
  });

  const webhook = (callSid: string) =>
    // The carrier signs the public URL it was given; the request reaches node 1.
    postVoiceWebhook(`${n1.url}/v1/telco/twilio/voice`, incomingCallParams({ accountSid: ACCOUNT, callSid, from: '+15559990601', to: NUMBER }), AUTH_TOKEN, undefined, `${PUBLIC_URL}/v1/telco/twilio/voice`);

  it('a second webhook before the first call\'s stream is busy; the stream on node 2 adopts the slot; the call\'s end frees it', async () => {
    const first = sid('CA');
    const hook = await webhook(first);
    expect(hook.stream, hook.text).toBeDefined();
    expect(await n1.daemon.bridge.slotsHeld()).toBe(1);
    // The organization's one slot is the first call's, although its stream has not started.
    const second = await webhook(sid('CA'));
    expect(second.reject).toBe('busy');

    const stream = await FakeStream.open(`${n2.url.replace(/^http/, 'ws')}/v1/telco/twilio/stream`);
    stream.start({ accountSid: ACCOUNT, callSid: first, customParameters: hook.stream!.parameters });
    await untilAsync(async () => n2.daemon.bridge.active === 1 && (await n2.daemon.bridge.slotsHeld()) === 1, 'node 2 to take the call and its slot');
    expect(await n1.daemon.bridge.slotsHeld()).toBe(0);
    await delay(300);
    expect(stream.closeCode).toBeUndefined();

    stream.stop(ACCOUNT, first);
    await untilAsync(async () => (await n2.daemon.bridge.slotsHeld()) === 0, 'the call\'s slot to go');
    expect((await webhook(sid('CA'))).stream).toBeDefined();
  });

  it('a reservation whose stream never comes is freed after the token expired', async () => {
    // The previous test's last webhook left a reservation too: both expire the same way.
    await untilAsync(async () => (await n1.daemon.bridge.slotsHeld()) === 0, 'node 1\'s reservations to expire', TOKEN_TTL_MS + 8000);
    const hook = await webhook(sid('CA'));
    expect(hook.stream).toBeDefined();
    expect((await webhook(sid('CA'))).reject).toBe('busy');
    await untilAsync(async () => (await n1.daemon.bridge.slotsHeld()) === 0, 'the unused reservation to expire', TOKEN_TTL_MS + 8000);
    expect((await webhook(sid('CA'))).stream).toBeDefined();
  });
});
