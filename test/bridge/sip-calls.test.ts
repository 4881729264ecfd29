/**
 * The SIP entry points alone (src/bridge/sip-calls.ts), with fake SIP calls and an in-memory
 * registry: an INVITE delivered while the node is full is refused 503 with Retry-After and the
 * slot admission took for it goes back; an inbound call's slot is held by the call; a dial needs
 * a listening user agent. The same paths over real SIP: test/bridge/admission.test.ts,
 * dial-limits.test.ts, smoke.test.ts.
 */
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { BridgedCalls } from '../../src/bridge/bridged-calls.ts';
import { CallRecordWriter } from '../../src/bridge/call-record-writer.ts';
import { CallSlots, MemorySlots } from '../../src/bridge/call-slots.ts';
import type { SessionOpener } from '../../src/bridge/session-opener.ts';
import { SipCalls } from '../../src/bridge/sip-calls.ts';
import { DomainError } from '../../src/domain/errors.ts';
import { MediaTicker } from '../../src/media/media-ticker.ts';
import type { SipCall, SipUserAgent } from '../../src/sip/ua/index.ts';
import type { Store } from '../../src/store/index.ts';

const log = pino({ level: 'silent' });

function setup(o: { pending?: () => number; ua?: SipUserAgent; agents?: Store['agents']['get'] } = {}) {
  const slots = new CallSlots(new MemorySlots(), 'node-1', { maxCallsPerTrunk: 1, maxCallsPerOrg: 0 }, log);
  const records = new CallRecordWriter({ markAnswered: () => true, end: () => true, setRecording: () => true, setSip: () => true }, true);
  const calls = new BridgedCalls({ slots, maxCalls: 1, pendingCalls: o.pending, records });
  const store = { agents: { get: o.agents ?? (() => new Promise(() => undefined)) }, sipTrunks: { get: () => Promise.resolve(undefined) } } as unknown as Store;
  const sessions = { recordsCalls: true, open: vi.fn(), connectUrl: (t: string) => t } as unknown as SessionOpener;
  const sip = new SipCalls({ store, sessions, logger: log, ua: () => o.ua, calls, records, ticker: new MediaTicker(), dialTransfer: () => Promise.resolve(undefined) });
  return { sip, calls, slots };
}

/** A routed inbound SipCall as far as the bridge reads it before the session starts. */
function inboundCall(route: object) {
  const rejected: Array<[number, string, unknown]> = [];
  const call = {
    id: 'call-1',
    callId: 'a84b4c76e66710@pc33.example.com',
    from: '+15550000001',
    to: '+15550000002',
    route,
    rtp: undefined,
    state: 'ringing',
    reject: (status: number, reason: string, headers: unknown) => void rejected.push([status, reason, headers]),
    closed: false,
    direction: 'inbound',
    on: () => undefined,
    inviteHeader: () => [],
  };
  return { call: call as unknown as SipCall, rejected };
}

const route = () => ({ orgId: 'org', agentId: 'agent', trunkId: 'trunk', number: '+15550000002' });

describe('SIP entry points', () => {
  it('refuses an admitted INVITE 503 with Retry-After when the node filled up meanwhile, and gives its slot back', async () => {
    let pending = 0;
    const s = setup({ pending: () => pending });
    const r = route();
    expect(await s.calls.admit(r)).toBeUndefined();
    expect(await s.slots.held()).toBe(1);
    pending = 1; // a carrier dial took the room between admission and delivery
    const { call, rejected } = inboundCall(r);
    s.sip.handleInbound(call);
    expect(rejected).toEqual([[503, 'Too many calls', [['Retry-After', '5']]]]);
    expect(s.calls.active).toBe(0);
    await s.slots.settled();
    expect(await s.slots.held()).toBe(0);
  });

  it('hands the admitted slot to the bridged call (not a second one)', async () => {
    const s = setup();
    const r = route();
    await s.calls.admit(r);
    s.sip.handleInbound(inboundCall(r).call);
    await new Promise((resolve) => setImmediate(resolve));
    expect(s.calls.active).toBe(1);
    expect(await s.slots.held()).toBe(1);
    expect(s.calls.takeAdmitted(r)).toBeUndefined();
  });

  it('dial: 503 without a listening SIP user agent', async () => {
    for (const ua of [undefined, { listening: false } as SipUserAgent]) {
      const err = await setup({ ua }).sip.dial({ orgId: 'org', agentId: 'agent', sipTrunkId: 'trunk', number: '+15550000003', callerId: '+15550000001' } as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DomainError);
      expect((err as DomainError).message).toMatch(/needs the SIP user agent/);
    }
  });
});
