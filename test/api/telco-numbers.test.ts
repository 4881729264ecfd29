/**
 * Telco numbers against a real daemon and a fake carrier speaking the carrier's REST wire
 * protocol over loopback HTTP: import (and every way the carrier can fail), list, relabel,
 * organization isolation, secrets at rest and in logs, restart.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/sqlite-driver.ts';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/log.ts';
import { INITIAL_KEY_FILE, startDaemon } from '../../src/main.ts';

const ACCOUNT = 'AC0123456789abcdef0123456789abcdef';
const TOKEN = 'carrier-token-3f9a1c7e5b2d4f6a8c0e';
const FIELDS = ['account_sid', 'created_at', 'id', 'label', 'phone_number', 'phone_sid', 'updated_at'];
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ISO_RE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const MISSING_ID = '00000000-0000-4000-8000-000000000000';

const basic = (user: string, password: string) => 'Basic ' + Buffer.from(`${user}:${password}`).toString('base64');

let serial = 0;
/** A number no other test uses: +1 555 01x xxxx. */
const freshNumber = () => `+1555010${String(serial++).padStart(4, '0')}`;

describe('telco numbers', () => {
  let carrier: FakeCarrier;
  let d: TestDaemon;

  /** A number the carrier lists in ACCOUNT, imported; returns the API response. */
  async function importNew(extra: Record<string, unknown> = {}) {
    const phone = freshNumber();
    const sid = carrier.addNumber(ACCOUNT, TOKEN, phone);
    const r = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN, ...extra });
    expect(r.status).toBe(201);
    return { phone, sid, body: r.body };
  }

  const listLength = async () => (await d.api('GET', '/v1/telco/numbers')).body.length as number;

  beforeAll(async () => {
    carrier = await startFakeCarrier();
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } });
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  describe('import', () => {
    it('returns 201 with exactly the Telco number fields and the carrier sid', async () => {
      const phone = freshNumber();
      const sid = carrier.addNumber(ACCOUNT, TOKEN, phone);
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN, label: 'Front desk' });
      expect(r.status).toBe(201);
      expect(Object.keys(r.body).sort()).toEqual(FIELDS);
      expect(r.body).toMatchObject({ phone_number: phone, phone_sid: sid, label: 'Front desk', account_sid: ACCOUNT });
      expect(r.body.id).toMatch(UUID_RE);
      expect(r.body.created_at).toMatch(ISO_RE);
      expect(r.body.updated_at).toBe(r.body.created_at);
      expect(r.text).not.toContain(TOKEN);
      expect(r.text).not.toContain('auth_token');
    });

    it('asks the carrier with GET, Basic auth and the E.164 number url-encoded', async () => {
      const { phone } = await importNew();
      const req = carrier.requests.at(-1)!;
      expect(req.method).toBe('GET');
      expect(req.path).toBe(`/2010-04-01/Accounts/${ACCOUNT}/IncomingPhoneNumbers.json?PhoneNumber=${encodeURIComponent(phone)}`);
      expect(req.query).toEqual({ PhoneNumber: phone });
      expect(req.authorization).toBe(basic(ACCOUNT, TOKEN));
    });

    it('labels the number with itself when no label is sent', async () => {
      const { phone, body } = await importNew();
      expect(body.label).toBe(phone);
    });

    it('picks the exact number when the carrier filter also matches a longer one', async () => {
      // The carrier's PhoneNumber filter is "contains": +1555020000 also matches +15550200001.
      const longer = carrier.addNumber(ACCOUNT, TOKEN, '+15550200001');
      const exact = carrier.addNumber(ACCOUNT, TOKEN, '+1555020000');
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+1555020000', account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(201);
      expect(r.body.phone_sid).toBe(exact);
      expect(r.body.phone_sid).not.toBe(longer);
    });

    it.each([
      ['no plus', '15551230000'],
      ['too long (16 digits)', '+1234567890123456'],
      ['letters', '+1555abc1234'],
      ['leading zero country code', '+0555123456'],
      ['empty', ''],
    ])('rejects a phone_number with %s (400, carrier not asked)', async (_what, phone) => {
      const before = carrier.requests.length;
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(400);
      expect(r.body.error).toContain('body.phone_number must be an E.164 number');
      expect(carrier.requests.length).toBe(before);
    });

    it.each(['phone_number', 'account_sid', 'auth_token'])('requires %s', async (field) => {
      const body: Record<string, string> = { phone_number: '+15550109999', account_sid: ACCOUNT, auth_token: TOKEN };
      delete body[field];
      const r = await d.api('POST', '/v1/telco/numbers', body);
      expect(r.status).toBe(400);
      expect(r.body.error).toBe(`body.${field} is required`);
    });

    it('rejects an unknown field, naming it', async () => {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550109999', account_sid: ACCOUNT, auth_token: TOKEN, friendly_name: 'x' });
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('body.friendly_name is not a known field');
    });

    it.each([
      ['label', { label: '' }],
      ['label', { label: 'x'.repeat(201) }],
      ['account_sid', { account_sid: '' }],
      ['account_sid', { account_sid: 'A'.repeat(65) }],
      ['account_sid', { account_sid: '..' }],
      ['account_sid', { account_sid: 'AC1/IncomingPhoneNumbers' }],
      ['auth_token', { auth_token: '' }],
      ['auth_token', { auth_token: 't'.repeat(257) }],
      ['auth_token', { auth_token: 42 }],
    ])('rejects a bad %s (%j)', async (field, patch) => {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550109999', account_sid: ACCOUNT, auth_token: TOKEN, ...patch });
      expect(r.status).toBe(400);
      expect(r.body.error).toContain(`body.${field}`);
    });

    it('answers 400 when the carrier rejects the credentials, without echoing them', async () => {
      const phone = freshNumber();
      carrier.addNumber(ACCOUNT, TOKEN, phone);
      const wrong = 'wrong-token-0b7e6d5c4a39';
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: wrong });
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ error: 'carrier rejected account_sid/auth_token' });
      expect(carrier.requests.at(-1)!.authorization).toBe(basic(ACCOUNT, wrong));
      expect(r.text).not.toContain(wrong);
    });

    it('answers 400 for an account the carrier does not know', async () => {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: freshNumber(), account_sid: 'ACnobody', auth_token: TOKEN });
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('carrier rejected account_sid/auth_token');
    });

    it('answers 400 when the carrier says 403', async () => {
      carrier.failNext(403);
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: freshNumber(), account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('carrier rejected account_sid/auth_token');
    });

    // A business-rule failure of the body (the service's document: 400), not a missing resource.
    it('answers 400 when the number is not in the carrier account', async () => {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: freshNumber(), account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ error: 'phone_number is not a number of that carrier account' });
    });

    it('answers 400 when the carrier itself answers 404', async () => {
      carrier.failNext(404);
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: freshNumber(), account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('phone_number is not a number of that carrier account');
    });

    it.each([500, 503, 429])('answers 502 when the carrier answers %i, storing nothing', async (status) => {
      const phone = freshNumber();
      carrier.addNumber(ACCOUNT, TOKEN, phone);
      const before = await listLength();
      carrier.failNext(status);
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(502);
      expect(r.body).toEqual({ error: `carrier API failed: HTTP ${status}` });
      expect(await listLength()).toBe(before);
    });

    it('answers 502 when the carrier answers something that is not JSON', async () => {
      carrier.failNext(200, '<html>maintenance</html>');
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: freshNumber(), account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(502);
      expect(r.body.error).toBe('carrier API failed: response is not JSON');
    });

    it('answers 502 when the carrier answers JSON of another shape', async () => {
      carrier.failNext(200, '{"numbers":[]}');
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: freshNumber(), account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(502);
      expect(r.body.error).toBe('carrier API failed: response has no incoming_phone_numbers list');
    });

    it('answers 409 on a second import of the same number, without asking the carrier', async () => {
      const { phone, body } = await importNew();
      const before = await listLength();
      const asked = carrier.requests.length;
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN, label: 'again' });
      expect(r.status).toBe(409);
      expect(r.body.error).toBe(`phone_number ${phone} is already imported (telco number ${body.id})`);
      expect(carrier.requests.length).toBe(asked);
      expect(await listLength()).toBe(before);
    });

    it('stores one of two concurrent imports of the same number and answers 409 to the other', async () => {
      const phone = freshNumber();
      carrier.addNumber(ACCOUNT, TOKEN, phone);
      const before = await listLength();
      const send = () => d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN });
      // Both usually pass the pre-check while the carrier answers, so the UNIQUE constraint decides.
      const answers = await Promise.all([send(), send()]);
      expect(answers.map((r) => r.status).sort()).toEqual([201, 409]);
      expect(answers.find((r) => r.status === 409)!.body.error).toMatch(`phone_number ${phone} is already imported`);
      expect(await listLength()).toBe(before + 1);
    });

    it('lets another organization import the same number', async () => {
      const { phone } = await importNew();
      const other = await d.newOrgKey('importer-b');
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN }, { key: other });
      expect(r.status).toBe(201);
    });
  });

  describe('list', () => {
    it('returns the organization’s numbers, oldest first, without secrets', async () => {
      const a = await importNew({ label: 'list-a' });
      const b = await importNew({ label: 'list-b' });
      const r = await d.api('GET', '/v1/telco/numbers');
      expect(r.status).toBe(200);
      expect(Array.isArray(r.body)).toBe(true);
      const ids = r.body.map((n: { id: string }) => n.id);
      expect(ids.indexOf(a.body.id)).toBeGreaterThanOrEqual(0);
      expect(ids.indexOf(b.body.id)).toBeGreaterThan(ids.indexOf(a.body.id));
      const created = r.body.map((n: { created_at: string }) => n.created_at);
      expect(created).toEqual([...created].sort());
      for (const n of r.body) expect(Object.keys(n).sort()).toEqual(FIELDS);
      expect(r.body.find((n: { id: string }) => n.id === b.body.id)).toEqual(b.body);
      expect(r.text).not.toContain(TOKEN);
    });

    it('shows another organization none of them', async () => {
      await importNew();
      const other = await d.newOrgKey('lister-b');
      const r = await d.api('GET', '/v1/telco/numbers', undefined, { key: other });
      expect(r.status).toBe(200);
      expect(r.body).toEqual([]);
    });
  });

  describe('relabel', () => {
    it('changes the label and updated_at, nothing else', async () => {
      const { body } = await importNew({ label: 'before' });
      await new Promise((resolve) => setTimeout(resolve, 5));
      const r = await d.api('PATCH', `/v1/telco/numbers/${body.id}`, { label: 'after' });
      expect(r.status).toBe(200);
      expect(Object.keys(r.body).sort()).toEqual(FIELDS);
      expect(r.body).toEqual({ ...body, label: 'after', updated_at: r.body.updated_at });
      expect(r.body.updated_at).toMatch(ISO_RE);
      expect(r.body.updated_at > body.updated_at).toBe(true);
      const listed = (await d.api('GET', '/v1/telco/numbers')).body.find((n: { id: string }) => n.id === body.id);
      expect(listed).toEqual(r.body);
    });

    it('answers 404 for a missing id', async () => {
      const r = await d.api('PATCH', `/v1/telco/numbers/${MISSING_ID}`, { label: 'x' });
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: 'telco number not found' });
    });

    it('answers 404 for another organization’s number and leaves it unchanged', async () => {
      const { body } = await importNew({ label: 'mine' });
      const other = await d.newOrgKey('other');
      const r = await d.api('PATCH', `/v1/telco/numbers/${body.id}`, { label: 'theirs' }, { key: other });
      expect(r.status).toBe(404);
      const listed = (await d.api('GET', '/v1/telco/numbers')).body.find((n: { id: string }) => n.id === body.id);
      expect(listed.label).toBe('mine');
    });

    it('answers 400 for a malformed id', async () => {
      const r = await d.api('PATCH', '/v1/telco/numbers/not-a-uuid', { label: 'x' });
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('params.id must be a uuid');
    });

    it.each([
      ['missing label', {}, 'body.label is required'],
      ['empty label', { label: '' }, 'body.label'],
      ['too long label', { label: 'x'.repeat(201) }, 'body.label'],
      ['non-string label', { label: 7 }, 'body.label'],
      ['unknown field', { label: 'x', phone_number: '+15550100000' }, 'body.phone_number is not a known field'],
    ])('answers 400 for a %s', async (_what, body, message) => {
      const { body: n } = await importNew();
      const r = await d.api('PATCH', `/v1/telco/numbers/${n.id}`, body);
      expect(r.status).toBe(400);
      expect(r.body.error).toContain(message);
    });
  });

  // The hosted service's name for these routes, which its SDK calls.
  describe('/v1/twilio/numbers, the service\'s name for the same routes', () => {
    it('imports, lists and relabels the same records as /v1/telco/numbers', async () => {
      const phone = freshNumber();
      const sid = carrier.addNumber(ACCOUNT, TOKEN, phone);
      const imported = await d.api('POST', '/v1/twilio/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN, label: 'via alias' });
      expect(imported.status, imported.text).toBe(201);
      expect(Object.keys(imported.body).sort()).toEqual(FIELDS);
      expect(imported.body).toMatchObject({ phone_number: phone, phone_sid: sid, label: 'via alias' });
      const viaTelco = (await d.api('GET', '/v1/telco/numbers')).body.find((n: { id: string }) => n.id === imported.body.id);
      expect(viaTelco).toEqual(imported.body);
      const viaTwilio = await d.api('GET', '/v1/twilio/numbers');
      expect(viaTwilio.status).toBe(200);
      expect(viaTwilio.body).toEqual((await d.api('GET', '/v1/telco/numbers')).body);
      const relabelled = await d.api('PATCH', `/v1/twilio/numbers/${imported.body.id}`, { label: 'renamed' });
      expect(relabelled.status).toBe(200);
      expect(relabelled.body.label).toBe('renamed');
      // One record under two names: importing it again under the other name is the same conflict.
      const again = await d.api('POST', '/v1/telco/numbers', { phone_number: phone, account_sid: ACCOUNT, auth_token: TOKEN });
      expect(again.status).toBe(409);
    });

    it('validates alike and scopes by organization alike', async () => {
      const bad = await d.api('POST', '/v1/twilio/numbers', { phone_number: 'call-me', account_sid: ACCOUNT, auth_token: TOKEN });
      expect(bad.status).toBe(400);
      expect(bad.body.error).toContain('body.phone_number');
      expect((await d.api('PATCH', `/v1/twilio/numbers/${MISSING_ID}`, { label: 'x' })).status).toBe(404);
      const { body } = await importNew({ label: 'org a' });
      const other = await d.newOrgKey('alias-other');
      expect((await d.api('PATCH', `/v1/twilio/numbers/${body.id}`, { label: 'theirs' }, { key: other })).status).toBe(404);
      expect((await d.api('GET', '/v1/twilio/numbers', undefined, { key: other })).body).toEqual([]);
      expect((await d.api('GET', '/v1/twilio/numbers', undefined, { key: null })).status).toBe(401);
    });

    it('is documented in /v1/openapi.json as an alias', async () => {
      const r = await d.api('GET', '/v1/openapi.json', undefined, { key: null });
      const alias = r.body.paths['/v1/twilio/numbers'];
      expect(Object.keys(alias).sort()).toEqual(['get', 'post']);
      expect(alias.post.description).toMatch(/Alias of \/v1\/telco\/numbers/);
      expect(Object.keys(alias.post.responses).sort()).toEqual(Object.keys(r.body.paths['/v1/telco/numbers'].post.responses).sort());
      expect(r.body.paths['/v1/twilio/numbers/{id}'].patch.description).toMatch(/Alias of/);
    });
  });

  it.each([
    ['POST', '/v1/telco/numbers', { phone_number: '+15550109999', account_sid: ACCOUNT, auth_token: TOKEN }],
    ['GET', '/v1/telco/numbers', undefined],
    ['PATCH', `/v1/telco/numbers/${MISSING_ID}`, { label: 'x' }],
  ])('answers 401 to %s %s without an API key', async (method, path, body) => {
    const asked = carrier.requests.length;
    const r = await d.api(method, path, body, { key: null });
    expect(r.status).toBe(401);
    expect(r.body.error).toMatch(/API key/);
    expect(carrier.requests.length).toBe(asked);
  });

  it('stores the auth_token encrypted, and opens it for outbound use', async () => {
    const { body } = await importNew();
    const db = new Database(join(d.dataDir, 'callbridge.sqlite'), { readonly: true });
    try {
      const row = db.prepare('SELECT auth_token_enc FROM telco_numbers WHERE id = ?').get(body.id) as { auth_token_enc: string };
      expect(row.auth_token_enc.startsWith('v1:')).toBe(true);
      expect(row.auth_token_enc).not.toContain(TOKEN);
      expect(Buffer.from(row.auth_token_enc.slice(3), 'base64').toString('latin1')).not.toContain(TOKEN);
    } finally {
      db.close();
    }
    const org = (await d.daemon.store.organizations.byApiKey(d.key))!;
    expect(await d.daemon.store.telcoNumbers.credentials(org.id, body.id)).toEqual({ account_sid: ACCOUNT, auth_token: TOKEN });
    expect(await d.daemon.store.telcoNumbers.credentials(org.id, MISSING_ID)).toBeUndefined();
  });

  it('documents the routes in /v1/openapi.json', async () => {
    const r = await d.api('GET', '/v1/openapi.json', undefined, { key: null });
    expect(r.status).toBe(200);
    const numbers = r.body.paths['/v1/telco/numbers'];
    expect(numbers.post.tags).toEqual(['telco']);
    expect(Object.keys(numbers.post.responses).sort()).toEqual(['201', '400', '401', '409', '502', '503']);
    expect(Object.keys(numbers.get.responses).sort()).toEqual(['200', '401']);
    const one = r.body.paths['/v1/telco/numbers/{id}'];
    expect(Object.keys(one.patch.responses).sort()).toEqual(['200', '400', '401', '404']);
    expect(r.text).not.toContain('auth_token_enc');
    const body = numbers.post.requestBody.content['application/json'].schema;
    expect(body.required.sort()).toEqual(['account_sid', 'auth_token', 'phone_number']);
    expect(body.properties.auth_token.writeOnly).toBe(true);
  });

  // Last: restart() replaces the daemon the tests above share.
  it('keeps imported numbers and their credentials across a restart', async () => {
    const { body } = await importNew({ label: 'durable' });
    const before = (await d.api('GET', '/v1/telco/numbers')).body;
    d = await d.restart();
    const after = await d.api('GET', '/v1/telco/numbers');
    expect(after.status).toBe(200);
    expect(after.body).toEqual(before);
    const org = (await d.daemon.store.organizations.byApiKey(d.key))!;
    expect((await d.daemon.store.telcoNumbers.credentials(org.id, body.id))?.auth_token).toBe(TOKEN);
  });
});

