/**
 * The status callbacks of carrier dials this node does not hold, alone
 * (src/bridge/carrier-dial-callbacks.ts), over a fake store: a final status of a dial still ringing
 * elsewhere spends its grant and ends its record, `answered` is remembered, the first callback
 * binds the CallSid, and a dial that ended, streams, belongs to another CallSid or is unknown is
 * left alone. Two daemons on one store: test/bridge/carrier-dial-nodes.test.ts.
 */
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { dialStatusElsewhere, type DialCallbackDeps } from '../../src/bridge/carrier-dial-callbacks.ts';
import type { CarrierCallProgress, CarrierCallStatus } from '../../src/telco/twilio-call-status.ts';

type Dial = { orgId: string; callSid: string | null; ended: boolean; streaming: boolean; answered: boolean };

function setup(dial: Dial | undefined) {
  const done: string[] = [];
  const metrics = { failure: vi.fn() };
  const deps = {
    store: {
      streamGrants: {
        carrierDial: (callId: string, accountSid: string) => Promise.resolve(accountSid === 'AC1' && callId === 'call-1' ? dial : undefined),
        markAnswered: (callId: string) => Promise.resolve(void done.push(`answered ${callId}`)),
      },
    },
    tokens: { revoke: (callId: string) => Promise.resolve(void done.push(`revoke ${callId}`)), bindCall: (callId: string, sid: string) => Promise.resolve(void done.push(`bind ${callId} ${sid}`)) },
    records: { failedDial: (callId: string, reason: string) => (done.push(`failedDial ${callId} ${reason}`), Promise.resolve(true)) },
    metrics,
    log: pino({ level: 'silent' }),
  } as unknown as DialCallbackDeps;
  return { deps, done, metrics };
}

const status = (progress: CarrierCallProgress, o: Partial<CarrierCallStatus> = {}): CarrierCallStatus => ({ accountSid: 'AC1', callSid: 'CA1', callId: 'call-1', progress, durationSecs: undefined, sipResponseCode: undefined, ...o });
const busy: CarrierCallProgress = { kind: 'ended', status: 'busy', dial: 'busy' };
const ringing = (o: Partial<Dial> = {}): Dial => ({ orgId: 'org', callSid: 'CA1', ended: false, streaming: false, answered: false, ...o });

describe('status callbacks of dials placed elsewhere', () => {
  it('a final status ends a dial still ringing: grant spent first, then the record, counted', async () => {
    const s = setup(ringing());
    await dialStatusElsewhere(s.deps, status(busy));
    expect(s.done).toEqual(['revoke call-1', 'failedDial call-1 busy']);
    expect(s.metrics.failure).toHaveBeenCalledWith('dial_busy');
  });

  it('completed without a stream ends as no_media_stream; answered is remembered; the first callback binds the CallSid', async () => {
    const s = setup(ringing({ callSid: null }));
    await dialStatusElsewhere(s.deps, status({ kind: 'answered' }));
    await dialStatusElsewhere(s.deps, status({ kind: 'ended', status: 'completed', dial: 'completed' }));
    expect(s.done).toEqual(['bind call-1 CA1', 'answered call-1', 'bind call-1 CA1', 'revoke call-1', 'failedDial call-1 no_media_stream']);
  });

  it('leaves alone a dial that ended, streams, has another CallSid, is of another account or has no call id', async () => {
    for (const [dial, u] of [
      [ringing({ ended: true }), status(busy)],
      [ringing({ streaming: true }), status(busy)],
      [ringing({ callSid: 'CA-other' }), status(busy)],
      [ringing(), status(busy, { accountSid: 'AC-other' })],
      [ringing(), status(busy, { callId: undefined })],
    ] as const) {
      const s = setup(dial);
      await dialStatusElsewhere(s.deps, u);
      expect(s.done).toEqual([]);
    }
  });
});
