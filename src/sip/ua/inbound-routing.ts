/**
 * Who may call, and which agent answers: the inbound decision for a new INVITE, exactly as
 * DESIGN.md states it.
 *
 *   1. Source address inside ACL trunks (inbound_host or an inbound_acl CIDR): each organization
 *      owning one of those trunks is asked whether it routes the Request-URI user (its
 *      alternate_number on one of them, then its imported carrier numbers). The called number
 *      decides between organizations, never the ACLs: what one organization configures must not
 *      take, block or reveal another's calls (docs/sip-trunks.md "Overlapping ACLs").
 *        - One organization routes it and no other organization's digest trunk claims it (an
 *          assignment `number`) -> accepted on that organization's most specific trunk (the
 *          prefix length of the CIDR admitting the source, an exact inbound_host counting as /32
 *          or /128: `specificity` ranks one organization's trunks, never two organizations').
 *        - Two or more organizations route it -> ambiguous: 404, logged and counted
 *          (ambiguous_route) with the claiming trunks' ids, never guessed; unless a digest trunk
 *          claims it too, then as below.
 *        - A digest trunk of another organization claims it -> 401 challenge (or, with
 *          credentials, the digest decision below): the credentials decide.
 *      A number some organization imported from its carrier never routes to an organization that
 *      did not import it (the directory leaves such claims out), so a carrier number needs no
 *      tie-break against an alternate_number.
 *   2. Otherwise digest: no credentials -> 401 challenge; the username names a digest trunk and
 *      the response checks out -> route by that trunk's assignment `number`, then its
 *      organization's carrier numbers; bad credentials -> 403 (counted per source address).
 *   3. No route -> 404; the routed agent is not active -> 480.
 *
 * Before both: a Request-URI user that is the Contact user of a trunk registered with its carrier
 * (register: true, outbound-registrations.ts) is a call the carrier sent to our registered
 * Contact. That random user is the trunk's proof, as registration-based carriers answer no
 * challenge; the number dialled is then the To user, routed on that trunk like a digest call
 * (assignment `number`, its `alternate_number`, then the organization's carrier numbers).
 *
 * Answers that cost a source nothing (a 401 challenge, a 403 because it is blocked) are rate
 * limited per source (challenge-rate-limit.ts): over the bucket the decision is 'throttle', which
 * the UAS drops (UDP) or answers 503 (TCP/TLS). A blocked source's refusals are logged once per
 * block (AuthRateLimiter.refusedWhileBlocked), the rest only counted.
 *
 * An ACL source whose number does not route is still challenged when some digest trunk routes
 * that number (a PBX may use both kinds from one address); otherwise it gets 404 at once, because
 * an ACL-only PBX cannot answer a challenge and "401" would hide the real problem.
 *
 * This file decides; it sends nothing. The UAS (uas.ts) turns a decision into a response and
 * logs `why` once per rejected INVITE, since "no trunk found" is what PBX admins fight most.
 */
import type { DigestServer } from '../digest/index.ts';
import type { AuthRateLimiter } from './auth-rate-limit.ts';
import type { ChallengeRateLimiter } from './challenge-rate-limit.ts';

/** A trunk as inbound routing sees it. */
export interface InboundTrunk {
  id: string;
  orgId: string;
  name: string;
  authType: 'digest' | 'acl';
  /** The trunk's media_encryption (SDES-SRTP policy, docs/sip-trunks.md); absent: none. */
  mediaEncryption?: 'none' | 'allow' | 'require';
  /**
   * ACL trunks from aclTrunksFor(): how specifically the trunk admitted the source, as a prefix
   * length (its longest matching CIDR; 32 or 128 for an exact inbound_host). Absent counts as 0.
   */
  specificity?: number;
}

