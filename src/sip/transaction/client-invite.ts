/**
 * The INVITE client transaction: RFC 3261 17.1.1 (figure 5) as updated by RFC 6026 7.2 (a 2xx
 * leads to "Accepted", where later 2xx responses -- retransmissions, or other branches of a
 * fork -- still reach the TU until Timer M fires). Pure functions, one per state.
 *
 *                                 |INVITE from TU
 *               Timer A fires     |INVITE sent           Timer B fires
 *               Reset A,          V                      or Transport Err.
 *               INVITE sent +-----------+                inform TU
 *                 +---------|           |------------------------------+
 *                 |         |  Calling  |                              |
 *                 +-------->|           |--------------+               |
 *                           +-----------+ 2xx          |               |
 *      300-699                 |  |       2xx to TU    |               |
 *      ACK sent, resp. to TU   |  |1xx                 |               |
 *      +-----------------------+  |1xx to TU           |               |
 *      |                          V                    |               |
 *      |           1xx      +-----------+              |               |
 *      |           to TU +--|           |              |               |
 *      |                 |  |Proceeding |---------+    |               |
 *      |                 +->|           | 2xx     |    |               |
 *      |                    +-----------+ to TU   |    |               |
 *      |       300-699         |                  V    V               |
 *      |       ACK sent,       |               +-----------+           |
 *      |       resp. to TU     |               |           |--+ 2xx    |
 *      |  +--------------------+               | Accepted  |  | to TU  |
 *      |  |                                    |           |<-+        |
 *      V  V                                    +-----------+           |
 *   +-----------+                                    | Timer M fires   |
 *   |           |--+ 300-699                         | -               |
 *   | Completed |  | ACK sent                        |                 |
 *   |           |<-+                                 |                 |
 *   +-----------+                                    |                 |
 *         | Timer D fires, or Transport Err.         |                 |
 *         V                                          V                 |
 *   +------------------------------------------------------------+     |
 *   |                         Terminated                         |<----+
 *   +------------------------------------------------------------+
 *
 * CANCEL (RFC 3261 9.1) is an input here too, because when it may be sent depends on the state:
 * not before a provisional response has arrived (the request is "pending" until then), never
 * after a final one. Once sent, a final response is due within 64*T1 (the "Cancel" timer);
 * without one the transaction is considered cancelled (9.1) and ends with a timeout.
 */
import { createRequest, type SipRequest, type SipResponse } from '../message/index.ts';
import type { TimerValues } from './timers.ts';
import { act, stay, statusClass, type Transition, type TxAction, type TxInput } from './types.ts';

export type ClientInviteStateName = 'Calling' | 'Proceeding' | 'Completed' | 'Accepted' | 'Terminated';

export interface ClientInviteState {
  readonly name: ClientInviteStateName;
  readonly t: TimerValues;
  /** The current Timer A interval (it doubles at each retransmission). */
  readonly a: number;
  /** CANCEL: not asked for; asked, waiting for a provisional response (9.1); sent. */
  readonly cancel: 'none' | 'pending' | 'sent';
  /** The 3xx-6xx that was ACKed (Completed): its retransmissions get that same ACK again. */
  readonly final?: SipResponse;
}

type Step = (s: ClientInviteState, input: TxInput) => Transition<ClientInviteState>;

/**
 * The transaction starts in Calling: the INVITE goes to the transport, Timer A starts on an
 * unreliable transport, Timer B on any (17.1.1.2).
 */
export function startClientInvite(t: TimerValues): Transition<ClientInviteState> {
  const actions: TxAction[] = [{ type: 'send-request', retransmission: false }];
  if (!t.reliable) actions.push(act.startTimer('A', t.A));
  actions.push(act.startTimer('B', t.B));
  return { state: { name: 'Calling', t, a: t.A, cancel: 'none' }, actions };
}

