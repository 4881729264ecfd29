/**
 * The outbound run repository (src/store/outbound-runs.ts, migration 19) on both backends, two
 * nodes on PostgreSQL: claims never exceed max_concurrent across nodes and never hand one contact
 * to two of them; a lease that ran out returns its contact (the late holder's answer is refused);
 * a slot refusal is not an attempt; calls_per_minute's gate lets one contact through and then
 * closes for 60000 / calls_per_minute ms; an ended call settles its contact once (and a call a
 * previous run of this node left ringing counts as ended, failed); a run with nothing left
 * completes. Contact time zones (migration 23): the claim takes only contacts whose zone's window is
 * open now, a contact without a zone following the window's own.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import { attemptOutcome, nextAfter, openZones, type RunSettings, type RunWindow } from '../../src/domain/outbound.ts';
import { forEachStoreBackend, openOtherNode, openTestStore, type TestStore } from '../helpers/store-backends.ts';
import { delay } from '../helpers/until.ts';

const SETTINGS: RunSettings = { max_concurrent: 2, retry: { max_attempts: 2, backoff_secs: 0, on: ['busy'] } };
const LEASE = 60_000;

forEachStoreBackend((backend) =>
  describe('outbound runs', () => {
    let t: TestStore;
    let a: Store;
    let b: Store;
    let orgId = '';
    beforeAll(async () => {
      t = await openTestStore(backend, undefined, { nodeId: 'node-a' });
      a = t.store;
      b = backend === 'postgres' ? await openOtherNode(t, 'node-b') : a;
      orgId = (await a.organizations.createKey('dialer')).org.id;
    });
    afterAll(async () => {
      if (b !== a) await b?.close();
      await t?.dispose();
    });

    const at = () => new Date().toISOString();
    async function runOf(contacts: number, settings: RunSettings, zones: Array<string | null> = []): Promise<{ runId: string; listId: string }> {
      const listId = randomUUID();
      await a.outboundLists.insert({ id: listId, org_id: orgId, name: 'l', agent_id: randomUUID(), sip_trunk_id: randomUUID(), from_number: null, caller_id: null, created_at: at() });
      const numbers = Array.from({ length: contacts }, (_, i) => ({ id: randomUUID(), phone_number: `+1555000${String(i).padStart(4, '0')}`, variables: [], timezone: zones[i] ?? null }));
      expect((await a.outboundLists.addContacts(listId, [...numbers, { ...numbers[0]!, id: randomUUID() }], at())).duplicates).toEqual([numbers[0]!.phone_number]);
      const runId = randomUUID();
      await a.outboundRuns.create({ id: runId, org_id: orgId, list_id: listId, settings, created_at: at() });
      await a.outboundRuns.setWaiting(runId, 'running', at());
      return { runId, listId };
    }
    const counts = async (listId: string, runId: string) => (await a.outboundRuns.get(orgId, listId, runId))!.counts;

    it('claims up to max_concurrent across nodes, one contact to one node; a slot refusal is no attempt', async () => {
      const { runId, listId } = await runOf(5, SETTINGS);
      const [x, y] = await Promise.all([a.outboundRuns.claim(runId, 'a', LEASE, 10), b.outboundRuns.claim(runId, 'b', LEASE, 10)]);
      expect(x.length + y.length).toBe(2);
      expect(new Set([...x, ...y].map((c) => c.contact_id)).size).toBe(2);
      expect(await b.outboundRuns.claim(runId, 'b', LEASE, 10)).toEqual([]);
      const [held, owner] = x.length > 0 ? [x[0]!, 'a'] : [y[0]!, 'b'];
      await a.outboundRuns.release(runId, held.contact_id, owner, 0);
      const again = await b.outboundRuns.claim(runId, 'b2', LEASE, 10);
      expect(again).toHaveLength(1);
      expect(again[0]!.attempts).toBe(0);
      expect(await counts(listId, runId)).toMatchObject({ pending: 3, dialing: 2 });
    });

    it('a lease that ran out returns its contact; the late holder cannot mark it placed', async () => {
      const { runId, listId } = await runOf(1, { ...SETTINGS, max_concurrent: 1 });
      const [c] = await a.outboundRuns.claim(runId, 'dead', 1, 10);
      expect(c).toBeDefined();
      await delay(20);
      const [again] = await b.outboundRuns.claim(runId, 'live', LEASE, 10);
      expect(again?.contact_id).toBe(c!.contact_id);
      const callId = randomUUID();
      await a.calls.insert({ id: callId, org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'outbound', from: '+15550001111', to: c!.phone_number, created_at: at() });
      expect(await a.outboundRuns.placed(runId, c!.contact_id, 'dead', callId)).toBe(false);
      expect(await b.outboundRuns.placed(runId, c!.contact_id, 'live', callId)).toBe(true);
      expect(await counts(listId, runId)).toMatchObject({ calling: 1, pending: 0 });
      expect(await a.calls.get(orgId, callId)).toMatchObject({ outbound_list_run_id: runId, outbound_contact_id: c!.contact_id });
    });

    it('an ended call settles its contact once: busy retried to max_attempts, then the run completes', async () => {
      const { runId, listId } = await runOf(1, { ...SETTINGS, max_concurrent: 1 });
      for (let attempt = 1; attempt <= 2; attempt++) {
        const [c] = await a.outboundRuns.claim(runId, 'a', LEASE, 10);
        expect(c, `attempt ${attempt}`).toBeDefined();
        const callId = randomUUID();
        await a.calls.insert({ id: callId, org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'outbound', from: '+15550001111', to: c!.phone_number, created_at: at() });
        expect(await a.outboundRuns.placed(runId, c!.contact_id, 'a', callId)).toBe(true);
        // Up: nothing to settle. Unless this node started after the call was placed: then it is
        // a previous run's call, cut while ringing (status started), settled by this node only.
        expect((await a.outboundRuns.endedAttempts(new Date(0).toISOString(), 100)).filter((e) => e.run_id === runId)).toEqual([]);
        const later = new Date(Date.now() + 60_000).toISOString();
        expect((await a.outboundRuns.endedAttempts(later, 100)).filter((e) => e.run_id === runId).map((e) => attemptOutcome(e))).toEqual(['failed']);
        if (b !== a) expect((await b.outboundRuns.endedAttempts(later, 100)).filter((e) => e.run_id === runId)).toEqual([]);
        await a.calls.end(callId, { ended_at: at(), termination_reason: 'busy (486)', end_status: 'busy' });
        const ended = (await b.outboundRuns.endedAttempts(new Date(0).toISOString(), 100)).filter((e) => e.run_id === runId);
        expect(ended).toHaveLength(1);
        const e = ended[0]!;
        const outcome = attemptOutcome(e);
        expect(outcome).toBe('busy');
        const next = nextAfter(outcome, e.attempts, e.settings, e.run_status);
        expect(next.state).toBe(attempt < 2 ? 'pending' : 'failed');
        const [first, second] = await Promise.all([a.outboundRuns.settle(e, outcome, next), b.outboundRuns.settle(e, outcome, next)]);
        expect([first, second].filter(Boolean)).toHaveLength(1);
      }
      expect(await a.outboundRuns.claim(runId, 'a', LEASE, 10)).toEqual([]);
      expect(await a.outboundRuns.finishIfDone(runId, at())).toBe(true);
      const run = await a.outboundRuns.get(orgId, listId, runId);
      expect(run).toMatchObject({ status: 'completed', counts: { failed: 1 } });
      expect((await a.outboundRuns.contacts(runId, 10, 0))[0]).toMatchObject({ state: 'failed', attempts: 2, last_outcome: 'busy' });
    });

    it('calls_per_minute: one contact per opening of the gate, which then stays closed', async () => {
      const { runId } = await runOf(3, { ...SETTINGS, max_concurrent: 3, calls_per_minute: 1 });
      expect(await a.outboundRuns.claim(runId, 'a', LEASE, 10)).toHaveLength(1);
      expect(await b.outboundRuns.claim(runId, 'b', LEASE, 10)).toEqual([]);
      const gate = await a.client.get<{ next_dial_at: number | string }>('SELECT next_dial_at FROM outbound_runs WHERE id = ?', [runId]);
      expect(Number(gate!.next_dial_at) - Date.now()).toBeGreaterThan(50_000);
      // The gate opens (as 60 s later): one more.
      await a.client.run('UPDATE outbound_runs SET next_dial_at = 0 WHERE id = ?', [runId]);
      expect(await b.outboundRuns.claim(runId, 'b', LEASE, 10)).toHaveLength(1);
      expect(await a.outboundRuns.claim(runId, 'a', LEASE, 10)).toEqual([]);
    });

    it('a paused or canceled run hands out nothing; cancel cancels its pending contacts', async () => {
      const { runId, listId } = await runOf(2, SETTINGS);
      expect(await a.outboundRuns.transition(orgId, listId, runId, 'pause', at())).toBe(true);
      expect(await a.outboundRuns.claim(runId, 'a', LEASE, 10)).toEqual([]);
      expect(await a.outboundRuns.transition(orgId, listId, runId, 'pause', at())).toBe(false);
      expect(await a.outboundRuns.transition(orgId, listId, runId, 'cancel', at())).toBe(true);
      expect(await counts(listId, runId)).toMatchObject({ canceled: 2, pending: 0 });
      expect(await a.outboundRuns.transition(orgId, listId, runId, 'resume', at())).toBe(false);
    });

    // A two-hour window around now in UTC: open in UTC (and Etc/UTC), closed twelve hours away.
    const hhmm = (t: number) => new Date(t).toISOString().slice(11, 16);
    const aroundNow = (timezone: string): RunWindow => ({ timezone, days: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], start: hhmm(Date.now() - 3600_000), end: hhmm(Date.now() + 3600_000) });
    async function claimInWindow(window: RunWindow, zones: Array<string | null>): Promise<string[]> {
      const { runId } = await runOf(zones.length, { ...SETTINGS, max_concurrent: 10, window }, zones);
      const pending = await a.outboundRuns.pendingZones(runId);
      expect(new Set(pending)).toEqual(new Set(zones));
      const claimed = await b.outboundRuns.claim(runId, 'b', LEASE, 10, openZones(window, pending, new Date()));
      const byId = new Map((await a.outboundRuns.contacts(runId, 10, 0)).map((c) => [c.contact_id, c.timezone]));
      return claimed.map((c) => String(byId.get(c.contact_id))).sort();
    }

    it("claims only contacts whose own zone is inside the window now; a contact without one follows the window's", async () => {
      // The window's zone (UTC) is open: Etc/UTC and zone-less contacts are taken, UTC+12 is not.
      expect(await claimInWindow(aroundNow('UTC'), ['Etc/GMT-12', 'Etc/UTC', null])).toEqual(['Etc/UTC', 'null']);
      // The window's zone is UTC+12, closed now: zone-less contacts wait; a contact in UTC is called.
      expect(await claimInWindow({ ...aroundNow('UTC'), timezone: 'Etc/GMT-12' }, ['Etc/GMT-12', 'Etc/UTC', null, null])).toEqual(['Etc/UTC']);
      // No zone open: nothing.
      const { runId } = await runOf(1, SETTINGS, ['Etc/GMT-12']);
      expect(await a.outboundRuns.claim(runId, 'a', LEASE, 10, [])).toEqual([]);
      expect(await a.outboundRuns.claim(runId, 'a', LEASE, 10, [null])).toEqual([]);
      expect(await a.outboundRuns.claim(runId, 'a', LEASE, 10, ['Etc/GMT-12'])).toHaveLength(1);
    });
  }),
);
