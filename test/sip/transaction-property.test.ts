/**
 * Properties of the transaction machines under arbitrary interleavings of duplicated and
 * reordered inputs (fast-check): whatever arrives in whatever order, a server transaction never
 * sends two different final responses, and a client transaction never passes two different
 * final outcomes to its TU.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createResponse, type SipResponse } from '../../src/sip/message/index.ts';
import { clientInviteStep, startClientInvite } from '../../src/sip/transaction/client-invite.ts';
import { clientNonInviteStep, startClientNonInvite } from '../../src/sip/transaction/client-noninvite.ts';
import { serverInviteStep, startServerInvite } from '../../src/sip/transaction/server-invite.ts';
import { serverNonInviteStep, startServerNonInvite } from '../../src/sip/transaction/server-noninvite.ts';
import { TransactionLayer, type ServerTransaction } from '../../src/sip/transaction/index.ts';
import { timerValues, type TimerName } from '../../src/sip/transaction/timers.ts';
import type { Transition, TxAction, TxInput } from '../../src/sip/transaction/types.ts';
import { FakeTransport, peerRequest, tuRequest, VirtualClock } from './transaction-fakes.ts';

const TIMERS: TimerName[] = ['A', 'B', 'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'Trying', 'Cancel'];
const STATUSES = [100, 180, 183, 200, 202, 302, 400, 404, 481, 486, 487, 500, 503, 603];

/**
 * A pool of distinct inputs (each response a distinct object), then an interleaving drawn from
 * it by index: any order, any input any number of times.
 */
function interleavings(pool: fc.Arbitrary<TxInput[]>): fc.Arbitrary<TxInput[]> {
  return pool.chain((inputs) => fc.array(fc.nat({ max: inputs.length - 1 }), { maxLength: 60 }).map((idx) => idx.map((i) => inputs[i]!)));
}

function run<S>(step: (s: S, i: TxInput) => Transition<S>, start: Transition<S>, inputs: TxInput[]): TxAction[] {
  const actions = [...start.actions];
  let s = start.state;
  for (const i of inputs) {
    const t = step(s, i);
    s = t.state;
    actions.push(...t.actions);
  }
  return actions;
}

const sentFinals = (actions: TxAction[]): SipResponse[] =>
  actions.flatMap((a) => (a.type === 'send-response' && a.response.status >= 200 ? [a.response] : []));

describe('server non-INVITE transaction: never two different final responses', () => {
  const req = peerRequest('OPTIONS');
  const pool = fc
    .tuple(fc.array(fc.constantFrom(...STATUSES), { minLength: 1, maxLength: 6 }), fc.boolean())
    .map(([statuses]): TxInput[] => [
      { kind: 'request', request: req },
      ...statuses.map((status): TxInput => ({ kind: 'tu-response', response: createResponse(req, status, undefined, { toTag: 't' }) })),
      ...TIMERS.map((timer): TxInput => ({ kind: 'timer', timer })),
      { kind: 'transport-error', error: new Error('x') },
    ]);

  it('pure machine, UDP and TCP', () => {
    fc.assert(
      fc.property(interleavings(pool), fc.boolean(), (inputs, reliable) => {
        const actions = run(serverNonInviteStep, startServerNonInvite(req, timerValues({}, reliable)), inputs);
        const finals = sentFinals(actions);
        expect(new Set(finals).size).toBeLessThanOrEqual(1);
        // Nothing provisional goes out once the final has.
        const firstFinal = actions.findIndex((a) => a.type === 'send-response' && a.response.status >= 200);
        if (firstFinal >= 0) {
          for (const a of actions.slice(firstFinal)) if (a.type === 'send-response') expect(a.response).toBe(finals[0]);
        }
        // At most one terminate, and nothing after it.
        const term = actions.findIndex((a) => a.type === 'terminate');
        if (term >= 0) expect(actions.length).toBe(term + 1);
      }),
      { numRuns: 2000 },
    );
  });

  it('through the layer: retransmissions, TU answers, time and send failures in any order', () => {
    type Step = { kind: 'retransmit' } | { kind: 'respond'; status: number } | { kind: 'advance'; ms: number } | { kind: 'fail'; on: boolean };
    const step: fc.Arbitrary<Step> = fc.oneof(
      fc.constant<Step>({ kind: 'retransmit' }),
      fc.constantFrom(...STATUSES).map((status): Step => ({ kind: 'respond', status })),
      fc.integer({ min: 0, max: 40_000 }).map((ms): Step => ({ kind: 'advance', ms })),
      fc.boolean().map((on): Step => ({ kind: 'fail', on })),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 40 }), fc.boolean(), (steps, tcp) => {
        const clock = new VirtualClock();
        const transport = new FakeTransport(clock);
        const layer = new TransactionLayer({ transport, clock });
        let tx: ServerTransaction | undefined;
        layer.on('request', (t) => {
          tx ??= t;
        });
        const source = { protocol: tcp ? ('tcp' as const) : ('udp' as const), address: '198.51.100.7', port: 5062 };
        const options = peerRequest('OPTIONS', { branch: 'z9hG4bKprop', protocol: tcp ? 'TCP' : 'UDP' });
        transport.deliverRequest(options, source);
        let failing = false;
        transport.failWhen = () => failing;
        for (const s of steps) {
          if (s.kind === 'retransmit') transport.deliverRequest(options, source);
          else if (s.kind === 'respond' && tx) tx.respond(createResponse(tx.request, s.status, undefined, { toTag: `t${s.status}` }));
          else if (s.kind === 'advance') clock.advance(s.ms);
          else if (s.kind === 'fail') failing = s.on;
        }
        // Only the first transaction is ever answered (a retransmission after Timer J starts a
        // new one, which the driver leaves unanswered), and each status is answered with its own
        // To tag: different finals would serialize differently.
        const finals = new Set(transport.responses().filter((r) => r.status >= 200).map((r) => r.toString()));
        expect(finals.size).toBeLessThanOrEqual(1);
        layer.close();
      }),
      { numRuns: 500 },
    );
  });
});

