/**
 * Where a call to a registered PBX goes (a trunk with no outbound_host whose PBX REGISTERed,
 * registrar.ts): what a registrar's proxy does with a call to the address-of-record (RFC 3261
 * 16.5), with the PBX's flow kept as RFC 5626 keeps it.
 *
 *   Request-URI  the registered Contact, exactly (its URI headers dropped, 19.1.5): the PBX
 *                recognises its own Contact; the dialled number travels in To, where PBXs on a
 *                registration trunk look for the DID ("DID from To header")
 *   UDP          to the source address and port of the REGISTER, not the Contact's host: behind
 *                NAT only that pinhole reaches the PBX
 *   TCP/TLS      over the connection the REGISTER came on while it is open (the transport finds
 *                it by its remote address and port); once it has closed, a new connection to the
 *                Contact's host, port and transport
 */
import { parseUri } from '../message/index.ts';
import type { Endpoint, SipTransportLayer, TransportProtocol } from '../transport/index.ts';
import { resolveDestination } from './uac.ts';

/** The binding a call to the PBX uses (the trunk's most recent, from the store). */
export interface RegisteredContact {
  contact: string;
  transport: TransportProtocol;
  sourceAddress: string;
  sourcePort: number;
  /** TCP/TLS: the connection the REGISTER came over (an id of this run of the transport). */
  connectionId?: string;
}

export interface RegisteredRoute {
  destination: Endpoint;
  requestUri: string;
  /** host[:port] of the Contact, for the To header. */
  toHost: string;
  /** Whether the REGISTER's own TCP/TLS connection carries the call. */
  reusesConnection: boolean;
}

/** @throws TypeError when the stored Contact is not a SIP URI; SipTransportError when its host does not resolve. */
export async function registeredRoute(transport: Pick<SipTransportLayer, 'connections'>, reg: RegisteredContact): Promise<RegisteredRoute> {
  const uri = parseUri(reg.contact);
  if (uri.kind !== 'sip') throw new TypeError(`the registered Contact ${reg.contact} is not a SIP URI`);
  uri.headers = [];
  const requestUri = uri.toString();
  const toHost = uri.hostport;
  if (reg.transport === 'udp') {
    return { destination: { protocol: 'udp', address: reg.sourceAddress, port: reg.sourcePort }, requestUri, toHost, reusesConnection: false };
  }
  const open = transport
    .connections()
    .some((c) => c.id === reg.connectionId && c.protocol === reg.transport && c.remote.address === reg.sourceAddress && c.remote.port === reg.sourcePort);
  if (open) {
    return { destination: { protocol: reg.transport, address: reg.sourceAddress, port: reg.sourcePort }, requestUri, toHost, reusesConnection: true };
  }
  const named = uri.transport;
  const protocol: TransportProtocol = uri.scheme === 'sips' || named === 'tls' ? 'tls' : named === 'tcp' ? 'tcp' : named === 'udp' ? 'udp' : reg.transport;
  return { destination: await resolveDestination(uri.host, uri.port, protocol), requestUri, toHost, reusesConnection: false };
}
