/**
 * Where a trunk's outbound requests go: its outbound_host through RFC 3263 (dns/resolver.ts) with
 * the transports we have listeners for, ordered with targets out of service last
 * (dns/target-status.ts). Shared by outbound calls, outbound registration and the OPTIONS pings,
 * so a target one of them finds dead is tried last by the others too.
 */
import { outboundTarget, type OutboundTarget, type Pbx } from '../../domain/sip-trunk.ts';
import { SipDnsResolver, TargetStatus, type ResolvedTarget } from '../dns/index.ts';
import { SipTransportError } from '../message/index.ts';
import type { Endpoint, SipTransportLayer, TransportProtocol } from '../transport/index.ts';

export interface TrunkTargetsOptions {
  transport: SipTransportLayer;
  dns: SipDnsResolver;
  status: TargetStatus;
}

export interface TrunkRoute {
  /** The parsed outbound_host (host as written, port if given, transport given or the preset's). */
  target: OutboundTarget;
  /** Targets to try, in order: live ones first (RFC 3263 / 2782 order), those out of service last. */
  targets: ResolvedTarget[];
}

export class TrunkTargets {
  readonly dns: SipDnsResolver;
  readonly status: TargetStatus;
  readonly #transport: SipTransportLayer;

  constructor(o: TrunkTargetsOptions) {
    this.#transport = o.transport;
    this.dns = o.dns;
    this.status = o.status;
  }

  /** The transports we can send on, in the order our listeners were configured. */
  supported(): TransportProtocol[] {
    const out: TransportProtocol[] = [];
    for (const e of this.#transport.endpoints) if (!out.includes(e.protocol)) out.push(e.protocol);
    return out;
  }

  /** True when a listener of the endpoint's protocol and address family exists to send from. */
  usable(e: Endpoint): boolean {
    try {
      this.#transport.localEndpoint(e.protocol, e.address.includes(':') ? 6 : 4);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * The route of a trunk; undefined when it has no usable outbound_host.
   * @throws SipTransportError SIP_TRANSPORT_RESOLVE (DNS failed or gave no usable address).
   */
  async resolve(trunk: { pbx: Pbx; outbound_host: string }): Promise<TrunkRoute | undefined> {
    let target: OutboundTarget | undefined;
    try {
      target = outboundTarget(trunk);
    } catch {
      target = undefined;
    }
    if (target === undefined) return undefined;
    // A sips: trunk is TLS only (RFC 3261 26.2): without a TLS listener there is nothing to
    // send from, and no other transport may stand in.
    if (target.secure === true && !this.supported().includes('tls')) {
      throw new SipTransportError('SIP_TRANSPORT_RESOLVE', `${trunk.outbound_host} is a sips: host, reached over TLS only, and callbridge has no TLS listener (set sip.tls_port, sip.tls_cert, sip.tls_key)`, { endpoint: { protocol: 'tls', address: target.host, port: target.port ?? 5061 } });
    }
    const targets = await this.dns.resolve({
      host: target.host,
      ...(target.port !== undefined ? { port: target.port } : {}),
      transport: target.transport,
      transportExplicit: /;transport=/i.test(trunk.outbound_host) && target.secure !== true,
      supported: this.supported(),
      usable: (e) => this.usable(e),
    });
    // Belt and braces for sips: (the resolver asks only SIPS+D2T / _sips._tcp for a TLS trunk):
    // a non-TLS target is never used.
    const kept = target.secure === true ? targets.filter((t) => t.destination.protocol === 'tls') : targets;
    if (kept.length === 0) throw new SipTransportError('SIP_TRANSPORT_RESOLVE', `${trunk.outbound_host} is a sips: host and DNS gave no TLS target`, { endpoint: { protocol: 'tls', address: target.host, port: target.port ?? 5061 } });
    return { target, targets: this.status.order(kept) };
  }
}