/** The final response is a 2xx: Accepted, Timer M (RFC 6026 7.2); the ACK is the TU's (13.2.2.4). */
function toAccepted(s: ClientInviteState, response: SipResponse, stops: TxAction[]): Transition<ClientInviteState> {
  return {
    state: { ...s, name: 'Accepted' },
    actions: [...stops, act.startTimer('M', s.t.M), { type: 'pass-response', response }],
  };
}

/**
 * The final response is 300-699: the ACK is sent (17.1.1.3), the response passed up, and the
 * transaction waits in Completed for Timer D to absorb retransmissions of the response -- or,
 * Timer D being zero on a reliable transport, ends at once.
 */
function toCompleted(s: ClientInviteState, response: SipResponse, stops: TxAction[]): Transition<ClientInviteState> {
  const ack: TxAction = { type: 'send-ack', response, retransmission: false };
  const pass: TxAction = { type: 'pass-response', response };
  if (s.t.D === 0) return { state: { ...s, name: 'Terminated', final: response }, actions: [...stops, ack, pass, { type: 'terminate' }] };
  return { state: { ...s, name: 'Completed', final: response }, actions: [...stops, ack, act.startTimer('D', s.t.D), pass] };
}

function terminated(s: ClientInviteState, actions: TxAction[]): Transition<ClientInviteState> {
  return { state: { ...s, name: 'Terminated' }, actions: [...actions, { type: 'terminate' }] };
}

/** The CANCEL goes out now, and the 64*T1 wait for the INVITE's final response starts (9.1). */
function sendCancel(s: ClientInviteState): TxAction[] {
  return [{ type: 'send-cancel' }, act.startTimer('Cancel', s.t.Cancel)];
}

/** Calling: the INVITE was sent, no response yet. */
export const calling: Step = (s, input) => {
  const stopAB = s.t.reliable ? [act.stopTimer('B')] : [act.stopTimer('A'), act.stopTimer('B')];
  switch (input.kind) {
    case 'timer':
      if (input.timer === 'A' && !s.t.reliable) {
        // 17.1.1.2: retransmit, and reset A with twice its value: T1, 2*T1, 4*T1...
        const a = s.a * 2;
        return { state: { ...s, a }, actions: [{ type: 'send-request', retransmission: true }, act.startTimer('A', a)] };
      }
      if (input.timer === 'B') return terminated(s, [act.stopTimer('A'), { type: 'timeout', timer: 'B' }]);
      return stay(s);
    case 'transport-error':
      return terminated(s, [...stopAB, { type: 'transport-error', error: input.error }]);
    case 'cancel':
      // 9.1: no CANCEL before a provisional response; remember the wish.
      return s.cancel === 'none' ? stay({ ...s, cancel: 'pending' }) : stay(s);
    case 'response': {
      const cls = statusClass(input.response.status);
      if (cls === 1) {
        // Retransmissions stop, and Timer B matters only in Calling (17.1.1.2).
        const pending = s.cancel === 'pending';
        return {
          state: { ...s, name: 'Proceeding', cancel: pending ? 'sent' : s.cancel },
          actions: [...stopAB, ...(pending ? sendCancel(s) : []), { type: 'pass-response', response: input.response }],
        };
      }
      if (cls === 2) return toAccepted(s, input.response, stopAB);
      return toCompleted(s, input.response, stopAB);
    }
    default:
      return stay(s);
  }
};

/** Proceeding: a provisional response arrived; waiting for the final one. */
export const proceeding: Step = (s, input) => {
  const stopCancel = s.cancel === 'sent' ? [act.stopTimer('Cancel')] : [];
  switch (input.kind) {
    case 'response': {
      const cls = statusClass(input.response.status);
      if (cls === 1) return { state: s, actions: [{ type: 'pass-response', response: input.response }] };
      if (cls === 2) return toAccepted(s, input.response, stopCancel);
      return toCompleted(s, input.response, stopCancel);
    }
    case 'cancel':
      return s.cancel === 'sent' ? stay(s) : { state: { ...s, cancel: 'sent' }, actions: sendCancel(s) };
    case 'timer':
      // 9.1: no final response within 64*T1 of the CANCEL: consider the INVITE cancelled.
      if (input.timer === 'Cancel' && s.cancel === 'sent') return terminated(s, [{ type: 'timeout', timer: 'Cancel' }]);
      return stay(s);
    default:
      // Nothing is sent in Proceeding, so a transport error here is a late report about the
      // INVITE, which evidently arrived: figure 5 has no transition for it.
      return stay(s);
  }
};

