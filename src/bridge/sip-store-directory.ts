/**
 * InboundDirectory over the store: trunks, assignments, imported carrier numbers and agents.
 * Every lookup reads the store, so a trunk or assignment changed through the API routes the very
 * next INVITE; the queries are indexed point reads (tens of microseconds on SQLite).
 *
 * inbound_host may be a DNS name ("ACL auth accepts a source address equal to inbound_host
 * (resolved)", DESIGN.md): names are resolved with the system resolver and cached for
 * `dnsTtlMs`; a failed lookup matches nothing and is retried on the next INVITE after a short
 * back-off, and logged once per name.
 */
import dns from 'node:dns/promises';
import { isIP } from 'node:net';
import { aclTooWide, formatCidr, ipInCidr, parseCidr, type AclWidthLimit, type Cidr } from '../domain/sip-trunk.ts';
import type { Store } from '../store/index.ts';
import type { StoredSipTrunk } from '../store/sip-trunks.ts';
import type { DigestAccountOf, InboundDirectory, InboundRoute, InboundTrunk, NumberClaimOf } from '../sip/ua/index.ts';
import type { OutboundTrunk } from '../sip/ua/index.ts';
import { registeredContactOf } from './sip-store-registrations.ts';
import { numberCandidates } from '../domain/phone.ts';

export interface StoreDirectoryOptions {
  /** How long a resolved inbound_host stays cached. Default 60 s. */
  dnsTtlMs?: number;
  /** Resolver; tests inject one. Default dns.lookup (all addresses). */
  resolve?: (host: string) => Promise<string[]>;
  logger?: { warn(obj: object, msg?: string): void };
  now?: () => number;
}

interface DnsEntry {
  addresses: string[];
  expires: number;
  pending?: Promise<void>;
}

const FAILED_LOOKUP_RETRY_MS = 5000;

function toInbound(t: StoredSipTrunk): InboundTrunk {
  return { id: t.id, orgId: t.org_id, name: t.name, authType: t.inbound_auth_type === 'acl' ? 'acl' : 'digest', mediaEncryption: t.media_encryption };
}

/** IPv4-mapped IPv6 sources (dual-stack sockets) compare as their IPv4 address. */
function plainAddress(ip: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  return m ? m[1]! : ip.toLowerCase();
}

export { numberCandidates };

export class StoreDirectory implements InboundDirectory {
  readonly #store: Store;
  readonly #dnsTtlMs: number;
  readonly #resolve: (host: string) => Promise<string[]>;
  readonly #logger: StoreDirectoryOptions['logger'];
  readonly #now: () => number;
  readonly #dns = new Map<string, DnsEntry>();
  /** Parsed CIDRs per trunk, keyed by updated_at so an edit through the API is seen at once. */
  readonly #cidrs = new Map<string, { updatedAt: string; cidrs: Cidr[] }>();

