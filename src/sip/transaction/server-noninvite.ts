/**
 * The non-INVITE server transaction: RFC 3261 17.2.2 (figure 8). Pure functions, one per state.
 *
 *                                   |Request received
 *                                   |pass to TU
 *                                   V
 *                             +-----------+
 *                             |           |
 *                             | Trying    |-------------+
 *                             |           |             |
 *                             +-----------+             |200-699 from TU
 *                                   |                   |send response
 *                                   |1xx from TU        |
 *                                   |send response      |
 *                                   |                   |
 *                Request            V      1xx from TU  |
 *                send response+-----------+send response|
 *                    +--------|           |--------+    |
 *                    |        | Proceeding|        |    |
 *                    +------->|           |<-------+    |
 *             +<--------------|           |             |
 *             |Trnsprt Err    +-----------+             |
 *             |Inform TU            |                   |
 *             |                     |                   |
 *             |                     |200-699 from TU    |
 *             |                     |send response      |
 *             |  Request            V                   |
 *             |  send response+-----------+             |
 *             |      +--------|           |             |
 *             |      |        | Completed |<------------+
 *             |      +------->|           |
 *             +<--------------|           |
 *             |Trnsprt Err    +-----------+
 *             |Inform TU            |
 *             |                     |Timer J fires
 *             |                     |-
 *             |                     |
 *             |                     V
 *             |               +-----------+
 *             |               |           |
 *             +-------------->| Terminated|
 *                             |           |
 *                             +-----------+
 *
 * In Trying, retransmitted requests are absorbed (nothing to send yet) and a transport error
 * ends the transaction too. The first final response from the TU is the only one ever sent:
 * later ones are discarded (17.2.2), which the property tests check under any interleaving.
 * Timer J is zero on reliable transports: a final response ends the transaction at once.
 */
import type { SipRequest, SipResponse } from '../message/index.ts';
import type { TimerValues } from './timers.ts';
import { act, stay, statusClass, type Transition, type TxAction, type TxInput } from './types.ts';

export type ServerNonInviteStateName = 'Trying' | 'Proceeding' | 'Completed' | 'Terminated';

export interface ServerNonInviteState {
  readonly name: ServerNonInviteStateName;
  readonly t: TimerValues;
  readonly request: SipRequest;
  /** The last response sent (provisional in Proceeding, final in Completed). */
  readonly last: SipResponse | undefined;
}

type Step = (s: ServerNonInviteState, input: TxInput) => Transition<ServerNonInviteState>;

/** The transaction starts in Trying; the runner passes the request to the TU. */
export function startServerNonInvite(request: SipRequest, t: TimerValues): Transition<ServerNonInviteState> {
  return { state: { name: 'Trying', t, request, last: undefined }, actions: [] };
}

function terminated(s: ServerNonInviteState, actions: TxAction[]): Transition<ServerNonInviteState> {
  return { state: { ...s, name: 'Terminated' }, actions: [...actions, { type: 'terminate' }] };
}

/** Trying and Proceeding: a response from the TU, a transport error. */
function fromTu(s: ServerNonInviteState, input: TxInput): Transition<ServerNonInviteState> | undefined {
  if (input.kind === 'tu-response') {
    const r = input.response;
    const send: TxAction = { type: 'send-response', response: r, retransmission: false };
    if (statusClass(r.status) === 1) return { state: { ...s, name: 'Proceeding', last: r }, actions: [send] };
    // Completed absorbs request retransmissions for 64*T1 (Timer J), zero when reliable.
    if (s.t.J === 0) return terminated({ ...s, last: r }, [send]);
    return { state: { ...s, name: 'Completed', last: r }, actions: [send, act.startTimer('J', s.t.J)] };
  }
  if (input.kind === 'transport-error') return terminated(s, [{ type: 'transport-error', error: input.error }]);
  return undefined;
}

/** Trying: the request is with the TU, nothing sent. */
export const trying: Step = (s, input) => fromTu(s, input) ?? stay(s);

/** Proceeding: a provisional response was sent; a retransmitted request gets it again. */
export const proceeding: Step = (s, input) => {
  const t = fromTu(s, input);
  if (t) return t;
  if (input.kind === 'request' && s.last) return { state: s, actions: [{ type: 'send-response', response: s.last, retransmission: true }] };
  return stay(s);
};

/** Completed: the final response was sent; retransmitted requests get it again until Timer J. */
export const completed: Step = (s, input) => {
  switch (input.kind) {
    case 'request':
      return s.last ? { state: s, actions: [{ type: 'send-response', response: s.last, retransmission: true }] } : stay(s);
    case 'timer':
      return input.timer === 'J' ? terminated(s, []) : stay(s);
    case 'transport-error':
      return terminated(s, [act.stopTimer('J'), { type: 'transport-error', error: input.error }]);
    default:
      // tu-response: "any other final responses passed by the TU ... MUST be discarded" (17.2.2).
      return stay(s);
  }
};

export const terminatedState: Step = (s) => stay(s);

const STATES: Record<ServerNonInviteStateName, Step> = {
  Trying: trying,
  Proceeding: proceeding,
  Completed: completed,
  Terminated: terminatedState,
};

/** One step of the non-INVITE server transaction. */
export function serverNonInviteStep(s: ServerNonInviteState, input: TxInput): Transition<ServerNonInviteState> {
  return STATES[s.name](s, input);
}
