/**
 * Outbound calls from an imported carrier number through the carrier's own call API, hang-up and
 * transfer (docs/telco.md), end to end: a real daemon (embedded runtime: eSpeak voice, energy
 * VAD, local/echo) with http.public_url on its own port, and the fake carrier
 * (test/helpers/fake-carrier.ts) speaking the Calls API (Basic auth, form-encoded, Twilio's JSON),
 * then acting as Twilio: signed status callbacks with delays (initiated, ringing, then in-progress
 * and the TwiML's media stream opened, or busy / no-answer), media paced at 20 ms.
 *
 *   - answered: the agent's first message is heard on the carrier's side (decoded mu-law, loud);
 *     the callee hanging up ends the record (source twilio, the CallSid, outbound)
 *   - enable_first_message_outbound false: nothing is said before the callee speaks
 *   - busy and no-answer end the record as such; nothing streams
 *   - the agent ends the call (its timeout): POST Calls/{sid}.json Status=completed
 *   - a timeout action with a transfer number: POST Calls/{sid}.json Twiml=<Dial>number</Dial>;
 *     a redirect the carrier refuses: the call is hung up instead
 *   - a forged status callback: 403; the carrier refusing or failing the call: 400 / 502 and a failed record
 *   - another organization can neither dial the agent nor assign the number
 *   - both directions: the session has caller_number and called_number (the first message says them)
 *   - inbound stream calls: a signed `completed` status callback ends the session (no hang-up
 *     request); the agent ending the call POSTs Status=completed for the inbound CallSid
 *   - the carrier unreachable: the client's error is a 502 naming ECONNREFUSED
 */
import { createServer } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { AddressInfo } from 'node:net';
import { expectCallTimes } from '../helpers/call-times.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCall, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { FakeStream, incomingCallParams, levelDbfs, postVoiceWebhook, sid, twilioSign } from './fake-twilio.ts';
import { createCarrierClient } from '../../src/telco/carrier-client.ts';
import { loadConfig } from '../../src/config.ts';

const ACCOUNT = sid('AC');
const AUTH_TOKEN = 'twilio-auth-token-' + sid('');
const NUMBER = '+15550202001';
const QUIET_NUMBER = '+15550202002';
const CALLEE = '+15557770001';
const BUSY_CALLEE = '+15557770002';
const NO_ANSWER_CALLEE = '+15557770003';
const TRANSFER_TO = '+15557779999';
// The session variables of a stream call are in it: caller_number and called_number.
const FIRST_MESSAGE = 'Hello from {{caller_number}} to {{called_number}}.';
const LOUD_DBFS = -45;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

async function until<T>(what: string, f: () => T | undefined | false | Promise<T | undefined | false>, ms = 10_000): Promise<T> {
  for (const end = Date.now() + ms; ; await sleep(25)) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
  }
}

