/**
 * Where callbridge may send a webhook. An organization names any URL; without a check, a URL
 * naming 127.0.0.1, the VM's metadata address or a private range would let one organization's
 * configuration reach the daemon's own host and network (SSRF). So by default only public
 * addresses are destinations; `webhooks.allow_private_destinations` opens loopback and private
 * ranges for an on-premises CRM.
 *
 * The name is resolved once per attempt and the request is sent to the address that was checked
 * (http-post.ts pins it), so a DNS answer that changes between the check and the connection
 * (rebinding) cannot move the request somewhere else.
 */
import dns from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

export class DestinationError extends Error {
  override readonly name = 'DestinationError';
}

/** Ranges that are not public destinations (RFC 6890 special-purpose, and friends). */
const NOT_PUBLIC = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 3],
] as const) NOT_PUBLIC.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of [
  ['::', 127],
  ['64:ff9b::', 96],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) NOT_PUBLIC.addSubnet(net, prefix, 'ipv6');

/** Whether an IP address is a public unicast address. */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return !NOT_PUBLIC.check(mapped[1]!, 'ipv4');
  return !NOT_PUBLIC.check(address, family === 6 ? 'ipv6' : 'ipv4');
}

export interface DestinationPolicy {
  /** Loopback and private ranges allowed (an on-premises receiver). */
  allowPrivate: boolean;
  /** Resolver; tests may inject one. Default: the system resolver, every address. */
  lookup?: (host: string) => Promise<Array<{ address: string; family: number }>>;
}

/** A URL an endpoint may have: http or https, a host, no credentials in it. @throws DestinationError */
export function parseWebhookUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new DestinationError('url is not an absolute URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new DestinationError('url must be http or https');
  if (url.username !== '' || url.password !== '') throw new DestinationError('url must not carry credentials');
  if (url.hostname === '') throw new DestinationError('url has no host');
  return url;
}

/**
 * The address to send to, after the policy's check of every address the name resolves to (one
 * non-public address among public ones refuses the whole name: the resolver may hand out either).
 * @throws DestinationError naming why, never the addresses of a private network beyond the URL's own.
 */
export async function resolveDestination(url: URL, policy: DestinationPolicy): Promise<{ address: string; family: 4 | 6 }> {
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  let addresses: Array<{ address: string; family: number }>;
  if (isIP(host) !== 0) addresses = [{ address: host, family: isIP(host) }];
  else {
    try {
      addresses = await (policy.lookup ?? ((h) => dns.lookup(h, { all: true })))(host);
    } catch (err) {
      throw new DestinationError(`url host ${host} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'lookup failed'})`);
    }
  }
  if (addresses.length === 0) throw new DestinationError(`url host ${host} does not resolve`);
  if (!policy.allowPrivate && addresses.some((a) => !isPublicAddress(a.address))) {
    throw new DestinationError(`url host ${host} is not a public address (loopback and private ranges need webhooks.allow_private_destinations)`);
  }
  const first = addresses[0]!;
  return { address: first.address, family: first.family === 6 ? 6 : 4 };
}
