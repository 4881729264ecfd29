/**
 * The four transaction state machines as pure functions, against the RFC figures: every
 * transition of RFC 3261 figures 5, 6, 7, 8 and of RFC 6026's updated figures 5 and 7.
 */
import { describe, expect, it } from 'vitest';
import { createResponse, createVia, type SipRequest } from '../../src/sip/message/index.ts';
import {
  buildAck,
  buildCancel,
  clientInviteStep,
  startClientInvite,
  type ClientInviteState,
} from '../../src/sip/transaction/client-invite.ts';
import { clientNonInviteStep, startClientNonInvite, type ClientNonInviteState } from '../../src/sip/transaction/client-noninvite.ts';
import { buildTrying, serverInviteStep, startServerInvite, type ServerInviteState } from '../../src/sip/transaction/server-invite.ts';
import { serverNonInviteStep, startServerNonInvite, type ServerNonInviteState } from '../../src/sip/transaction/server-noninvite.ts';
import { resolveTimerConfig, timerValues, type TimerName } from '../../src/sip/transaction/timers.ts';
import type { Transition, TxAction, TxInput } from '../../src/sip/transaction/types.ts';
import { peerRequest, tuRequest } from './transaction-fakes.ts';

const UDP = timerValues({}, false);
const TCP = timerValues({}, true);

function fmt(actions: TxAction[]): string[] {
  return actions.map((a) => {
    switch (a.type) {
      case 'send-request':
        return a.retransmission ? 'resend-request' : 'send-request';
      case 'send-ack':
        return `${a.retransmission ? 'resend' : 'send'}-ack ${a.response.status}`;
      case 'send-cancel':
        return 'send-cancel';
      case 'send-response':
        return `${a.retransmission ? 'resend' : 'send'} ${a.response.status}`;
      case 'pass-response':
        return `pass ${a.response.status}`;
      case 'pass-ack':
        return 'pass-ack';
      case 'start-timer':
        return `start ${a.timer}=${a.ms}`;
      case 'stop-timer':
        return `stop ${a.timer}`;
      case 'timeout':
        return `timeout ${a.timer}`;
      case 'transport-error':
        return 'transport-error';
      case 'terminate':
        return 'terminate';
    }
  });
}

function withVia(req: SipRequest): SipRequest {
  req.prepend('Via', createVia('UDP', '192.0.2.1', 5060));
  return req;
}

const invite = withVia(tuRequest('INVITE', { routes: ['<sip:proxy.example.net;lr>'] }));
const options = withVia(tuRequest('OPTIONS'));
const res = (req: SipRequest, status: number) => createResponse(req, status, undefined, { toTag: 'bobtag' });
const response = (status: number, req: SipRequest = invite): TxInput => ({ kind: 'response', response: res(req, status) });
const timer = (t: TimerName): TxInput => ({ kind: 'timer', timer: t });
const transportError: TxInput = { kind: 'transport-error', error: new Error('unreachable') };
const cancel: TxInput = { kind: 'cancel' };

/** Runs inputs through a machine, returning the last transition. */
function run<S>(step: (s: S, i: TxInput) => Transition<S>, start: Transition<S>, inputs: TxInput[]): Transition<S> {
  let t = start;
  for (const i of inputs) t = step(t.state, i);
  return t;
}

// --------------------------------------------------------------------------------------------------