/** Completed: a 3xx-6xx arrived and was ACKed; absorbing its retransmissions until Timer D. */
export const completed: Step = (s, input) => {
  switch (input.kind) {
    case 'response':
      // 17.1.1.2: a retransmitted final response gets the ACK again and is not passed up. The ACK
      // is the one of the response that completed the transaction (one final per transaction).
      if (input.response.status >= 300 && s.final) return { state: s, actions: [{ type: 'send-ack', response: s.final, retransmission: true }] };
      return stay(s);
    case 'timer':
      return input.timer === 'D' ? terminated(s, []) : stay(s);
    case 'transport-error':
      return terminated(s, [act.stopTimer('D'), { type: 'transport-error', error: input.error }]);
    default:
      return stay(s);
  }
};

/** Accepted (RFC 6026 7.2): a 2xx arrived; any further 2xx goes to the TU, which ACKs it. */
export const accepted: Step = (s, input) => {
  switch (input.kind) {
    case 'response':
      if (statusClass(input.response.status) === 2) return { state: s, actions: [{ type: 'pass-response', response: input.response }] };
      return stay(s);
    case 'timer':
      return input.timer === 'M' ? terminated(s, []) : stay(s);
    default:
      return stay(s);
  }
};

/** Terminated: everything is absorbed (responses reaching the layer then are stray). */
export const terminatedState: Step = (s) => stay(s);

const STATES: Record<ClientInviteStateName, Step> = {
  Calling: calling,
  Proceeding: proceeding,
  Completed: completed,
  Accepted: accepted,
  Terminated: terminatedState,
};

/** One step of the INVITE client transaction. */
export function clientInviteStep(s: ClientInviteState, input: TxInput): Transition<ClientInviteState> {
  return STATES[s.name](s, input);
}

/**
 * The ACK for a 3xx-6xx response to an INVITE, built by the client transaction (RFC 3261
 * 17.1.1.3): Request-URI, Call-ID, From and CSeq number of the INVITE, To of the response (with
 * its tag), a single Via equal to the INVITE's top Via (same branch), the INVITE's Route header
 * fields, no body.
 */
export function buildAck(invite: SipRequest, response: SipResponse): SipRequest {
  const via = invite.topVia;
  if (via === undefined) throw new TypeError('the INVITE has no Via');
  // createRequest writes the CSeq as "<number> ACK" (17.1.1.3: same number, method ACK).
  const ack = createRequest({
    method: 'ACK',
    uri: invite.uri.clone(),
    from: invite.from.clone(),
    to: response.to.clone(),
    callId: invite.callId,
    cseq: invite.cseq.seq,
    via: via.clone(),
    routes: invite.routes.map((r) => r.clone()),
  });
  return ack;
}

/**
 * The CANCEL for an INVITE (RFC 3261 9.1): same Request-URI, Call-ID, To, From and CSeq number
 * (method CANCEL), a single Via equal to the INVITE's top Via (so the server matches it to the
 * INVITE's transaction, 9.2), the INVITE's Route header fields, no body. `headers` are appended
 * (e.g. Reason, RFC 3326).
 */
export function buildCancel(invite: SipRequest, headers: [string, string][] = []): SipRequest {
  const via = invite.topVia;
  if (via === undefined) throw new TypeError('the INVITE has no Via');
  return createRequest({
    method: 'CANCEL',
    uri: invite.uri.clone(),
    from: invite.from.clone(),
    to: invite.to.clone(),
    callId: invite.callId,
    cseq: invite.cseq.seq,
    via: via.clone(),
    routes: invite.routes.map((r) => r.clone()),
    headers,
  });
}
