/**
 * The registry of bridged calls alone (src/bridge/bridged-calls.ts): bridge.max_calls counted in
 * memory (503 with Retry-After), the per-trunk limit's slots (486) taken at admission, handed to
 * the call or given back when the INVITE lapses, and given back when the call finishes. Fake legs
 * and links, in-memory slots: no daemon, no SIP peer. test/bridge/admission.test.ts runs the same
 * rules over real SIP.
 */
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import type { BridgeMetrics } from '../../src/bridge/bridge-metrics.ts';
import { BridgedCalls } from '../../src/bridge/bridged-calls.ts';
import type { CallLeg, LegEnd } from '../../src/bridge/call-leg.ts';
import { CallRecordWriter } from '../../src/bridge/call-record-writer.ts';
import { CallSlots, MemorySlots } from '../../src/bridge/call-slots.ts';
import type { VoiceLink } from '../../src/bridge/voice-link.ts';

const log = pino({ level: 'silent' });
const settle = () => new Promise((resolve) => setImmediate(resolve));

/** A ringing leg whose session never starts: it ends when the test ends it. */
function ringingLeg(): CallLeg & { end(reason: string): void } {
  const hangups: Array<(end: LegEnd) => void> = [];
  let state: CallLeg['state'] = 'ringing';
  const end = (reason: string) => {
    if (state === 'ended') return;
    state = 'ended';
    for (const l of hangups) l({ reason });
  };
  return {
    id: 'leg',
    direction: 'inbound',
    from: '+15550000001',
    to: '+15550000002',
    route: { orgId: 'org', agentId: 'agent', trunkId: 'trunk' },
    trunkId: 'trunk',
    get state() {
      return state;
    },
    get closed() {
      return state === 'ended';
    },
    codec: 'PCMU',
    answer: () => false,
    refuse: () => end('rejected'),
    hangup: () => end('local'),
    onHangup: (l) => void hangups.push(l),
    onDtmf: () => undefined,
    sendDtmf: () => Promise.resolve(),
    startMedia: () => {
      throw new Error('no media in these tests');
    },
    transfer: () => Promise.resolve(),
    quality: () => ({ packetsReceived: 0, packetsLost: 0, jitterMs: 0 }),
    end,
  };
}

const link: VoiceLink = { open: false, audioInWorker: false, sendInputAudio: () => undefined, sendDtmf: () => undefined, finalCounts: () => Promise.resolve(undefined), close: () => undefined };

function registry(o: { maxCalls?: number; maxCallsPerTrunk?: number; pending?: () => number } = {}) {
  const slots = new CallSlots(new MemorySlots(), 'node-1', { maxCallsPerTrunk: o.maxCallsPerTrunk ?? 0, maxCallsPerOrg: 0 }, log);
  const metrics = { callStarted: vi.fn(), callEnded: vi.fn(), failure: vi.fn<BridgeMetrics['failure']>(), quality: vi.fn() } as unknown as BridgeMetrics & { failure: ReturnType<typeof vi.fn> };
  const records = new CallRecordWriter({ markAnswered: () => true, end: () => true, setRecording: () => true, setSip: () => true }, true);
  const calls = new BridgedCalls({ slots, maxCalls: o.maxCalls ?? 0, pendingCalls: o.pending, records, metrics });
  /** A call ringing in the registry (its session being opened). */
  const ringing = () => {
    const leg = ringingLeg();
    const core = calls.bridge(leg, log, () => link, undefined);
    void core.start(new Promise(() => undefined));
    return { leg, core };
  };
  return { calls, slots, metrics, ringing };
}

const route = { orgId: 'org', trunkId: 'trunk' };

describe('bridged calls: bridge.max_calls', () => {
  it('counts each bridged call until it finishes, and refuses admission with 503 and Retry-After while full', async () => {
    const r = registry({ maxCalls: 1 });
    expect(r.calls.admit(route)).toBeUndefined();
    const { leg } = r.ringing();
    expect(r.calls.active).toBe(1);
    expect(r.calls.full()).toBe(true);
    expect(r.calls.admit(route)).toMatchObject({ status: 503, reason: 'Too many calls', retryAfter: 5 });
    expect(r.metrics.failure).toHaveBeenCalledWith('limit_global');
    leg.end('caller hung up');
    await settle();
    expect(r.calls.active).toBe(0);
    expect(r.calls.full()).toBe(false);
  });

  it('counts calls still to come (carrier dials ringing) against the limit', () => {
    let pending = 0;
    const r = registry({ maxCalls: 2, pending: () => pending });
    r.ringing();
    expect(r.calls.full()).toBe(false);
    pending = 1;
    expect(r.calls.full()).toBe(true);
  });
});

describe('bridged calls: per-trunk slots', () => {
  it('takes a slot at admission, refuses the next with 486, and gives it back when the INVITE lapses', async () => {
    const r = registry({ maxCallsPerTrunk: 1 });
    const first = { ...route };
    expect(await r.calls.admit(first)).toBeUndefined();
    expect(await r.slots.held()).toBe(1);
    expect(await r.calls.admit({ ...route })).toMatchObject({ status: 486, reason: 'Trunk busy' });
    expect(r.metrics.failure).toHaveBeenCalledWith('limit_trunk');
    r.calls.admissionLapsed(first);
    await r.slots.settled();
    expect(await r.slots.held()).toBe(0);
    expect(await r.calls.admit({ ...route })).toBeUndefined();
  });

  it('hands an admitted slot to the call once, which holds it until it finishes', async () => {
    const r = registry({ maxCallsPerTrunk: 1 });
    const admitted = { ...route };
    await r.calls.admit(admitted);
    const held = r.calls.takeAdmitted(admitted)!;
    expect(held).toBeDefined();
    expect(r.calls.takeAdmitted(admitted)).toBeUndefined();
    const { leg, core } = r.ringing();
    r.calls.hold(core, held);
    expect(await r.slots.held()).toBe(1);
    leg.end('caller hung up');
    await r.slots.settled();
    expect(await r.slots.held()).toBe(0);
    // A call done already gives a slot back at once.
    const late = await r.slots.acquire('org', 'trunk');
    r.calls.hold(core, 'held' in late ? late.held : { release: () => undefined });
    await r.slots.settled();
    expect(await r.slots.held()).toBe(0);
  });

  it('refuses a call busy when its slot is refused, before its session is read', async () => {
    const r = registry({ maxCallsPerTrunk: 1 });
    await r.calls.admit({ ...route });
    const { core } = r.ringing();
    const session = vi.fn(() => Promise.reject(new Error('must not be read')));
    const result = await r.calls.holding(core, r.slots.acquire('org', 'trunk'), session);
    expect(result).toMatchObject({ refuse: 'busy' });
    expect(session).not.toHaveBeenCalled();
  });
});