/** The agent an inbound call goes to, and how it was found. */
export interface InboundRoute {
  orgId: string;
  agentId: string;
  /** How the Request-URI user matched. */
  via: 'assignment_number' | 'alternate_number' | 'carrier_number';
  /** The number as stored (the matched form of the Request-URI user). */
  number: string;
  /** The trunk whose assignment routed the call (carrier-number routes keep the authenticating trunk). */
  trunkId: string;
  agentActive: boolean;
}

/** A trunk's claim on a dialled number: trunk ids only leave routing (logs, metrics). */
export interface NumberClaimOf {
  trunkId: string;
  orgId: string;
}

/** A digest trunk and its password (for verification only). */
export interface DigestAccountOf {
  trunk: InboundTrunk;
  password: string;
}

/**
 * What routing needs from the store (bridge/sip-store-directory.ts implements it). A lookup may
 * answer at once or through a promise (the store is asynchronous); routing awaits either.
 */
export interface InboundDirectory {
  /** ACL trunks whose inbound_host (resolved) or inbound_acl CIDRs contain the address, with their `specificity`. */
  aclTrunksFor(address: string): InboundTrunk[] | Promise<InboundTrunk[]>;
  /** The digest trunk with this inbound username, and its password (for verification only). */
  digestAccount(username: string): DigestAccountOf | undefined | Promise<DigestAccountOf | undefined>;
  /** ACL route of one organization: its alternate_number on one of `trunks` (all of that organization), then its carrier numbers. */
  routeAcl(trunks: readonly InboundTrunk[], user: string): InboundRoute | undefined | Promise<InboundRoute | undefined>;
  /** Digest route: the trunk's assignment `number`, then its organization's carrier numbers. */
  routeDigest(trunk: InboundTrunk, user: string): InboundRoute | undefined | Promise<InboundRoute | undefined>;
  /**
   * The digest trunks whose assignment `number` routes this user, with their organizations
   * (claims on another organization's imported carrier number left out). Absent: none.
   */
  digestClaims?(user: string): NumberClaimOf[] | Promise<NumberClaimOf[]>;
  /** Whether some digest trunk could route this user (then an ACL miss is challenged, not 404). */
  digestRouteMayExist(user: string): boolean | Promise<boolean>;
  /** The trunk registered with its carrier under this Contact user, if any (see the file comment). */
  registeredContactTrunk?(contactUser: string): InboundTrunk | undefined | Promise<InboundTrunk | undefined>;
  /** Route on a registered trunk: its assignment `number` or `alternate_number`, then carrier numbers. */
  routeRegistered?(trunk: InboundTrunk, user: string): InboundRoute | undefined | Promise<InboundRoute | undefined>;
}

export interface InboundRequestInfo {
  method: string;
  /** The Request-URI exactly as received (the digest uri is compared with it). */
  requestUri: string;
  /** The Request-URI user part (the number dialled), '' when none. */
  user: string;
  /** The To user part, '' when none: the number dialled when the Request-URI is our registered Contact. */
  toUser?: string;
  /** Authorization header values. */
  authorization: readonly string[];
  /** The source IP address the request came from (not Via: RFC 3581 received). */
  sourceAddress: string;
}

export type InboundDecision =
  | {
      kind: 'accept';
      trunk: InboundTrunk;
      route: InboundRoute;
      auth: 'acl' | 'digest' | 'registration';
      /** The digest username that authenticated, for logs. */
      username?: string;
    }
  | {
      kind: 'reject';
      status: 400 | 401 | 403 | 404 | 480;
      /** Extra headers, e.g. WWW-Authenticate challenges. */
      headers: [string, string][];
      /** One sentence for the log line: which trunk matched or not, which step failed. */
      why: string;
      /** Fields for the log line (never a secret). */
      detail: Record<string, unknown>;
      /** A 401 is part of every login; the rest is worth a warning. */
      quiet: boolean;
      /** The outcome counted in metrics when it is not the status's usual one (e.g. ambiguous_route). */
      outcome?: string;
      /** Counted, not logged: a blocked source's refusals after the first of its block. */
      unlogged?: boolean;
      /** The trunks claiming the number when it is ambiguous (refused, or challenged so that credentials decide). */
      ambiguousTrunks?: string[];
    }
  | {
      /**
       * The source is over its challenge rate (sip.challenge_rate): no 401/403 for it now. The
       * UAS drops the INVITE on UDP and answers 503 with Retry-After on TCP/TLS.
       */
      kind: 'throttle';
      retryAfter: number;
      why: string;
      detail: Record<string, unknown>;
      /** Log this one (the first of the source's window); the rest are only counted. */
      log: boolean;
    };