describe('telco numbers: carrier unreachable or slow', () => {
  it('answers 502 when nothing listens at the carrier address', async () => {
    const gone = await startFakeCarrier();
    await gone.close();
    const d = await startTestDaemon({ telco: { api_base_url: gone.url } });
    try {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550300000', account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(502);
      expect(r.body).toEqual({ error: 'carrier API failed: ECONNREFUSED' });
      expect((await d.api('GET', '/v1/telco/numbers')).body).toEqual([]);
    } finally {
      await d.close();
    }
  });

  it('answers 502 when the carrier does not answer within telco.timeout_ms', async () => {
    const carrier = await startFakeCarrier();
    const d = await startTestDaemon({ telco: { api_base_url: carrier.url, timeout_ms: 200 } });
    try {
      carrier.addNumber(ACCOUNT, TOKEN, '+15550300001');
      carrier.delayNext(3000);
      const started = Date.now();
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550300001', account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(502);
      expect(r.body).toEqual({ error: 'carrier API failed: no answer within 200 ms' });
      expect(Date.now() - started).toBeLessThan(2500);
    } finally {
      await d.close();
      await carrier.close();
    }
  });
});

describe('telco numbers: no carrier configured', () => {
  it('answers 503 when telco.api_base_url is empty', async () => {
    const d = await startTestDaemon({ telco: { api_base_url: '' } });
    try {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550300002', account_sid: ACCOUNT, auth_token: TOKEN });
      expect(r.status).toBe(503);
      expect(r.body).toEqual({ error: 'carrier API is not configured (telco.api_base_url)' });
    } finally {
      await d.close();
    }
  });
});

