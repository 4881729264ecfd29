/**
 * Address helpers of the transport layer (transport*.ts): IP families, IPv4-mapped IPv6
 * addresses from dual-stack sockets, comparison of addresses as RFC 3261 18.2.1 needs it, keys of
 * the connection pool. No sockets here.
 */
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { Endpoint, TransportProtocol } from './types.ts';

export type IpFamily = 4 | 6;

/** 4 or 6 for an IP literal (IPv6 with or without brackets), 0 for a host name. */
export function ipFamily(address: string): 0 | IpFamily {
  const f = isIP(stripBrackets(address));
  return f === 4 || f === 6 ? f : 0;
}

export function stripBrackets(address: string): string {
  return address.length > 1 && address.charCodeAt(0) === 0x5b && address.endsWith(']') ? address.slice(1, -1) : address;
}

const MAPPED = /^::ffff:(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})$/i;

/**
 * A dual-stack IPv6 socket (bound to "::") reports IPv4 peers as "::ffff:192.0.2.1". The rest of
 * the stack (Via received, ACLs, logs) wants the IPv4 address.
 */
export function unmapIPv4(address: string): string {
  if (address.length < 9 || address.charCodeAt(0) !== 0x3a) return address;
  const m = MAPPED.exec(address);
  return m ? m[1]! : address;
}

/** The form to hand to a dual-stack IPv6 socket for an IPv4 destination. */
export function mapIPv4(address: string): string {
  return `::ffff:${address}`;
}

/** Without a zone index ("fe80::1%eth0" -> "fe80::1"): what a Via `received` may carry (RFC 3261 25.1). */
export function withoutZone(address: string): string {
  const i = address.indexOf('%');
  return i < 0 ? address : address.slice(0, i);
}

/**
 * Canonical text of an IP literal: IPv4 as is, IPv6 lower-cased and compressed (RFC 5952), so
 * that "0:0::1" and "::1" compare equal. Host names are lower-cased.
 */
export function canonicalAddress(address: string): string {
  const a = unmapIPv4(stripBrackets(address));
  const f = isIP(withoutZone(a));
  if (f !== 6) return f === 4 ? a : a.toLowerCase();
  try {
    // The WHATWG URL parser serializes IPv6 hosts in the RFC 5952 form.
    return new URL(`http://[${withoutZone(a)}]/`).hostname.slice(1, -1);
  } catch {
    return a.toLowerCase();
  }
}

/**
 * True when `host` (a Via sent-by host: a name or an IP literal) is the IP address `source`.
 * RFC 3261 18.2.1: a name never equals an address (the server adds `received`).
 */
export function sameAddress(host: string, source: string): boolean {
  if (host === source) return ipFamily(host) !== 0;
  if (ipFamily(host) === 0) return false;
  return canonicalAddress(host) === canonicalAddress(source);
}

/** "0.0.0.0", "::" and other spellings of the unspecified address. */
export function isUnspecified(address: string): boolean {
  const a = canonicalAddress(address);
  return a === '0.0.0.0' || a === '::';
}

/**
 * An address of this host to advertise when a listener is bound to the unspecified address and
 * no `advertise` host is configured: the first non-internal interface address of the family,
 * else the loopback address. (Node cannot tell which local address a UDP datagram was sent to or
 * from without a connected socket.)
 */
export function defaultInterfaceAddress(family: IpFamily): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const info of list ?? []) {
      if (info.internal) continue;
      if (family === 4 && info.family === 'IPv4') return info.address;
      // Link-local IPv6 addresses need a zone index to be reached: useless in a Via.
      if (family === 6 && info.family === 'IPv6' && !info.address.toLowerCase().startsWith('fe80')) return info.address;
    }
  }
  return family === 4 ? '127.0.0.1' : '::1';
}

/** Pool key of a remote stream endpoint: protocol, canonical address, port. */
export function endpointKey(protocol: TransportProtocol, address: string, port: number): string {
  return `${protocol}|${canonicalAddress(address)}|${port}`;
}

/** "192.0.2.1:5060", "[2001:db8::1]:5060" (logs, ids). */
export function formatEndpoint(e: { address: string; port: number }): string {
  return e.address.includes(':') ? `[${e.address}]:${e.port}` : `${e.address}:${e.port}`;
}

/** The default port of a transport (RFC 3261 18.2.2, 19.1.2): 5061 for TLS, else 5060. */
export function defaultPort(protocol: TransportProtocol): number {
  return protocol === 'tls' ? 5061 : 5060;
}

/** The Via transport token of a protocol ("UDP", "TCP", "TLS"). */
export function viaTransport(protocol: TransportProtocol): string {
  return protocol.toUpperCase();
}

/** The protocol named by a Via transport token, or undefined for one we do not speak (SCTP, WS). */
export function protocolOfVia(transport: string): TransportProtocol | undefined {
  const t = transport.toUpperCase();
  return t === 'UDP' ? 'udp' : t === 'TCP' ? 'tcp' : t === 'TLS' ? 'tls' : undefined;
}

export function copyEndpoint(e: Endpoint): Endpoint {
  return { protocol: e.protocol, address: e.address, port: e.port };
}