/** The source is over its challenge rate: drop (UDP) or 503 (TCP/TLS), see uas-responses.ts. */
export type ThrottleDecision = Extract<InboundDecision, { kind: 'throttle' }>;

export interface InboundAuthorizer {
  directory: InboundDirectory;
  digest: DigestServer;
  limiter: AuthRateLimiter;
  /** Per-source rate of challenges and blocked refusals; undefined: no limit. */
  challenges?: ChallengeRateLimiter | undefined;
}

/**
 * Undefined when the source may get another cheap refusal now (a challenge, a blocked 403, a 400
 * to a malformed INVITE); else the throttle decision. Takes a token.
 */
export function throttled(a: Pick<InboundAuthorizer, 'challenges'>, src: string, detail: Record<string, unknown>): ThrottleDecision | undefined {
  const t = a.challenges?.take(src);
  if (t === undefined) return undefined;
  const limit = a.challenges!;
  return {
    kind: 'throttle',
    retryAfter: t.retryAfterSecs,
    log: t.log,
    why: `source ${src} is over the challenge rate limit (sip.challenge_rate ${limit.ratePerSecond}/s, burst ${limit.burst}): its INVITEs and REGISTERs that would be challenged or refused are dropped (UDP) or answered 503 (TCP/TLS) until it slows down; counted as outcome "throttled", logged at most once a minute per source`,
    detail: t.suppressed > 0 ? { ...detail, throttledSinceLastLog: t.suppressed } : detail,
  };
}

function challenge(a: InboundAuthorizer, req: InboundRequestInfo, why: string, detail: Record<string, unknown>, stale = false): InboundDecision {
  const over = throttled(a, req.sourceAddress, detail);
  if (over !== undefined) return over;
  const headers = a.digest.challenge({ stale, binding: req.sourceAddress }).map((v): [string, string] => ['WWW-Authenticate', v]);
  return { kind: 'reject', status: 401, headers, why, detail, quiet: true };
}

function reject(status: 400 | 403 | 404 | 480, why: string, detail: Record<string, unknown>, outcome?: string): InboundDecision {
  return outcome === undefined ? { kind: 'reject', status, headers: [], why, detail, quiet: false } : { kind: 'reject', status, headers: [], why, detail, quiet: false, outcome };
}

type AclPick =
  | { kind: 'route'; trunk: InboundTrunk; route: InboundRoute }
  | { kind: 'ambiguous'; trunkIds: string[] }
  | { kind: 'none' };

/**
 * The ACL claims on `user`: each organization's admitting trunks asked together (routeAcl), most
 * specific first so that its carrier-number route lands on its most specific trunk. Routes from
 * two organizations are ambiguous whatever their ACLs' widths: a narrower ACL must not let one
 * organization take calls from a source it shares with another. One trunk (the common case)
 * costs one routeAcl call.
 */
