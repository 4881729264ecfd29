/**
 * callbridge as the registrar of the PBX behind a digest trunk (RFC 3261 10.3): the PBX
 * registers with the trunk's inbound_sip_username as its address-of-record user (To) and the
 * trunk's inbound credentials, and calls to it through the trunk then go to its Contact.
 *
 *   REGISTER without credentials          401, challenged like an INVITE (same nonces, realm,
 *                                          per-source challenge rate)
 *   wrong password, unknown username,      403 after the challenge, the same answer for all three,
 *   a trunk that is not digest             so a REGISTER cannot tell which usernames exist;
 *                                          counted in the per-source failure limit
 *   credentials of another AOR than To     403
 *   authenticated                          bindings changed per register-bindings.ts; 200 with
 *                                          every current binding and its remaining expires;
 *                                          423 with Min-Expires, 400 on a bad Contact or an
 *                                          out-of-order CSeq
 *
 * The username must be the To user: one trunk, one address-of-record, so one PBX cannot write
 * another's bindings with its own password. The bindings live in the store behind
 * RegistrationStore (bridge/sip-store-registrations.ts); this file knows nothing of it.
 */
import type { DigestServer } from '../digest/index.ts';
import type { SipRequest } from '../message/index.ts';
import type { ServerTransaction } from '../transaction/index.ts';
import type { Inbound } from '../transport/index.ts';
import type { AuthRateLimiter } from './auth-rate-limit.ts';
import type { ChallengeRateLimiter } from './challenge-rate-limit.ts';
import { throttled, type InboundDirectory, type InboundTrunk } from './inbound-routing.ts';
import { applyRegister, DEFAULT_REGISTRAR_LIMITS, remainingSecs, type RegisterRequest, type RegistrarLimits, type RegistrationBinding } from './register-bindings.ts';
import { respond, throttle, type ThrottleContext } from './uas-responses.ts';
import { clipForLog } from '../../log-fields.ts';

/** Where the bindings are kept (the store, through the bridge's adapter); answers may be promises. */
export interface RegistrationStore {
  /** The trunk's unexpired bindings. */
  bindings(trunkId: string, now: number): RegistrationBinding[] | Promise<RegistrationBinding[]>;
  /** Replaces the trunk's bindings with these, atomically. */
  replace(trunkId: string, bindings: readonly RegistrationBinding[]): void | Promise<void>;
  /** The last REGISTER for the trunk authenticated (true) or failed authentication (false). */
  authOutcome(trunkId: string, ok: boolean): void | Promise<void>;
}

export interface RegistrarOptions extends Partial<RegistrarLimits> {
  store: RegistrationStore;
  /** ms since the epoch (bindings outlive the process). Default Date.now. */
  now?: () => number;
}

export interface RegistrarLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

export interface RegistrarContext extends ThrottleContext {
  directory: InboundDirectory;
  digest: DigestServer;
  limiter: AuthRateLimiter;
  challenges?: ChallengeRateLimiter | undefined;
  store: RegistrationStore;
  limits: RegistrarLimits;
  now(): number;
  logger: RegistrarLogger;
  /** Keeps a TCP/TLS connection open through `ms` of silence (0: its usual idle timeout). */
  holdConnection?(connectionId: string, ms: number): void;
}

/** The context the user agent builds from its options. */
export function registrarContext(base: Omit<RegistrarContext, 'store' | 'limits' | 'now'>, opts: RegistrarOptions): RegistrarContext {
  const limits: RegistrarLimits = {
    minExpiresSecs: opts.minExpiresSecs ?? DEFAULT_REGISTRAR_LIMITS.minExpiresSecs,
    maxExpiresSecs: opts.maxExpiresSecs ?? DEFAULT_REGISTRAR_LIMITS.maxExpiresSecs,
    defaultExpiresSecs: opts.defaultExpiresSecs ?? DEFAULT_REGISTRAR_LIMITS.defaultExpiresSecs,
    maxBindings: opts.maxBindings ?? DEFAULT_REGISTRAR_LIMITS.maxBindings,
  };
  return { ...base, store: opts.store, limits, now: opts.now ?? Date.now };
}

/** The longest To user taken (the INVITE path's MAX_IDENTITY_LENGTH). */
const MAX_AOR_USER_LENGTH = 128;

const clip = (s: string): string => clipForLog(s, MAX_AOR_USER_LENGTH);

/**
 * A REGISTER outside any dialog (see the file comment). The store answers asynchronously, so
 * this returns at once and answers the request when the store has; a failure of the store is
 * logged and answered 500. It never throws.
 */
