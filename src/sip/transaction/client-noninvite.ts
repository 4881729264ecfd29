/**
 * The non-INVITE client transaction: RFC 3261 17.1.2 (figure 6). Pure functions, one per state.
 *
 *                                    |Request from TU
 *                                    |send request
 *                Timer E             V
 *                send request  +-----------+
 *                    +---------|           |-------------------+
 *                    |         |  Trying   |  Timer F          |
 *                    +-------->|           |  or Transport Err.|
 *                              +-----------+  inform TU        |
 *                 200-699         |  |                         |
 *                 resp. to TU     |  |1xx                      |
 *                 +---------------+  |resp. to TU              |
 *                 |                  |                         |
 *                 |   Timer E        V       Timer F           |
 *                 |   send req +-----------+ or Transport Err. |
 *                 |  +---------|           | inform TU         |
 *                 |  |         |Proceeding |------------------>|
 *                 |  +-------->|           |-----+             |
 *                 |            +-----------+     |1xx          |
 *                 |              |      ^        |resp to TU   |
 *                 | 200-699      |      +--------+             |
 *                 | resp. to TU  |                             |
 *                 |              |                             |
 *                 |              V                             |
 *                 |            +-----------+                   |
 *                 |            |           |                   |
 *                 |            | Completed |                   |
 *                 |            |           |                   |
 *                 |            +-----------+                   |
 *                 |              ^   |                         |
 *                 |              |   | Timer K                 |
 *                 +--------------+   | -                       |
 *                                    |                         |
 *                                    V                         |
 *                              +-----------+                   |
 *                              |           |                   |
 *                              | Terminated|<------------------+
 *                              |           |
 *                              +-----------+
 *   (each transition: the event, then the action)
 *
 * Timer E doubles from T1 up to T2 while Trying, and is T2 in Proceeding (17.1.2.2). It is not
 * used on reliable transports, where Timer K is zero: a final response ends the transaction.
 */
import type { TimerValues } from './timers.ts';
import { act, stay, statusClass, type Transition, type TxAction, type TxInput } from './types.ts';

export type ClientNonInviteStateName = 'Trying' | 'Proceeding' | 'Completed' | 'Terminated';

export interface ClientNonInviteState {
  readonly name: ClientNonInviteStateName;
  readonly t: TimerValues;
  /** The current Timer E interval. */
  readonly e: number;
}

type Step = (s: ClientNonInviteState, input: TxInput) => Transition<ClientNonInviteState>;

/** Trying: the request goes to the transport, Timer E (unreliable only) and Timer F start (17.1.2.2). */
export function startClientNonInvite(t: TimerValues): Transition<ClientNonInviteState> {
  const actions: TxAction[] = [{ type: 'send-request', retransmission: false }];
  if (!t.reliable) actions.push(act.startTimer('E', t.E));
  actions.push(act.startTimer('F', t.F));
  return { state: { name: 'Trying', t, e: t.E }, actions };
}

function terminated(s: ClientNonInviteState, actions: TxAction[]): Transition<ClientNonInviteState> {
  return { state: { ...s, name: 'Terminated' }, actions: [...actions, { type: 'terminate' }] };
}

/** What Trying and Proceeding share: final responses, Timer F, transport errors. */
function common(s: ClientNonInviteState, input: TxInput): Transition<ClientNonInviteState> | undefined {
  const stopEF = s.t.reliable ? [act.stopTimer('F')] : [act.stopTimer('E'), act.stopTimer('F')];
  if (input.kind === 'response' && statusClass(input.response.status) >= 2) {
    const pass: TxAction = { type: 'pass-response', response: input.response };
    // Completed absorbs retransmitted responses for T4 (Timer K), zero on reliable transports.
    if (s.t.K === 0) return terminated(s, [...stopEF, pass]);
    return { state: { ...s, name: 'Completed' }, actions: [...stopEF, act.startTimer('K', s.t.K), pass] };
  }
  if (input.kind === 'timer' && input.timer === 'F') return terminated(s, [act.stopTimer('E'), { type: 'timeout', timer: 'F' }]);
  if (input.kind === 'transport-error') return terminated(s, [...stopEF, { type: 'transport-error', error: input.error }]);
  return undefined;
}

/** Trying: the request was sent, no response yet. */
export const trying: Step = (s, input) => {
  const t = common(s, input);
  if (t) return t;
  if (input.kind === 'timer' && input.timer === 'E' && !s.t.reliable) {
    // 17.1.2.2: retransmit, and reset E with MIN(2*E, T2).
    const e = Math.min(2 * s.e, s.t.T2);
    return { state: { ...s, e }, actions: [{ type: 'send-request', retransmission: true }, act.startTimer('E', e)] };
  }
  if (input.kind === 'response') {
    // 1xx (finals were handled above).
    return { state: { ...s, name: 'Proceeding' }, actions: [{ type: 'pass-response', response: input.response }] };
  }
  return stay(s);
};

/** Proceeding: a provisional response arrived. */
export const proceeding: Step = (s, input) => {
  const t = common(s, input);
  if (t) return t;
  if (input.kind === 'timer' && input.timer === 'E' && !s.t.reliable) {
    // 17.1.2.2: in Proceeding, Timer E is reset with T2.
    return { state: { ...s, e: s.t.T2 }, actions: [{ type: 'send-request', retransmission: true }, act.startTimer('E', s.t.T2)] };
  }
  if (input.kind === 'response') return { state: s, actions: [{ type: 'pass-response', response: input.response }] };
  return stay(s);
};

/** Completed: a final response arrived; its retransmissions are absorbed until Timer K. */
export const completed: Step = (s, input) => (input.kind === 'timer' && input.timer === 'K' ? terminated(s, []) : stay(s));

export const terminatedState: Step = (s) => stay(s);

const STATES: Record<ClientNonInviteStateName, Step> = {
  Trying: trying,
  Proceeding: proceeding,
  Completed: completed,
  Terminated: terminatedState,
};

/** One step of the non-INVITE client transaction. */
export function clientNonInviteStep(s: ClientNonInviteState, input: TxInput): Transition<ClientNonInviteState> {
  return STATES[s.name](s, input);
}