  constructor(store: Store, options: StoreDirectoryOptions = {}) {
    this.#store = store;
    this.#dnsTtlMs = options.dnsTtlMs ?? 60_000;
    this.#resolve = options.resolve ?? (async (host) => (await dns.lookup(host, { all: true })).map((a) => a.address));
    this.#logger = options.logger;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The ACL trunks admitting `address`, each with how specifically: the prefix length of its
   * longest matching CIDR, or the full length (32 / 128) when the address is its inbound_host.
   * In store order; inbound-routing.ts ranks them.
   */
  async aclTrunksFor(address: string): Promise<InboundTrunk[]> {
    const src = plainAddress(address);
    const out: InboundTrunk[] = [];
    for (const t of await this.#store.sipTrunks.listByInboundAuth('acl')) {
      let specificity = -1;
      for (const c of this.#cidrsOf(t)) if (c.prefix > specificity && ipInCidr(src, c)) specificity = c.prefix;
      const full = isIP(src) === 6 ? 128 : 32;
      if (specificity < full && (await this.#hostMatches(t.inbound_host, src))) specificity = full;
      if (specificity >= 0) out.push({ ...toInbound(t), specificity });
    }
    return out;
  }

  /**
   * ACL trunks holding CIDRs wider than `limit` (written before the limit existed, or by hand):
   * they still route, and the daemon warns about them at start.
   */
  async wideAclTrunks(limit: AclWidthLimit): Promise<Array<{ trunkId: string; cidrs: string[] }>> {
    const out: Array<{ trunkId: string; cidrs: string[] }> = [];
    for (const t of await this.#store.sipTrunks.listByInboundAuth('acl')) {
      const wide = this.#cidrsOf(t).filter((c) => aclTooWide(c, limit));
      if (wide.length > 0) out.push({ trunkId: t.id, cidrs: wide.map(formatCidr) });
    }
    return out;
  }

  async digestAccount(username: string): Promise<DigestAccountOf | undefined> {
    const t = await this.#store.sipTrunks.byInboundUsername(username);
    if (t === undefined || t.inbound_auth_type !== 'digest') return undefined;
    const password = (await this.#store.sipTrunks.credentials(t.id))?.inbound?.password;
    return password === undefined ? undefined : { trunk: toInbound(t), password };
  }

  /**
   * One organization's ACL route (inbound-routing.ts asks each organization separately): its
   * alternate_number on one of `trunks`, then its carrier numbers. A number another organization
   * imported from its carrier is not routed through an alternate_number (#importedElsewhere).
   */
  async routeAcl(trunks: readonly InboundTrunk[], user: string): Promise<InboundRoute | undefined> {
    const ids = new Set(trunks.map((t) => t.id));
    for (const orgId of new Set(trunks.map((t) => t.orgId))) {
      for (const n of numberCandidates(user)) {
        const a = await this.#store.assignments.byOrgAlternateNumber(orgId, n);
        if (a === undefined || !ids.has(a.sip_trunk_id) || (await this.#importedElsewhere(orgId, n))) continue;
        const trunk = trunks.find((t) => t.id === a.sip_trunk_id)!;
        return this.#agentRoute(orgId, a.agent_id, 'alternate_number', n, trunk.id);
      }
    }
    for (const trunk of trunks) {
      const r = await this.#carrierRoute(trunk, user);
      if (r !== undefined) return r;
    }
    return undefined;
  }

  async routeDigest(trunk: InboundTrunk, user: string): Promise<InboundRoute | undefined> {
    for (const n of numberCandidates(user)) {
      const a = await this.#store.assignments.byTrunkNumber(trunk.id, n);
      if (a !== undefined && !(await this.#importedElsewhere(trunk.orgId, n))) return this.#agentRoute(trunk.orgId, a.agent_id, 'assignment_number', n, trunk.id);
    }
    return this.#carrierRoute(trunk, user);
  }

  async registeredContactTrunk(contactUser: string): Promise<InboundTrunk | undefined> {
    // Our Contact users are 'cb' + 16 hex digits: anything else is a number, not worth a query.
    if (!/^cb[0-9a-f]{16}$/.test(contactUser)) return undefined;
    const t = await this.#store.sipTrunks.byOutboundContactUser(contactUser);
    return t === undefined ? undefined : toInbound(t);
  }

  /** The trunk's own assignments only (its `number`, then its `alternate_number`), then carrier numbers. */
  async routeRegistered(trunk: InboundTrunk, user: string): Promise<InboundRoute | undefined> {
    for (const n of numberCandidates(user)) {
      if (await this.#importedElsewhere(trunk.orgId, n)) continue;
      const byNumber = await this.#store.assignments.byTrunkNumber(trunk.id, n);
      const a = byNumber ?? (await this.#store.assignments.byTrunkAlternateNumber(trunk.id, n));
      if (a !== undefined) return this.#agentRoute(trunk.orgId, a.agent_id, byNumber !== undefined ? 'assignment_number' : 'alternate_number', n, trunk.id);
    }
    return this.#carrierRoute(trunk, user);
  }

  /**
   * The digest trunks whose assignment `number` is the dialled one (any form of it), leaving out
   * claims on a number another organization imported from its carrier (they would not route).
   */
  async digestClaims(user: string): Promise<NumberClaimOf[]> {
    const out: NumberClaimOf[] = [];
    for (const n of numberCandidates(user)) {
      for (const c of await this.#store.assignments.digestClaims(n)) {
        if (out.some((o) => o.trunkId === c.sip_trunk_id) || (await this.#importedElsewhere(c.org_id, n))) continue;
        out.push({ trunkId: c.sip_trunk_id, orgId: c.org_id });
      }
    }
    return out;
  }

  async digestRouteMayExist(user: string): Promise<boolean> {
    if ((await this.digestClaims(user)).length > 0) return true;
    for (const n of numberCandidates(user)) {
      if (n.startsWith('+') && (await this.#store.telcoNumbers.digestRoutable(n))) return true;
    }
    return false;
  }

  /**
   * Whether `number` (in an E.164 form) was imported from the carrier by some organization, but
   * not by `orgId`: the carrier proved the importer's ownership, so no assignment of another
   * organization routes it.
   */
  async #importedElsewhere(orgId: string, number: string): Promise<boolean> {
    for (const n of numberCandidates(number)) {
      if (!n.startsWith('+')) continue;
      const importers = await this.#store.telcoNumbers.importingOrgs(n);
      if (importers.length > 0 && !importers.includes(orgId)) return true;
    }
    return false;
  }

  async #carrierRoute(trunk: InboundTrunk, user: string): Promise<InboundRoute | undefined> {
    for (const n of numberCandidates(user)) {
      if (!n.startsWith('+')) continue;
      const num = await this.#store.telcoNumbers.byPhoneNumber(trunk.orgId, n);
      if (num === undefined) continue;
      const agentId = await this.#store.agents.holderOfPhoneNumber(num.id);
      if (agentId !== undefined) return this.#agentRoute(trunk.orgId, agentId, 'carrier_number', n, trunk.id);
    }
    return undefined;
  }

  async #agentRoute(orgId: string, agentId: string, via: InboundRoute['via'], number: string, trunkId: string): Promise<InboundRoute | undefined> {
    const agent = await this.#store.agents.get(orgId, agentId);
    if (agent === undefined) return undefined;
    return { orgId, agentId, via, number, trunkId, agentActive: agent.status === 'active' };
  }

  #cidrsOf(t: StoredSipTrunk): Cidr[] {
    const cached = this.#cidrs.get(t.id);
    if (cached !== undefined && cached.updatedAt === t.updated_at) return cached.cidrs;
    const cidrs: Cidr[] = [];
    for (const s of t.inbound_acl) {
      try {
        cidrs.push(parseCidr(s));
      } catch {
        // validated on write; an unparsable one (older data) matches nothing
      }
    }
    this.#cidrs.set(t.id, { updatedAt: t.updated_at, cidrs });
    return cidrs;
  }

  async #hostMatches(host: string, src: string): Promise<boolean> {
    if (host === '') return false;
    const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
    if (isIP(bare) !== 0) return plainAddress(bare) === src;
    const addresses = await this.#lookup(bare.toLowerCase());
    return addresses.some((a) => plainAddress(a) === src);
  }

  async #lookup(name: string): Promise<string[]> {
    const now = this.#now();
    let entry = this.#dns.get(name);
    if (entry !== undefined && entry.expires > now) return entry.addresses;
    if (entry?.pending !== undefined) {
      await entry.pending;
      return this.#dns.get(name)?.addresses ?? [];
    }
    entry ??= { addresses: [], expires: 0 };
    this.#dns.set(name, entry);
    const e = entry;
    e.pending = this.#resolve(name).then(
      (addresses) => {
        e.addresses = addresses;
        e.expires = this.#now() + this.#dnsTtlMs;
      },
      (err: unknown) => {
        // Keep the last good answer through a resolver outage; retry soon.
        if (e.addresses.length === 0) this.#logger?.warn({ err, host: name }, 'inbound_host does not resolve: ACL trunks naming it match no source');
        e.expires = this.#now() + FAILED_LOOKUP_RETRY_MS;
      },
    );
    await e.pending;
    e.pending = undefined;
    return e.addresses;
  }
}

/**
 * The trunk an outbound call goes through, as the UAC needs it (outbound credentials decrypted
 * here, for the SIP layer only), with the PBX registered on it when it has no outbound_host.
 * Undefined when the trunk is not the organization's.
 */
export async function outboundTrunkFromStore(store: Store, orgId: string, trunkId: string): Promise<OutboundTrunk | undefined> {
  const t = await store.sipTrunks.get(orgId, trunkId);
  if (t === undefined) return undefined;
  const creds = (await store.sipTrunks.credentials(t.id))?.outbound;
  const registered = t.outbound_host === '' ? await registeredContactOf(store, t.id) : undefined;
  return {
    id: t.id,
    orgId: t.org_id,
    name: t.name,
    pbx: t.pbx,
    outbound_host: t.outbound_host,
    caller_id_transforms: t.caller_id_transforms,
    media_encryption: t.media_encryption,
    ...(creds ? { credentials: creds } : {}),
    ...(registered ? { registered } : {}),
  };
}

/** Whether a call can go through the trunk: it names an outbound_host or a PBX is registered on it. */
export function canCallThrough(trunk: OutboundTrunk): boolean {
  return trunk.outbound_host !== '' || trunk.registered !== undefined;
}