export function handleRegister(ctx: RegistrarContext, tx: ServerTransaction, inbound: Inbound<SipRequest>): void {
  handleRegisterAsync(ctx, tx, inbound).catch((err: unknown) => {
    ctx.logger.warn({ err, callId: clip(inbound.message.callId) }, 'REGISTER handling failed: answered 500');
    if (tx.finalResponse === undefined) respond(tx, inbound.message, 500);
  });
}

/**
 * REGISTERs of one trunk run one at a time from reading its bindings to writing them back: two
 * interleaved would each apply their change to the same old set, and the later write would drop
 * the earlier one's binding.
 */
const trunkQueues = new WeakMap<RegistrationStore, Map<string, Promise<void>>>();

function oneAtATime(store: RegistrationStore, trunkId: string, fn: () => Promise<void>): Promise<void> {
  let queues = trunkQueues.get(store);
  if (queues === undefined) trunkQueues.set(store, (queues = new Map()));
  const run = (queues.get(trunkId) ?? Promise.resolve()).then(fn);
  const tail = run.catch(() => undefined);
  queues.set(trunkId, tail);
  void tail.then(() => {
    if (queues.get(trunkId) === tail) queues.delete(trunkId);
  });
  return run;
}

async function handleRegisterAsync(ctx: RegistrarContext, tx: ServerTransaction, inbound: Inbound<SipRequest>): Promise<void> {
  const req = inbound.message;
  const src = inbound.source.address;
  const aor = req.to.uri.kind === 'sip' ? (req.to.uri.user ?? '') : '';
  const base = { callId: clip(req.callId), source: `${inbound.source.protocol}:${src}:${inbound.source.port}`, aor: clip(aor) };

  if (aor.length > MAX_AOR_USER_LENGTH) {
    const over = throttled(ctx, src, base);
    if (over !== undefined) return throttle(ctx, tx, inbound, base, over);
    ctx.logger.info({ ...base, status: 400 }, `REGISTER refused (400): the To user is longer than ${MAX_AOR_USER_LENGTH} characters`);
    return respond(tx, req, 400, 'To too long');
  }
  if (ctx.limiter.isBlocked(src)) {
    const over = throttled(ctx, src, { ...base, blocked: true });
    if (over !== undefined) return throttle(ctx, tx, inbound, base, over);
    if (ctx.limiter.refusedWhileBlocked(src)?.first === true) {
      ctx.logger.warn({ ...base, blocked: true, status: 403 }, 'REGISTER refused (403): the source is blocked after repeated failed authentication (sip.auth_block_secs); its further requests during this block are not logged');
    }
    return respond(tx, req, 403);
  }
  const authorization = req.getAll('Authorization');
  if (authorization.length === 0) return challenge(ctx, tx, inbound, base, false);

  let account: { trunk: InboundTrunk; password: string } | undefined;
  const result = await ctx.digest.verifyAsync<InboundTrunk>({
    method: req.method,
    uri: req.uri.toString(),
    authorization,
    binding: src,
    password: async (username) => {
      account = await ctx.directory.digestAccount(username);
      return account === undefined ? undefined : { password: account.password, data: account.trunk };
    },
  });
  if (!result.ok) {
    const detail = { ...base, username: clip(result.username ?? ''), digest: result.reason };
    if (result.action === 'challenge') return challenge(ctx, tx, inbound, detail, result.stale);
    const failure = ctx.limiter.recordFailure(src);
    // Only a wrong password marks the trunk: the username named it, and its owner should see why
    // the PBX is not registered. An unknown username names no trunk.
    if (account !== undefined && result.reason === 'bad_response') await ctx.store.authOutcome(account.trunk.id, false);
    const status = result.action === 'bad_request' ? 400 : 403;
    const who =
      result.reason === 'unknown_user'
        ? `no digest trunk has inbound_sip_username "${clip(result.username ?? '')}"`
        : `digest${account === undefined ? '' : ` trunk ${account.trunk.id}`}: ${result.detail}`;
    ctx.logger.warn({ ...detail, status, ...(failure.newlyBlocked ? { blockedNow: true } : {}) }, `REGISTER refused (${status}): ${who}`);
    return respond(tx, req, status);
  }
  ctx.limiter.recordSuccess(src);
  const trunk = result.account!;
  if (result.username !== aor) {
    ctx.logger.warn({ ...base, trunkId: trunk.id, username: result.username, status: 403 }, `REGISTER refused (403): credentials of "${result.username}" may register only the address-of-record "${result.username}", not "${clip(aor)}"`);
    return respond(tx, req, 403);
  }
  await ctx.store.authOutcome(trunk.id, true);
  await oneAtATime(ctx.store, trunk.id, () => registerBindings(ctx, tx, inbound, trunk, { ...base, trunkId: trunk.id }));
}

