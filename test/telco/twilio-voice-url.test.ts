/**
 * Import points the number's voice webhook at this daemon through the carrier's REST API (POST
 * IncomingPhoneNumbers/{sid}.json, VoiceUrl + VoiceMethod and StatusCallback + StatusCallbackMethod,
 * Basic auth) when http.public_url is set and telco.set_voice_url is on; nothing else of the number
 * is sent. A carrier that refuses
 * the update fails the import (502) and nothing is stored. The fake carrier speaks the carrier's
 * documented REST formats on loopback (test/helpers/fake-carrier.ts). Deleting the import gives
 * the number back the webhook read before import, unless it was changed at the carrier since.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { sid } from './fake-twilio.ts';

const ACCOUNT = sid('AC');
const TOKEN = 'tok-' + sid('');
const PUBLIC = 'https://calls.example.com/';

describe.each([true, false])('telco.set_voice_url %s, http.public_url set', (setVoiceUrl) => {
  let carrier: FakeCarrier;
  let d: TestDaemon;
  beforeAll(async () => {
    carrier = await startFakeCarrier();
    d = await startTestDaemon({ telco: { api_base_url: carrier.url, set_voice_url: setVoiceUrl }, http: { host: '127.0.0.1', port: 0, public_url: PUBLIC } });
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  it(setVoiceUrl ? "sets the number's VoiceUrl, StatusCallback and their methods at import, and nothing else" : 'leaves the number at the carrier alone', async () => {
    const phoneSid = carrier.addNumber(ACCOUNT, TOKEN, '+15550103001');
    const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550103001', account_sid: ACCOUNT, auth_token: TOKEN });
    expect(r.status, r.text).toBe(201);
    const posts = carrier.requests.filter((q) => q.method === 'POST');
    if (!setVoiceUrl) {
      expect(posts).toEqual([]);
      expect(carrier.numberFields(phoneSid)).toBeUndefined();
      // Delete does not write to the carrier either: callbridge did not set the webhook.
      const del = await d.api('DELETE', `/v1/telco/numbers/${r.body.id}`);
      expect(del.status, del.text).toBe(200);
      expect(del.body).toMatchObject({ id: r.body.id, deleted: true, carrier_webhook_restored: false });
      expect(carrier.requests.filter((q) => q.method === 'POST')).toEqual([]);
      expect(carrier.numberFields(phoneSid)).toBeUndefined();
      return;
    }
    expect(posts).toHaveLength(1);
    expect(posts[0]).toMatchObject({
      path: `/2010-04-01/Accounts/${ACCOUNT}/IncomingPhoneNumbers/${phoneSid}.json`,
      authorization: 'Basic ' + Buffer.from(`${ACCOUNT}:${TOKEN}`).toString('base64'),
      form: { VoiceUrl: 'https://calls.example.com/v1/telco/twilio/voice', VoiceMethod: 'POST', StatusCallback: 'https://calls.example.com/v1/telco/twilio/status', StatusCallbackMethod: 'POST' },
    });
    expect(Object.keys(posts[0]!.form!).sort()).toEqual(['StatusCallback', 'StatusCallbackMethod', 'VoiceMethod', 'VoiceUrl']);
    expect(carrier.numberFields(phoneSid)).toEqual({ VoiceUrl: 'https://calls.example.com/v1/telco/twilio/voice', VoiceMethod: 'POST', StatusCallback: 'https://calls.example.com/v1/telco/twilio/status', StatusCallbackMethod: 'POST' });
  });

  it.runIf(setVoiceUrl)('fails the import with 502 when the carrier refuses the update, storing nothing', async () => {
    carrier.addNumber(ACCOUNT, TOKEN, '+15550103002');
    carrier.failNext(500, undefined, 'POST');
    const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550103002', account_sid: ACCOUNT, auth_token: TOKEN });
    expect(r.status, r.text).toBe(502);
    expect(r.body.error).toMatch(/carrier API failed: HTTP 500/);
    expect(r.text).not.toContain(TOKEN);
    const list = await d.api('GET', '/v1/telco/numbers');
    expect(list.body.map((n: any) => n.phone_number)).not.toContain('+15550103002');
    // Retried once the carrier is back: imported and pointed.
    const again = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550103002', account_sid: ACCOUNT, auth_token: TOKEN });
    expect(again.status, again.text).toBe(201);
  });
});

describe('delete gives the number back the webhook it had before import', () => {
  let carrier: FakeCarrier;
  let d: TestDaemon;
  const OURS = { VoiceUrl: 'https://calls.example.com/v1/telco/twilio/voice', VoiceMethod: 'POST', StatusCallback: 'https://calls.example.com/v1/telco/twilio/status', StatusCallbackMethod: 'POST' };
  const OLD = { VoiceUrl: 'https://old.example/voice', VoiceMethod: 'GET' };
  beforeAll(async () => {
    carrier = await startFakeCarrier();
    d = await startTestDaemon({ telco: { api_base_url: carrier.url }, http: { host: '127.0.0.1', port: 0, public_url: PUBLIC } });
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  /** A number at the carrier whose webhook was `OLD`, imported (so pointed at us). */
  async function imported(phone: string, prefix = '/v1/telco/numbers'): Promise<{ phoneSid: string; id: string }> {
    const phoneSid = carrier.addNumber(ACCOUNT, TOKEN, phone);
    carrier.setNumberFields(phoneSid, OLD);
    const r = await d.api('POST', prefix, { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN });
    expect(r.status, r.text).toBe(201);
    expect(carrier.numberFields(phoneSid)).toEqual(OURS);
    return { phoneSid, id: r.body.id };
  }

  it('restores VoiceUrl and VoiceMethod (and clears the status callback that was empty), Basic auth only', async () => {
    const { phoneSid, id } = await imported('+15550105001', '/v1/twilio/numbers');
    const del = await d.api('DELETE', `/v1/twilio/numbers/${id}`);
    expect(del.status, del.text).toBe(200);
    expect(del.body).toEqual({ id, deleted: true, carrier_webhook_restored: true });
    expect(carrier.numberFields(phoneSid)).toEqual({ VoiceUrl: 'https://old.example/voice', VoiceMethod: 'GET', StatusCallback: '', StatusCallbackMethod: 'POST' });
    const posts = carrier.numberPosts(phoneSid);
    expect(posts).toHaveLength(2);
    expect(posts[1]).toEqual({ VoiceUrl: 'https://old.example/voice', VoiceMethod: 'GET', StatusCallback: '', StatusCallbackMethod: 'POST' });
    const restore = carrier.requests.filter((q) => q.method === 'POST' && q.path.includes(phoneSid)).at(-1)!;
    expect(restore.authorization).toBe('Basic ' + Buffer.from(`${ACCOUNT}:${TOKEN}`).toString('base64'));
    for (const q of carrier.requests) expect(q.path + JSON.stringify(q.form ?? {})).not.toContain(TOKEN);
    expect((await d.api('GET', '/v1/telco/numbers')).body.map((n: any) => n.id)).not.toContain(id);
    expect((await d.api('DELETE', `/v1/telco/numbers/${id}`)).status).toBe(404);
  });

  it('leaves a webhook changed at the carrier since import alone', async () => {
    const { phoneSid, id } = await imported('+15550105002');
    carrier.setNumberFields(phoneSid, { VoiceUrl: 'https://someone-else.example/hook' });
    const del = await d.api('DELETE', `/v1/telco/numbers/${id}`);
    expect(del.status, del.text).toBe(200);
    expect(del.body).toMatchObject({ deleted: true, carrier_webhook_restored: false, carrier_webhook_reason: expect.stringMatching(/changed at the carrier/) });
    expect(carrier.numberPosts(phoneSid)).toHaveLength(1);
    expect(carrier.numberFields(phoneSid)!.VoiceUrl).toBe('https://someone-else.example/hook');
  });

  it('still deletes when the restore fails (500), and says so', async () => {
    const { phoneSid, id } = await imported('+15550105003');
    carrier.failNext(500, undefined, 'POST');
    const del = await d.api('DELETE', `/v1/telco/numbers/${id}`);
    expect(del.status, del.text).toBe(200);
    expect(del.body).toMatchObject({ id, deleted: true, carrier_webhook_restored: false, carrier_webhook_reason: expect.stringMatching(/HTTP 500/) });
    expect(del.text).not.toContain(TOKEN);
    expect(carrier.numberFields(phoneSid)).toEqual(OURS);
    expect((await d.api('GET', '/v1/telco/numbers')).body.map((n: any) => n.id)).not.toContain(id);
  });

  it("another organization's delete is 404 and writes nothing to the carrier", async () => {
    const { phoneSid, id } = await imported('+15550105004');
    const other = await d.newOrgKey('intruder');
    for (const prefix of ['/v1/telco/numbers', '/v1/twilio/numbers']) {
      const r = await d.api('DELETE', `${prefix}/${id}`, undefined, { key: other });
      expect(r.status, r.text).toBe(404);
    }
    expect(carrier.numberPosts(phoneSid)).toHaveLength(1);
    expect(carrier.numberFields(phoneSid)).toEqual(OURS);
    expect((await d.api('GET', '/v1/telco/numbers')).body.map((n: any) => n.id)).toContain(id);
  });
});

