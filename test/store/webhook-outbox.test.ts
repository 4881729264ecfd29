/**
 * The webhook outbox (src/store/webhook-outbox.ts, migration 16) on both backends: call events
 * are written with the call change, in its transaction, for subscribed endpoints only; the claim
 * hands an endpoint's events of one call out in order, leases each to one claimer (two nodes on
 * PostgreSQL), and gives a row whose lease ran out to the next claimer.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import { toCall } from '../../src/domain/call.ts';
import { newWebhookSecret } from '../../src/events/standard-webhooks.ts';
import { forEachStoreBackend, openOtherNode, openTestStore, type TestStore } from '../helpers/store-backends.ts';
import { delay } from '../helpers/until.ts';

const LEASE_MS = 60_000;

forEachStoreBackend((backend) =>
  describe('webhook outbox', () => {
    let t: TestStore;
    let a: Store;
    let b: Store;
    let orgId = '';
    let otherOrgId = '';
    beforeAll(async () => {
      t = await openTestStore(backend, undefined, { nodeId: 'node-a', publicUrl: 'https://calls.example.com/base/' });
      a = t.store;
      b = backend === 'postgres' ? await openOtherNode(t, 'node-b') : a;
      orgId = (await a.organizations.createKey('hooks')).org.id;
      otherOrgId = (await a.organizations.createKey('no-hooks')).org.id;
    });
    afterAll(async () => {
      if (b !== a) await b?.close();
      await t?.dispose();
    });

    const at = () => new Date().toISOString();
    async function endpoint(org: string, events: string[]): Promise<string> {
      const id = randomUUID();
      await a.webhooks.insert({ id, org_id: org, url: `https://hooks.example.com/${id}`, events: events as never, description: '', secret: newWebhookSecret(), created_at: at() });
      return id;
    }
    async function call(org = orgId): Promise<string> {
      const id = randomUUID();
      await a.calls.insert({ id, org_id: org, agent_id: null, sip_trunk_id: null, direction: 'inbound', from: '+15550001111', to: '+15550002222', created_at: at() });
      return id;
    }
    const rows = async (endpointId: string) => (await a.webhookDeliveries.listForEndpoint(endpointId, 100)).reverse();
    /** Marks every row claimable now delivered (leaves the store with nothing due for the next test). */
    async function drain(): Promise<void> {
      for (let got = await a.webhookDeliveries.claim('drain', LEASE_MS, 100); got.length > 0; got = await a.webhookDeliveries.claim('drain', LEASE_MS, 100)) {
        for (const d of got) await a.webhookDeliveries.delivered(d.id, 200);
      }
    }

    it('writes nothing for an organization without a subscribed endpoint; one row per subscribed endpoint and event', async () => {
      await drain();
      const started = await endpoint(orgId, ['call.started', 'call.ended']);
      const endedOnly = await endpoint(orgId, ['call.ended']);
      const foreign = await endpoint(otherOrgId, ['call.started']);
      const id = await call();
      expect((await rows(started)).map((r) => [r.event_type, r.call_id])).toEqual([['call.started', id]]);
      expect(await rows(endedOnly)).toEqual([]);
      expect(await rows(foreign)).toEqual([]);
      // The other organization's call reaches its own endpoint only.
      const otherCall = await call(otherOrgId);
      expect((await rows(foreign)).map((r) => r.call_id)).toEqual([otherCall]);
      expect((await rows(started)).map((r) => r.call_id)).toEqual([id]);

      expect(await a.calls.markAnswered(id, at())).toBe(true);
      expect(await a.calls.markAnswered(id, at())).toBe(false);
      expect(await a.calls.end(id, { ended_at: at(), termination_reason: 'client_closed', transcript: [{ index: 0, role: 'assistant', message: 'Bye.', type: 'message' }] })).toBe(true);
      expect(await a.calls.end(id, { ended_at: at(), termination_reason: 'timeout' })).toBe(false);
      // call.answered has no subscriber; call.ended goes to both, once.
      expect((await rows(started)).map((r) => r.event_type)).toEqual(['call.started', 'call.ended']);
      expect((await rows(endedOnly)).map((r) => r.event_type)).toEqual(['call.ended']);
      // Both endpoints' rows of one event carry the same event id (the webhook-id).
      expect((await rows(started))[1]!.event_id).toBe((await rows(endedOnly))[0]!.event_id);

      const claimed = (await a.webhookDeliveries.claim('t', LEASE_MS, 100)).filter((d) => d.endpoint_id === endedOnly);
      expect(claimed).toHaveLength(1);
      const body = JSON.parse(claimed[0]!.body);
      expect(body).toEqual({ type: 'call.ended', id: claimed[0]!.event_id, created_at: expect.any(String), data: { call: toCall((await a.calls.get(orgId, id))!) } });
      expect(body.data.call).toMatchObject({ status: 'ended', end_status: 'completed', termination_reason: 'client_closed', transcript: { entries: [{ message: 'Bye.' }] } });
      expect(claimed[0]!.secret).toMatch(/^whsec_/);
      await drain();
      for (const e of [started, endedOnly, foreign]) await a.webhooks.delete(e === foreign ? otherOrgId : orgId, e);
    });

    it('the post-call analysis writes call.analyzed with the analysed call, once', async () => {
      await drain();
      const hook = await endpoint(orgId, ['call.analyzed']);
      const id = await call();
      expect(await a.calls.setAnalysis(id, { summary: 'Early.', extracted_variables: [] }, at())).toBe(false); // not ended yet
      await a.calls.end(id, { ended_at: at(), termination_reason: 'client_closed' });
      expect(await rows(hook)).toEqual([]);
      const analysis = { summary: 'The caller asked about opening hours.', extracted_variables: [] };
      expect(await a.calls.setAnalysis(id, analysis, at())).toBe(true);
      expect(await a.calls.setAnalysis(id, { summary: 'Again.', extracted_variables: [] }, at())).toBe(false);
      expect((await rows(hook)).map((r) => [r.event_type, r.call_id])).toEqual([['call.analyzed', id]]);
      const claimed = (await a.webhookDeliveries.claim('t', LEASE_MS, 100)).filter((d) => d.endpoint_id === hook);
      expect(JSON.parse(claimed[0]!.body).data.call).toMatchObject({ id, summary: 'The caller asked about opening hours.' });
      await drain();
      await a.webhooks.delete(orgId, hook);
    });

    it('storing the recording writes recording.ready with the call and the recording_url under http.public_url, once, only when subscribed', async () => {
      await drain();
      const hook = await endpoint(orgId, ['recording.ready']);
      const notSubscribed = await endpoint(orgId, ['call.started', 'call.ended']);
      const id = await call();
      await a.calls.end(id, { ended_at: at(), termination_reason: 'client_closed' });
      expect(await rows(hook)).toEqual([]);
      expect(await a.calls.setRecording(id, `/data/recordings/${id}.wav`)).toBe(true);
      // Once per call: a second recording is not kept and writes no event.
      expect(await a.calls.setRecording(id, '/data/recordings/other.wav')).toBe(false);
      expect(await a.calls.recordingPath(orgId, id)).toBe(`/data/recordings/${id}.wav`);
      expect((await rows(hook)).map((r) => [r.event_type, r.call_id])).toEqual([['recording.ready', id]]);
      expect((await rows(notSubscribed)).map((r) => r.event_type)).toEqual(['call.started', 'call.ended']);
      const claimed = (await a.webhookDeliveries.claim('t', LEASE_MS, 100)).filter((d) => d.endpoint_id === hook);
      expect(claimed).toHaveLength(1);
      const body = JSON.parse(claimed[0]!.body);
      expect(body).toMatchObject({ type: 'recording.ready', id: claimed[0]!.event_id, data: { call: { id, has_recording: true, status: 'ended' } } });
      // The path never leaves the server: the receiver gets the API link (the test store's public_url).
      expect(body.data.recording_url).toBe(`https://calls.example.com/base/v1/calls/${id}/recording`);
      expect(JSON.stringify(body)).not.toContain('/data/recordings');
      expect(Object.keys(body.data).sort()).toEqual(['call', 'recording_url']);
      // A recording of a call that does not exist: nothing stored, no event.
      expect(await a.calls.setRecording(randomUUID(), '/data/recordings/none.wav')).toBe(false);
      expect(await rows(hook)).toHaveLength(1);
      await drain();
      await a.webhooks.delete(orgId, hook);
      await a.webhooks.delete(orgId, notSubscribed);
    });

    it('without http.public_url, recording_url is the path of GET /v1/calls/{id}/recording', async () => {
      const plain = await openTestStore(backend);
      try {
        const s = plain.store;
        const org = (await s.organizations.createKey('plain')).org.id;
        const hook = randomUUID();
        await s.webhooks.insert({ id: hook, org_id: org, url: 'https://hooks.example.com/plain', events: ['recording.ready'], description: '', secret: newWebhookSecret(), created_at: at() });
        const id = randomUUID();
        await s.calls.insert({ id, org_id: org, agent_id: null, sip_trunk_id: null, direction: 'inbound', from: '+15550001111', to: '+15550002222', created_at: at() });
        expect(await s.calls.setRecording(id, `/data/recordings/${id}.wav`)).toBe(true);
        const [d] = await s.webhookDeliveries.claim('t', LEASE_MS, 100);
        expect(d?.event_type).toBe('recording.ready');
        expect(JSON.parse(d!.body).data.recording_url).toBe(`/v1/calls/${id}/recording`);
      } finally {
        await plain.dispose();
      }
    });

    it('an event commits with its change or not at all', async () => {
      const hook = await endpoint(orgId, ['call.started']);
      const id = randomUUID();
      await expect(
        a.tx(async (tx) => {
          await tx.calls.insert({ id, org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'inbound', from: '+1555', to: '+1556', created_at: at() });
          throw new Error('rolled back');
        }),
      ).rejects.toThrow('rolled back');
      expect(await a.calls.get(orgId, id)).toBeUndefined();
      expect(await rows(hook)).toEqual([]);
      await a.webhooks.delete(orgId, hook);
    });

    it('hands out an endpoint\'s events of one call in order: n + 1 only once n is delivered or given up', async () => {
      await drain();
      const hook = await endpoint(orgId, ['call.started', 'call.answered', 'call.ended']);
      const id = await call();
      await a.calls.markAnswered(id, at());
      await a.calls.end(id, { ended_at: at(), termination_reason: 'client_closed' });
      const other = await call();
      const first = await a.webhookDeliveries.claim('t', LEASE_MS, 100);
      // The first event of each call, not the others behind it.
      expect(first.map((d) => [d.event_type, JSON.parse(d.body).data.call.id]).sort()).toEqual([['call.started', id], ['call.started', other]].sort());
      const started = first.find((d) => JSON.parse(d.body).data.call.id === id)!;
      await a.webhookDeliveries.retryLater(started.id, { statusCode: 500, error: 'HTTP 500' }, 0);
      // Failed and due again: still the head of its call; the next is not handed out around it.
      const again = await a.webhookDeliveries.claim('t', LEASE_MS, 100);
      expect(again.map((d) => [d.id, d.attempts])).toEqual([[started.id, 2]]);
      await a.webhookDeliveries.delivered(started.id, 204);
      const answered = await a.webhookDeliveries.claim('t', LEASE_MS, 100);
      expect(answered.map((d) => d.event_type)).toEqual(['call.answered']);
      await a.webhookDeliveries.giveUp(answered[0]!.id, { statusCode: null, error: 'timeout: no answer' });
      expect((await a.webhookDeliveries.claim('t', LEASE_MS, 100)).map((d) => d.event_type)).toEqual(['call.ended']);
      expect((await rows(hook)).filter((r) => r.call_id === id).map((r) => [r.event_type, r.status])).toEqual([
        ['call.started', 'delivered'],
        ['call.answered', 'failed'],
        ['call.ended', 'pending'],
      ]);
      await drain();
      await a.webhooks.delete(orgId, hook);
    });

    it('a leased row goes to no other claimer until its lease runs out; then to the next one', async () => {
      await drain();
      const hook = await endpoint(orgId, ['call.started']);
      await call();
      const held = await a.webhookDeliveries.claim('node-a/1', 300, 100);
      expect(held).toHaveLength(1);
      expect(await b.webhookDeliveries.claim('node-b/1', LEASE_MS, 100)).toEqual([]);
      await delay(400);
      // The holder died mid-attempt: its row is taken over, the attempt counted again.
      const taken = await b.webhookDeliveries.claim('node-b/1', LEASE_MS, 100);
      expect(taken.map((d) => [d.id, d.attempts])).toEqual([[held[0]!.id, 2]]);
      await drain();
      await a.webhooks.delete(orgId, hook);
    });

    it('of many claims at once from two nodes, each row goes to exactly one', async () => {
      await drain();
      const hook = await endpoint(orgId, ['call.started']);
      for (let i = 0; i < 30; i++) await call();
      const got = (await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? a : b).webhookDeliveries.claim(`node-${i}`, LEASE_MS, 4)))).flat();
      const rest = await a.webhookDeliveries.claim('late', LEASE_MS, 100);
      const ids = [...got, ...rest].map((d) => d.id);
      expect(ids).toHaveLength(30);
      expect(new Set(ids).size).toBe(30);
      expect(await a.webhookDeliveries.pendingCount()).toBe(30);
      for (const d of [...got, ...rest]) await a.webhookDeliveries.delivered(d.id, 200);
      expect(await a.webhookDeliveries.pendingCount()).toBe(0);
      await a.webhooks.delete(orgId, hook);
    });

    it('bulk ends (an expired token, a dead node\'s calls) write call.ended too', async () => {
      await drain();
      const hook = await endpoint(orgId, ['call.ended']);
      const now = Date.now();
      const sessionId = randomUUID();
      const agentId = randomUUID();
      await a.agents.insert({ id: agentId, org_id: orgId, name: `Agent ${agentId}`, status: 'active', phone_number_id: null, settings: {} as never, created_at: at() });
      await a.sessions.create({
        id: sessionId,
        org_id: orgId,
        agent_id: agentId,
        version_id: null,
        caller_id: 'web',
        transport: 'websocket',
        chat_id: null,
        first_message: null,
        prompt: null,
        variables: [],
        scopes: ['voice'],
        token_jti: randomUUID(),
        token_expires_at: new Date(now - 1000).toISOString(),
        created_at: new Date(now - 2000).toISOString(),
        call_to: 'agent',
      });
      expect(await a.sessions.expireUnused(new Date(now).toISOString())).toBe(1);
      const [row] = await rows(hook);
      expect(row).toMatchObject({ event_type: 'call.ended', call_id: sessionId });
      // A dead node's calls, ended by the survivor's sweep.
      const lost = await call();
      await a.client.run('UPDATE calls SET node_id = ? WHERE id = ?', ['node-dead', lost]);
      await a.client.run("INSERT INTO cluster_nodes (node_id, started_at, heartbeat_at, http_url, sip_address) VALUES ('node-dead', 1, 1, '', '')");
      expect((await a.clusterNodes.sweepDead(1000, at())).map((n) => n.calls)).toEqual([1]);
      expect((await rows(hook)).map((r) => [r.event_type, r.call_id])).toEqual([
        ['call.ended', sessionId],
        ['call.ended', lost],
      ]);
      await drain();
      await a.webhooks.delete(orgId, hook);
    });
  }),
);
