/**
 * RFC 3263 "Locating SIP Servers": a trunk's host -> the ordered list of (protocol, address, port)
 * to try, through node:dns's Resolver (c-ares: its own servers and timeouts, so tests can point it
 * at a DNS server on loopback).
 *
 *   IP literal, or a name with an explicit port   -> that address (a name: its A/AAAA), no NAPTR/SRV (4.1, 4.2)
 *   name, transport given (;transport=)           -> SRV of that transport -> A/AAAA
 *   name, no transport                            -> NAPTR (SIP+D2U, SIP+D2T, SIPS+D2T; a TLS trunk
 *                                                    SIPS+D2T only; only transports we can send on),
 *                                                    else SRV of each transport we support, in our
 *                                                    order of preference -> A/AAAA
 *   no SRV at all                                 -> A/AAAA of the name, port 5060 (5061 for TLS)
 *
 * SRV targets come in RFC 2782 order (priority, then weighted random). A/AAAA answers are cached
 * for their TTL; NAPTR and SRV answers, whose TTL node does not report, for `cacheSecs`; "no such
 * record" answers too (a carrier without NAPTR does not cost three extra queries per call).
 *
 * With the system's resolver (no `servers`), a name that DNS knows nothing about is finally looked
 * up with getaddrinfo (dns.lookup), as before RFC 3263 was done here: /etc/hosts names such as
 * `localhost` keep working. Explicitly configured servers are the only source.
 *
 * Failures: a resolver that does not answer (timeout, connection refused) ends the resolution at
 * once with SIP_TRANSPORT_RESOLVE naming the query, unless an expired answer to that query is
 * still held: then that is used (serve-stale, RFC 8767), so a DNS outage does not stop calls to
 * hosts resolved before it; a server failure (SERVFAIL, NOTIMP...) on a
 * NAPTR or SRV query counts as "none" (many servers mishandle NAPTR) and the next step is tried.
 */
