import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/sqlite-driver.ts';
import { join } from 'node:path';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const IN_PASSWORD = 'in-Secret-7f3a9c';
const OUT_PASSWORD = 'out-Secret-b81d2e';
const MISSING = '00000000-0000-4000-8000-000000000000';

/** Digest usernames are global, so each test takes fresh ones. */
let seq = 0;
const uniq = (prefix: string) => `${prefix}${++seq}${Date.now().toString(36)}`;
const num = () => `+1555${String(1_000_000 + ++seq).slice(-7)}`;

const digestTrunk = (over: Record<string, unknown> = {}) => ({
  pbx: 'generic',
  name: 'main pbx',
  inbound_sip_username: uniq('user'),
  inbound_sip_password: IN_PASSWORD,
  ...over,
});
const aclTrunk = (over: Record<string, unknown> = {}) => ({ pbx: 'generic', inbound_auth_type: 'acl', inbound_acl: ['203.0.113.0/24'], ...over });

describe('SIP trunks API', () => {
  let d: TestDaemon;
  let otherKey: string;

  beforeAll(async () => {
    d = await startTestDaemon();
    otherKey = await d.newOrgKey('other');
  });
  afterAll(() => d?.close());

  async function createTrunk(body: Record<string, unknown> = digestTrunk(), key?: string) {
    const r = await d.api('POST', '/v1/sip-trunks', body, key ? { key } : {});
    expect(r.status, r.text).toBe(201);
    return r.body;
  }
  async function createAgent(key?: string): Promise<string> {
    const r = await d.api('POST', '/v1/agents', { name: 'trunk agent' }, key ? { key } : {});
    expect(r.status, r.text).toBe(201);
    return r.body.id;
  }
  async function assign(trunkId: string, body: Record<string, unknown>, key?: string) {
    const r = await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, body, key ? { key } : {});
    expect(r.status, r.text).toBe(201);
    return r.body;
  }

  describe('create', () => {
    it('creates a digest trunk with the generic preset and returns the record', async () => {
      const body = digestTrunk({ outbound_host: 'pbx.example.com:5080;transport=tcp', outbound_sip_username: 'out', outbound_sip_password: OUT_PASSWORD });
      const r = await d.api('POST', '/v1/sip-trunks', body);
      expect(r.status).toBe(201);
      expect(r.body).toEqual({
        id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        pbx: 'generic',
        name: 'main pbx',
        inbound_auth_type: 'digest',
        inbound_host: '',
        inbound_acl: [],
        inbound_sip_username: body.inbound_sip_username,
        outbound_host: 'pbx.example.com:5080;transport=tcp',
        outbound_sip_username: 'out',
        register: false,
        remain_in_dialog: false,
        caller_id_transforms: [],
        media_encryption: 'none',
        header_variables: [],
        inbound_registration_status: 'not_registered',
        outbound_registration_status: 'not_registered',
        outbound_registration_error: '',
        outbound_registration_expires_at: null,
        created_at: expect.any(String),
        updated_at: expect.any(String),
      });
      expect(r.body.created_at).toBe(r.body.updated_at);
      expect(new Date(r.body.created_at).toISOString()).toBe(r.body.created_at);
    });

    it('applies the 3cx and yeastar presets (digest, remain_in_dialog, no register)', async () => {
      for (const pbx of ['3cx', 'yeastar']) {
        const t = await createTrunk(digestTrunk({ pbx }));
        expect(t).toMatchObject({ pbx, inbound_auth_type: 'digest', register: false, remain_in_dialog: true });
      }
    });

    it('applies the webex preset (acl, register) and checks what it implies', async () => {
      const bare = await d.api('POST', '/v1/sip-trunks', { pbx: 'webex', inbound_acl: ['198.51.100.0/24'] });
      expect(bare.status).toBe(400);
      expect(bare.body.error).toMatch(/outbound_host is required when register is true/);
      const t = await createTrunk({
        pbx: 'webex',
        inbound_acl: ['198.51.100.0/24'],
        outbound_host: 'gw.webex.example',
        outbound_sip_username: 'lgw',
        outbound_sip_password: OUT_PASSWORD,
      });
      expect(t).toMatchObject({ pbx: 'webex', inbound_auth_type: 'acl', register: true, remain_in_dialog: false, outbound_host: 'gw.webex.example' });
    });

    it('sent fields win over the preset', async () => {
      const t = await createTrunk({ pbx: '3cx', inbound_auth_type: 'none', remain_in_dialog: false });
      expect(t).toMatchObject({ inbound_auth_type: 'none', remain_in_dialog: false, register: false });
    });

    it('stores canonical CIDRs and normalized caller ID transforms', async () => {
      const t = await createTrunk(
        aclTrunk({
          inbound_acl: ['203.0.113.77/24', '2001:DB8::/32', '198.51.100.7'],
          caller_id_transforms: [
            { type: 'strip_digits_start', number: 2 },
            { type: 'add_prefix', value: '0', value2: 'ignored' },
            { type: 'replace', value: '+44', value2: '' },
          ],
        }),
      );
      expect(t.inbound_acl).toEqual(['203.0.113.0/24', '2001:db8::/32', '198.51.100.7/32']);
      expect(t.caller_id_transforms).toEqual([
        { type: 'strip_digits_start', number: 2 },
        { type: 'add_prefix', value: '0' },
        { type: 'replace', value: '+44', value2: '' },
      ]);
    });

    it.each([
      ['pbx missing', { name: 'x' }, /body\.pbx is required/],
      ['bad pbx', { pbx: 'asterisk' }, /body\.pbx must be one of "generic", "3cx", "yeastar", "webex"/],
      ['bad inbound_auth_type', { pbx: 'generic', inbound_auth_type: 'ip' }, /body\.inbound_auth_type must be one of/],
      ['bad CIDR', aclTrunk({ inbound_acl: ['203.0.113.0/33'] }), /body\.inbound_acl\.0 prefix must be between 0 and 32/],
      ['not a CIDR', aclTrunk({ inbound_acl: ['10.0.0.0/8', 'pbx.example.com'] }), /body\.inbound_acl\.1 must be a CIDR/],
      ['bad IPv6 prefix', aclTrunk({ inbound_acl: ['2001:db8::/200'] }), /body\.inbound_acl\.0 prefix must be between 0 and 128/],
      ['outbound_host with scheme', { pbx: 'generic', inbound_auth_type: 'none', outbound_host: 'sip:pbx.example.com' }, /body\.outbound_host must be \[sips:\]host\[:port\]/],
      ['outbound_host bad port', { pbx: 'generic', inbound_auth_type: 'none', outbound_host: 'pbx.example.com:0' }, /body\.outbound_host port/],
      ['outbound_host bad transport', { pbx: 'generic', inbound_auth_type: 'none', outbound_host: 'pbx.example.com;transport=ws' }, /body\.outbound_host transport/],
      ['inbound_host with port', aclTrunk({ inbound_acl: [], inbound_host: 'pbx.example.com:5060' }), /body\.inbound_host must be a host name/],
      ['digest without password', { pbx: 'generic', inbound_sip_username: 'nopass' }, /body\.inbound_sip_password is required when inbound_auth_type is digest/],
      ['digest without username', { pbx: 'generic', inbound_sip_password: 'p' }, /body\.inbound_sip_username is required when inbound_auth_type is digest/],
      ['acl without host or acl', { pbx: 'generic', inbound_auth_type: 'acl' }, /body\.inbound_host or a non-empty body\.inbound_acl/],
      [
        'register without outbound password',
        { pbx: 'generic', inbound_auth_type: 'none', register: true, outbound_host: 'gw.example.com', outbound_sip_username: 'o' },
        /body\.outbound_sip_password is required when register is true/,
      ],
      ['unknown field', digestTrunk({ inbound_password: 'x' }), /body\.inbound_password is not a known field/],
      ['transform missing number', { pbx: 'generic', inbound_auth_type: 'none', caller_id_transforms: [{ type: 'strip_digits_end' }] }, /caller_id_transforms\.0\.number/],
      ['transform missing value2', { pbx: 'generic', inbound_auth_type: 'none', caller_id_transforms: [{ type: 'replace', value: '1' }] }, /caller_id_transforms\.0\.value2 is required/],
      ['transform bad type', { pbx: 'generic', inbound_auth_type: 'none', caller_id_transforms: [{ type: 'upper' }] }, /caller_id_transforms\.0\.type must be one of/],
      ['transform unknown field', { pbx: 'generic', inbound_auth_type: 'none', caller_id_transforms: [{ type: 'add_prefix', value: '1', x: 1 }] }, /0\.x is not a known field/],
      ['empty password', digestTrunk({ inbound_sip_password: '' }), /body\.inbound_sip_password must NOT have fewer than 1 characters/],
      ['register not boolean', { pbx: 'generic', inbound_auth_type: 'none', register: 'yes' }, /body\.register must be boolean/],
    ])('400: %s', async (_name, body, message) => {
      const r = await d.api('POST', '/v1/sip-trunks', body);
      expect(r.status, r.text).toBe(400);
      expect(r.body.error).toMatch(message);
    });

    it('409 on a duplicate inbound_sip_username, also across organizations', async () => {
      const username = uniq('dup');
      await createTrunk(digestTrunk({ inbound_sip_username: username }));
      const same = await d.api('POST', '/v1/sip-trunks', digestTrunk({ inbound_sip_username: username }));
      expect(same.status).toBe(409);
      expect(same.body.error).toMatch(/inbound_sip_username is already used/);
      const other = await d.api('POST', '/v1/sip-trunks', digestTrunk({ inbound_sip_username: username }), { key: otherKey });
      expect(other.status).toBe(409);
    });

    it('any number of trunks may have no inbound_sip_username', async () => {
      await createTrunk(aclTrunk());
      await createTrunk(aclTrunk());
    });
  });

  describe('passwords', () => {
    it('never appear in any response', async () => {
      const body = digestTrunk({ outbound_host: 'gw.example.com', outbound_sip_username: 'o', outbound_sip_password: OUT_PASSWORD, register: true });
      const created = await d.api('POST', '/v1/sip-trunks', body);
      expect(created.status).toBe(201);
      const id = created.body.id;
      const responses = [
        created,
        await d.api('GET', `/v1/sip-trunks/${id}`),
        await d.api('GET', '/v1/sip-trunks'),
        await d.api('PATCH', `/v1/sip-trunks/${id}`, { name: 'renamed' }),
        await d.api('PATCH', `/v1/sip-trunks/${id}`, { inbound_sip_password: IN_PASSWORD, outbound_sip_password: OUT_PASSWORD }),
        await d.api('GET', '/v1/openapi.json'),
      ];
      for (const r of responses) {
        expect(r.status).toBe(200 + (r === created ? 1 : 0));
        expect(r.text).not.toContain(IN_PASSWORD);
        expect(r.text).not.toContain(OUT_PASSWORD);
        expect(r.text).not.toMatch(/password_enc/);
      }
      for (const r of responses.slice(0, 5)) expect(r.text).not.toMatch(/_password/);
    });

    it('are stored encrypted in the SQLite file and readable for SIP', async () => {
      const t = await createTrunk(digestTrunk({ outbound_host: 'gw.example.com', outbound_sip_username: 'o', outbound_sip_password: OUT_PASSWORD }));
      const db = new Database(join(d.dataDir, 'callbridge.sqlite'), { readonly: true, fileMustExist: true });
      try {
        const row = db.prepare('SELECT inbound_sip_password_enc AS i, outbound_sip_password_enc AS o FROM sip_trunks WHERE id = ?').get(t.id) as { i: string; o: string };
        for (const v of [row.i, row.o]) expect(v).toMatch(/^v1:/);
        expect(row.i).not.toContain(IN_PASSWORD);
        expect(row.o).not.toContain(OUT_PASSWORD);
      } finally {
        db.close();
      }
      expect(await d.daemon.store.sipTrunks.credentials(t.id)).toEqual({
        inbound: { username: t.inbound_sip_username, password: IN_PASSWORD },
        outbound: { username: 'o', password: OUT_PASSWORD },
      });
    });
  });

  describe('read', () => {
    it('lists the organization’s trunks in creation order, with limit and offset', async () => {
      const key = await d.newOrgKey(uniq('lister'));
      const a = await createTrunk(aclTrunk({ name: 'a' }), key);
      const b = await createTrunk(aclTrunk({ name: 'b' }), key);
      const all = await d.api('GET', '/v1/sip-trunks', undefined, { key });
      expect(all.status).toBe(200);
      expect(all.body.map((t: { id: string }) => t.id)).toEqual([a.id, b.id]);
      const page = await d.api('GET', '/v1/sip-trunks?limit=1&offset=1', undefined, { key });
      expect(page.body.map((t: { id: string }) => t.id)).toEqual([b.id]);
      expect((await d.api('GET', '/v1/sip-trunks?limit=0', undefined, { key })).status).toBe(400);
    });

    it('gets one trunk; 404 for a missing one, 400 for a malformed id', async () => {
      const t = await createTrunk();
      const r = await d.api('GET', `/v1/sip-trunks/${t.id}`);
      expect(r.status).toBe(200);
      expect(r.body).toEqual(t);
      const missing = await d.api('GET', `/v1/sip-trunks/${MISSING}`);
      expect(missing.status).toBe(404);
      expect(missing.body.error).toBe('sip trunk not found');
      const bad = await d.api('GET', '/v1/sip-trunks/not-a-uuid');
      expect(bad.status).toBe(400);
      expect(bad.body.error).toMatch(/params\.id must be a uuid/);
    });
  });

  describe('PATCH', () => {
    it('changes only the sent fields and keeps the stored passwords', async () => {
      const t = await createTrunk(
        digestTrunk({ outbound_host: 'gw.example.com', outbound_sip_username: 'o', outbound_sip_password: OUT_PASSWORD, caller_id_transforms: [{ type: 'add_prefix', value: '9' }] }),
      );
      await new Promise((r) => setTimeout(r, 5));
      const r = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { name: 'renamed', remain_in_dialog: true });
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ ...t, name: 'renamed', remain_in_dialog: true, updated_at: r.body.updated_at });
      expect(r.body.updated_at > t.updated_at).toBe(true);
      expect(await d.daemon.store.sipTrunks.credentials(t.id)).toEqual({
        inbound: { username: t.inbound_sip_username, password: IN_PASSWORD },
        outbound: { username: 'o', password: OUT_PASSWORD },
      });
      // register can be switched on without resending the stored outbound password
      const reg = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { register: true });
      expect(reg.status).toBe(200);
      expect(reg.body.register).toBe(true);
    });

    it('sets a new password, and null clears one when the rules allow it', async () => {
      const t = await createTrunk(digestTrunk({ outbound_sip_username: 'o', outbound_sip_password: OUT_PASSWORD }));
      expect((await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { inbound_sip_password: 'new-pass' })).status).toBe(200);
      expect((await d.daemon.store.sipTrunks.credentials(t.id))?.inbound?.password).toBe('new-pass');
      expect((await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { outbound_sip_password: null })).status).toBe(200);
      expect((await d.daemon.store.sipTrunks.credentials(t.id))?.outbound).toBeUndefined();
      const clear = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { inbound_sip_password: null });
      expect(clear.status).toBe(400);
      expect(clear.body.error).toMatch(/inbound_sip_password is required when inbound_auth_type is digest/);
      expect((await d.daemon.store.sipTrunks.credentials(t.id))?.inbound?.password).toBe('new-pass');
    });

    it('checks the cross-field rules on the merged record', async () => {
      const t = await createTrunk(aclTrunk());
      const toDigest = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { inbound_auth_type: 'digest' });
      expect(toDigest.status).toBe(400);
      expect(toDigest.body.error).toMatch(/inbound_sip_username is required/);
      const emptyAcl = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { inbound_acl: [] });
      expect(emptyAcl.status).toBe(400);
      const ok = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { inbound_acl: [], inbound_host: 'pbx.example.com' });
      expect(ok.status).toBe(200);
      expect(ok.body).toMatchObject({ inbound_acl: [], inbound_host: 'pbx.example.com', inbound_auth_type: 'acl' });
      const bad = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { outbound_host: 'x;transport=quic' });
      expect(bad.status).toBe(400);
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}`)).body).toEqual(ok.body);
    });

    it('409 on taking another trunk’s username; keeping its own is fine', async () => {
      const a = await createTrunk();
      const b = await createTrunk();
      const r = await d.api('PATCH', `/v1/sip-trunks/${b.id}`, { inbound_sip_username: a.inbound_sip_username });
      expect(r.status).toBe(409);
      expect(r.body.error).toMatch(/inbound_sip_username is already used/);
      expect((await d.api('PATCH', `/v1/sip-trunks/${a.id}`, { inbound_sip_username: a.inbound_sip_username })).status).toBe(200);
    });

    it('400 on an unknown field or a read-only field, 404 on a missing trunk', async () => {
      const t = await createTrunk();
      const unknown = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { outbound_registration_status: 'registered' });
      expect(unknown.status).toBe(400);
      expect(unknown.body.error).toMatch(/outbound_registration_status is not a known field/);
      expect((await d.api('PATCH', `/v1/sip-trunks/${MISSING}`, { name: 'x' })).status).toBe(404);
      expect((await d.api('PATCH', '/v1/sip-trunks/123', { name: 'x' })).status).toBe(400);
    });

    // The service's OpenAPI document marks these fields nullable: null resets a field to what a
    // create would give it.
    it('null clears a field: text to "", lists to [], the rest to the PBX preset', async () => {
      const t = await createTrunk(
        digestTrunk({
          pbx: '3cx',
          inbound_host: 'pbx.example.com',
          outbound_host: 'gw.example.com;transport=tcp',
          outbound_sip_username: 'o',
          outbound_sip_password: OUT_PASSWORD,
          remain_in_dialog: false,
          caller_id_transforms: [{ type: 'add_prefix', value: '9' }],
        }),
      );
      expect(t.remain_in_dialog).toBe(false);
      const r = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, {
        inbound_host: null,
        outbound_host: null,
        outbound_sip_username: null,
        outbound_sip_password: null,
        register: null,
        remain_in_dialog: null,
        caller_id_transforms: null,
        name: null,
      });
      expect(r.status, r.text).toBe(200);
      expect(r.body).toMatchObject({
        name: '',
        inbound_host: '',
        outbound_host: '',
        outbound_sip_username: '',
        register: false,
        remain_in_dialog: true, // 3cx's preset
        caller_id_transforms: [],
        inbound_auth_type: 'digest',
      });
      expect((await d.daemon.store.sipTrunks.credentials(t.id))?.outbound).toBeUndefined();
      // inbound_auth_type null goes back to the preset too, and the rules run on the result.
      const acl = await createTrunk(aclTrunk({ pbx: 'webex', register: false }));
      const reset = await d.api('PATCH', `/v1/sip-trunks/${acl.id}`, { pbx: 'generic', inbound_auth_type: null });
      expect(reset.status).toBe(400);
      expect(reset.body.error).toMatch(/inbound_sip_username is required when inbound_auth_type is digest/);
    });

    it('null on create is the same as leaving the field out', async () => {
      const r = await d.api('POST', '/v1/sip-trunks', {
        pbx: 'generic',
        inbound_auth_type: null,
        inbound_host: null,
        inbound_sip_username: uniq('user'),
        inbound_sip_password: IN_PASSWORD,
        outbound_host: null,
        outbound_sip_username: null,
        outbound_sip_password: null,
        register: null,
        remain_in_dialog: null,
      });
      expect(r.status, r.text).toBe(201);
      expect(r.body).toMatchObject({ inbound_auth_type: 'digest', inbound_host: '', outbound_host: '', register: false, remain_in_dialog: false });
    });

    it('an empty PATCH is a 400 (no fields to update), as the service documents', async () => {
      const t = await createTrunk();
      const r = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, {});
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('body has no fields to update');
      expect((await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { pbx: null })).status).toBe(400);
    });
  });

  describe('DELETE', () => {
    it('204 with no body, then 404; removes the trunk’s assignments', async () => {
      const t = await createTrunk();
      const agentId = await createAgent();
      const alt = num();
      const a = await assign(t.id, { agent_id: agentId, number: '100', alternate_number: alt });
      const r = await d.api('DELETE', `/v1/sip-trunks/${t.id}`);
      expect(r.status).toBe(204);
      expect(r.text).toBe('');
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}`)).status).toBe(404);
      expect((await d.api('DELETE', `/v1/sip-trunks/${t.id}`)).status).toBe(404);
      expect((await d.api('GET', `/v1/sip-trunks/assignments/${a.id}`)).status).toBe(404);
      // the freed alternate_number can be used again
      const t2 = await createTrunk();
      await assign(t2.id, { agent_id: agentId, alternate_number: alt });
    });
  });

  describe('assignments', () => {
    let trunk: { id: string };
    let agentId: string;
    beforeAll(async () => {
      trunk = await createTrunk();
      agentId = await createAgent();
    });

    it('create, get, list', async () => {
      const alt = num();
      const r = await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agentId, number: '200', alternate_number: alt });
      expect(r.status).toBe(201);
      expect(r.body).toEqual({ id: expect.any(String), agent_id: agentId, sip_trunk_id: trunk.id, number: '200', alternate_number: alt, created_at: expect.any(String), routing_warnings: [] });
      const onlyNumber = await assign(trunk.id, { agent_id: agentId, number: '201' });
      expect(onlyNumber.alternate_number).toBe('');
      const onlyAlt = await assign(trunk.id, { agent_id: agentId, alternate_number: num(), number: null });
      expect(onlyAlt.number).toBe('');

      const got = await d.api('GET', `/v1/sip-trunks/assignments/${r.body.id}`);
      expect(got.status).toBe(200);
      expect(got.body).toEqual(r.body);
      const list = await d.api('GET', `/v1/sip-trunks/${trunk.id}/assignments`);
      expect(list.status).toBe(200);
      expect(list.body.map((a: { id: string }) => a.id)).toEqual([r.body.id, onlyNumber.id, onlyAlt.id]);
      const emptyTrunk = await createTrunk();
      expect((await d.api('GET', `/v1/sip-trunks/${emptyTrunk.id}/assignments`)).body).toEqual([]);
      expect((await d.api('GET', `/v1/sip-trunks/${MISSING}/assignments`)).status).toBe(404);
    });

    it('the static assignments path does not clash with /v1/sip-trunks/:id', async () => {
      // "assignments" is no uuid: if /:id caught it, this would be a 400 about params.id
      const r = await d.api('GET', `/v1/sip-trunks/assignments/${MISSING}`);
      expect(r.status).toBe(404);
      expect(r.body.error).toBe('assignment not found');
      const bad = await d.api('GET', '/v1/sip-trunks/assignments/nope');
      expect(bad.status).toBe(400);
      expect(bad.body.error).toMatch(/params\.assignmentId must be a uuid/);
      const routes = (await d.api('GET', '/v1/openapi.json')).body.paths;
      expect(Object.keys(routes)).toEqual(
        expect.arrayContaining(['/v1/sip-trunks', '/v1/sip-trunks/{id}', '/v1/sip-trunks/{id}/assignments', '/v1/sip-trunks/assignments/{assignmentId}']),
      );
    });

    it.each([
      ['no number at all', () => ({ agent_id: agentId }), /body\.number or body\.alternate_number is required/],
      ['both null', () => ({ agent_id: agentId, number: null, alternate_number: null }), /body\.number or body\.alternate_number is required/],
      ['agent_id missing', () => ({ number: '1' }), /body\.agent_id is required/],
      ['agent_id malformed', () => ({ agent_id: 'x', number: '1' }), /body\.agent_id must be a uuid/],
      ['agent unknown', () => ({ agent_id: MISSING, number: '1' }), /body\.agent_id does not name an agent of this organization/],
      ['bad number', () => ({ agent_id: agentId, number: '12a' }), /body\.number must be an E\.164 number or a dial string/],
      ['empty number', () => ({ agent_id: agentId, number: '' }), /body\.number must be/],
      ['bad alternate_number', () => ({ agent_id: agentId, alternate_number: '+1 555' }), /body\.alternate_number must be/],
      ['unknown field', () => ({ agent_id: agentId, number: '1', priority: 1 }), /body\.priority is not a known field/],
    ])('400: %s', async (_name, body, message) => {
      const r = await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, body());
      expect(r.status, r.text).toBe(400);
      expect(r.body.error).toMatch(message);
    });

    it('404 on a missing trunk; an agent of another organization is a 400 naming agent_id', async () => {
      expect((await d.api('POST', `/v1/sip-trunks/${MISSING}/assignments`, { agent_id: agentId, number: '1' })).status).toBe(404);
      const foreignAgent = await createAgent(otherKey);
      const r = await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: foreignAgent, number: '1' });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatch(/body\.agent_id/);
    });

    it('number is unique within a trunk, but allowed on another trunk', async () => {
      await assign(trunk.id, { agent_id: agentId, number: '300' });
      const dup = await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agentId, number: '300' });
      expect(dup.status).toBe(409);
      expect(dup.body.error).toMatch(/number is already assigned on this SIP trunk/);
      const other = await createTrunk();
      await assign(other.id, { agent_id: agentId, number: '300' });
    });

    it('alternate_number is unique within an organization, not across organizations (nor does a 409 reveal another organization)', async () => {
      const alt = num();
      await assign(trunk.id, { agent_id: agentId, alternate_number: alt });
      const other = await createTrunk();
      const sameOrg = await d.api('POST', `/v1/sip-trunks/${other.id}/assignments`, { agent_id: agentId, alternate_number: alt });
      expect(sameOrg.status).toBe(409);
      expect(sameOrg.body.error).toMatch(/alternate_number is already assigned/);
      const foreignTrunk = await createTrunk(digestTrunk(), otherKey);
      const foreignAgent = await createAgent(otherKey);
      const otherOrg = await d.api('POST', `/v1/sip-trunks/${foreignTrunk.id}/assignments`, { agent_id: foreignAgent, alternate_number: alt }, { key: otherKey });
      expect(otherOrg.status, otherOrg.text).toBe(201);
      expect(otherOrg.text).not.toContain(trunk.id);
      // Within the other organization the number is now taken, and the 409 speaks of that organization only.
      const twice = await d.api('POST', `/v1/sip-trunks/${foreignTrunk.id}/assignments`, { agent_id: foreignAgent, alternate_number: alt }, { key: otherKey });
      expect(twice.status).toBe(409);
      expect(twice.body.error).toBe('alternate_number is already assigned in this organization');
    });

    it('PATCH changes numbers; null clears one; clearing both is a 400', async () => {
      const a = await assign(trunk.id, { agent_id: agentId, number: '400', alternate_number: num() });
      const newAlt = num();
      const r1 = await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { alternate_number: newAlt });
      expect(r1.status).toBe(200);
      expect(r1.body).toEqual({ ...a, alternate_number: newAlt });
      const r2 = await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { number: null });
      expect(r2.status).toBe(200);
      expect(r2.body).toEqual({ ...a, number: '', alternate_number: newAlt });
      const r3 = await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { alternate_number: null });
      expect(r3.status).toBe(400);
      expect(r3.body.error).toMatch(/at least one/);
      const r4 = await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { number: '401', alternate_number: null });
      expect(r4.status).toBe(200);
      expect(r4.body).toMatchObject({ number: '401', alternate_number: '' });
      const same = await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { number: '401' });
      expect(same.status).toBe(200);
      expect((await d.api('GET', `/v1/sip-trunks/assignments/${a.id}`)).body).toEqual(r4.body);
    });

    it('PATCH 409 on a taken number or alternate_number, 400 on bad input, 404 on a missing one', async () => {
      const taken = await assign(trunk.id, { agent_id: agentId, number: '500', alternate_number: num() });
      const a = await assign(trunk.id, { agent_id: agentId, number: '501' });
      expect((await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { number: '500' })).status).toBe(409);
      expect((await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { alternate_number: taken.alternate_number })).status).toBe(409);
      expect((await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { number: 'abc' })).status).toBe(400);
      expect((await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { agent_id: agentId })).status).toBe(400);
      expect((await d.api('PATCH', `/v1/sip-trunks/assignments/${MISSING}`, { number: '1' })).status).toBe(404);
    });

    it('DELETE answers 204 with no body, then 404', async () => {
      const a = await assign(trunk.id, { agent_id: agentId, number: '600' });
      const r = await d.api('DELETE', `/v1/sip-trunks/assignments/${a.id}`);
      expect(r.status).toBe(204);
      expect(r.text).toBe('');
      expect((await d.api('GET', `/v1/sip-trunks/assignments/${a.id}`)).status).toBe(404);
      expect((await d.api('DELETE', `/v1/sip-trunks/assignments/${a.id}`)).status).toBe(404);
      expect((await d.api('DELETE', '/v1/sip-trunks/assignments/zzz')).status).toBe(400);
      // the number is free again
      await assign(trunk.id, { agent_id: agentId, number: '600' });
    });

    it('deleting the agent removes its assignments', async () => {
      const t = await createTrunk();
      const gone = await createAgent();
      const stays = await createAgent();
      const a = await assign(t.id, { agent_id: gone, number: '700' });
      const b = await assign(t.id, { agent_id: stays, number: '701' });
      expect((await d.api('DELETE', `/v1/agents/${gone}`)).status).toBe(204);
      expect((await d.api('GET', `/v1/sip-trunks/assignments/${a.id}`)).status).toBe(404);
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}/assignments`)).body).toEqual([b]);
    });
  });

  describe('media_encryption and header_variables (fields of ours)', () => {
    it('stores both on create, returns them on GET and list, PATCH changes them and null resets them', async () => {
      const key = await d.newOrgKey('fields of ours'); // an organization of its own: the list holds this trunk alone
      const t = await createTrunk(digestTrunk({ media_encryption: 'allow', header_variables: ['X-Customer-Id', 'Diversion'] }), key);
      expect(t).toMatchObject({ media_encryption: 'allow', header_variables: ['X-Customer-Id', 'Diversion'] });
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}`, undefined, { key })).body).toEqual(t);
      expect((await d.api('GET', '/v1/sip-trunks', undefined, { key })).body).toEqual([t]);
      const p = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { media_encryption: 'require' }, { key });
      expect(p.status, p.text).toBe(200);
      expect(p.body).toMatchObject({ media_encryption: 'require', header_variables: ['X-Customer-Id', 'Diversion'] });
      const q = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { header_variables: ['P-Asserted-Identity'] }, { key });
      expect(q.body).toMatchObject({ media_encryption: 'require', header_variables: ['P-Asserted-Identity'] });
      const reset = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { media_encryption: null, header_variables: null }, { key });
      expect(reset.status, reset.text).toBe(200);
      expect(reset.body).toMatchObject({ media_encryption: 'none', header_variables: [] });
    });

    it('deduplicates header names case-insensitively (the first spelling stays) and trims them', async () => {
      const t = await createTrunk(digestTrunk({ header_variables: ['X-Customer-Id', 'x-customer-id', ' Diversion ', 'DIVERSION'] }));
      expect(t.header_variables).toEqual(['X-Customer-Id', 'Diversion']);
    });

    it('refuses credential headers, non-tokens, more than 20 names and unknown encryptions with 400 naming the header', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [['X-Ok', 'Authorization'], /header_variables\.1 \(Authorization\) carries credentials/],
        [['proxy-authorization'], /header_variables\.0 \(proxy-authorization\) carries credentials/],
        [['X Customer'], /header_variables\.0 \("X Customer"\) is not a SIP header name/],
        [['X-Id:'], /header_variables\.0 \("X-Id:"\) is not a SIP header name/],
        [['Caf\u00e9'], /header_variables\.0 .* is not a SIP header name/],
        [[''], /header_variables/],
        [Array.from({ length: 21 }, (_, i) => `X-H${i}`), /at most 20 headers/],
        ['X-Customer-Id', /header_variables/],
      ];
      for (const [header_variables, message] of cases) {
        const r = await d.api('POST', '/v1/sip-trunks', digestTrunk({ header_variables }));
        expect(r.status, JSON.stringify(header_variables)).toBe(400);
        expect(r.body.error).toMatch(message);
      }
      // 20 distinct names (plus duplicates of them) fit
      const twenty = Array.from({ length: 20 }, (_, i) => `X-H${i}`);
      expect((await createTrunk(digestTrunk({ header_variables: [...twenty, 'x-h0'] }))).header_variables).toEqual(twenty);
      const enc = await d.api('POST', '/v1/sip-trunks', digestTrunk({ media_encryption: 'sometimes' }));
      expect(enc.status).toBe(400);
      expect(enc.body.error).toMatch(/media_encryption/);
      const t = await createTrunk();
      const patch = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { header_variables: ['Authorization'] });
      expect(patch.status).toBe(400);
      expect(patch.body.error).toMatch(/Authorization/);
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}`)).body.header_variables).toEqual([]);
    });

    it('keeps both across a PATCH of another field, and documents them in /v1/openapi.json', async () => {
      const t = await createTrunk(digestTrunk({ media_encryption: 'require', header_variables: ['X-Customer-Id'] }));
      const r = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { name: 'other' });
      expect(r.body).toMatchObject({ media_encryption: 'require', header_variables: ['X-Customer-Id'] });
      const doc = (await d.api('GET', '/v1/openapi.json')).body;
      const item = doc.paths['/v1/sip-trunks/{id}'];
      const props = item.get.responses['200'].content['application/json'].schema.properties;
      expect(props.media_encryption.enum).toEqual(['none', 'allow', 'require']);
      expect(props.media_encryption.description).toMatch(/^ours:/);
      expect(props.header_variables.description).toMatch(/^ours:/);
      const patchProps = item.patch.requestBody.content['application/json'].schema.properties;
      expect(Object.keys(patchProps)).toEqual(expect.arrayContaining(['media_encryption', 'header_variables']));
      const createProps = doc.paths['/v1/sip-trunks'].post.requestBody.content['application/json'].schema.properties;
      expect(Object.keys(createProps)).toEqual(expect.arrayContaining(['media_encryption', 'header_variables']));
    });
  });

  describe('organization isolation and auth', () => {
    it('another organization gets 404 for every trunk and assignment route', async () => {
      const t = await createTrunk();
      const agentId = await createAgent();
      const a = await assign(t.id, { agent_id: agentId, number: '800' });
      const as = { key: otherKey };
      const checks = [
        await d.api('GET', `/v1/sip-trunks/${t.id}`, undefined, as),
        await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { name: 'stolen' }, as),
        await d.api('DELETE', `/v1/sip-trunks/${t.id}`, undefined, as),
        await d.api('GET', `/v1/sip-trunks/${t.id}/assignments`, undefined, as),
        await d.api('POST', `/v1/sip-trunks/${t.id}/assignments`, { agent_id: agentId, number: '801' }, as),
        await d.api('GET', `/v1/sip-trunks/assignments/${a.id}`, undefined, as),
        await d.api('PATCH', `/v1/sip-trunks/assignments/${a.id}`, { number: '802' }, as),
        await d.api('DELETE', `/v1/sip-trunks/assignments/${a.id}`, undefined, as),
      ];
      for (const r of checks) {
        expect(r.status, r.text).toBe(404);
        expect(r.body.error).toMatch(/not found/);
      }
      const list = await d.api('GET', '/v1/sip-trunks', undefined, as);
      expect(list.body.map((x: { id: string }) => x.id)).not.toContain(t.id);
      // untouched
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}`)).body).toEqual(t);
      expect((await d.api('GET', `/v1/sip-trunks/assignments/${a.id}`)).body).toEqual(a);
    });

    it('401 without or with a bad key on every route', async () => {
      const t = await createTrunk();
      const calls: [string, string, unknown?][] = [
        ['POST', '/v1/sip-trunks', digestTrunk()],
        ['GET', '/v1/sip-trunks'],
        ['GET', `/v1/sip-trunks/${t.id}`],
        ['PATCH', `/v1/sip-trunks/${t.id}`, { name: 'x' }],
        ['DELETE', `/v1/sip-trunks/${t.id}`],
        ['POST', `/v1/sip-trunks/${t.id}/assignments`, { agent_id: MISSING, number: '1' }],
        ['GET', `/v1/sip-trunks/${t.id}/assignments`],
        ['GET', `/v1/sip-trunks/assignments/${MISSING}`],
        ['PATCH', `/v1/sip-trunks/assignments/${MISSING}`, { number: '1' }],
        ['DELETE', `/v1/sip-trunks/assignments/${MISSING}`],
      ];
      for (const [method, path, body] of calls) {
        expect((await d.api(method, path, body, { key: null })).status, `${method} ${path}`).toBe(401);
        expect((await d.api(method, path, body, { key: 'cbk_wrong' })).status, `${method} ${path}`).toBe(401);
      }
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}`)).status).toBe(200);
    });
  });

  it('documents every route in /v1/openapi.json without password fields in responses', async () => {
    const doc = (await d.api('GET', '/v1/openapi.json')).body;
    const item = doc.paths['/v1/sip-trunks/{id}'];
    expect(Object.keys(item).sort()).toEqual(['delete', 'get', 'patch']);
    expect(item.get.tags).toEqual(['sip-trunks']);
    expect(Object.keys(item.patch.responses).sort()).toEqual(['200', '400', '401', '404', '409']);
    const trunkProps = Object.keys(item.get.responses['200'].content['application/json'].schema.properties);
    expect(trunkProps).not.toContain('inbound_sip_password');
    expect(trunkProps).toContain('outbound_registration_status');
    expect(Object.keys(doc.paths['/v1/sip-trunks/assignments/{assignmentId}']).sort()).toEqual(['delete', 'get', 'patch']);
    expect(Object.keys(doc.paths['/v1/sip-trunks/{id}/assignments']).sort()).toEqual(['get', 'post']);
  });
});

describe('SIP trunks survive a restart', () => {
  it('keeps trunks, passwords and assignments', async () => {
    let d = await startTestDaemon();
    try {
      const t = (await d.api('POST', '/v1/sip-trunks', digestTrunk({ outbound_sip_username: 'o', outbound_sip_password: OUT_PASSWORD }))).body;
      const agentId = (await d.api('POST', '/v1/agents', { name: 'a' })).body.id;
      const a = (await d.api('POST', `/v1/sip-trunks/${t.id}/assignments`, { agent_id: agentId, number: '900', alternate_number: num() })).body;
      d = await d.restart();
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}`)).body).toEqual(t);
      expect((await d.api('GET', `/v1/sip-trunks/${t.id}/assignments`)).body).toEqual([a]);
      expect(await d.daemon.store.sipTrunks.credentials(t.id)).toEqual({
        inbound: { username: t.inbound_sip_username, password: IN_PASSWORD },
        outbound: { username: 'o', password: OUT_PASSWORD },
      });
      // uniqueness still enforced from the stored data
      expect((await d.api('POST', `/v1/sip-trunks/${t.id}/assignments`, { agent_id: agentId, number: '900' })).status).toBe(409);
    } finally {
      await d.close();
    }
  });
});

