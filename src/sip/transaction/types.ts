/**
 * What the four transaction state machines (RFC 3261 17.1.1, 17.1.2, 17.2.1, 17.2.2, with RFC
 * 6026) take and give. Each machine is a set of pure functions, one per state,
 *
 *     (state, input) -> { state: next state, actions }
 *
 * so the code reads against the RFC figures, and the tests drive them without sockets or time.
 * The runner (runner.ts) feeds inputs from the transport, the TU and the timers, and
 * carries the actions out in order.
 */
import type { SipRequest, SipResponse } from '../message/index.ts';
import type { TimerName } from './timers.ts';

export type TransactionKind = 'client-invite' | 'client-non-invite' | 'server-invite' | 'server-non-invite';

/** An input to a state machine. */
export type TxInput =
  /** Client: a response matched to the transaction (RFC 3261 17.1.3); its class is its status / 100. */
  | { kind: 'response'; response: SipResponse }
  /** Server: a request matched to the transaction (17.2.3): a retransmission, or the ACK of an INVITE. */
  | { kind: 'request'; request: SipRequest }
  /** Server: the TU passes a response to send. */
  | { kind: 'tu-response'; response: SipResponse }
  /** Client INVITE: the TU asks to cancel (RFC 3261 9.1). */
  | { kind: 'cancel' }
  /** A timer the machine started fired. */
  | { kind: 'timer'; timer: TimerName }
  /** The transport failed to send one of the transaction's messages (RFC 3261 17.1.1.2, 17.2.1...). */
  | { kind: 'transport-error'; error: unknown };

/** An action a machine asks its runner to carry out, in order. */
export type TxAction =
  /** Client: pass the request to the transport (again, when `retransmission`). */
  | { type: 'send-request'; retransmission: boolean }
  /** Client INVITE: send the ACK for this 3xx-6xx response (RFC 3261 17.1.1.3). */
  | { type: 'send-ack'; response: SipResponse; retransmission: boolean }
  /** Client INVITE: send the CANCEL for the INVITE (RFC 3261 9.1) in its own transaction. */
  | { type: 'send-cancel' }
  /** Server: pass a response to the transport (again, when `retransmission`). */
  | { type: 'send-response'; response: SipResponse; retransmission: boolean }
  /** Client: pass a response to the TU. */
  | { type: 'pass-response'; response: SipResponse }
  /** Server INVITE in Accepted: pass an ACK to the TU (RFC 6026 7.1). */
  | { type: 'pass-ack'; request: SipRequest }
  | { type: 'start-timer'; timer: TimerName; ms: number }
  | { type: 'stop-timer'; timer: TimerName }
  /** Inform the TU that the transaction timed out (Timer B, F, H; Cancel). */
  | { type: 'timeout'; timer: TimerName }
  /** Inform the TU of a transport error. */
  | { type: 'transport-error'; error: unknown }
  /** The machine reached Terminated: the transaction is destroyed. */
  | { type: 'terminate' };

/** The result of one step of a machine. */
export interface Transition<S> {
  state: S;
  actions: TxAction[];
}

/** The class of a status code: 1 for 1xx ... 6 for 6xx. */
export function statusClass(status: number): number {
  return Math.floor(status / 100);
}

/** Helpers to write the per-state functions compactly. */
export const act = {
  startTimer: (timer: TimerName, ms: number): TxAction => ({ type: 'start-timer', timer, ms }),
  stopTimer: (timer: TimerName): TxAction => ({ type: 'stop-timer', timer }),
};

/** The state unchanged, nothing to do: an input the state absorbs. */
export function stay<S>(state: S): Transition<S> {
  return { state, actions: [] };
}
