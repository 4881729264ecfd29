/**
 * Migration 22 on both store backends: a SIP call's Call-ID and final response (docs/calls.md
 * "SIP details"): stored on their own (an answered call) or with the end (a call never answered,
 * so call.ended carries them), clipped to their bounds, read back in the record, the list and
 * the API shape within the call's organization only; absent on a call that has none.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SIP_CALL_ID_MAX, SIP_REASON_MAX, toCall } from '../../src/domain/call.ts';
import { newWebhookSecret } from '../../src/events/standard-webhooks.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';

forEachStoreBackend((backend) =>
  describe(`SIP details of a call in the store (${backend})`, () => {
    let t: TestStore;
    let orgId: string;
    let otherOrgId: string;
    beforeAll(async () => {
      t = await openTestStore(backend);
      orgId = (await t.store.organizations.createKey('sip-details')).org.id;
      otherOrgId = (await t.store.organizations.createKey('other')).org.id;
    });
    afterAll(() => t?.dispose());

    const newCall = async (): Promise<string> => {
      const id = randomUUID();
      await t.store.calls.insert({ id, org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'inbound', from: '+15550001111', to: '+15550002222', created_at: '2026-01-01T00:00:00.000Z' });
      return id;
    };

    it('an answered call: setSip stores them; record, list and API shape have them, another organization does not see the call', async () => {
      const id = await newCall();
      expect(await t.store.calls.setSip(id, { call_id: 'a84b4c76e66710@pc33.example.com', final_status: 200, final_reason: 'OK' })).toBe(true);
      const rec = (await t.store.calls.get(orgId, id))!;
      expect(rec.sip).toEqual({ call_id: 'a84b4c76e66710@pc33.example.com', final_status: 200, final_reason: 'OK' });
      expect(toCall(rec).sip).toEqual({ call_id: 'a84b4c76e66710@pc33.example.com', final_status: 200, final_reason: 'OK' });
      const listed = (await t.store.calls.list(orgId, {}, 100, 0)).calls.find((c) => c.id === id)!;
      expect(listed.sip?.final_status).toBe(200);
      expect(await t.store.calls.get(otherOrgId, id)).toBeUndefined();
    });

    it('a call never answered: the end stores them first, so the call.ended payload carries them; peer strings are clipped', async () => {
      const hook = randomUUID();
      await t.store.webhooks.insert({ id: hook, org_id: orgId, url: 'https://hooks.example.com/sip', events: ['call.ended'], description: '', secret: newWebhookSecret(), created_at: '2026-01-01T00:00:00.000Z' });
      const id = await newCall();
      const longId = `${'x'.repeat(600)}@host`;
      const longReason = 'B'.repeat(500);
      expect(await t.store.calls.end(id, { ended_at: '2026-01-01T00:01:00.000Z', termination_reason: 'busy (486)', end_status: 'busy', sip: { call_id: longId, final_status: 486, final_reason: longReason } })).toBe(true);
      const sip = toCall((await t.store.calls.get(orgId, id))!).sip!;
      expect(sip).toEqual({ call_id: longId.slice(0, SIP_CALL_ID_MAX), final_status: 486, final_reason: longReason.slice(0, SIP_REASON_MAX) });
      const [row] = await t.store.client.all<{ body: string }>('SELECT body FROM webhook_deliveries WHERE endpoint_id = ? AND event_type = ?', [hook, 'call.ended']);
      expect((JSON.parse(row!.body) as { data: { call: { sip: unknown } } }).data.call.sip).toEqual(sip);
    });

    it('a call without them (web, carrier media stream) has no sip field; a Call-ID without a final response has no status', async () => {
      const plain = await newCall();
      await t.store.calls.end(plain, { ended_at: '2026-01-01T00:01:00.000Z', termination_reason: 'agent_hangup' });
      const rec = (await t.store.calls.get(orgId, plain))!;
      expect(rec.sip).toBeNull();
      expect('sip' in toCall(rec)).toBe(false);
      const noFinal = await newCall();
      await t.store.calls.setSip(noFinal, { call_id: 'c1@h', final_status: null, final_reason: null });
      expect(toCall((await t.store.calls.get(orgId, noFinal))!).sip).toEqual({ call_id: 'c1@h' });
    });
  }),
);