async function pickAclRoute(directory: InboundDirectory, trunks: readonly InboundTrunk[], user: string): Promise<AclPick> {
  const ranked = trunks.length === 1 ? trunks : [...trunks].sort((x, y) => (y.specificity ?? 0) - (x.specificity ?? 0));
  const byOrg = new Map<string, InboundTrunk[]>();
  for (const t of ranked) {
    const group = byOrg.get(t.orgId);
    if (group === undefined) byOrg.set(t.orgId, [t]);
    else group.push(t);
  }
  const claims: Array<{ trunk: InboundTrunk; route: InboundRoute }> = [];
  for (const group of byOrg.values()) {
    const route = await directory.routeAcl(group, user);
    if (route !== undefined) claims.push({ trunk: group.find((t) => t.id === route.trunkId) ?? group[0]!, route });
  }
  if (claims.length > 1) return { kind: 'ambiguous', trunkIds: claims.map((c) => c.trunk.id) };
  return claims.length === 1 ? { kind: 'route', ...claims[0]! } : { kind: 'none' };
}

/**
 * Step 1 for a source some ACL trunks admit (see the file comment): decided (routed, or refused
 * at once), or left to digest; `contested` then names the trunks claiming the number when a digest
 * trunk of another organization is among them (trunk ids only, here and in the log lines: one
 * organization's data must not reach another's view).
 */
async function decideAcl(
  directory: InboundDirectory,
  req: InboundRequestInfo,
  aclTrunks: readonly InboundTrunk[],
  base: Record<string, unknown>,
): Promise<{ kind: 'decided'; decision: InboundDecision } | { kind: 'digest'; contested?: string[] }> {
  const { user, sourceAddress: src } = req;
  const pick = await pickAclRoute(directory, aclTrunks, user);
  const names = aclTrunks.map((t) => t.id);
  const digestClaims = pick.kind === 'none' ? [] : ((await directory.digestClaims?.(user)) ?? []);
  const rivals = pick.kind === 'route' ? digestClaims.filter((c) => c.orgId !== pick.route.orgId) : digestClaims;
  if (pick.kind !== 'none' && rivals.length > 0) {
    return { kind: 'digest', contested: [...(pick.kind === 'route' ? [pick.trunk.id] : pick.trunkIds), ...rivals.map((c) => c.trunkId)] };
  }
  if (pick.kind === 'route') return { kind: 'decided', decision: routed(pick.trunk, pick.route, 'acl', { ...base, trunkId: pick.trunk.id, auth: 'acl' }) };
  if (pick.kind === 'ambiguous') {
    const decision = reject(
      404,
      `ambiguous route: source ${src} is admitted by ACL trunks ${pick.trunkIds.join(', ')} of different organizations, and each routes "${user}"; refusing rather than guessing (one of them must drop the number, or narrow its inbound_acl or inbound_host so that they no longer overlap)`,
      { ...base, aclTrunks: names, claimingTrunks: pick.trunkIds },
      'ambiguous_route',
    );
    if (decision.kind === 'reject') decision.ambiguousTrunks = pick.trunkIds;
    return { kind: 'decided', decision };
  }
  if (req.authorization.length === 0 && !(await directory.digestRouteMayExist(user))) {
    const why = `source ${src} matched ACL trunk(s) ${names.join(', ')} but "${user}" is no alternate_number of theirs nor a carrier number of their organization`;
    return { kind: 'decided', decision: reject(404, why, { ...base, aclTrunks: names }) };
  }
  return { kind: 'digest' };
}

function routed(trunk: InboundTrunk, route: InboundRoute, auth: 'acl' | 'digest' | 'registration', detail: Record<string, unknown>, username?: string): InboundDecision {
  if (!route.agentActive) {
    return reject(480, `number ${route.number} routes to agent ${route.agentId}, which is not active`, { ...detail, agentId: route.agentId, via: route.via });
  }
  return username === undefined ? { kind: 'accept', trunk, route, auth } : { kind: 'accept', trunk, route, auth, username };
}