describe('server INVITE transaction: one final outcome', () => {
  const req = peerRequest('INVITE');
  const ack = peerRequest('ACK', { branch: req.topVia!.branch });
  const pool = fc.array(fc.constantFrom(...STATUSES), { minLength: 1, maxLength: 6 }).map((statuses): TxInput[] => [
    { kind: 'request', request: req },
    { kind: 'request', request: ack },
    ...statuses.map((status): TxInput => ({ kind: 'tu-response', response: createResponse(req, status, undefined, { toTag: 't' }) })),
    ...TIMERS.map((timer): TxInput => ({ kind: 'timer', timer })),
    { kind: 'transport-error', error: new Error('x') },
  ]);

  it('a non-2xx final is the only final ever sent; a 2xx excludes any non-2xx', () => {
    fc.assert(
      fc.property(interleavings(pool), fc.boolean(), (inputs, reliable) => {
        const finals = sentFinals(run(serverInviteStep, startServerInvite(req, timerValues({}, reliable)), inputs));
        if (finals.length === 0) return;
        if (finals[0]!.status >= 300) expect(new Set(finals).size).toBe(1);
        else expect(finals.every((f) => f.status >= 200 && f.status < 300)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('client transactions: the TU never gets two different final outcomes', () => {
  const invite = tuRequest('INVITE');
  invite.prepend('Via', 'SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKprop');
  const options = tuRequest('OPTIONS');
  options.prepend('Via', 'SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKprop2');
  const pool = (req: typeof invite) =>
    fc.array(fc.constantFrom(...STATUSES), { minLength: 1, maxLength: 6 }).map((statuses): TxInput[] => [
      ...statuses.map((status): TxInput => ({ kind: 'response', response: createResponse(req, status, undefined, { toTag: `t${status}` }) })),
      ...TIMERS.map((timer): TxInput => ({ kind: 'timer', timer })),
      { kind: 'transport-error', error: new Error('x') },
      { kind: 'cancel' },
    ]);
  const outcomes = (actions: TxAction[]) =>
    actions.flatMap((a) => {
      if (a.type === 'pass-response' && a.response.status >= 200) return [a.response.status >= 300 ? `final ${a.response.status}` : '2xx'];
      if (a.type === 'timeout' || a.type === 'transport-error') return [a.type];
      return [];
    });

  it('INVITE: one non-2xx final (then at most a failed ACK), timeout or transport error, never beside a 2xx; one CANCEL at most', () => {
    fc.assert(
      fc.property(interleavings(pool(invite)), fc.boolean(), (inputs, reliable) => {
        const actions = run(clientInviteStep, startClientInvite(timerValues({}, reliable)), inputs);
        const o = outcomes(actions);
        if (o.includes('2xx')) expect(o.every((x) => x === '2xx')).toBe(true);
        else if (o[0]?.startsWith('final')) {
          // After a 3xx-6xx, the only further report is that its ACK could not be sent (figure 5).
          expect(o.slice(1)).toEqual(o.length > 1 ? ['transport-error'] : []);
        } else expect(o.length).toBeLessThanOrEqual(1);
        expect(actions.filter((a) => a.type === 'send-cancel').length).toBeLessThanOrEqual(1);
        // An ACK only ever acknowledges the one non-2xx final passed up.
        const acked = new Set(actions.flatMap((a) => (a.type === 'send-ack' ? [a.response.status] : [])));
        expect(acked.size).toBeLessThanOrEqual(1);
      }),
      { numRuns: 2000 },
    );
  });

  it('non-INVITE: at most one final outcome', () => {
    fc.assert(
      fc.property(interleavings(pool(options)), fc.boolean(), (inputs, reliable) => {
        expect(outcomes(run(clientNonInviteStep, startClientNonInvite(timerValues({}, reliable)), inputs)).length).toBeLessThanOrEqual(1);
      }),
      { numRuns: 2000 },
    );
  });
});
