/**
 * The INVITE server transaction: RFC 3261 17.2.1 (figure 7) as updated by RFC 6026 7.1. A 2xx
 * from the TU leads to "Accepted" (not straight to Terminated as in RFC 3261), where
 * retransmissions of the INVITE are absorbed instead of looking like new requests, the TU's
 * retransmissions of the 2xx (RFC 3261 13.3.1.4) are sent, and ACKs go to the TU, until Timer L.
 * Transport errors inform the TU and change no state (RFC 6026 figure 7). Pure functions, one per
 * state.
 *
 *                                  |INVITE
 *                                  |pass INV to TU
 *               INVITE             V send 100 if TU won't in 200 ms
 *               send response +------------+
 *                   +---------|            |--------+ 101-199 from TU
 *                   |         | Proceeding |        | send response
 *                   +-------->|            |<-------+
 *                             |            |--+ Transport Err.
 *                             |            |<-+ inform TU
 *                             +------------+
 *           300-699 from TU      |      |      2xx from TU
 *           send response        |      |      send response
 *               +----------------+      +------------------+
 *               V                                          V
 *   INVITE  +-----------+  Timer G fires        INVITE +------------+
 *   send    |           |  send response        -      |            |--+ ACK
 *   resp. +-| Completed |<-+                       +---|  Accepted  |  | to TU
 *         +>|           |--+                       +-->|            |<-+
 *           |           |--+ Transport Err.            |            |--+ 2xx from TU
 *           |           |<-+ inform TU                 |            |<-+ send response
 *           +-----------+                              |            |--+ Transport Err.
 *             |       |  ACK                           |            |<-+ inform TU
 *             |       |  -                             +------------+
 *             |       V                                      |
 *             |   +-----------+                              |
 *             |   | Confirmed |--+ ACK, INVITE: absorbed      |
 *             |   |           |<-+                           |
 *             |   +-----------+                              |
 *             |       | Timer I fires                        | Timer L fires
 *   Timer H   |       | -                                    | -
 *   fires     V       V                                      V
 *   inform  +------------------------------------------------------+
 *   TU      |                      Terminated                      |
 *           +------------------------------------------------------+
 *
 * Timer G (response retransmission) is not used on reliable transports, and Timer I is zero there:
 * the ACK ends the transaction at once.
 */
import { createResponse, type SipRequest, type SipResponse } from '../message/index.ts';
import type { TimerValues } from './timers.ts';
import { act, stay, statusClass, type Transition, type TxAction, type TxInput } from './types.ts';

export type ServerInviteStateName = 'Proceeding' | 'Completed' | 'Confirmed' | 'Accepted' | 'Terminated';

export interface ServerInviteState {
  readonly name: ServerInviteStateName;
  readonly t: TimerValues;
  /** The INVITE that created the transaction (the 100 Trying is built from it). */
  readonly request: SipRequest;
  /** The most recent provisional response sent, to answer retransmitted INVITEs in Proceeding. */
  readonly provisional: SipResponse | undefined;
  /** The final response sent. */
  readonly final: SipResponse | undefined;
  /** The current Timer G interval. */
  readonly g: number;
}

type Step = (s: ServerInviteState, input: TxInput) => Transition<ServerInviteState>;

/**
 * 100 Trying for a request (RFC 3261 8.2.6.1, 17.2.1): Via, From, To, Call-ID, CSeq copied, no To
 * tag added, and the Timestamp header copied when the request has one.
 */
export function buildTrying(request: SipRequest): SipResponse {
  const timestamp = request.get('Timestamp');
  return createResponse(request, 100, 'Trying', timestamp === undefined ? {} : { headers: [['Timestamp', timestamp]] });
}

/**
 * The transaction starts in Proceeding; the INVITE is passed to the TU by the runner. Unless the TU
 * answers within 200 ms, the "Trying" timer sends 100 Trying (17.2.1).
 */
export function startServerInvite(request: SipRequest, t: TimerValues): Transition<ServerInviteState> {
  return {
    state: { name: 'Proceeding', t, request, provisional: undefined, final: undefined, g: t.G },
    actions: [act.startTimer('Trying', t.Trying)],
  };
}

function terminated(s: ServerInviteState, actions: TxAction[]): Transition<ServerInviteState> {
  return { state: { ...s, name: 'Terminated' }, actions: [...actions, { type: 'terminate' }] };
}

function send(response: SipResponse, retransmission = false): TxAction {
  return { type: 'send-response', response, retransmission };
}

function isAck(input: TxInput): boolean {
  return input.kind === 'request' && input.request.method === 'ACK';
}

