/**
 * One CallSid is at most one call, however often its signed voice webhook arrives (the carrier's
 * retry, or a replay: the signature has no timestamp), over real sockets with the fake carrier:
 *
 *   - the same signed webhook N times before the stream: N identical answers (the same stream URL
 *     and token), one grant in the store
 *   - the call's stream starts once: one session, one call record; a second stream with the same
 *     token is closed 4409 and opens no session; the webhook once more is <Reject/>
 *   - across two nodes on one PostgreSQL store: the same webhook to both at once gives one token,
 *     and the second stream (on the other node) is closed 4409
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { delay, untilAsync } from '../helpers/until.ts';
import { FakeStream, incomingCallParams, postVoiceWebhook, sid } from './fake-twilio.ts';

const ACCOUNT = sid('AC');
const AUTH_TOKEN = 'twilio-auth-token-' + sid('');
const NUMBER = '+15550707001';
const CALLER = '+15559990701';
const pg = postgresAvailability();

async function importAndAssign(d: TestDaemon): Promise<void> {
  const imported = await d.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
  expect(imported.status, imported.text).toBe(201);
  const agent = await d.api('POST', '/v1/agents', { name: 'Desk', first_message: 'Hello.', phone_number_id: imported.body.id });
  expect(agent.status, agent.text).toBe(201);
}

/** The call records of a CallSid. */
async function recordsOf(d: TestDaemon, callSid: string): Promise<any[]> {
  const list = await d.api('GET', '/v1/calls?source=twilio&page_size=100');
  expect(list.status, list.text).toBe(200);
  return (list.body.calls as any[]).filter((c) => c.carrier_call_id === callSid);
}

const wsOf = (url: string) => `${url.replace(/^http/, 'ws')}/v1/telco/twilio/stream`;

describe('the voice webhook is idempotent per CallSid (one node)', () => {
  let carrier: FakeCarrier;
  let d: TestDaemon;
  let webhook: string;

  beforeAll(async () => {
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, NUMBER);
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } });
    webhook = `${d.url}/v1/telco/twilio/voice`;
    await importAndAssign(d);
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  it('answers a replayed webhook the same, opens one stream, one session and one record', async () => {
    const callSid = sid('CA');
    const params = incomingCallParams({ accountSid: ACCOUNT, callSid, from: CALLER, to: NUMBER });
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push(await postVoiceWebhook(webhook, params, AUTH_TOKEN));
    // Five at once too (a retry racing the first answer).
    answers.push(...(await Promise.all(Array.from({ length: 5 }, () => postVoiceWebhook(webhook, params, AUTH_TOKEN)))));
    for (const a of answers) {
      expect(a.status, a.text).toBe(200);
      expect(a.text).toBe(answers[0]!.text);
    }
    const token = answers[0]!.stream!.parameters.token!;
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(await d.daemon.store.streamGrants.pending(new Date().toISOString())).toBe(1);

    const first = await FakeStream.open(wsOf(d.url));
    first.start({ accountSid: ACCOUNT, callSid, customParameters: answers[0]!.stream!.parameters });
    await untilAsync(async () => d.daemon.bridge.active === 1 && (await recordsOf(d, callSid)).length === 1, 'the call to be bridged and recorded');

    // Every other answer's stream (the same token): closed 4409, no second session.
    const second = await FakeStream.open(wsOf(d.url));
    second.start({ accountSid: ACCOUNT, callSid, customParameters: answers[3]!.stream!.parameters });
    await second.closed;
    expect(second.closeCode).toBe(4409);
    await delay(300);
    expect(d.daemon.bridge.active).toBe(1);
    expect(first.closeCode).toBeUndefined();

    // The webhook once more, the call in progress: no second call.
    const late = await postVoiceWebhook(webhook, params, AUTH_TOKEN);
    expect(late.reject).toBe('rejected');

    first.stop(ACCOUNT, callSid);
    await untilAsync(async () => d.daemon.bridge.active === 0 && (await recordsOf(d, callSid))[0]?.ended_at != null, 'the call to end');
    expect(await recordsOf(d, callSid)).toHaveLength(1);
    // After the call, still none (the record carries the CallSid).
    expect((await postVoiceWebhook(webhook, params, AUTH_TOKEN)).reject).toBe('rejected');
    expect(await recordsOf(d, callSid)).toHaveLength(1);
  });

  it('another CallSid is another call with another token', async () => {
    const a = await postVoiceWebhook(webhook, incomingCallParams({ accountSid: ACCOUNT, callSid: sid('CA'), from: CALLER, to: NUMBER }), AUTH_TOKEN);
    const b = await postVoiceWebhook(webhook, incomingCallParams({ accountSid: ACCOUNT, callSid: sid('CA'), from: CALLER, to: NUMBER }), AUTH_TOKEN);
    expect(a.stream!.parameters.token).not.toBe(b.stream!.parameters.token);
  });
});

describe.skipIf(pg.skip)(`the voice webhook is idempotent per CallSid across nodes${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => {
  let server: PostgresServer;
  let carrier: FakeCarrier;
  let n1: TestDaemon;
  let n2: TestDaemon;
  const PUBLIC_URL = 'http://127.0.0.1:9';

  beforeAll(async () => {
    server = await startPostgres();
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, NUMBER);
    const common = {
      store: { url: await server.createDatabase('webhook_replay'), pool_size: 4 },
      security: { encryption_key: Buffer.alloc(32, 0x41).toString('base64'), token_secret: Buffer.alloc(32, 0x42).toString('base64') },
      telco: { api_base_url: carrier.url },
      http: { host: '127.0.0.1', port: 0, public_url: PUBLIC_URL },
    };
    n1 = await startTestDaemon(common);
    n2 = await startTestDaemon(common);
    await importAndAssign(n1);
  });
  afterAll(async () => {
    await n2?.close();
    await n1?.close();
    await carrier?.close();
    await server?.stop();
  });

  it('the same webhook on both nodes at once: one token; the second stream, on the other node, is closed 4409', async () => {
    const callSid = sid('CA');
    const params = incomingCallParams({ accountSid: ACCOUNT, callSid, from: CALLER, to: NUMBER });
    const post = (n: TestDaemon) => postVoiceWebhook(`${n.url}/v1/telco/twilio/voice`, params, AUTH_TOKEN, undefined, `${PUBLIC_URL}/v1/telco/twilio/voice`);
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => post(i % 2 === 0 ? n1 : n2)));
    for (const a of answers) expect(a.text, a.text).toBe(answers[0]!.text);
    expect(answers[0]!.stream).toBeDefined();

    const first = await FakeStream.open(wsOf(n2.url));
    first.start({ accountSid: ACCOUNT, callSid, customParameters: answers[0]!.stream!.parameters });
    await untilAsync(async () => n2.daemon.bridge.active === 1 && (await recordsOf(n1, callSid)).length === 1, 'node 2 to bridge and record the call');
    const second = await FakeStream.open(wsOf(n1.url));
    second.start({ accountSid: ACCOUNT, callSid, customParameters: answers[1]!.stream!.parameters });
    await second.closed;
    expect(second.closeCode).toBe(4409);
    expect(n1.daemon.bridge.active).toBe(0);
    expect((await post(n1)).reject).toBe('rejected');
    first.stop(ACCOUNT, callSid);
    await untilAsync(async () => n2.daemon.bridge.active === 0, 'the call to end');
    expect(await recordsOf(n1, callSid)).toHaveLength(1);
  });
});
