/**
 * Migration 20 on both store backends: a session keeps its dial's answering-machine detection
 * (sessions.machine_detection, read back as the dial sent it; null when off), and a call's end
 * stores what the detection decided (calls.machine_detection): in the record, the list, the API
 * shape and the call.ended webhook's payload. A call without detection has none.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toCall } from '../../src/domain/call.ts';
import { newWebhookSecret } from '../../src/events/standard-webhooks.ts';
import type { NewSession } from '../../src/store/sessions.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';

forEachStoreBackend((backend) =>
  describe(`answering-machine detection in the store (${backend})`, () => {
    let t: TestStore;
    let orgId: string;
    let agentId: string;
    beforeAll(async () => {
      t = await openTestStore(backend);
      orgId = (await t.store.organizations.createKey('amd')).org.id;
      agentId = randomUUID();
      await t.store.agents.insert({ id: agentId, org_id: orgId, name: 'Dialer', status: 'active', phone_number_id: null, settings: {} as never, created_at: '2026-01-01T00:00:00.000Z' });
    });
    afterAll(() => t?.dispose());

    const session = (over: Partial<NewSession> = {}): NewSession => ({
      id: randomUUID(),
      org_id: orgId,
      agent_id: agentId,
      version_id: null,
      caller_id: '+15550001111',
      transport: 'websocket',
      chat_id: null,
      first_message: null,
      prompt: null,
      variables: [],
      scopes: ['voice'],
      token_jti: randomUUID(),
      token_expires_at: '2026-01-01T00:10:00.000Z',
      created_at: '2026-01-01T00:00:00.000Z',
      call_to: '+15550002222',
      direction: 'outbound',
      ...over,
    });

    it('the session keeps the dial\'s setting; without one it is null', async () => {
      const withIt = await t.store.sessions.create(session({ machine_detection: { mode: 'leave_message', message: 'Hi {{name}}' } }));
      expect((await t.store.sessions.get(withIt.id))!.machine_detection).toEqual({ mode: 'leave_message', message: 'Hi {{name}}' });
      const without = await t.store.sessions.create(session());
      expect((await t.store.sessions.get(without.id))!.machine_detection).toBeNull();
    });

    it('the end stores the outcome: record, list, API shape and the call.ended payload', async () => {
      const hook = randomUUID();
      await t.store.webhooks.insert({ id: hook, org_id: orgId, url: 'https://hooks.example.com/amd', events: ['call.ended'], description: '', secret: newWebhookSecret(), created_at: '2026-01-01T00:00:00.000Z' });
      const s = await t.store.sessions.create(session({ machine_detection: { mode: 'hangup' } }));
      const outcome = { result: 'machine' as const, decided_after_ms: 3120, beep: true };
      expect(await t.store.calls.end(s.id, { ended_at: '2026-01-01T00:01:00.000Z', termination_reason: 'machine_detected', machine_detection: outcome })).toBe(true);
      const rec = (await t.store.calls.get(orgId, s.id))!;
      expect(rec.machine_detection).toEqual(outcome);
      expect(rec.outcome).toBe('ended_by_agent');
      expect(toCall(rec).machine_detection).toEqual(outcome);
      const listed = (await t.store.calls.list(orgId, {}, 10, 0)).calls.find((c) => c.id === s.id)!;
      expect(listed.machine_detection).toEqual(outcome);
      const [row] = await t.store.client.all<{ body: string }>('SELECT body FROM webhook_deliveries WHERE endpoint_id = ? AND event_type = ?', [hook, 'call.ended']);
      expect((JSON.parse(row!.body) as { data: { call: { machine_detection: unknown; termination_reason: string } } }).data.call).toMatchObject({ machine_detection: outcome, termination_reason: 'machine_detected' });
      // A call without detection: no field.
      const plain = await t.store.sessions.create(session());
      await t.store.calls.end(plain.id, { ended_at: '2026-01-01T00:01:00.000Z', termination_reason: 'agent_hangup' });
      const p = (await t.store.calls.get(orgId, plain.id))!;
      expect(p.machine_detection).toBeNull();
      expect(toCall(p)).not.toHaveProperty('machine_detection');
    });
  }),
);
