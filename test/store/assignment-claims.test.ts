/**
 * The store's side of inbound routing across organizations, on both backends: alternate_number
 * unique per organization (the UNIQUE violation recognised as the API's 409), the org- and
 * trunk-scoped lookups, the cross-organization claims routing asks for, and who imported a
 * carrier number.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';
import { isUniqueViolation } from '../../src/store/db.ts';
import type { Store } from '../../src/store/index.ts';
import { trunkForCreate } from '../../src/domain/sip-trunk.ts';
import { newId } from '../../src/domain/ids.ts';

const AT = '2026-01-01T00:00:00.000Z';

forEachStoreBackend((backend) => {
  let t: TestStore;
  let store: Store;
  const org: string[] = [];
  const acl: string[] = [];
  const digest: string[] = [];
  const agent: string[] = [];

  beforeAll(async () => {
    t = await openTestStore(backend);
    store = t.store;
    for (const name of ['Claims One', 'Claims Two']) {
      const o = (await store.organizations.createKey(name)).org.id;
      const a = newId();
      await store.agents.insert({ id: a, org_id: o, name: 'a', status: 'active', phone_number_id: null, settings: {} as never, created_at: AT });
      const aclId = newId();
      const digestId = newId();
      await store.sipTrunks.insert({ id: aclId, org_id: o, settings: trunkForCreate({ pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['192.0.2.0/24'] }), passwords: {}, created_at: AT });
      await store.sipTrunks.insert({
        id: digestId,
        org_id: o,
        settings: trunkForCreate({ pbx: 'generic', name: 'digest', inbound_auth_type: 'digest', inbound_sip_username: `u-${o}`, inbound_sip_password: 'secret-1' }),
        passwords: { inbound_sip_password: 'secret-1' },
        created_at: AT,
      });
      org.push(o);
      agent.push(a);
      acl.push(aclId);
      digest.push(digestId);
    }
  });
  afterAll(() => t?.dispose());

  const insert = (i: number, trunk: string, numbers: { number?: string; alternate_number?: string }) =>
    store.assignments.insert({ id: newId(), sip_trunk_id: trunk, agent_id: agent[i]!, number: numbers.number ?? null, alternate_number: numbers.alternate_number ?? null, created_at: AT });

  it('two organizations may hold one alternate_number; one organization may not hold it twice (a UNIQUE violation on alternate_number)', async () => {
    await insert(0, acl[0]!, { alternate_number: '300' });
    await insert(1, acl[1]!, { alternate_number: '300' });
    const twice = insert(0, digest[0]!, { alternate_number: '300' });
    await expect(twice).rejects.toSatisfy((err: unknown) => isUniqueViolation(err, 'alternate_number') && !isUniqueViolation(err, 'sip_trunk_assignments.number'));
  });

  it('the lookups are scoped: per organization, per trunk; the claims list both organizations', async () => {
    expect(await store.assignments.byOrgAlternateNumber(org[1]!, '300')).toMatchObject({ sip_trunk_id: acl[1], agent_id: agent[1] });
    expect(await store.assignments.byTrunkAlternateNumber(acl[0]!, '300')).toMatchObject({ agent_id: agent[0] });
    expect(await store.assignments.byTrunkAlternateNumber(digest[0]!, '300')).toBeUndefined();
    const claims = await store.assignments.alternateClaims('300');
    expect(claims.map((c) => [c.org_id, c.sip_trunk_id]).sort()).toEqual(
      [
        [org[0], acl[0]],
        [org[1], acl[1]],
      ].sort(),
    );
  });

  it('digest claims: assignment numbers on digest trunks only', async () => {
    await insert(0, digest[0]!, { number: '700' });
    await insert(1, acl[1]!, { number: '700' });
    expect(await store.assignments.digestClaims('700')).toEqual([{ assignment_id: expect.any(String), sip_trunk_id: digest[0], org_id: org[0] }]);
  });

  it('importingOrgs: every organization that imported the carrier number, none for another', async () => {
    for (const i of [0, 1]) {
      await store.telcoNumbers.insert({ id: newId(), org_id: org[i]!, phone_number: '+15550001111', phone_sid: `PN${i}`, label: '', account_sid: 'AC1', auth_token: 'token', created_at: AT });
    }
    expect((await store.telcoNumbers.importingOrgs('+15550001111')).sort()).toEqual([...org].sort());
    expect(await store.telcoNumbers.importingOrgs('+15550002222')).toEqual([]);
  });
});
