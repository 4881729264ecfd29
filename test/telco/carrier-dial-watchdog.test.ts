/**
 * The watchdog of outbound carrier dials (src/bridge/carrier-dial.ts): a call the carrier accepted
 * but that neither streams nor gets a final status callback (a lost callback, a TwiML that never
 * reached us) is ended at the carrier (canceled while ringing, completed once answered) and in
 * the record (carrier_timeout), and its stream token is spent. The carrier client, store and
 * session opener are stand-ins here: the wire protocol is proven in twilio-outbound.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CarrierDials } from '../../src/bridge/carrier-dial.ts';
import { CallRecordWriter } from '../../src/bridge/call-record-writer.ts';
import { createLogger } from '../../src/log.ts';
import type { CarrierClient } from '../../src/telco/carrier-client.ts';
import { StreamTokens } from '../../src/telco/twilio-stream-tokens.ts';
import type { Store } from '../../src/store/index.ts';
import { openTestStore, type TestStore } from '../helpers/store-backends.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, check: () => boolean): Promise<void> {
  for (const end = Date.now() + 5000; !check(); await sleep(20)) if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
}

// The stream grants are in a real (SQLite) store; the rest of the store is a stand-in.
let grants: TestStore;
beforeAll(async () => {
  grants = await openTestStore('sqlite');
});
afterAll(() => grants.dispose());

function harness() {
  const updates: Array<{ callSid: string; fields: unknown }> = [];
  const ends: Array<{ id: string; reason: string; end_status?: string }> = [];
  let issued = '';
  const tokens = new StreamTokens(grants.store.streamGrants);
  const issue = tokens.issue.bind(tokens);
  tokens.issue = async (grant, ttl) => (issued = await issue(grant, ttl));
  const client: CarrierClient = {
    lookupNumber: () => Promise.reject(new Error('unused')),
    setVoiceUrl: () => Promise.reject(new Error('unused')),
    getNumberWebhook: () => Promise.reject(new Error('unused')),
    writeNumberWebhook: () => Promise.reject(new Error('unused')),
    createCall: () => Promise.resolve({ sid: 'CA0001', status: 'queued' }),
    updateCall: (_a, _t, callSid, fields) => {
      updates.push({ callSid, fields });
      return Promise.resolve();
    },
  };
  const store = {
    agents: { get: () => ({ id: 'agent-1', status: 'active', active_version_id: null }) },
    telcoNumbers: { get: () => ({ id: 'num-1', phone_number: '+15550001111' }), credentials: () => ({ account_sid: 'AC1', auth_token: 'tok' }) },
    calls: { setCarrierCallId: () => true },
    streamGrants: grants.store.streamGrants,
  } as unknown as Store;
  const records = new CallRecordWriter({ markAnswered: () => true, setRecording: () => true, setSip: () => true, end: (id, e) => (ends.push({ id, reason: e.termination_reason, ...(e.end_status ? { end_status: e.end_status } : {}) }), true) }, true);
  const dials = new CarrierDials({
    store,
    sessions: { recordsCalls: true, open: () => Promise.resolve({ sessionId: 'call-1', connectUrl: 'ws://127.0.0.1:1/v1/connection?token=x', token: 'x' }), connectUrl: (t) => `ws://127.0.0.1:1/v1/connection?token=${t}` },
    records,
    client,
    tokens,
    publicUrl: 'https://calls.example.com',
    ringTimeoutSecs: 0,
    log: createLogger('silent'),
    watchdogSlackMs: 150,
  });
  const req = { orgId: 'org-1', agentId: 'agent-1', telcoNumberId: 'num-1', number: '+15557770001', variables: [] };
  return { dials, req, updates, ends, tokens, token: () => issued };
}

const status = (kind: 'answered' | 'ringing') => ({
  accountSid: 'AC1',
  callSid: 'CA0001',
  callId: 'call-1',
  progress: kind === 'answered' ? ({ kind: 'answered' } as const) : ({ kind: 'progress', status: 'ringing' } as const),
  durationSecs: undefined,
  sipResponseCode: undefined,
});

describe('outbound carrier dial watchdog', () => {
  it('cancels a ringing call that never ends, and ends its record carrier_timeout', async () => {
    const h = harness();
    await h.dials.dial(h.req);
    expect(await h.dials.status(status('ringing'))).toBe(true);
    expect(h.dials.pending).toBe(1);
    await until('the watchdog', () => h.ends.length > 0);
    expect(h.updates).toEqual([{ callSid: 'CA0001', fields: { Status: 'canceled' } }]);
    expect(h.ends).toEqual([{ id: 'call-1', reason: 'carrier_timeout', end_status: 'failed' }]);
    await until('the carrier told', () => h.updates.length > 0);
    expect(h.dials.pending).toBe(0);
    // The token is spent: a late stream is refused.
    expect(await h.tokens.redeem(h.token())).toBeUndefined();
  });

  it('completes an answered call whose stream never came', async () => {
    const h = harness();
    await h.dials.dial(h.req);
    await h.dials.status(status('answered'));
    await until('the watchdog', () => h.ends.length > 0 && h.updates.length > 0);
    expect(h.updates).toEqual([{ callSid: 'CA0001', fields: { Status: 'completed' } }]);
    expect(h.ends.map((e) => e.reason)).toEqual(['carrier_timeout']);
  });

  it('leaves a call alone once its stream started', async () => {
    const h = harness();
    await h.dials.dial(h.req);
    await h.dials.status(status('answered'));
    expect(h.dials.streamStarted('call-1', 'CA0001')).toMatchObject({ callId: 'call-1' });
    await sleep(400);
    expect(h.updates).toEqual([]);
    expect(h.ends).toEqual([]);
  });
});