describe('INVITE client transaction (RFC 3261 17.1.1, figure 5; RFC 6026 7.2)', () => {
  const start = () => startClientInvite(UDP);
  const go = (inputs: TxInput[], s: Transition<ClientInviteState> = start()) => run(clientInviteStep, s, inputs);

  it('starts in Calling: INVITE sent, Timer A = T1, Timer B = 64*T1', () => {
    const t = start();
    expect(t.state.name).toBe('Calling');
    expect(fmt(t.actions)).toEqual(['send-request', 'start A=500', 'start B=32000']);
  });

  it('on a reliable transport Timer A is not started', () => {
    expect(fmt(startClientInvite(TCP).actions)).toEqual(['send-request', 'start B=32000']);
  });

  it('Calling, Timer A fires: INVITE sent again, A reset with twice its value', () => {
    let t = start();
    const intervals: number[] = [];
    for (let i = 0; i < 6; i++) {
      t = clientInviteStep(t.state, timer('A'));
      expect(t.state.name).toBe('Calling');
      const a = fmt(t.actions);
      expect(a[0]).toBe('resend-request');
      intervals.push(Number(a[1]!.split('=')[1]));
    }
    expect(intervals).toEqual([1000, 2000, 4000, 8000, 16000, 32000]);
  });

  it('Calling, Timer B fires: timeout to the TU, Terminated', () => {
    const t = go([timer('B')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop A', 'timeout B', 'terminate']);
  });

  it('Calling, transport error: TU informed, Terminated', () => {
    const t = go([transportError]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop A', 'stop B', 'transport-error', 'terminate']);
  });

  it('Calling, 1xx: to the TU, Proceeding (retransmissions and Timer B stop)', () => {
    for (const status of [100, 180, 183]) {
      const t = go([response(status)]);
      expect(t.state.name).toBe('Proceeding');
      expect(fmt(t.actions)).toEqual(['stop A', 'stop B', `pass ${status}`]);
    }
  });

  it('Calling, 2xx: to the TU, Accepted with Timer M, no ACK from the transaction (RFC 6026 7.2)', () => {
    const t = go([response(200)]);
    expect(t.state.name).toBe('Accepted');
    expect(fmt(t.actions)).toEqual(['stop A', 'stop B', 'start M=32000', 'pass 200']);
  });

  it('Calling, 300-699: ACK sent, response to the TU, Completed with Timer D', () => {
    for (const status of [302, 404, 486, 503, 603]) {
      const t = go([response(status)]);
      expect(t.state.name).toBe('Completed');
      expect(fmt(t.actions)).toEqual(['stop A', 'stop B', `send-ack ${status}`, 'start D=32000', `pass ${status}`]);
    }
  });

  it('Proceeding, 1xx: to the TU, stays', () => {
    const t = go([response(100), response(180)]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['pass 180']);
  });

  it('Proceeding, 2xx: to the TU, Accepted', () => {
    const t = go([response(180), response(200)]);
    expect(t.state.name).toBe('Accepted');
    expect(fmt(t.actions)).toEqual(['start M=32000', 'pass 200']);
  });

  it('Proceeding, 300-699: ACK sent, to the TU, Completed', () => {
    const t = go([response(180), response(486)]);
    expect(t.state.name).toBe('Completed');
    expect(fmt(t.actions)).toEqual(['send-ack 486', 'start D=32000', 'pass 486']);
  });

  it('Proceeding ignores stale Timer A/B and late transport errors', () => {
    const p = go([response(180)]);
    for (const i of [timer('A'), timer('B'), transportError]) {
      const t = clientInviteStep(p.state, i);
      expect(t.state.name).toBe('Proceeding');
      expect(t.actions).toEqual([]);
    }
  });

  it('Completed, 300-699 again: ACK sent again, not passed up', () => {
    const t = go([response(486), response(486)]);
    expect(t.state.name).toBe('Completed');
    expect(fmt(t.actions)).toEqual(['resend-ack 486']);
  });

  it('Completed absorbs 1xx and 2xx', () => {
    const c = go([response(486)]);
    for (const status of [180, 200]) expect(clientInviteStep(c.state, response(status)).actions).toEqual([]);
  });

  it('Completed, Timer D fires: Terminated', () => {
    const t = go([response(486), timer('D')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['terminate']);
  });

  it('Completed, transport error (sending the ACK): TU informed, Terminated', () => {
    const t = go([response(486), transportError]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop D', 'transport-error', 'terminate']);
  });

  it('Accepted, 2xx: to the TU (retransmission or fork), stays', () => {
    const t = go([response(200), response(200)]);
    expect(t.state.name).toBe('Accepted');
    expect(fmt(t.actions)).toEqual(['pass 200']);
  });

  it('Accepted absorbs 1xx, 3xx-6xx and transport errors', () => {
    const a = go([response(200)]);
    for (const i of [response(180), response(486), transportError]) expect(clientInviteStep(a.state, i).actions).toEqual([]);
  });

  it('Accepted, Timer M fires: Terminated', () => {
    const t = go([response(200), timer('M')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['terminate']);
  });

  it('reliable transport: Timer D is zero, a 3xx-6xx ends the transaction at once', () => {
    const t = run(clientInviteStep, startClientInvite(TCP), [response(486)]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop B', 'send-ack 486', 'pass 486', 'terminate']);
  });

  it('Terminated absorbs everything', () => {
    const t = go([timer('B')]);
    for (const i of [response(180), response(200), response(486), timer('A'), timer('D'), timer('M'), transportError, cancel]) {
      const n = clientInviteStep(t.state, i);
      expect(n.state.name).toBe('Terminated');
      expect(n.actions).toEqual([]);
    }
  });

  describe('CANCEL (RFC 3261 9.1)', () => {
    it('asked in Calling: waits for a provisional response, then sends it and starts the Cancel timer', () => {
      const pending = go([cancel]);
      expect(pending.state.name).toBe('Calling');
      expect(pending.state.cancel).toBe('pending');
      expect(pending.actions).toEqual([]);
      const t = clientInviteStep(pending.state, response(180));
      expect(t.state.name).toBe('Proceeding');
      expect(fmt(t.actions)).toEqual(['stop A', 'stop B', 'send-cancel', 'start Cancel=32000', 'pass 180']);
    });

    it('asked in Proceeding: sent at once; asked again: nothing more', () => {
      const t = go([response(180), cancel]);
      expect(fmt(t.actions)).toEqual(['send-cancel', 'start Cancel=32000']);
      expect(clientInviteStep(t.state, cancel).actions).toEqual([]);
    });

    it('a final response while it is pending: never sent', () => {
      for (const status of [200, 486]) {
        const t = go([cancel, response(status)]);
        expect(fmt(t.actions)).not.toContain('send-cancel');
        expect(fmt(clientInviteStep(t.state, response(180)).actions)).not.toContain('send-cancel');
      }
    });

    it('asked after a final response: nothing', () => {
      for (const status of [200, 486]) expect(go([response(status), cancel]).actions).toEqual([]);
    });

    it('the 487 after the CANCEL stops the Cancel timer, ACKed like any 3xx-6xx', () => {
      const t = go([response(180), cancel, response(487)]);
      expect(t.state.name).toBe('Completed');
      expect(fmt(t.actions)).toEqual(['stop Cancel', 'send-ack 487', 'start D=32000', 'pass 487']);
    });

    it('no final response within 64*T1 of the CANCEL: timeout, Terminated', () => {
      const t = go([response(180), cancel, timer('Cancel')]);
      expect(t.state.name).toBe('Terminated');
      expect(fmt(t.actions)).toEqual(['timeout Cancel', 'terminate']);
    });

    it('a stray Cancel timer without a CANCEL sent is ignored', () => {
      expect(go([response(180), timer('Cancel')]).state.name).toBe('Proceeding');
    });
  });
});

// --------------------------------------------------------------------------------------------------

describe('non-INVITE client transaction (RFC 3261 17.1.2, figure 6)', () => {
  const start = () => startClientNonInvite(UDP);
  const go = (inputs: TxInput[], s: Transition<ClientNonInviteState> = start()) => run(clientNonInviteStep, s, inputs);
  const r = (status: number) => response(status, options);

  it('starts in Trying: request sent, Timer E = T1, Timer F = 64*T1', () => {
    const t = start();
    expect(t.state.name).toBe('Trying');
    expect(fmt(t.actions)).toEqual(['send-request', 'start E=500', 'start F=32000']);
  });

  it('on a reliable transport Timer E is not started', () => {
    expect(fmt(startClientNonInvite(TCP).actions)).toEqual(['send-request', 'start F=32000']);
  });

  it('Trying, Timer E fires: request sent again, E = MIN(2E, T2)', () => {
    let t = start();
    const intervals: number[] = [];
    for (let i = 0; i < 6; i++) {
      t = clientNonInviteStep(t.state, timer('E'));
      expect(t.state.name).toBe('Trying');
      const a = fmt(t.actions);
      expect(a[0]).toBe('resend-request');
      intervals.push(Number(a[1]!.split('=')[1]));
    }
    expect(intervals).toEqual([1000, 2000, 4000, 4000, 4000, 4000]);
  });

  it('Trying, Timer F fires: timeout, Terminated', () => {
    const t = go([timer('F')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop E', 'timeout F', 'terminate']);
  });

  it('Trying, transport error: TU informed, Terminated', () => {
    const t = go([transportError]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop E', 'stop F', 'transport-error', 'terminate']);
  });

  it('Trying, 1xx: to the TU, Proceeding', () => {
    const t = go([r(100)]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['pass 100']);
  });

  it('Trying, 200-699: to the TU, Completed with Timer K = T4', () => {
    for (const status of [200, 202, 404, 500]) {
      const t = go([r(status)]);
      expect(t.state.name).toBe('Completed');
      expect(fmt(t.actions)).toEqual(['stop E', 'stop F', 'start K=5000', `pass ${status}`]);
    }
  });

  it('Proceeding, Timer E fires: request sent again, E = T2', () => {
    const t = go([timer('E'), r(100), timer('E')]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['resend-request', 'start E=4000']);
  });

  it('Proceeding, 1xx: to the TU, stays', () => {
    const t = go([r(100), r(180)]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['pass 180']);
  });

  it('Proceeding, Timer F fires: timeout, Terminated', () => {
    const t = go([r(100), timer('F')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop E', 'timeout F', 'terminate']);
  });

  it('Proceeding, transport error: TU informed, Terminated', () => {
    const t = go([r(100), transportError]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop E', 'stop F', 'transport-error', 'terminate']);
  });

  it('Proceeding, 200-699: to the TU, Completed', () => {
    const t = go([r(100), r(200)]);
    expect(t.state.name).toBe('Completed');
    expect(fmt(t.actions)).toEqual(['stop E', 'stop F', 'start K=5000', 'pass 200']);
  });

  it('Completed absorbs responses, timers E/F and transport errors', () => {
    const c = go([r(200)]);
    for (const i of [r(200), r(100), r(500), timer('E'), timer('F'), transportError]) {
      const t = clientNonInviteStep(c.state, i);
      expect(t.state.name).toBe('Completed');
      expect(t.actions).toEqual([]);
    }
  });

  it('Completed, Timer K fires: Terminated', () => {
    const t = go([r(200), timer('K')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['terminate']);
  });

  it('reliable transport: Timer K is zero, a final response ends the transaction at once', () => {
    const t = run(clientNonInviteStep, startClientNonInvite(TCP), [r(200)]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop F', 'pass 200', 'terminate']);
  });

  it('Terminated absorbs everything', () => {
    const t = go([timer('F')]);
    for (const i of [r(200), r(100), timer('E'), timer('K'), transportError]) expect(clientNonInviteStep(t.state, i).actions).toEqual([]);
  });
});

// --------------------------------------------------------------------------------------------------

describe('INVITE server transaction (RFC 3261 17.2.1, figure 7; RFC 6026 7.1)', () => {
  const req = peerRequest('INVITE');
  const ack = peerRequest('ACK', { branch: req.topVia!.branch });
  const start = () => startServerInvite(req, UDP);
  const go = (inputs: TxInput[], s: Transition<ServerInviteState> = start()) => run(serverInviteStep, s, inputs);
  const tu = (status: number): TxInput => ({ kind: 'tu-response', response: res(req, status) });
  const again: TxInput = { kind: 'request', request: req };
  const ackIn: TxInput = { kind: 'request', request: ack };

  it('starts in Proceeding with the 200 ms 100 Trying timer', () => {
    const t = start();
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['start Trying=200']);
  });

  it('Proceeding, the TU does not answer within 200 ms: 100 Trying sent (no To tag, Timestamp copied)', () => {
    const withTs = peerRequest('INVITE');
    withTs.append('Timestamp', '54.2');
    const t = run(serverInviteStep, startServerInvite(withTs, UDP), [timer('Trying')]);
    expect(fmt(t.actions)).toEqual(['send 100']);
    const trying = (t.actions[0] as { response: { to: { tag?: string }; get(n: string): string | undefined } }).response;
    expect(trying.to.tag).toBeUndefined();
    expect(trying.get('Timestamp')).toBe('54.2');
    expect(buildTrying(req).reason).toBe('Trying');
  });

  it('Proceeding, 101-199 from the TU: sent, stays (the 100 Trying timer stops)', () => {
    const t = go([tu(180)]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['stop Trying', 'send 180']);
    expect(go([tu(180), timer('Trying')]).actions).toEqual([]);
  });

  it('Proceeding, INVITE again: the last provisional response sent again', () => {
    const t = go([tu(180), again]);
    expect(fmt(t.actions)).toEqual(['resend 180']);
  });

  it('Proceeding, INVITE again before any response: 100 Trying at once', () => {
    const t = go([again]);
    expect(fmt(t.actions)).toEqual(['stop Trying', 'send 100']);
    expect(fmt(serverInviteStep(t.state, again).actions)).toEqual(['resend 100']);
  });

  it('Proceeding, transport error: TU informed, stays (RFC 6026 figure 7)', () => {
    const t = go([tu(180), transportError]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['transport-error']);
  });

  it('Proceeding, 2xx from the TU: sent, Accepted with Timer L = 64*T1 (RFC 6026 7.1)', () => {
    const t = go([tu(180), tu(200)]);
    expect(t.state.name).toBe('Accepted');
    expect(fmt(t.actions)).toEqual(['stop Trying', 'send 200', 'start L=32000']);
  });

  it('Proceeding, 300-699 from the TU: sent, Completed with Timers G = T1 and H = 64*T1', () => {
    for (const status of [302, 404, 486, 487, 603]) {
      const t = go([tu(status)]);
      expect(t.state.name).toBe('Completed');
      expect(fmt(t.actions)).toEqual(['stop Trying', `send ${status}`, 'start G=500', 'start H=32000']);
    }
  });

  it('Completed, INVITE again: the final response sent again', () => {
    expect(fmt(go([tu(486), again]).actions)).toEqual(['resend 486']);
  });

  it('Completed, Timer G fires: the response sent again, G = MIN(2G, T2)', () => {
    let t = go([tu(486)]);
    const intervals: number[] = [];
    for (let i = 0; i < 5; i++) {
      t = serverInviteStep(t.state, timer('G'));
      const a = fmt(t.actions);
      expect(a[0]).toBe('resend 486');
      intervals.push(Number(a[1]!.split('=')[1]));
    }
    expect(intervals).toEqual([1000, 2000, 4000, 4000, 4000]);
  });

  it('Completed, Timer H fires: TU informed, Terminated', () => {
    const t = go([tu(486), timer('H')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop G', 'timeout H', 'terminate']);
  });

  it('Completed, transport error: TU informed, stays (RFC 6026 figure 7; Timer H still bounds it)', () => {
    const t = go([tu(486), transportError]);
    expect(t.state.name).toBe('Completed');
    expect(fmt(t.actions)).toEqual(['transport-error']);
  });

  it('Completed, ACK: Confirmed with Timer I = T4', () => {
    const t = go([tu(486), ackIn]);
    expect(t.state.name).toBe('Confirmed');
    expect(fmt(t.actions)).toEqual(['stop G', 'stop H', 'start I=5000']);
  });

  it('Completed discards further responses from the TU', () => {
    for (const status of [180, 200, 500]) expect(go([tu(486), tu(status)]).actions).toEqual([]);
  });

  it('Confirmed absorbs ACK and INVITE retransmissions; Timer I fires: Terminated', () => {
    const c = go([tu(486), ackIn]);
    for (const i of [ackIn, again, tu(200), timer('G'), timer('H')]) {
      const t = serverInviteStep(c.state, i);
      expect(t.state.name).toBe('Confirmed');
      expect(t.actions).toEqual([]);
    }
    const t = serverInviteStep(c.state, timer('I'));
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['terminate']);
  });

  it('Accepted absorbs retransmitted INVITEs without passing them up', () => {
    const t = go([tu(200), again]);
    expect(t.state.name).toBe('Accepted');
    expect(t.actions).toEqual([]);
  });

  it('Accepted, ACK: passed to the TU', () => {
    const t = go([tu(200), ackIn]);
    expect(t.state.name).toBe('Accepted');
    expect(fmt(t.actions)).toEqual(['pass-ack']);
  });

  it('Accepted, 2xx from the TU (its retransmission): sent', () => {
    const first = res(req, 200);
    let t = go([{ kind: 'tu-response', response: first }]);
    t = serverInviteStep(t.state, { kind: 'tu-response', response: first });
    expect(fmt(t.actions)).toEqual(['resend 200']);
  });

  it('Accepted discards non-2xx from the TU', () => {
    expect(go([tu(200), tu(486)]).actions).toEqual([]);
  });

  it('Accepted, transport error: TU informed, stays', () => {
    const t = go([tu(200), transportError]);
    expect(t.state.name).toBe('Accepted');
    expect(fmt(t.actions)).toEqual(['transport-error']);
  });

  it('Accepted, Timer L fires: Terminated', () => {
    const t = go([tu(200), timer('L')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['terminate']);
  });

  it('reliable transport: no Timer G; Timer I is zero, the ACK ends the transaction', () => {
    const c = run(serverInviteStep, startServerInvite(req, TCP), [tu(486)]);
    expect(fmt(c.actions)).toEqual(['stop Trying', 'send 486', 'start H=32000']);
    expect(serverInviteStep(c.state, timer('G')).actions).toEqual([]);
    const t = serverInviteStep(c.state, ackIn);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop G', 'stop H', 'terminate']);
  });

  it('Terminated absorbs everything', () => {
    const t = go([tu(200), timer('L')]);
    for (const i of [again, ackIn, tu(200), timer('G'), transportError]) expect(serverInviteStep(t.state, i).actions).toEqual([]);
  });
});

// --------------------------------------------------------------------------------------------------

describe('non-INVITE server transaction (RFC 3261 17.2.2, figure 8)', () => {
  const req = peerRequest('OPTIONS');
  const start = () => startServerNonInvite(req, UDP);
  const go = (inputs: TxInput[], s: Transition<ServerNonInviteState> = start()) => run(serverNonInviteStep, s, inputs);
  const tu = (status: number): TxInput => ({ kind: 'tu-response', response: res(req, status) });
  const again: TxInput = { kind: 'request', request: req };

  it('starts in Trying, nothing sent', () => {
    const t = start();
    expect(t.state.name).toBe('Trying');
    expect(t.actions).toEqual([]);
  });

  it('Trying absorbs retransmitted requests', () => {
    const t = go([again, again]);
    expect(t.state.name).toBe('Trying');
    expect(t.actions).toEqual([]);
  });

  it('Trying, 1xx from the TU: sent, Proceeding', () => {
    const t = go([tu(100)]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['send 100']);
  });

  it('Trying, 200-699 from the TU: sent, Completed with Timer J = 64*T1', () => {
    for (const status of [200, 202, 404, 481, 500]) {
      const t = go([tu(status)]);
      expect(t.state.name).toBe('Completed');
      expect(fmt(t.actions)).toEqual([`send ${status}`, 'start J=32000']);
    }
  });

  it('Trying, transport error: TU informed, Terminated', () => {
    const t = go([transportError]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['transport-error', 'terminate']);
  });

  it('Proceeding, 1xx from the TU: sent, stays', () => {
    const t = go([tu(100), tu(180)]);
    expect(t.state.name).toBe('Proceeding');
    expect(fmt(t.actions)).toEqual(['send 180']);
  });

  it('Proceeding, request again: the last provisional response sent again', () => {
    expect(fmt(go([tu(100), tu(180), again]).actions)).toEqual(['resend 180']);
  });

  it('Proceeding, 200-699 from the TU: sent, Completed', () => {
    const t = go([tu(100), tu(200)]);
    expect(t.state.name).toBe('Completed');
    expect(fmt(t.actions)).toEqual(['send 200', 'start J=32000']);
  });

  it('Proceeding, transport error: TU informed, Terminated', () => {
    const t = go([tu(100), transportError]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['transport-error', 'terminate']);
  });

  it('Completed, request again: the final response sent again', () => {
    expect(fmt(go([tu(200), again]).actions)).toEqual(['resend 200']);
  });

  it('Completed discards further responses from the TU', () => {
    for (const status of [100, 200, 500]) {
      const t = go([tu(404), tu(status)]);
      expect(t.state.name).toBe('Completed');
      expect(t.actions).toEqual([]);
    }
  });

  it('Completed, transport error: TU informed, Terminated', () => {
    const t = go([tu(200), transportError]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['stop J', 'transport-error', 'terminate']);
  });

  it('Completed, Timer J fires: Terminated', () => {
    const t = go([tu(200), timer('J')]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['terminate']);
  });

  it('reliable transport: Timer J is zero, the final response ends the transaction at once', () => {
    const t = run(serverNonInviteStep, startServerNonInvite(req, TCP), [tu(200)]);
    expect(t.state.name).toBe('Terminated');
    expect(fmt(t.actions)).toEqual(['send 200', 'terminate']);
  });

  it('Terminated absorbs everything', () => {
    const t = go([tu(200), timer('J')]);
    for (const i of [again, tu(200), timer('J'), transportError]) expect(serverNonInviteStep(t.state, i).actions).toEqual([]);
  });
});

// --------------------------------------------------------------------------------------------------

describe('timer values (RFC 3261 appendix A, RFC 6026 8.1)', () => {
  it('defaults: T1 500 ms, T2 4 s, T4 5 s, 64*T1 = 32 s', () => {
    expect(UDP).toMatchObject({ T1: 500, T2: 4000, T4: 5000, A: 500, B: 32000, D: 32000, E: 500, F: 32000, G: 500, H: 32000, I: 5000, J: 32000, K: 5000, L: 32000, M: 32000, Trying: 200 });
  });

  it('reliable transports: D, I, J, K are zero', () => {
    expect(TCP).toMatchObject({ D: 0, I: 0, J: 0, K: 0, B: 32000, F: 32000, H: 32000, L: 32000, M: 32000 });
  });

  it('configurable; D stays at least 32 s unless set', () => {
    const v = timerValues({ t1: 10, t2: 40, t4: 50 }, false);
    expect(v).toMatchObject({ B: 640, F: 640, H: 640, J: 640, L: 640, M: 640, I: 50, K: 50, D: 32000 });
    expect(timerValues({ t1: 10, timerD: 700 }, false).D).toBe(700);
    expect(timerValues({ t1: 1000 }, false).D).toBe(64000);
  });

  it('refuses unusable values', () => {
    expect(() => resolveTimerConfig({ t1: 0 })).toThrow(RangeError);
    expect(() => resolveTimerConfig({ t1: Number.NaN })).toThrow(RangeError);
    expect(() => resolveTimerConfig({ t1: 5000, t2: 4000 })).toThrow(RangeError);
  });
});

describe('ACK and CANCEL construction', () => {
  it('ACK for a 3xx-6xx (17.1.1.3): INVITE Request-URI, Call-ID, From, CSeq number; To of the response; one Via; Route', () => {
    invite.prepend('Via', createVia('UDP', 'upstream.example', 5070)); // a second Via must not be copied
    const top = invite.topVia!;
    const response = res(invite, 486);
    const ack = buildAck(invite, response);
    expect(ack.method).toBe('ACK');
    expect(ack.uri.toString()).toBe(invite.uri.toString());
    expect(ack.callId).toBe(invite.callId);
    expect(ack.from.toString()).toBe(invite.from.toString());
    expect(ack.to.tag).toBe('bobtag');
    expect(ack.cseq.toString()).toBe(`${invite.cseq.seq} ACK`);
    expect(ack.via.map(String)).toEqual([top.toString()]);
    expect(ack.routes.map(String)).toEqual(invite.routes.map(String));
    expect(ack.body.length).toBe(0);
    invite.remove('Via');
    invite.prepend('Via', createVia('UDP', '192.0.2.1', 5060));
  });

  it('CANCEL (9.1): INVITE Request-URI, Call-ID, To, From, CSeq number; top Via; Route', () => {
    const c = buildCancel(invite, [['Reason', 'SIP;cause=487']]);
    expect(c.method).toBe('CANCEL');
    expect(c.uri.toString()).toBe(invite.uri.toString());
    expect(c.to.toString()).toBe(invite.to.toString());
    expect(c.from.toString()).toBe(invite.from.toString());
    expect(c.callId).toBe(invite.callId);
    expect(c.cseq.toString()).toBe(`${invite.cseq.seq} CANCEL`);
    expect(c.via.map(String)).toEqual([invite.topVia!.toString()]);
    expect(c.routes.map(String)).toEqual(['<sip:proxy.example.net;lr>']);
    expect(c.get('Reason')).toBe('SIP;cause=487');
    expect(c.body.length).toBe(0);
  });
});
