/**
 * Import points the number's voice webhook at this daemon through the carrier's REST API (POST
 * IncomingPhoneNumbers/{sid}.json, VoiceUrl + VoiceMethod and StatusCallback + StatusCallbackMethod,
 * Basic auth) when http.public_url is set and telco.set_voice_url is on; nothing else of the number
 * is sent. A carrier that refuses
 * the update fails the import (502) and nothing is stored. The fake carrier speaks the carrier's
 * documented REST formats on loopback (test/helpers/fake-carrier.ts).
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
});
