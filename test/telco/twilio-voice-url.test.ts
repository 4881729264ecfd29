/**
 * Import points the number's voice webhook at this daemon through the carrier's REST API (POST
 * IncomingPhoneNumbers/{sid}.json, VoiceUrl + VoiceMethod, Basic auth) when http.public_url is
 * set and telco.set_voice_url is on; nothing else of the number is sent. A carrier that refuses
 * the update fails the import (502) and nothing is stored. The fake carrier speaks the carrier's
 * documented REST formats on loopback (test/helpers/fake-carrier.ts).
 */
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

  it(setVoiceUrl ? "sets the number's VoiceUrl and VoiceMethod at import, and nothing else" : 'leaves the number at the carrier alone', async () => {
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
      form: { VoiceUrl: 'https://calls.example.com/v1/telco/twilio/voice', VoiceMethod: 'POST' },
    });
    expect(Object.keys(posts[0]!.form!).sort()).toEqual(['VoiceMethod', 'VoiceUrl']);
    expect(carrier.numberFields(phoneSid)).toEqual({ VoiceUrl: 'https://calls.example.com/v1/telco/twilio/voice', VoiceMethod: 'POST' });
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
