/**
 * The registration client's columns of sip_trunks (migration 5) on both store backends: the
 * random Contact user of every trunk, the trunks that register with their password, the lookup
 * by Contact user (only while register is on), and outbound_registration_status as computed on
 * read (not_registered with register off, pending before a report, registered turning failed
 * past the granted expiry). Also the two fields of ours of migration 6, media_encryption and
 * header_variables: stored, read back, defaulted, and given to trunks of a version-5 database.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Store } from '../../src/store/index.ts';
import { Database } from '../../src/store/sqlite-driver.ts';
import { migrate } from '../../src/store/db.ts';
import { SqliteClient } from '../../src/store/sqlite-client.ts';
import { MIGRATIONS } from '../../src/store/migrations.ts';
import type { SipTrunkSettings } from '../../src/domain/sip-trunk.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';

const registering: SipTrunkSettings = {
  pbx: 'generic',
  name: 'carrier',
  inbound_auth_type: 'none',
  inbound_host: '',
  inbound_acl: [],
  inbound_sip_username: '',
  outbound_host: 'sip.carrier.example',
  outbound_sip_username: 'acct',
  register: true,
  remain_in_dialog: false,
  caller_id_transforms: [],
  media_encryption: 'none',
  header_variables: [],
};

forEachStoreBackend((backend) => {
let t: TestStore;
let store: Store;
let org: { id: string };
beforeAll(async () => {
  t = await openTestStore(backend);
  store = t.store;
  org = (await store.organizations.createKey('Carrier org')).org;
});
afterAll(() => t?.dispose());

async function insert(settings: SipTrunkSettings): Promise<string> {
  const id = randomUUID();
  await store.sipTrunks.insert({ id, org_id: org.id, settings, passwords: { outbound_sip_password: 'carrier-pw' }, created_at: new Date().toISOString() });
  return id;
}

const status = async (id: string) => (await store.sipTrunks.get(org.id, id))!;

describe('outbound registration columns of sip_trunks', () => {
  it('gives every trunk its own random Contact user, and lists the registering trunks with their password', async () => {
    const a = await insert(registering);
    const b = await insert(registering);
    const off = await insert({ ...registering, register: false });
    const list = (await store.sipTrunks.registeringTrunks()).filter((t) => [a, b, off].includes(t.id));
    // Order is created_at then id: two trunks made in the same millisecond come in id order, so
    // compare as a set.
    expect(list.map((t) => t.id).sort()).toEqual([a, b].sort());
    for (const t of list) {
      expect(t.outbound_contact_user).toMatch(/^cb[0-9a-f]{16}$/);
      expect(t.outbound_sip_password).toBe('carrier-pw');
    }
    expect(list[0]!.outbound_contact_user).not.toBe(list[1]!.outbound_contact_user);
    const first = list.find((t) => t.id === a)!;
    expect((await store.sipTrunks.byOutboundContactUser(first.outbound_contact_user))?.id).toBe(a);
    expect(JSON.stringify(await status(a))).not.toContain('carrier-pw');
  });

  it('finds a trunk by its Contact user only while it registers', async () => {
    const id = await insert(registering);
    const user = (await store.sipTrunks.registeringTrunks()).find((t) => t.id === id)!.outbound_contact_user;
    await store.sipTrunks.update({ id, org_id: org.id, settings: { ...registering, register: false }, passwords: {}, updated_at: new Date().toISOString(), outboundChanged: true });
    expect(await store.sipTrunks.byOutboundContactUser(user)).toBeUndefined();
  });

  it('computes the status on read: pending before a report, as reported, failed once a registration expired unrefreshed', async () => {
    const id = await insert(registering);
    expect((await status(id)).outbound_registration_status).toBe('pending');
    const soon = Date.now() + 60_000;
    await store.sipTrunks.setOutboundRegistration(id, { status: 'registered', error: '', expiresAt: soon });
    expect(await status(id)).toMatchObject({ outbound_registration_status: 'registered', outbound_registration_error: '', outbound_registration_expires_at: new Date(soon).toISOString() });
    await store.sipTrunks.setOutboundRegistration(id, { status: 'registered', error: '', expiresAt: Date.now() - 1 });
    expect(await status(id)).toMatchObject({ outbound_registration_status: 'failed', outbound_registration_error: 'the registration expired without a refresh' });
    await store.sipTrunks.setOutboundRegistration(id, { status: 'auth_failed', error: '401 Unauthorized: credentials refused', expiresAt: null });
    expect(await status(id)).toMatchObject({ outbound_registration_status: 'auth_failed', outbound_registration_expires_at: null });
  });

  it('reads not_registered with register off, and starts over when the outbound settings change', async () => {
    const id = await insert(registering);
    await store.sipTrunks.setOutboundRegistration(id, { status: 'failed', error: '503 Service Unavailable', expiresAt: null });
    await store.sipTrunks.update({ id, org_id: org.id, settings: { ...registering, name: 'renamed' }, passwords: {}, updated_at: new Date().toISOString() });
    expect(await status(id)).toMatchObject({ outbound_registration_status: 'failed', outbound_registration_error: '503 Service Unavailable' });
    await store.sipTrunks.update({ id, org_id: org.id, settings: registering, passwords: { outbound_sip_password: 'new-pw' }, updated_at: new Date().toISOString(), outboundChanged: true });
    expect(await status(id)).toMatchObject({ outbound_registration_status: 'pending', outbound_registration_error: '' });
    await store.sipTrunks.update({ id, org_id: org.id, settings: { ...registering, register: false }, passwords: {}, updated_at: new Date().toISOString(), outboundChanged: true });
    expect(await status(id)).toMatchObject({ outbound_registration_status: 'not_registered', outbound_registration_error: '', outbound_registration_expires_at: null });
  });
});

describe('media_encryption and header_variables columns of sip_trunks (migration 6)', () => {
  it('stores and reads both, and a PATCH-style update replaces them', async () => {
    const id = await insert({ ...registering, media_encryption: 'require', header_variables: ['X-Customer-Id', 'Diversion'] });
    expect(await status(id)).toMatchObject({ media_encryption: 'require', header_variables: ['X-Customer-Id', 'Diversion'] });
    await store.sipTrunks.update({
      id,
      org_id: org.id,
      settings: { ...registering, media_encryption: 'allow', header_variables: [] },
      passwords: {},
      updated_at: new Date().toISOString(),
    });
    expect(await status(id)).toMatchObject({ media_encryption: 'allow', header_variables: [] });
  });

  it('gives a write that leaves them out the defaults: none and []', async () => {
    const id = await insert(registering);
    expect(await status(id)).toMatchObject({ media_encryption: 'none', header_variables: [] });
  });

  it('refuses a media_encryption outside none/allow/require at the database too', async () => {
    await expect(insert({ ...registering, media_encryption: 'sometimes' as never })).rejects.toThrow(/CHECK constraint/i);
  });

  // SQLite's migration 6 rewrites existing rows; PostgreSQL databases never had version-5 rows.
  it.skipIf(backend !== 'sqlite')('gives the trunks of a version-5 database the defaults when it is upgraded', async () => {
    const d = mkdtempSync(join(tmpdir(), 'callbridge-migration-6-'));
    try {
      const db = new Database(join(d, 'db.sqlite'));
      db.pragma('foreign_keys = ON');
      await migrate(new SqliteClient(db), MIGRATIONS.filter((m) => m.version <= 5));
      db.prepare("INSERT INTO organizations (id, name, created_at) VALUES ('0a000000-0000-4000-8000-000000000001', 'old', '2026-01-01T00:00:00.000Z')").run();
      db.prepare(
        "INSERT INTO sip_trunks (id, org_id, pbx, name, inbound_auth_type, inbound_host, inbound_acl, outbound_host, outbound_sip_username, register, remain_in_dialog, caller_id_transforms, inbound_registration_status, outbound_registration_status, created_at, updated_at) " +
          "VALUES ('0d000000-0000-4000-8000-000000000001', '0a000000-0000-4000-8000-000000000001', 'generic', 'old trunk', 'none', '', '[]', '', '', 0, 0, '[]', 'not_registered', 'not_registered', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
      ).run();
      await migrate(new SqliteClient(db), MIGRATIONS);
      expect(db.prepare('SELECT media_encryption, header_variables FROM sip_trunks').get()).toEqual({ media_encryption: 'none', header_variables: '[]' });
      // Upgraded through every migration there is (later ones add to other tables).
      expect(db.prepare('SELECT max(version) AS v FROM schema_migrations').get()).toEqual({ v: MIGRATIONS.at(-1)!.version });
      db.close();
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
});
