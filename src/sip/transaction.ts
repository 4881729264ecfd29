/**
 * The SIP transaction layer (RFC 3261 17, RFC 6026): import from here. See docs/sip-transaction.md.
 */
export { TransactionLayer, type TransactionLayerEvents, type TransactionLayerOptions } from './transaction-layer.ts';
export { ClientTransaction, type CancelOptions, type ClientTransactionEvents } from './transaction-client.ts';
export { ServerTransaction, type ServerTransactionEvents } from './transaction-server.ts';
export type { TransactionLogger, TransactionStats } from './transaction-runner.ts';
export {
  DEFAULT_T1,
  DEFAULT_T2,
  DEFAULT_T4,
  DEFAULT_TRYING_DELAY,
  resolveTimerConfig,
  systemTransactionTimers,
  timerValues,
  type TimerName,
  type TimerValues,
  type TransactionTimerConfig,
  type TransactionTimers,
} from './transaction-timers.ts';
export type { TransactionKind, TxAction, TxInput, Transition } from './transaction-types.ts';
export { buildAck, buildCancel } from './transaction-client-invite.ts';
export { buildTrying } from './transaction-server-invite.ts';
export { SipTransactionError } from './errors.ts';
