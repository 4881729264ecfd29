/**
 * The registrar's table (store/registrations.ts, migration 4) on both store backends: a trunk's
 * bindings replaced as a whole, expired ones never read and swept, counts per trunk for the
 * gauge, the computed inbound_registration_status of the trunk reads, and the bindings going with
 * their trunk.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import type { StoredRegistration } from '../../src/store/registrations.ts';
import type { SipTrunkSettings } from '../../src/domain/sip-trunk.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';

const settings: SipTrunkSettings = {
  pbx: 'generic',
  name: 't',
  inbound_auth_type: 'digest',
  inbound_host: '',
  inbound_acl: [],
  inbound_sip_username: '',
  outbound_host: '',
  outbound_sip_username: '',
  register: false,
  remain_in_dialog: false,
  caller_id_transforms: [],
  media_encryption: 'none',
  header_variables: [],
};

forEachStoreBackend((backend) => {
let t: TestStore;
let store: Store;
let org: { id: string };
let a: string;
let b: string;
beforeAll(async () => {
  t = await openTestStore(backend);
  store = t.store;
  org = (await store.organizations.createKey('Registrar org')).org;
  a = await trunk('00000000-0000-4000-8000-00000000000a', 'user-a');
  b = await trunk('00000000-0000-4000-8000-00000000000b', 'user-b');
});
afterAll(() => t?.dispose());

async function trunk(id: string, user: string): Promise<string> {
  await store.sipTrunks.insert({ id, org_id: org.id, settings: { ...settings, inbound_sip_username: user }, passwords: { inbound_sip_password: 'pw' }, created_at: new Date().toISOString() });
  return id;
}

function row(trunkId: string, contact: string, expiresAt: number, updatedAt: number): StoredRegistration {
  return { trunk_id: trunkId, contact, expires_at: expiresAt, call_id: 'c', cseq: 1, transport: 'tcp', source_address: '192.0.2.1', source_port: 5060, connection_id: 'tcp:1', updated_at: updatedAt };
}

const now = Date.now();

describe('RegistrationRepo', () => {

  it('replaces a trunk\'s bindings as a whole; reads skip expired rows; latest is the most recently refreshed', async () => {
    await store.registrations.replace(a, [row(a, 'sip:old@192.0.2.1', now + 60_000, now - 5000), row(a, 'sip:new@192.0.2.1', now + 60_000, now - 1000), row(a, 'sip:gone@192.0.2.1', now - 1, now - 9000)]);
    await store.registrations.replace(b, [row(b, 'sip:b@192.0.2.2', now + 60_000, now)]);
    expect((await store.registrations.live(a, now)).map((r) => r.contact)).toEqual(['sip:new@192.0.2.1', 'sip:old@192.0.2.1']);
    expect(await store.registrations.latest(a, now)).toMatchObject({ contact: 'sip:new@192.0.2.1', transport: 'tcp', connection_id: 'tcp:1' });
    expect(await store.registrations.countsByTrunk(now)).toEqual(new Map([[a, 2], [b, 1]]));
    await store.registrations.replace(a, [row(a, 'sip:only@192.0.2.1', now + 60_000, now)]);
    expect((await store.registrations.live(a, now)).map((r) => r.contact)).toEqual(['sip:only@192.0.2.1']);
  });

  it('the trunk reads registered while a binding lives, auth_failed after a failed REGISTER only when none does, else not_registered', async () => {
    expect((await store.sipTrunks.get(org.id, a))!.inbound_registration_status).toBe('registered');
    await store.sipTrunks.setRegistrationStatus(a, { inbound: 'auth_failed' });
    expect((await store.sipTrunks.get(org.id, a))!.inbound_registration_status).toBe('registered');
    await store.registrations.replace(a, []);
    expect((await store.sipTrunks.get(org.id, a))!.inbound_registration_status).toBe('auth_failed');
    await store.sipTrunks.setRegistrationStatus(a, { inbound: 'not_registered' });
    expect((await store.sipTrunks.list(org.id, 10, 0)).map((t) => [t.id, t.inbound_registration_status])).toEqual([
      [a, 'not_registered'],
      [b, 'registered'],
    ]);
  });

  it('the sweep deletes expired rows only; deleting the trunk deletes its bindings', async () => {
    await store.registrations.replace(a, [row(a, 'sip:short@192.0.2.1', now + 1000, now)]);
    expect(await store.registrations.sweep(now + 500)).toBe(0);
    expect(await store.registrations.sweep(now + 1000)).toBe(1);
    expect(await store.registrations.live(a, now)).toEqual([]);
    expect(await store.sipTrunks.delete(org.id, b)).toBe(true);
    expect(await store.client.get('SELECT count(*) AS n FROM sip_registrations WHERE trunk_id = ?', [b])).toEqual({ n: 0 });
  });
});
});
