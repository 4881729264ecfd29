/**
 * The registration client's columns of sip_trunks (migration 5) on a real SQLite file: the
 * random Contact user of every trunk, the trunks that register with their password, the lookup
 * by Contact user (only while register is on), and outbound_registration_status as computed on
 * read (not_registered with register off, pending before a report, registered turning failed
 * past the granted expiry).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../../src/store/index.ts';
import type { SipTrunkSettings } from '../../src/domain/sip-trunk.ts';

const dir = mkdtempSync(join(tmpdir(), 'callbridge-outbound-registration-'));
const store = openStore(dir, '');
afterAll(() => {
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

const { org } = store.organizations.createKey('Carrier org');
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
};

function insert(settings: SipTrunkSettings): string {
  const id = randomUUID();
  store.sipTrunks.insert({ id, org_id: org.id, settings, passwords: { outbound_sip_password: 'carrier-pw' }, created_at: new Date().toISOString() });
  return id;
}

const status = (id: string) => store.sipTrunks.get(org.id, id)!;

describe('outbound registration columns of sip_trunks', () => {
  it('gives every trunk its own random Contact user, and lists the registering trunks with their password', () => {
    const a = insert(registering);
    const b = insert(registering);
    const off = insert({ ...registering, register: false });
    const list = store.sipTrunks.registeringTrunks().filter((t) => [a, b, off].includes(t.id));
    expect(list.map((t) => t.id)).toEqual([a, b]);
    for (const t of list) {
      expect(t.outbound_contact_user).toMatch(/^cb[0-9a-f]{16}$/);
      expect(t.outbound_sip_password).toBe('carrier-pw');
    }
    expect(list[0]!.outbound_contact_user).not.toBe(list[1]!.outbound_contact_user);
    expect(store.sipTrunks.byOutboundContactUser(list[0]!.outbound_contact_user)?.id).toBe(a);
    expect(JSON.stringify(status(a))).not.toContain('carrier-pw');
  });

  it('finds a trunk by its Contact user only while it registers', () => {
    const id = insert(registering);
    const user = store.sipTrunks.registeringTrunks().find((t) => t.id === id)!.outbound_contact_user;
    store.sipTrunks.update({ id, org_id: org.id, settings: { ...registering, register: false }, passwords: {}, updated_at: new Date().toISOString(), outboundChanged: true });
    expect(store.sipTrunks.byOutboundContactUser(user)).toBeUndefined();
  });

  it('computes the status on read: pending before a report, as reported, failed once a registration expired unrefreshed', () => {
    const id = insert(registering);
    expect(status(id).outbound_registration_status).toBe('pending');
    const soon = Date.now() + 60_000;
    store.sipTrunks.setOutboundRegistration(id, { status: 'registered', error: '', expiresAt: soon });
    expect(status(id)).toMatchObject({ outbound_registration_status: 'registered', outbound_registration_error: '', outbound_registration_expires_at: new Date(soon).toISOString() });
    store.sipTrunks.setOutboundRegistration(id, { status: 'registered', error: '', expiresAt: Date.now() - 1 });
    expect(status(id)).toMatchObject({ outbound_registration_status: 'failed', outbound_registration_error: 'the registration expired without a refresh' });
    store.sipTrunks.setOutboundRegistration(id, { status: 'auth_failed', error: '401 Unauthorized: credentials refused', expiresAt: null });
    expect(status(id)).toMatchObject({ outbound_registration_status: 'auth_failed', outbound_registration_expires_at: null });
  });

  it('reads not_registered with register off, and starts over when the outbound settings change', () => {
    const id = insert(registering);
    store.sipTrunks.setOutboundRegistration(id, { status: 'failed', error: '503 Service Unavailable', expiresAt: null });
    store.sipTrunks.update({ id, org_id: org.id, settings: { ...registering, name: 'renamed' }, passwords: {}, updated_at: new Date().toISOString() });
    expect(status(id)).toMatchObject({ outbound_registration_status: 'failed', outbound_registration_error: '503 Service Unavailable' });
    store.sipTrunks.update({ id, org_id: org.id, settings: registering, passwords: { outbound_sip_password: 'new-pw' }, updated_at: new Date().toISOString(), outboundChanged: true });
    expect(status(id)).toMatchObject({ outbound_registration_status: 'pending', outbound_registration_error: '' });
    store.sipTrunks.update({ id, org_id: org.id, settings: { ...registering, register: false }, passwords: {}, updated_at: new Date().toISOString(), outboundChanged: true });
    expect(status(id)).toMatchObject({ outbound_registration_status: 'not_registered', outbound_registration_error: '', outbound_registration_expires_at: null });
  });
});