/** Proceeding: the INVITE is with the TU. */
export const proceeding: Step = (s, input) => {
  switch (input.kind) {
    case 'request': {
      if (isAck(input)) return stay(s);
      // 17.2.1: a retransmitted INVITE gets the most recent provisional response again. None was
      // sent yet (the TU is within its 200 ms): the sender is retransmitting already, so the 100
      // Trying goes out now rather than later.
      if (s.provisional) return { state: s, actions: [send(s.provisional, true)] };
      const trying = buildTrying(s.request);
      return { state: { ...s, provisional: trying }, actions: [act.stopTimer('Trying'), send(trying)] };
    }
    case 'timer': {
      if (input.timer !== 'Trying' || s.provisional) return stay(s);
      const trying = buildTrying(s.request);
      return { state: { ...s, provisional: trying }, actions: [send(trying)] };
    }
    case 'tu-response': {
      const r = input.response;
      const cls = statusClass(r.status);
      const stop = act.stopTimer('Trying');
      if (cls === 1) return { state: { ...s, provisional: r }, actions: [stop, send(r)] };
      if (cls === 2) {
        // RFC 6026 7.1: Accepted, Timer L = 64*T1.
        return { state: { ...s, name: 'Accepted', final: r }, actions: [stop, send(r), act.startTimer('L', s.t.L)] };
      }
      // 17.2.1: Completed; Timer G (unreliable only) retransmits the response, Timer H waits for the ACK.
      const actions: TxAction[] = [stop, send(r)];
      if (!s.t.reliable) actions.push(act.startTimer('G', s.t.G));
      actions.push(act.startTimer('H', s.t.H));
      return { state: { ...s, name: 'Completed', final: r, g: s.t.G }, actions };
    }
    case 'transport-error':
      return { state: s, actions: [{ type: 'transport-error', error: input.error }] };
    default:
      return stay(s);
  }
};

/** Completed: a 3xx-6xx was sent; retransmitting it until the ACK (or Timer H). */
export const completed: Step = (s, input) => {
  switch (input.kind) {
    case 'request': {
      if (isAck(input)) {
        // ACK: Confirmed, where Timer I absorbs ACK retransmissions (zero when reliable).
        const stops = [act.stopTimer('G'), act.stopTimer('H')];
        if (s.t.I === 0) return terminated(s, stops);
        return { state: { ...s, name: 'Confirmed' }, actions: [...stops, act.startTimer('I', s.t.I)] };
      }
      return s.final ? { state: s, actions: [send(s.final, true)] } : stay(s);
    }
    case 'timer':
      if (input.timer === 'G' && !s.t.reliable && s.final) {
        // 17.2.1: G doubles from T1 but never beyond T2.
        const g = Math.min(2 * s.g, s.t.T2);
        return { state: { ...s, g }, actions: [send(s.final, true), act.startTimer('G', g)] };
      }
      if (input.timer === 'H') return terminated(s, [act.stopTimer('G'), { type: 'timeout', timer: 'H' }]);
      return stay(s);
    case 'transport-error':
      return { state: s, actions: [{ type: 'transport-error', error: input.error }] };
    default:
      // A further response from the TU is discarded: one final response per transaction.
      return stay(s);
  }
};

/** Confirmed: the ACK arrived; its retransmissions are absorbed until Timer I. */
export const confirmed: Step = (s, input) => (input.kind === 'timer' && input.timer === 'I' ? terminated(s, []) : stay(s));

/** Accepted (RFC 6026 7.1): a 2xx was sent; the TU retransmits it and receives the ACKs. */
export const accepted: Step = (s, input) => {
  switch (input.kind) {
    case 'request':
      // Retransmitted INVITEs are absorbed, not passed to the TU; ACKs are passed to the TU.
      return isAck(input) ? { state: s, actions: [{ type: 'pass-ack', request: input.request }] } : stay(s);
    case 'tu-response':
      if (statusClass(input.response.status) !== 2) return stay(s);
      return { state: { ...s, final: input.response }, actions: [send(input.response, input.response === s.final)] };
    case 'timer':
      return input.timer === 'L' ? terminated(s, []) : stay(s);
    case 'transport-error':
      return { state: s, actions: [{ type: 'transport-error', error: input.error }] };
    default:
      return stay(s);
  }
};

export const terminatedState: Step = (s) => stay(s);

const STATES: Record<ServerInviteStateName, Step> = {
  Proceeding: proceeding,
  Completed: completed,
  Confirmed: confirmed,
  Accepted: accepted,
  Terminated: terminatedState,
};

/** One step of the INVITE server transaction. */
export function serverInviteStep(s: ServerInviteState, input: TxInput): Transition<ServerInviteState> {
  return STATES[s.name](s, input);
}
