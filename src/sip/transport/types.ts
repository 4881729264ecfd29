/**
 * The contract between the SIP transport layer (UDP, TCP, TLS sockets) and the transaction
 * layer above it (RFC 3261 section 18 / 17). The transaction layer knows nothing of sockets;
 * the transport layer knows nothing of transactions.
 */
import type { SipRequest, SipResponse } from '../message/index.ts';

export type TransportProtocol = 'udp' | 'tcp' | 'tls';

/** Where a message came from or goes to. */
export interface Endpoint {
  protocol: TransportProtocol;
  address: string;
  port: number;
  /**
   * TLS to an address the caller resolved itself: the SIP domain the certificate must name (RFC
   * 5922 7.2: the domain looked up, not the SRV target) and the SNI sent. Ignored otherwise.
   */
  tlsName?: string;
}

/** A message received, with its source and the local listener it arrived on. */
export interface Inbound<M extends SipRequest | SipResponse = SipRequest | SipResponse> {
  message: M;
  source: Endpoint;
  /** Our listening address and port (for Via / Contact of responses and in-dialog requests). */
  local: Endpoint;
  /** Stream transports: the connection the message came in on, for responses to reuse. */
  connectionId?: string;
}

/** What the transaction layer needs from the transports. */
export interface SipTransport {
  /** Whether the protocol is reliable (RFC 3261 17: no retransmission timers A, E, G). */
  isReliable(protocol: TransportProtocol): boolean;
  /**
   * Sends a request to `destination` (opening a connection on stream transports), or a
   * response back to where its request came from: pass the request's `inbound.source` as
   * `destination` and its `inbound.connectionId` (the transport may follow the RFC 3261 18.2.2 /
   * RFC 3581 route of the top Via instead for peers it trusts, docs/sip-transport.md).
   * @throws SipTransportError when nothing can be sent (no listener for that protocol, closed).
   */
  send(message: SipRequest | SipResponse, destination: Endpoint, connectionId?: string): Promise<void>;
  /** The local endpoint used for a protocol (to build Via headers of requests). */
  localEndpoint(protocol: TransportProtocol): Endpoint;
  on(event: 'request', listener: (inbound: Inbound<SipRequest>) => void): this;
  on(event: 'response', listener: (inbound: Inbound<SipResponse>) => void): this;
  close(): Promise<void>;
}