describe('outbound carrier calls (Twilio call API + status callbacks + media streams)', () => {
  let carrier: FakeCarrier;
  let d: TestDaemon;
  let publicUrl: string;
  const numberIds: Record<string, string> = {};
  const agents = { caller: '', quiet: '', hangsUp: '', transfers: '' };

  beforeAll(async () => {
    await new LocalEspeakProvider().warmUp();
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, NUMBER);
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, QUIET_NUMBER);
    carrier.callee(BUSY_CALLEE, 'busy');
    carrier.callee(NO_ANSWER_CALLEE, 'no-answer');
    const port = await freePort();
    publicUrl = `http://127.0.0.1:${port}`;
    d = await startTestDaemon({ http: { host: '127.0.0.1', port, public_url: publicUrl }, telco: { api_base_url: carrier.url, timeout_ms: 2000 }, sip: { ring_timeout_secs: 1 } });
    for (const n of [NUMBER, QUIET_NUMBER]) {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: n, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
      expect(r.status, r.text).toBe(201);
      numberIds[n] = r.body.id;
    }
    const mk = async (body: Record<string, unknown>) => {
      const r = await d.api('POST', '/v1/agents', { vad_settings: { start_secs: 0.1, stop_secs: 0.4, silence_timeout_secs: 30 }, ...body });
      expect(r.status, r.text).toBe(201);
      return r.body.id as string;
    };
    agents.caller = await mk({ name: 'Carrier caller', first_message: FIRST_MESSAGE, phone_number_id: numberIds[NUMBER] });
    agents.quiet = await mk({ name: 'Waits to be spoken to', first_message: FIRST_MESSAGE, enable_first_message_outbound: false, phone_number_id: numberIds[QUIET_NUMBER] });
  });

  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  const dial = (agentId: string, to: string, key?: string) => d.api('POST', `/v1/agents/${agentId}/dial?number=${encodeURIComponent(to)}`, undefined, key === undefined ? {} : { key });

  async function placed(agentId: string, to: string): Promise<FakeCall> {
    const before = carrier.calls.length;
    const r = await dial(agentId, to);
    expect(r.status, r.text).toBe(200);
    expect(r.body).toEqual({ success: true });
    return until('the Calls.json request', () => carrier.calls.length > before && carrier.calls[before]);
  }

  async function record(callSid: string, outbound = true): Promise<any> {
    return until(`the ended record of ${callSid}`, async () => {
      const list = await d.api('GET', `/v1/calls?source=twilio&outbound=${outbound}&page_size=100`);
      const rec = (list.body.calls as any[]).find((c) => c.carrier_call_id === callSid);
      return rec?.ended_at ? rec : undefined;
    });
  }

  it('places the call through Calls.json; the answered call streams and the agent\'s first message is heard', async () => {
    const call = await placed(agents.caller, CALLEE);
    // The request as the carrier got it: Basic auth, form-encoded, the documented parameters.
    const req = carrier.requests.find((r) => r.path.endsWith('/Calls.json'))!;
    expect(req.method).toBe('POST');
    expect(req.path).toBe(`/2010-04-01/Accounts/${ACCOUNT}/Calls.json`);
    expect(req.authorization).toBe('Basic ' + Buffer.from(`${ACCOUNT}:${AUTH_TOKEN}`).toString('base64'));
    expect(call.to).toBe(CALLEE);
    expect(call.from).toBe(NUMBER);
    expect(call.statusCallbackEvents).toEqual(['initiated', 'ringing', 'answered', 'completed']);
    expect(call.params.StatusCallbackMethod).toBe('POST');
    expect(call.params.StatusCallback).toMatch(new RegExp(`^${publicUrl}/v1/telco/twilio/status\\?call=[0-9a-f-]{36}$`));
    expect(call.params.Timeout).toBe('1');
    expect(call.params.Twiml).toContain(`<Stream url="ws://127.0.0.1:${new URL(publicUrl).port}/v1/telco/twilio/stream">`);
    expect(call.params.Twiml).toMatch(/<Parameter name="token" value="[A-Za-z0-9_-]{43}"\/>/);

    const stream = await until('the media stream', () => call.stream);
    await stream.waitFor(() => stream.frames.some((f) => levelDbfs(f.pcm) > LOUD_DBFS), 15_000, "the agent's first message");
    expect(stream.frames.every((f) => f.bytes === 160)).toBe(true);
    expect(call.callbacks.map((c) => c.status)).toEqual(['initiated', 'ringing', 'in-progress']);
    expect(call.callbacks.every((c) => c.answer === 204)).toBe(true);
    // A stream carries no silence: the message is over when the agent's frames stop coming.
    await stream.waitFor(() => performance.now() - stream.frames.at(-1)!.at > 700, 15_000, 'the first message to finish');

    call.hangup();
    const rec = await record(call.sid);
    expect(rec).toMatchObject({ source: 'twilio', direction: 'outbound', outbound: true, from: NUMBER, to: CALLEE, party_number: CALLEE, status: 'ended', end_status: 'completed', carrier_call_id: call.sid });
    expectCallTimes(rec);
    expect(rec.sip_trunk_id).toBeUndefined();
    // caller_number is our number, called_number the callee's.
    expect(rec.transcript.entries.find((e: any) => e.role === 'assistant')?.message).toBe(`Hello from ${NUMBER} to ${CALLEE}.`);
    await call.done;
    // The callee hung up: nothing to hang up through the call API.
    expect(call.updates).toEqual([]);
  });

  it('enable_first_message_outbound false: the agent says nothing before the callee speaks', async () => {
    const call = await placed(agents.quiet, CALLEE);
    const stream = await until('the media stream', () => call.stream);
    await sleep(2000);
    expect(stream.frames.filter((f) => levelDbfs(f.pcm) > LOUD_DBFS)).toEqual([]);
    call.hangup();
    const rec = await record(call.sid);
    expect(rec.transcript.entries.filter((e: any) => e.role === 'assistant')).toEqual([]);
  });

  it('busy and no-answer end the record as such, with nothing streamed', async () => {
    const busy = await placed(agents.caller, BUSY_CALLEE);
    const noAnswer = await placed(agents.caller, NO_ANSWER_CALLEE);
    const busyRec = await record(busy.sid);
    expect(busyRec).toMatchObject({ status: 'ended', end_status: 'busy', termination_reason: 'busy (486)', source: 'twilio', carrier_call_id: busy.sid });
    const noAnswerRec = await record(noAnswer.sid);
    expect(noAnswerRec).toMatchObject({ status: 'ended', end_status: 'no_answer', source: 'twilio', carrier_call_id: noAnswer.sid });
    expect(noAnswerRec.termination_reason).toMatch(/^no_answer/);
    expect(busy.stream).toBeUndefined();
    expect(noAnswer.stream).toBeUndefined();
    expect(busy.callbacks.map((c) => c.status)).toEqual(['initiated', 'busy']);
    expect(noAnswer.callbacks.map((c) => c.status)).toEqual(['initiated', 'ringing', 'no-answer']);
  });

  it('the agent ending the call hangs it up through the call API (Status=completed)', async () => {
    agents.hangsUp = (await d.api('POST', '/v1/agents', { name: 'Short caller', first_message: 'Hi.', phone_number_id: null, timeout_settings: { default_timeout: 2 } })).body.id;
    // The number moves to this agent for the test (one agent holds a number).
    expect((await d.api('PATCH', `/v1/agents/${agents.caller}`, { phone_number_id: null })).status).toBe(200);
    expect((await d.api('PATCH', `/v1/agents/${agents.hangsUp}`, { phone_number_id: numberIds[NUMBER] })).status).toBe(200);
    try {
      const call = await placed(agents.hangsUp, CALLEE);
      await until('the media stream', () => call.stream);
      await until('Status=completed from callbridge', () => call.updates.some((u) => u.Status === 'completed'), 15_000);
      expect(call.updates).toEqual([{ Status: 'completed' }]);
      const rec = await record(call.sid);
      expect(rec).toMatchObject({ termination_reason: 'timeout', outcome: 'ended_by_agent', carrier_call_id: call.sid });
    } finally {
      await d.api('PATCH', `/v1/agents/${agents.hangsUp}`, { phone_number_id: null });
      await d.api('PATCH', `/v1/agents/${agents.caller}`, { phone_number_id: numberIds[NUMBER] });
    }
  });

  it('a transfer redirects the live call to <Dial> of the transfer number and ends the session', async () => {
    agents.transfers = (await d.api('POST', '/v1/agents', { name: 'Transferring caller', first_message: 'One moment.', timeout_settings: { default_timeout: 2, timeout_action: 'transfer_call', transfer_number: TRANSFER_TO } })).body.id;
    expect((await d.api('PATCH', `/v1/agents/${agents.caller}`, { phone_number_id: null })).status).toBe(200);
    expect((await d.api('PATCH', `/v1/agents/${agents.transfers}`, { phone_number_id: numberIds[NUMBER] })).status).toBe(200);
    try {
      const call = await placed(agents.transfers, CALLEE);
      const stream = await until('the media stream', () => call.stream);
      await until('the redirect', () => call.dialled, 15_000);
      expect(call.updates).toHaveLength(1);
      expect(call.updates[0]!.Twiml).toMatch(new RegExp(`<Response><Dial>\\${TRANSFER_TO}</Dial></Response>$`));
      const rec = await record(call.sid);
      expect(rec).toMatchObject({ termination_reason: 'transfer', outcome: 'transferred', carrier_call_id: call.sid });
      await stream.closed;
      await call.done;
      // Transferred: never hung up through the API afterwards.
      expect(call.updates.some((u) => u.Status !== undefined)).toBe(false);
    } finally {
      await d.api('PATCH', `/v1/agents/${agents.transfers}`, { phone_number_id: null });
      await d.api('PATCH', `/v1/agents/${agents.caller}`, { phone_number_id: numberIds[NUMBER] });
    }
  });

  it('a transfer the carrier refuses hangs the call up (Status=completed) instead', async () => {
    expect((await d.api('PATCH', `/v1/agents/${agents.caller}`, { phone_number_id: null })).status).toBe(200);
    expect((await d.api('PATCH', `/v1/agents/${agents.transfers}`, { phone_number_id: numberIds[NUMBER] })).status).toBe(200);
    try {
      const call = await placed(agents.transfers, CALLEE);
      await until('the media stream', () => call.stream);
      // The next request to the carrier is the redirect: it fails.
      carrier.failNext(500, undefined, 'POST');
      const path = `/2010-04-01/Accounts/${ACCOUNT}/Calls/${call.sid}.json`;
      await until('the hang-up after the refused redirect', () => carrier.requests.filter((q) => q.path === path).length >= 2, 15_000);
      expect(carrier.requests.filter((q) => q.path === path).map((q) => Object.keys(q.form ?? {}))).toEqual([['Twiml'], ['Status']]);
      expect(call.updates).toEqual([{ Status: 'completed' }]);
      expect(call.dialled).toBeUndefined();
    } finally {
      await d.api('PATCH', `/v1/agents/${agents.transfers}`, { phone_number_id: null });
      await d.api('PATCH', `/v1/agents/${agents.caller}`, { phone_number_id: numberIds[NUMBER] });
    }
  });

  it('refuses a forged status callback with 403, and one for an unknown account', async () => {
    const url = `${publicUrl}/v1/telco/twilio/status`;
    const params = { AccountSid: ACCOUNT, CallSid: sid('CA'), CallStatus: 'completed', CallbackSource: 'call-progress-events' };
    const post = (signature: string | undefined, p: Record<string, string> = params) =>
      fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...(signature ? { 'x-twilio-signature': signature } : {}) }, body: new URLSearchParams(p).toString() });
    expect((await post(twilioSign('not-the-token', url, params))).status).toBe(403);
    expect((await post(undefined)).status).toBe(403);
    const other = { ...params, AccountSid: sid('AC') };
    expect((await post(twilioSign(AUTH_TOKEN, url, other), other)).status).toBe(403);
    // Correctly signed, about no call of ours: accepted and ignored.
    expect((await post(twilioSign(AUTH_TOKEN, url, params))).status).toBe(204);
  });

  it('the carrier refusing or failing the call: 400 / 502 with the reason, and a failed record', async () => {
    const bad = await dial(agents.caller, '4100');
    expect(bad.status, bad.text).toBe(400);
    expect(bad.body.error).toMatch(/carrier refused the call: Invalid 'To' Phone Number.*21211/);
    carrier.failNext(500, undefined, 'POST');
    const down = await dial(agents.caller, CALLEE);
    expect(down.status, down.text).toBe(502);
    expect(down.body.error).toMatch(/carrier API failed: HTTP 500 placing the call/);
    carrier.delayNext(4000);
    const slow = await dial(agents.caller, CALLEE);
    expect(slow.status, slow.text).toBe(502);
    expect(slow.body.error).toMatch(/no answer within 2000 ms/);
    expect(JSON.stringify([bad.body, down.body, slow.body])).not.toContain(AUTH_TOKEN);
    const list = await d.api('GET', `/v1/calls?outbound=true&agent_ids=${agents.caller}&page_size=100`);
    const failed = (list.body.calls as any[]).filter((c) => c.end_status === 'failed' && !c.carrier_call_id);
    expect(failed.map((c) => c.termination_reason).sort()).toEqual([
      expect.stringMatching(/^carrier_failed: carrier API failed: HTTP 500/),
      expect.stringMatching(/^carrier_failed: carrier API failed: no answer within/),
      expect.stringMatching(/^carrier_refused: carrier refused the call/),
    ]);
    expect(failed.every((c) => c.source === 'twilio' && c.status === 'ended')).toBe(true);
  });

  it('another organization can neither dial the agent nor assign the number', async () => {
    const otherKey = await d.newOrgKey('other org');
    const before = carrier.calls.length;
    const r = await dial(agents.caller, CALLEE, otherKey);
    expect(r.status).toBe(404);
    const theirs = await d.api('POST', '/v1/agents', { name: 'Thief', phone_number_id: numberIds[NUMBER] }, { key: otherKey });
    expect(theirs.status).not.toBe(201);
    expect(carrier.calls.length).toBe(before);
  });

  it('inbound stream calls: a completed status callback ends the session; the agent ending one hangs it up through the API', async () => {
    const inbound = async (to: string) => {
      const callSid = sid('CA');
      const hook = await postVoiceWebhook(`${publicUrl}/v1/telco/twilio/voice`, incomingCallParams({ accountSid: ACCOUNT, callSid, from: '+15559990202', to }), AUTH_TOKEN);
      expect(hook.stream, hook.text).toBeDefined();
      const stream = await FakeStream.open(hook.stream!.url);
      stream.start({ accountSid: ACCOUNT, callSid, customParameters: hook.stream!.parameters });
      return { callSid, stream };
    };
    const calls = (callSid: string) => carrier.requests.filter((r) => r.path === `/2010-04-01/Accounts/${ACCOUNT}/Calls/${callSid}.json`);

    // The caller hangs up and only the status callback says so: the stream is closed, the record ends.
    const a = await inbound(NUMBER);
    await a.stream.waitFor(() => a.stream.frames.some((f) => levelDbfs(f.pcm) > LOUD_DBFS), 15_000, "the agent's first message");
    await a.stream.waitFor(() => performance.now() - a.stream.frames.at(-1)!.at > 700, 15_000, 'the first message to finish');
    const url = `${publicUrl}/v1/telco/twilio/status`;
    const params = { AccountSid: ACCOUNT, CallSid: a.callSid, CallStatus: 'completed', CallDuration: '3', CallbackSource: 'call-progress-events', Direction: 'inbound', From: '+15559990202', To: NUMBER };
    const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': twilioSign(AUTH_TOKEN, url, params) }, body: new URLSearchParams(params).toString() });
    expect(r.status).toBe(204);
    await until('the stream closed by callbridge', () => a.stream.closeCode !== undefined);
    expect(a.stream.closeCode).toBe(1000);
    const recA = await record(a.callSid, false);
    expect(recA).toMatchObject({ direction: 'inbound', termination_reason: 'client_closed', carrier_call_id: a.callSid });
    // Inbound, caller_number is the caller and called_number the imported number.
    expect(recA.transcript.entries.find((e: any) => e.role === 'assistant')?.message).toBe(`Hello from +15559990202 to ${NUMBER}.`);
    expect(calls(a.callSid)).toEqual([]);

    // The agent ends an inbound call (its default_timeout): Status=completed for that CallSid.
    expect((await d.api('PATCH', `/v1/agents/${agents.caller}`, { timeout_settings: { default_timeout: 2 } })).status).toBe(200);
    try {
      const b = await inbound(NUMBER);
      await until('Status=completed for the inbound call', () => calls(b.callSid).length > 0);
      expect(calls(b.callSid).map((q) => q.form)).toEqual([{ Status: 'completed' }]);
      expect(calls(b.callSid)[0]!.authorization).toBe('Basic ' + Buffer.from(`${ACCOUNT}:${AUTH_TOKEN}`).toString('base64'));
    } finally {
      await d.api('PATCH', `/v1/agents/${agents.caller}`, { timeout_settings: { default_timeout: 1800 } });
    }
  });

  it('the carrier unreachable: the call API client fails with a 502 naming the socket error', async () => {
    const closed = await freePort();
    const client = createCarrierClient(loadConfig({ data_dir: d.dataDir, telco: { api_base_url: `http://127.0.0.1:${closed}`, timeout_ms: 2000 } }, {}));
    const err = await client.createCall(ACCOUNT, AUTH_TOKEN, { to: CALLEE, from: NUMBER, twiml: '<Response/>', statusCallback: `${publicUrl}/v1/telco/twilio/status`, timeoutSecs: 5 }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'bad_gateway', message: expect.stringMatching(/^carrier API failed: ECONNREFUSED \(placing the call\)$/) });
    expect(String((err as Error).message)).not.toContain(AUTH_TOKEN);
  });
});
