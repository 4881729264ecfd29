/** SIP messages (RFC 3261 7, 20, 25): parsing, building, framing: the layer's one entry module; the other layers and the bridge import from here. */
export * from './message.ts';
export { SipTransactionError, SipTransportError } from './errors.ts';
