/** SIP dialogs (RFC 3261 12-15), session timers (RFC 4028) and REFER (RFC 3515): the layer's one entry module; the other layers and the bridge import from here. */
export * from './dialog.ts';
export { SessionTimer, negotiateSessionTimerUas, peerAllowsUpdate, refreshSessionByUpdate, sessionRefreshHeaders, sessionTimerFromUacResponse, sessionTimerUacHeaders } from './session-timer.ts';
export type { NegotiatedSessionTimer, SessionTimerConfig } from './session-timer.ts';
export { transferByRefer } from './refer.ts';
export type { TransferOutcome } from './refer.ts';
export { ReliableProvisionalSender, RELIABLE_PROVISIONAL_TAG, parseRAck, requiresReliableProvisional } from './reliable-provisional.ts';
export type { ReliableProvisionalOptions } from './reliable-provisional.ts';