describe('telco numbers: the auth token never reaches the logs', () => {
  it('logs imports and carrier failures at debug level without the token', async () => {
    const carrier = await startFakeCarrier();
    const dir = mkdtempSync(join(tmpdir(), 'callbridge-telco-log-'));
    const lines: string[] = [];
    const logger = createLogger('debug', { write: (line: string) => void lines.push(line) });
    const config = loadConfig({ data_dir: dir, http: { host: '127.0.0.1', port: 0 }, log_level: 'debug', telco: { api_base_url: carrier.url } }, {});
    const daemon = await startDaemon(config, logger, () => {});
    try {
      const key = readFileSync(join(dir, INITIAL_KEY_FILE), 'utf8').trim();
      const post = (body: unknown) =>
        fetch(daemon.url + '/v1/telco/numbers', {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      carrier.addNumber(ACCOUNT, TOKEN, '+15550400000');
      carrier.addNumber(ACCOUNT, TOKEN, '+15550400001');

      expect((await post({ phone_number: '+15550400000', account_sid: ACCOUNT, auth_token: TOKEN })).status).toBe(201);
      expect((await post({ phone_number: '+15550400001', account_sid: ACCOUNT, auth_token: TOKEN + 'x' })).status).toBe(400);
      carrier.failNext(500);
      expect((await post({ phone_number: '+15550400001', account_sid: ACCOUNT, auth_token: TOKEN })).status).toBe(502);
      expect((await post({ phone_number: 'bad', account_sid: ACCOUNT, auth_token: TOKEN })).status).toBe(400);
      expect((await post({ phone_number: '+15550400001', account_sid: ACCOUNT, auth_token: TOKEN, extra: TOKEN })).status).toBe(400);

      const log = lines.join('');
      // The test only means something if those requests were logged.
      expect(log).toContain('telco number imported');
      expect(log).toContain('carrier API failed: HTTP 500');
      expect(log).not.toContain(TOKEN);
      expect(log).not.toContain(basic(ACCOUNT, TOKEN).slice('Basic '.length));
    } finally {
      await daemon.close();
      await carrier.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
