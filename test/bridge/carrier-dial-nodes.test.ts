/**
 * Outbound carrier dials on a store several nodes share (src/bridge/carrier-dial.ts), on both
 * backends: node a places the dial (CarrierDials over a real store; the carrier client and the
 * session opener are stand-ins), node b is another store on the same database (on SQLite the
 * same store) with a CarrierDials of its own that never placed anything.
 *
 *   - a's watchdog re-reads the store: a dial b ended, or whose stream started on b, is forgotten
 *     without a carrier request or a record write
 *   - a's check of its pending dials (storeCheckMs) drops a dial whose stream started on b, long
 *     before the watchdog
 *   - b, given the dial's callbacks: answered is stored (a's watchdog then completes the call
 *     rather than cancel it), busy ends the record as a one-node busy does; one of another
 *     account, or of a call that streams, changes nothing
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CarrierDials } from '../../src/bridge/carrier-dial.ts';
import { CallRecordWriter } from '../../src/bridge/call-record-writer.ts';
import { createLogger } from '../../src/log.ts';
import type { Store } from '../../src/store/index.ts';
import type { CarrierClient } from '../../src/telco/carrier-client.ts';
import type { CarrierCallStatus } from '../../src/telco/twilio-call-status.ts';
import { callProgress } from '../../src/telco/twilio-call-status.ts';
import { StreamTokens } from '../../src/telco/twilio-stream-tokens.ts';
import { delay, untilAsync } from '../helpers/until.ts';
import { forEachStoreBackend, openOtherNode, openTestStore, type TestStore } from '../helpers/store-backends.ts';


const ACCOUNT = 'AC' + randomUUID().replace(/-/g, '');
const FROM = '+15550505001';

forEachStoreBackend((backend) =>
  describe('carrier dials across nodes', () => {
    let t: TestStore;
    let a: Store;
    let b: Store;
    let orgId = '';
    let numberId = '';
    beforeAll(async () => {
      t = await openTestStore(backend, undefined, { nodeId: 'node-a' });
      a = t.store;
      b = backend === 'postgres' ? await openOtherNode(t, 'node-b') : a;
      orgId = (await a.organizations.createKey('dials')).org.id;
      numberId = randomUUID();
      await a.telcoNumbers.insert({ id: numberId, org_id: orgId, phone_number: FROM, phone_sid: 'PN1', label: FROM, account_sid: ACCOUNT, auth_token: 'tok', created_at: new Date().toISOString() });
    });
    afterAll(async () => {
      if (b !== a) await b?.close();
      await t?.dispose();
    });

    /** A node's CarrierDials over its store; `placed` collects the Calls.json requests it makes. */
    function node(store: Store, o: { watchdogSlackMs?: number; storeCheckMs?: number } = {}) {
      const updates: Array<{ callSid: string; fields: unknown }> = [];
      const placed: Array<{ sid: string; token: string; callId: string }> = [];
      const client: CarrierClient = {
        lookupNumber: () => Promise.reject(new Error('unused')),
        setVoiceUrl: () => Promise.reject(new Error('unused')),
        getNumberWebhook: () => Promise.reject(new Error('unused')),
        writeNumberWebhook: () => Promise.reject(new Error('unused')),
        createCall: (_a, _t, call) => {
          const sid = 'CA' + randomUUID().replace(/-/g, '');
          const token = /<Parameter name="token" value="([^"]+)"\/>/.exec(call.twiml)![1]!;
          placed.push({ sid, token, callId: new URL(call.statusCallback).searchParams.get('call')! });
          return Promise.resolve({ sid, status: 'queued' });
        },
        updateCall: (_a, _t, callSid, fields) => {
          updates.push({ callSid, fields });
          return Promise.resolve();
        },
      };
      // The agent is a stand-in; numbers, calls and grants are the store's.
      const dialStore = { ...store, agents: { get: () => Promise.resolve({ id: 'agent-1', status: 'active', active_version_id: null }) } } as unknown as Store;
      const dials = new CarrierDials({
        store: dialStore,
        sessions: {
          recordsCalls: true,
          async open(input) {
            const id = randomUUID();
            await store.calls.insert({ id, org_id: input.orgId, agent_id: null, sip_trunk_id: null, direction: 'outbound', source: 'twilio', from: input.callerId, to: input.callTo, created_at: new Date().toISOString() });
            return { sessionId: id, connectUrl: `ws://127.0.0.1:1/v1/connection?token=s-${id}`, token: `s-${id}` };
          },
          connectUrl: (token) => `ws://127.0.0.1:1/v1/connection?token=${token}`,
        },
        records: new CallRecordWriter(store.calls, true),
        client,
        tokens: new StreamTokens(store.streamGrants),
        publicUrl: 'https://calls.example.com',
        ringTimeoutSecs: 0,
        log: createLogger('silent'),
        watchdogSlackMs: o.watchdogSlackMs ?? 300,
        storeCheckMs: o.storeCheckMs ?? 0,
      });
      const dial = async () => {
        await dials.dial({ orgId, agentId: 'agent-1', telcoNumberId: numberId, number: '+15557770001', variables: [] });
        return placed.at(-1)!;
      };
      return { dials, updates, dial };
    }

    const callback = (p: { sid: string; callId: string }, status: string, accountSid = ACCOUNT): CarrierCallStatus => ({
      accountSid,
      callSid: p.sid,
      callId: p.callId,
      progress: callProgress(status)!,
      durationSecs: undefined,
      sipResponseCode: status === 'busy' ? 486 : undefined,
    });
    const record = (callId: string) => a.calls.get(orgId, callId);

    it('the watchdog forgets a dial another node ended: no carrier request, no write', async () => {
      const na = node(a);
      const p = await na.dial();
      expect(await b.calls.end(p.callId, { ended_at: '2026-01-01T00:00:00.000Z', termination_reason: 'ended_elsewhere', end_status: 'failed' })).toBe(true);
      await delay(600);
      expect(na.dials.pending).toBe(0);
      expect(na.updates).toEqual([]);
      expect(await record(p.callId)).toMatchObject({ ended_at: '2026-01-01T00:00:00.000Z', termination_reason: 'ended_elsewhere' });
    });

    it('the watchdog forgets a dial whose stream started on another node: the call is left alone', async () => {
      const na = node(a);
      const p = await na.dial();
      expect(await new StreamTokens(b.streamGrants).redeem(p.token, p.sid)).toMatchObject({ outbound: { callId: p.callId, sessionToken: `s-${p.callId}` } });
      await delay(600);
      expect(na.dials.pending).toBe(0);
      expect(na.updates).toEqual([]);
      expect((await record(p.callId))?.ended_at).toBeNull();
    });

    it('the store check drops a dial whose stream started elsewhere long before the watchdog', async () => {
      const na = node(a, { watchdogSlackMs: 30_000, storeCheckMs: 100 });
      const p = await na.dial();
      expect(na.dials.pending).toBe(1);
      await new StreamTokens(b.streamGrants).redeem(p.token, p.sid);
      await untilAsync(() => na.dials.pending === 0, 'node a drops the dial', 2000);
      expect(na.updates).toEqual([]);
      na.dials.close();
      await na.dials.settled();
      expect(na.updates).toEqual([]);
    });

    it('another node\'s callbacks: answered is stored, so the placing node completes rather than cancels', async () => {
      const na = node(a, { watchdogSlackMs: 800 });
      const nb = node(b);
      const p = await na.dial();
      // A signed callback of another account changes nothing.
      await nb.dials.statusElsewhere(callback(p, 'in-progress', 'AC-another'));
      expect((await a.streamGrants.dialStates([p.callId])).get(p.callId)?.answered).toBe(false);
      await nb.dials.statusElsewhere(callback(p, 'ringing'));
      await nb.dials.statusElsewhere(callback(p, 'in-progress'));
      expect((await a.streamGrants.dialStates([p.callId])).get(p.callId)?.answered).toBe(true);
      await untilAsync(() => na.updates.length > 0, 'the watchdog', 3000);
      expect(na.updates).toEqual([{ callSid: p.sid, fields: { Status: 'completed' } }]);
      expect(await record(p.callId)).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'carrier_timeout' });
    });

    it('another node\'s busy callback ends the record busy and spends the grant; on a streaming call it does nothing', async () => {
      const na = node(a, { watchdogSlackMs: 800 });
      const nb = node(b);
      const p = await na.dial();
      await nb.dials.statusElsewhere(callback(p, 'busy'));
      expect(await record(p.callId)).toMatchObject({ status: 'ended', end_status: 'busy', termination_reason: 'busy (486)' });
      expect(await new StreamTokens(a.streamGrants).redeem(p.token, p.sid)).toBeUndefined();
      await delay(1000);
      expect(na.updates).toEqual([]);
      expect(na.dials.pending).toBe(0);

      const streaming = await na.dial();
      await new StreamTokens(b.streamGrants).redeem(streaming.token, streaming.sid);
      await nb.dials.statusElsewhere(callback(streaming, 'completed'));
      expect((await record(streaming.callId))?.ended_at).toBeNull();
      // The placing node's own final callback of a call that streams elsewhere: no write either.
      expect(await na.dials.status(callback(streaming, 'completed'))).toBe(true);
      await delay(100);
      expect((await record(streaming.callId))?.ended_at).toBeNull();
      expect(na.updates).toEqual([]);
    });
  }),
);
