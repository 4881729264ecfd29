/**
 * The SIP transaction layer (RFC 3261 17, RFC 6026): import from here. See docs/sip-transaction.md.
 */
export { TransactionLayer, type TransactionLayerEvents, type TransactionLayerOptions } from './layer.ts';
export { ClientTransaction, type CancelOptions, type ClientTransactionEvents } from './client.ts';
export { ServerTransaction, type ServerTransactionEvents } from './server.ts';
export type { TransactionLogger, TransactionStats } from './runner.ts';
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
} from './timers.ts';
export type { TransactionKind, TxAction, TxInput, Transition } from './types.ts';
export { buildAck, buildCancel } from './client-invite.ts';
export { buildTrying } from './server-invite.ts';
export { SipTransactionError } from '../message/index.ts';

// Used by the other SIP layers and by the bridge: this index is the layer's one entry.
export { emitSafely } from './runner.ts';