describe('ACL width limit: sip.acl_min_prefix_v4 / _v6', () => {
  let d: TestDaemon;
  beforeAll(async () => {
    d = await startTestDaemon();
  });
  afterAll(() => d?.close());

  it.each([
    ['0.0.0.0/0', 'body.inbound_acl.0', '/8'],
    ['10.0.0.0/7', 'body.inbound_acl.0', '/8'],
    ['::/0', 'body.inbound_acl.0', '/32'],
    ['2001:db8::/31', 'body.inbound_acl.0', '/32'],
  ])('create: %s is refused 400 naming the field and the limit', async (cidr, field, limit) => {
    const r = await d.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: [cidr] }));
    expect(r.status, r.text).toBe(400);
    expect(r.body.error).toContain(field);
    expect(r.body.error).toContain(limit);
    // A wide entry after a narrow one is named by its own index.
    const second = await d.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: ['192.0.2.0/24', cidr] }));
    expect(second.status, second.text).toBe(400);
    expect(second.body.error).toContain('body.inbound_acl.1');
  });

  it('create: /8 (IPv4) and /32 (IPv6) are the widest accepted', async () => {
    const r = await d.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: ['10.0.0.0/8', '2001:db8::/32', '127.0.0.7'] }));
    expect(r.status, r.text).toBe(201);
    expect(r.body.inbound_acl).toEqual(['10.0.0.0/8', '2001:db8::/32', '127.0.0.7/32']);
  });

  it('PATCH: 0.0.0.0/0 and 10.0.0.0/7 are refused 400 and the trunk keeps its ACL; /8 is accepted', async () => {
    const t = (await d.api('POST', '/v1/sip-trunks', aclTrunk())).body;
    for (const cidr of ['0.0.0.0/0', '10.0.0.0/7']) {
      const r = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { inbound_acl: [cidr] });
      expect(r.status, r.text).toBe(400);
      expect(r.body.error).toContain('body.inbound_acl.0');
      expect(r.body.error).toContain('/8');
    }
    expect((await d.api('GET', `/v1/sip-trunks/${t.id}`)).body.inbound_acl).toEqual(['203.0.113.0/24']);
    const ok = await d.api('PATCH', `/v1/sip-trunks/${t.id}`, { inbound_acl: ['10.0.0.0/8'] });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.inbound_acl).toEqual(['10.0.0.0/8']);
  });

  it('the limits are settings; /0 stays refused even with a limit of 0', async () => {
    const wide = await startTestDaemon({ sip: { acl_min_prefix_v4: 0, acl_min_prefix_v6: 0, enabled: false } }).catch((err: unknown) => err as Error);
    // 0 is not a valid limit: the start refuses it, naming the setting.
    expect(wide).toBeInstanceOf(Error);
    expect(String(wide)).toContain('sip.acl_min_prefix_v4');
    const loose = await startTestDaemon({ sip: { acl_min_prefix_v4: 1, acl_min_prefix_v6: 1, enabled: false } });
    try {
      expect((await loose.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: ['10.0.0.0/7'] }))).status).toBe(201);
      expect((await loose.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: ['0.0.0.0/0'] }))).status).toBe(400);
      expect((await loose.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: ['::/0'] }))).status).toBe(400);
    } finally {
      await loose.close();
    }
    const strict = await startTestDaemon({ sip: { acl_min_prefix_v4: 24, enabled: false } });
    try {
      const r = await strict.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: ['198.51.100.0/23'] }));
      expect(r.status).toBe(400);
      expect(r.body.error).toContain('/24');
      expect((await strict.api('POST', '/v1/sip-trunks', aclTrunk({ inbound_acl: ['198.51.100.0/24'] }))).status).toBe(201);
    } finally {
      await strict.close();
    }
  });
});