/** The decision for one new INVITE (see the file comment). */
export async function decideInbound(a: InboundAuthorizer, req: InboundRequestInfo): Promise<InboundDecision> {
  const src = req.sourceAddress;
  const user = req.user;
  const aclTrunks = await a.directory.aclTrunksFor(src);
  const base: Record<string, unknown> = { source: src, user };
  const registered = await a.directory.registeredContactTrunk?.(user);
  if (registered !== undefined) {
    const dialled = req.toUser ?? '';
    const detail = { ...base, trunkId: registered.id, auth: 'registration', to: dialled };
    const route = await a.directory.routeRegistered?.(registered, dialled);
    if (route === undefined) {
      return reject(404, `call to the Contact trunk ${registered.id} registered with its carrier, but the To user "${dialled}" is no assignment number or alternate_number of that trunk nor a carrier number of its organization`, detail);
    }
    return routed(registered, route, 'registration', detail);
  }
  // The trunks claiming the number when a digest trunk is among them: the challenge (or the digest decision) settles it.
  let contested: string[] | undefined;
  if (aclTrunks.length > 0) {
    const acl = await decideAcl(a.directory, req, aclTrunks, base);
    if (acl.kind === 'decided') return acl.decision;
    contested = acl.contested;
    base.aclTrunks = aclTrunks.map((t) => t.id);
    if (contested !== undefined) base.claimingTrunks = contested;
  }

  if (a.limiter.isBlocked(src)) {
    const over = throttled(a, src, { ...base, blocked: true });
    if (over !== undefined) return over;
    const refusal = a.limiter.refusedWhileBlocked(src);
    const decision = reject(
      403,
      `source ${src} is blocked after repeated failed authentication (sip.auth_block_secs); its further INVITEs during this block get 403 and are counted as outcome "auth_blocked", not logged`,
      { ...base, blocked: true },
      'auth_blocked',
    );
    if (decision.kind === 'reject' && refusal?.first === false) decision.unlogged = true;
    return decision;
  }
  if (req.authorization.length === 0) {
    if (contested !== undefined) {
      const decision = challenge(a, req, `ambiguous route: "${user}" is claimed by trunks ${contested.join(', ')} of different organizations, a digest trunk among them: challenging so that credentials decide`, base);
      if (decision.kind === 'reject') {
        decision.ambiguousTrunks = contested;
        decision.outcome = 'ambiguous_route_challenged';
      }
      return decision;
    }
    return challenge(a, req, aclTrunks.length > 0 ? `source ${src} in an ACL trunk without a route for "${user}": challenging for a digest trunk` : `source ${src} is in no ACL trunk and sent no credentials: challenging`, base);
  }
  let account: DigestAccountOf | undefined;
  const result = await a.digest.verifyAsync<InboundTrunk>({
    method: req.method,
    uri: req.requestUri,
    authorization: req.authorization,
    binding: src,
    password: async (username) => {
      account = await a.directory.digestAccount(username);
      return account === undefined ? undefined : { password: account.password, data: account.trunk };
    },
  });
  if (!result.ok) {
    const detail: Record<string, unknown> = { ...base, username: result.username, digest: result.reason };
    if (result.action === 'challenge') return challenge(a, req, `digest: ${result.detail}; challenging again`, detail, result.stale);
    const outcome = a.limiter.recordFailure(src);
    if (outcome.newlyBlocked) detail.blockedNow = true;
    const who = result.reason === 'unknown_user' ? `no digest trunk has inbound_sip_username "${result.username ?? ''}"` : `digest${account === undefined ? '' : ` trunk ${account.trunk.id} (${result.username ?? ''})`}: ${result.detail}`;
    return reject(result.action === 'bad_request' ? 400 : 403, who, detail);
  }
  a.limiter.recordSuccess(src);
  const trunk = result.account!;
  const route = await a.directory.routeDigest(trunk, user);
  const detail = { ...base, trunkId: trunk.id, auth: 'digest', username: result.username };
  if (route === undefined) {
    return reject(404, `digest trunk ${trunk.id} (${result.username}) has no assignment number "${user}" and its organization no such carrier number`, detail);
  }
  return routed(trunk, route, 'digest', detail, result.username);
}