/** How long past a binding's expiry its connection is kept for the REGISTER that refreshes it late. */
const REREGISTER_MARGIN_MS = 30_000;

/**
 * Calls to the PBX go over the connection its bindings came on (registered-route.ts), so it must
 * outlive the transport's idle timeout until the last of them expires (plus a margin for the
 * re-REGISTER that refreshes it); with none left it closes when idle again.
 */
function holdFlow(ctx: RegistrarContext, connectionId: string, bindings: readonly RegistrationBinding[], now: number): void {
  let until = now;
  for (const b of bindings) if (b.connectionId === connectionId && b.expiresAt > until) until = b.expiresAt;
  ctx.holdConnection?.(connectionId, until > now ? until - now + REREGISTER_MARGIN_MS : 0);
}

function challenge(ctx: RegistrarContext, tx: ServerTransaction, inbound: Inbound<SipRequest>, detail: Record<string, unknown>, stale: boolean): void {
  const src = inbound.source.address;
  const over = throttled(ctx, src, detail);
  if (over !== undefined) return throttle(ctx, tx, inbound, detail, over);
  ctx.logger.debug({ ...detail, status: 401 }, 'REGISTER challenged');
  respond(
    tx,
    inbound.message,
    401,
    undefined,
    ctx.digest.challenge({ stale, binding: src }).map((v): [string, string] => ['WWW-Authenticate', v]),
  );
}

/** RFC 3261 10.3 steps 6-8 for an authenticated REGISTER of `trunk`. */
async function registerBindings(ctx: RegistrarContext, tx: ServerTransaction, inbound: Inbound<SipRequest>, trunk: InboundTrunk, base: Record<string, unknown>): Promise<void> {
  const req = inbound.message;
  const now = ctx.now();
  let contacts: RegisterRequest['contacts'];
  let wildcard: boolean;
  let expires: number | undefined;
  try {
    wildcard = req.isContactWildcard;
    contacts = req.contacts.map((c) => ({ uri: c.uri, expires: c.expires }));
    expires = req.expires;
  } catch (err) {
    ctx.logger.warn({ ...base, status: 400, err: err instanceof Error ? err.message : String(err) }, 'REGISTER refused (400): a Contact or Expires header does not parse');
    return respond(tx, req, 400, 'Bad Contact or Expires');
  }
  const current = await ctx.store.bindings(trunk.id, now);
  const source = inbound.source;
  const outcome =
    !wildcard && contacts.length === 0
      ? ({ ok: true, bindings: current, added: 0, removed: 0, refreshed: 0 } as const) // a query (10.3 step 6)
      : applyRegister(
          current,
          {
            wildcard,
            contacts,
            expires,
            callId: req.callId,
            cseq: req.cseq.seq,
            flow: { transport: source.protocol, sourceAddress: source.address, sourcePort: source.port, ...(inbound.connectionId !== undefined ? { connectionId: inbound.connectionId } : {}) },
            now,
          },
          ctx.limits,
        );
  if (!outcome.ok) {
    ctx.logger.warn({ ...base, status: outcome.status }, `REGISTER refused (${outcome.status}): ${outcome.why}`);
    return respond(tx, req, outcome.status, outcome.reason, outcome.headers);
  }
  if (outcome.added + outcome.removed + outcome.refreshed > 0) await ctx.store.replace(trunk.id, outcome.bindings);
  if (inbound.connectionId !== undefined) holdFlow(ctx, inbound.connectionId, outcome.bindings, now);
  const line = { ...base, bindings: outcome.bindings.length, added: outcome.added, removed: outcome.removed, refreshed: outcome.refreshed };
  if (outcome.added + outcome.removed > 0) ctx.logger.info(line, outcome.bindings.length > 0 ? 'PBX registered' : 'PBX unregistered');
  else ctx.logger.debug(line, 'PBX registration refreshed');
  // 10.3 step 8: the 200 lists every current binding with its expiry.
  respond(
    tx,
    req,
    200,
    undefined,
    outcome.bindings.map((b): [string, string] => ['Contact', `<${b.contact}>;expires=${remainingSecs(b, now)}`]),
  );
}
