/**
 * The carrier path's small parts on their own: the signature, the TwiML, the one-time stream
 * tokens, the carrier call id on the call record (migration 7), and that the webhook signs over
 * http.public_url when it is set (the URL the carrier was given, not the one this daemon sees).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Database } from '../../src/store/sqlite-driver.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/store/db.ts';
import { SqliteClient } from '../../src/store/sqlite-client.ts';
import { MIGRATIONS } from '../../src/store/migrations.ts';
import { twilioSignature, validTwilioSignature } from '../../src/telco/twilio-signature.ts';
import { StreamTokens, type StreamGrant } from '../../src/telco/twilio-stream-tokens.ts';
import { connectStreamTwiml, rejectTwiml } from '../../src/telco/twilio-twiml.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { openTestStore, type TestStore } from '../helpers/store-backends.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { parseWav } from '../bridge/wav.ts';
import { FakeStream, incomingCallParams, levelDbfs, postVoiceWebhook, sid, twilioSign } from './fake-twilio.ts';

describe('X-Twilio-Signature', () => {
  const url = 'https://calls.example.com/v1/telco/twilio/voice?x=1';
  const params: Array<[string, string]> = [['To', '+15550001111'], ['From', '+15559990000'], ['CallSid', 'CA1'], ['AccountSid', 'AC1'], ['Caller', 'a b&c=d']];
  it('is the fake carrier’s (independent) computation: URL, then the parameters sorted by name', () => {
    expect(twilioSignature('tok', url, params)).toBe(twilioSign('tok', url, Object.fromEntries(params)));
    expect(validTwilioSignature('tok', url, params, twilioSign('tok', url, Object.fromEntries(params)))).toBe(true);
  });
  it('fails on another token, URL, value, an added parameter, or none at all', () => {
    const good = twilioSignature('tok', url, params);
    expect(validTwilioSignature('other', url, params, good)).toBe(false);
    expect(validTwilioSignature('tok', url.replace('x=1', 'x=2'), params, good)).toBe(false);
    expect(validTwilioSignature('tok', url, [...params.slice(1), ['To', '+15550001112']], good)).toBe(false);
    expect(validTwilioSignature('tok', url, [...params, ['Digits', '1']], good)).toBe(false);
    expect(validTwilioSignature('tok', url, params, undefined)).toBe(false);
    expect(validTwilioSignature('tok', url, params, '')).toBe(false);
    expect(validTwilioSignature('tok', url, params, good.slice(0, -2))).toBe(false);
  });
});

describe('TwiML', () => {
  it('connects a stream with escaped parameters, or rejects', () => {
    expect(connectStreamTwiml('wss://h/s', { token: 'a"b', from: '<x>&' })).toBe(
      '<?xml version="1.0" encoding="UTF-8"?><Response><Connect><Stream url="wss://h/s"><Parameter name="token" value="a&quot;b"/><Parameter name="from" value="&lt;x&gt;&amp;"/></Stream></Connect></Response>',
    );
    expect(rejectTwiml('busy')).toBe('<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="busy"/></Response>');
  });
});

describe('one-time stream tokens', () => {
  const grant: StreamGrant = { orgId: 'o', agentId: 'a', numberId: 'n', callSid: 'CA1', accountSid: 'AC1', from: '+1', to: '+2' };
  // The grants are kept in the store (test/store/stream-grants.test.ts: both backends, several nodes).
  let t0: TestStore;
  beforeAll(async () => {
    t0 = await openTestStore('sqlite');
  });
  afterAll(() => t0.dispose());
  it('are random, redeemed once, and expire', async () => {
    let now = 1000;
    const t = new StreamTokens(t0.store.streamGrants, { ttlMs: 500, now: () => now });
    const a = await t.issue(grant);
    const b = await t.issue(grant);
    expect(a).not.toBe(b);
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(await t.redeem(a)).toEqual(grant);
    expect(await t.redeem(a)).toBeUndefined();
    now += 500;
    expect(await t.redeem(b)).toBeUndefined();
    expect(await t.redeem(undefined)).toBeUndefined();
    expect(await t.redeem(42)).toBeUndefined();
    await t.issue(grant);
    now += 1000;
    expect(await t.pending()).toBe(0);
  });
});

describe('calls.carrier_call_id (migration 7)', () => {
  it('is added as null to the calls of a version-6 database', async () => {
    const d = mkdtempSync(join(tmpdir(), 'callbridge-mig7-'));
    try {
      const db = new Database(join(d, 'db.sqlite'));
      await migrate(new SqliteClient(db), MIGRATIONS.filter((m) => m.version <= 6));
      db.prepare("INSERT INTO organizations (id, name, created_at) VALUES ('0a000000-0000-4000-8000-000000000001', 'old', '2026-01-01T00:00:00.000Z')").run();
      db.prepare(
        "INSERT INTO calls (id, org_id, direction, source, outbound, status, from_number, to_number, party_number, created_at) VALUES ('0c000000-0000-4000-8000-000000000001', '0a000000-0000-4000-8000-000000000001', 'inbound', 'sip', 0, 'started', '+1', '+2', '+1', '2026-01-01T00:00:00.000Z')",
      ).run();
      await migrate(new SqliteClient(db), MIGRATIONS);
      expect(db.prepare('SELECT carrier_call_id FROM calls').get()).toEqual({ carrier_call_id: null });
      db.close();
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});

describe('the voice webhook signs over http.public_url', () => {
  const ACCOUNT = sid('AC');
  const TOKEN = 'tok-' + sid('');
  const NUMBER = '+15550102001';
  let carrier: FakeCarrier;
  let d: TestDaemon;
  beforeAll(async () => {
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, TOKEN, NUMBER);
    d = await startTestDaemon({ telco: { api_base_url: carrier.url }, http: { host: '127.0.0.1', port: 0, public_url: 'https://calls.example.com/' }, rtp: { media_timeout_secs: 1 }, bridge: { recording: true, recording_sample_rate: 8000 } });
    const num = await d.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: ACCOUNT, auth_token: TOKEN });
    expect(num.status, num.text).toBe(201);
    expect((await d.api('POST', '/v1/agents', { name: 'A', first_message: 'Hello, you are being recorded.', phone_number_id: num.body.id })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  it('accepts a signature over the public URL and points the stream there; refuses one over the local URL', async () => {
    const local = `${d.url}/v1/telco/twilio/voice`;
    const params = incomingCallParams({ accountSid: ACCOUNT, callSid: sid('CA'), from: '+15559990000', to: NUMBER });
    const ok = await postVoiceWebhook(local, params, TOKEN, undefined, 'https://calls.example.com/v1/telco/twilio/voice');
    expect(ok.status, ok.text).toBe(200);
    expect(ok.stream?.url).toBe('wss://calls.example.com/v1/telco/twilio/stream');
    expect((await postVoiceWebhook(local, params, TOKEN)).status).toBe(403);
  });

  it('closes a started stream the carrier stopped sending on (rtp.media_timeout_secs, 4408) and ends the call', async () => {
    const callSid = sid('CA');
    const params = incomingCallParams({ accountSid: ACCOUNT, callSid, from: '+15559990000', to: NUMBER });
    const r = await postVoiceWebhook(`${d.url}/v1/telco/twilio/voice`, params, TOKEN, undefined, 'https://calls.example.com/v1/telco/twilio/voice');
    const s = await FakeStream.open(`${d.url.replace(/^http/, 'ws')}/v1/telco/twilio/stream`);
    try {
      s.start({ accountSid: ACCOUNT, callSid, customParameters: r.stream!.parameters });
      await s.waitFor(() => s.frames.length > 0, 10_000, 'agent audio');
      s.goQuiet();
      await Promise.race([s.closed, new Promise((res) => setTimeout(res, 5000))]);
      expect(s.closeCode).toBe(4408);
    } finally {
      s.close();
    }
    let rec: any;
    for (const end = Date.now() + 3000; Date.now() < end && !rec?.ended_at; await new Promise((res) => setTimeout(res, 50))) {
      rec = (await d.api('GET', '/v1/calls?source=twilio')).body.calls.find((c: any) => c.carrier_call_id === callSid);
    }
    expect(rec).toMatchObject({ status: 'ended', source: 'twilio' });
  });

  it('records a stream call like a SIP call (bridge.recording): the caller left, the agent right', async () => {
    const callSid = sid('CA');
    const params = incomingCallParams({ accountSid: ACCOUNT, callSid, from: '+15559990000', to: NUMBER });
    const r = await postVoiceWebhook(`${d.url}/v1/telco/twilio/voice`, params, TOKEN, undefined, 'https://calls.example.com/v1/telco/twilio/voice');
    const s = await FakeStream.open(`${d.url.replace(/^http/, 'ws')}/v1/telco/twilio/stream`);
    try {
      s.start({ accountSid: ACCOUNT, callSid, customParameters: r.stream!.parameters });
      await s.waitFor(() => s.frames.some((f) => levelDbfs(f.pcm) > -45), 10_000, 'the first message');
      // The caller: a 440 Hz tone for a second, after the agent has started.
      const tone = new Int16Array(8000).map((_, i) => Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 8000)));
      s.say(tone);
      await s.said();
      await new Promise((res) => setTimeout(res, 300));
      s.stop(ACCOUNT, callSid);
      await s.closed;
    } finally {
      s.close();
    }
    let rec: any;
    for (const end = Date.now() + 3000; Date.now() < end && !rec?.has_recording; await new Promise((res) => setTimeout(res, 50))) {
      rec = (await d.api('GET', '/v1/calls?source=twilio')).body.calls.find((c: any) => c.carrier_call_id === callSid);
    }
    expect(rec?.has_recording).toBe(true);
    const res = await fetch(`${d.url}/v1/calls/${rec.id}/recording`, { headers: { authorization: `Bearer ${d.key}` } });
    expect(res.status).toBe(200);
    const wav = parseWav(Buffer.from(await res.arrayBuffer()));
    expect(wav).toMatchObject({ channels: 2, sampleRate: 8000, bitsPerSample: 16 });
    expect(levelDbfs(wav.left), 'the caller (left)').toBeGreaterThan(-40);
    expect(levelDbfs(wav.right), 'the agent (right)').toBeGreaterThan(-40);
  });

  it('answers a stream GET without the WebSocket handshake with 426', async () => {
    const r = await fetch(`${d.url}/v1/telco/twilio/stream`);
    expect(r.status).toBe(426);
    expect(await r.json()).toEqual({ error: expect.stringContaining('WebSocket') });
  });
});