describe('callbridge telco set-voice-urls (numbers imported earlier)', () => {
  const BIN = join(import.meta.dirname, '..', '..', 'bin', 'callbridge.js');
  let carrier: FakeCarrier;
  let d: TestDaemon;
  const sids: string[] = [];
  beforeAll(async () => {
    carrier = await startFakeCarrier();
    // Imported while the daemon had no public URL: the carrier was not written to.
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } });
    for (const n of ['+15550104001', '+15550104002']) {
      sids.push(carrier.addNumber(ACCOUNT, TOKEN, n));
      expect((await d.api('POST', '/v1/telco/numbers', { phone_number: n, account_sid: ACCOUNT, auth_token: TOKEN })).status).toBe(201);
    }
    expect(carrier.requests.filter((q) => q.method === 'POST')).toEqual([]);
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  /** The command in a child process (async: the fake carrier runs in this one). */
  const run = (args: string[], env: Record<string, string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, CALLBRIDGE_DATA_DIR: d.dataDir, CALLBRIDGE_TELCO_API_BASE_URL: carrier.url, CALLBRIDGE_LOG_LEVEL: 'silent', ...env } });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c) => (stdout += c));
      child.stderr.on('data', (c) => (stderr += c));
      child.on('exit', (code) => resolve({ code, stdout, stderr }));
    });

  it('points every imported number at <public_url>/v1/telco/twilio/voice and says so per number', async () => {
    const r = await run(['telco', 'set-voice-urls'], { CALLBRIDGE_PUBLIC_URL: 'https://calls.example.com' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual([`+15550104001 ${sids[0]} ok`, `+15550104002 ${sids[1]} ok`]);
    for (const s of sids) expect(carrier.numberFields(s)).toEqual({ VoiceUrl: 'https://calls.example.com/v1/telco/twilio/voice', VoiceMethod: 'POST', StatusCallback: 'https://calls.example.com/v1/telco/twilio/status', StatusCallbackMethod: 'POST' });
    expect(r.stdout + r.stderr).not.toContain(TOKEN);
  });

  it('fails with a reason: a carrier error per number (exit 1), no public URL or an unknown --org (exit 2)', async () => {
    carrier.failNext(500, undefined, 'POST');
    const r = await run(['telco', 'set-voice-urls', '--org', 'nobody'], { CALLBRIDGE_PUBLIC_URL: 'https://calls.example.com' });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('no organization named "nobody"');
    const failing = await run(['telco', 'set-voice-urls'], { CALLBRIDGE_PUBLIC_URL: 'https://calls.example.com' });
    expect(failing.code).toBe(1);
    expect(failing.stdout).toContain(`+15550104001 ${sids[0]} failed: carrier API failed: HTTP 500`);
    expect(failing.stdout).toContain(`+15550104002 ${sids[1]} ok`);
    const noUrl = await run(['telco', 'set-voice-urls'], { CALLBRIDGE_PUBLIC_URL: '' });
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toContain('http.public_url');
  });

  it('a second run does not record our own URL as the previous webhook: delete gives back what was there first', async () => {
    // The second number was pointed twice (both runs above); before that its VoiceUrl was unset.
    expect(carrier.numberPosts(sids[1]!)).toHaveLength(2);
    const id = (await d.api('GET', '/v1/telco/numbers')).body.find((n: any) => n.phone_sid === sids[1]).id;
    const del = await d.api('DELETE', `/v1/telco/numbers/${id}`);
    expect(del.status, del.text).toBe(200);
    expect(del.body.carrier_webhook_restored).toBe(true);
    expect(carrier.numberFields(sids[1]!)).toEqual({ VoiceUrl: '', VoiceMethod: 'POST', StatusCallback: '', StatusCallbackMethod: 'POST' });
  });
});
