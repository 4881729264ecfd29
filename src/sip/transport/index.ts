/** SIP transports (RFC 3261 18): UDP, TCP, TLS: the layer's one entry module; the other layers and the bridge import from here. */
export * from './transport.ts';