import { lookup, Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import { SipTransportError } from '../message/index.ts';
import type { Endpoint, TransportProtocol } from '../transport/index.ts';
import { orderSrv } from './srv-order.ts';

export interface SipDnsOptions {
  /** DNS servers, "host" or "host:port" ("[v6]:port"); empty = the system's (/etc/resolv.conf). */
  servers?: readonly string[];
  /** Per query try, ms. Default 2000. */
  timeoutMs?: number;
  /** Tries per query and server. Default 2. */
  tries?: number;
  /** How long NAPTR and SRV answers (and "none" answers) are kept, seconds. Default 60. */
  cacheSecs?: number;
  now?: () => number;
  random?: () => number;
  logger?: { debug(obj: object, msg: string): void };
}

export interface ResolveRequest {
  /** A name or an IP literal (an IPv6 one with or without brackets). */
  host: string;
  port?: number;
  /** The trunk's transport: given with ;transport=, else its PBX preset's. */
  transport: TransportProtocol;
  /** True when `transport` was given explicitly (;transport=): no NAPTR, SRV for it only. */
  transportExplicit: boolean;
  /** Transports we can send on, in our order of preference. */
  supported: readonly TransportProtocol[];
  /** Endpoints we can actually send to (an address family without a listener is not); default all. */
  usable?: (e: Endpoint) => boolean;
}

export interface ResolvedTarget {
  destination: Endpoint;
  /** The name the address belongs to (the SRV target, or the host), for logs and TLS names. */
  name: string;
  /** How it was found. */
  via: 'literal' | 'naptr' | 'srv' | 'a';
}

export const SIP_DNS_DEFAULTS = { timeoutMs: 2000, tries: 2, cacheSecs: 60 } as const;

/** NAPTR services (RFC 3263 4.1) -> our transports. */
const NAPTR_SERVICES: Record<string, TransportProtocol> = { 'SIP+D2U': 'udp', 'SIP+D2T': 'tcp', 'SIPS+D2T': 'tls' };

function srvPrefix(p: TransportProtocol): string {
  return p === 'udp' ? '_sip._udp' : p === 'tcp' ? '_sip._tcp' : '_sips._tcp';
}

function defaultPort(p: TransportProtocol): number {
  return p === 'tls' ? 5061 : 5060;
}

/** Answers that mean "no such record": the next step of the resolution is tried. */
const NONE = new Set(['ENOTFOUND', 'ENODATA']);
/** Answers that mean the resolver itself is not reachable: no point asking it more. */
const UNREACHABLE = new Set(['ETIMEOUT', 'ECONNREFUSED', 'ECANCELLED', 'EDESTRUCTION']);

function codeOf(err: unknown): string {
  return typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : 'EUNKNOWN';
}

interface Cached<T> {
  expires: number;
  value: Promise<T>;
}

interface SrvAnswer {
  name: string;
  port: number;
  priority: number;
  weight: number;
}
interface NaptrAnswer {
  flags: string;
  service: string;
  replacement: string;
  order: number;
  preference: number;
}

class Unreachable extends Error {}

export class SipDnsResolver {
  readonly #resolver: Resolver;
  readonly #cacheMs: number;
  readonly #now: () => number;
  readonly #random: () => number;
  readonly #o: SipDnsOptions;
  readonly #cache = new Map<string, Cached<unknown>>();
  readonly #servers: string;
  /** No servers configured: /etc/hosts (getaddrinfo) is the last resort for a name without records. */
  readonly #systemFallback: boolean;

  /** @throws Error (from node:dns) when a server is not an address[:port]. */
  constructor(o: SipDnsOptions = {}) {
    this.#o = o;
    this.#resolver = new Resolver({ timeout: o.timeoutMs ?? SIP_DNS_DEFAULTS.timeoutMs, tries: o.tries ?? SIP_DNS_DEFAULTS.tries });
    if (o.servers !== undefined && o.servers.length > 0) this.#resolver.setServers([...o.servers]);
    this.#systemFallback = o.servers === undefined || o.servers.length === 0;
    this.#servers = this.#resolver.getServers().join(', ');
    this.#cacheMs = (o.cacheSecs ?? SIP_DNS_DEFAULTS.cacheSecs) * 1000;
    this.#now = o.now ?? Date.now;
    this.#random = o.random ?? Math.random;
  }

  /** The servers asked, for logs. */
  get servers(): string {
    return this.#servers;
  }

  /** Forgets every cached answer. */
  clear(): void {
    this.#cache.clear();
  }

  /**
   * The targets for `req`, in the order to try them (see the file comment).
   * @throws SipTransportError SIP_TRANSPORT_RESOLVE: the resolver did not answer, or no address.
   */
  async resolve(req: ResolveRequest): Promise<ResolvedTarget[]> {
    const bare = req.host.startsWith('[') && req.host.endsWith(']') ? req.host.slice(1, -1) : req.host;
    const fail = (why: string, cause?: unknown): SipTransportError =>
      new SipTransportError('SIP_TRANSPORT_RESOLVE', `cannot resolve ${bare}: ${why}`, { cause, endpoint: { protocol: req.transport, address: bare, port: req.port ?? defaultPort(req.transport) } });
    const usable = req.usable ?? (() => true);
    if (isIP(bare) !== 0) {
      const destination = { protocol: req.transport, address: bare, port: req.port ?? defaultPort(req.transport) };
      return [{ destination, name: bare, via: 'literal' }];
    }
    try {
      let out: ResolvedTarget[];
      if (req.port !== undefined) {
        out = await this.#addresses(bare, req.transport, req.port, 'a');
      } else {
        out = await this.#byService(bare, req);
        if (out.length === 0) out = await this.#addresses(bare, req.transport, defaultPort(req.transport), 'a');
      }
      if (out.length === 0 && this.#systemFallback) out = await this.#hostsFile(bare, req.transport, req.port ?? defaultPort(req.transport));
      // RFC 5922 7.2: a TLS target found through NAPTR/SRV of `bare` must present a certificate
      // for `bare` (the SIP domain), not for the SRV target's name; one found by A/AAAA of
      // `bare` likewise. The transport checks it against destination.tlsName.
      for (const t of out) if (t.destination.protocol === 'tls') t.destination.tlsName = bare;
      const kept = out.filter((t) => usable(t.destination));
      if (kept.length === 0) throw fail(out.length === 0 ? `no NAPTR/SRV target${req.transport === 'tls' ? ' for TLS (SIPS+D2T, _sips._tcp; other transports are not used for a TLS trunk)' : ''} and no A/AAAA record` : `no address we can send to (${out.map((t) => t.destination.address).join(', ')})`);
      return kept;
    } catch (err) {
      if (err instanceof SipTransportError) throw err;
      if (err instanceof Unreachable) throw fail(`the DNS server (${this.#servers}) did not answer: ${err.message}`, err.cause);
      throw fail(err instanceof Error ? err.message : String(err), err);
    }
  }

  /** NAPTR -> SRV, else SRV per supported transport; [] when neither gives a target. */
  async #byService(name: string, req: ResolveRequest): Promise<ResolvedTarget[]> {
    const secure = req.transport === 'tls';
    const supported = new Set(req.supported);
    const allowed = (p: TransportProtocol): boolean => supported.has(p) && (!secure || p === 'tls');
    // 4.1: a transport given with the URI is the one used; only its SRV is asked.
    if (req.transportExplicit) return this.#srv(`${srvPrefix(req.transport)}.${name}`, req.transport, 'srv');
    const naptr = (await this.#query<NaptrAnswer[]>('NAPTR', name))
      .filter((r) => r.flags.toLowerCase() === 's' && NAPTR_SERVICES[r.service.toUpperCase()] !== undefined && allowed(NAPTR_SERVICES[r.service.toUpperCase()]!))
      .sort((a, b) => a.order - b.order || a.preference - b.preference);
    const out: ResolvedTarget[] = [];
    for (const r of naptr) out.push(...(await this.#srv(r.replacement, NAPTR_SERVICES[r.service.toUpperCase()]!, 'naptr')));
    if (out.length > 0) return out;
    // No usable NAPTR (4.1): SRV for each transport we support, ours first.
    const order = [req.transport, ...req.supported.filter((p) => p !== req.transport)].filter(allowed);
    for (const p of order) out.push(...(await this.#srv(`${srvPrefix(p)}.${name}`, p, 'srv')));
    return out;
  }

  async #srv(name: string, protocol: TransportProtocol, via: 'srv' | 'naptr'): Promise<ResolvedTarget[]> {
    const records = (await this.#query<SrvAnswer[]>('SRV', name)).filter((r) => r.name !== '' && r.name !== '.');
    const out: ResolvedTarget[] = [];
    for (const r of orderSrv(records, this.#random)) out.push(...(await this.#addresses(r.name, protocol, r.port, via)));
    return out;
  }

  /** A then AAAA of `name` (IPv4 first: the common case for carrier SBCs). */
  async #addresses(name: string, protocol: TransportProtocol, port: number, via: ResolvedTarget['via']): Promise<ResolvedTarget[]> {
    if (isIP(name) !== 0) return [{ destination: { protocol, address: name, port }, name, via }];
    const [v4, v6] = await Promise.all([this.#query<string[]>('A', name), this.#query<string[]>('AAAA', name)]);
    return [...v4, ...v6].map((address) => ({ destination: { protocol, address, port }, name, via }));
  }

  /** getaddrinfo's answer (/etc/hosts included), [] when it has none. */
  async #hostsFile(name: string, protocol: TransportProtocol, port: number): Promise<ResolvedTarget[]> {
    try {
      const all = await lookup(name, { all: true });
      return all.map((a) => ({ destination: { protocol, address: a.address, port }, name, via: 'a' as const }));
    } catch {
      return [];
    }
  }

  /** One cached query; "none" answers are []; an unreachable resolver throws Unreachable. */
  #query<T extends unknown[]>(type: 'NAPTR' | 'SRV' | 'A' | 'AAAA', name: string): Promise<T> {
    const key = `${type} ${name.toLowerCase()}`;
    const now = this.#now();
    const hit = this.#cache.get(key);
    if (hit !== undefined && hit.expires > now) return hit.value as Promise<T>;
    const entry: Cached<unknown> = { expires: Number.POSITIVE_INFINITY, value: Promise.resolve() };
    entry.value = this.#ask(type, name).then(
      ({ value, ttlMs }) => {
        entry.expires = this.#now() + ttlMs;
        return value;
      },
      (err: unknown) => {
        // Failures are not cached: the next call asks again.
        if (this.#cache.get(key) === entry) this.#cache.delete(key);
        const code = codeOf(err);
        if (UNREACHABLE.has(code)) {
          if (hit !== undefined) {
            // Serve stale (as RFC 8767 has resolvers do): a DNS outage does not take down trunks
            // whose records we already had; the expired entry stays, so the next call asks again.
            this.#cache.set(key, hit);
            this.#o.logger?.debug({ type, name, code }, 'DNS server did not answer: using the expired answer');
            return hit.value;
          }
          throw new Unreachable(`${type} ${name}: ${code}`, { cause: err });
        }
        this.#o.logger?.debug({ type, name, code }, 'DNS query failed: taken as no record');
        return [];
      },
    );
    this.#cache.set(key, entry);
    return entry.value as Promise<T>;
  }

  async #ask(type: 'NAPTR' | 'SRV' | 'A' | 'AAAA', name: string): Promise<{ value: unknown[]; ttlMs: number }> {
    try {
      switch (type) {
        case 'NAPTR':
          return { value: await this.#resolver.resolveNaptr(name), ttlMs: this.#cacheMs };
        case 'SRV':
          return { value: await this.#resolver.resolveSrv(name), ttlMs: this.#cacheMs };
        case 'A':
        case 'AAAA': {
          const records = type === 'A' ? await this.#resolver.resolve4(name, { ttl: true }) : await this.#resolver.resolve6(name, { ttl: true });
          const ttl = Math.min(...records.map((r) => r.ttl));
          return { value: records.map((r) => r.address), ttlMs: Math.max(0, Number.isFinite(ttl) ? ttl : 0) * 1000 };
        }
      }
    } catch (err) {
      if (NONE.has(codeOf(err))) return { value: [], ttlMs: this.#cacheMs };
      throw err;
    }
  }
}
