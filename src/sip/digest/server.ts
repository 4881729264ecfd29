/**
 * Digest authentication of inbound requests (the UAS side, RFC 3261 section 22.2 and 22.4,
 * RFC 7616, RFC 8760).
 *
 *   const server = new DigestServer({ realm: 'callbridge', secret });
 *   // request without credentials, or result.action === 'challenge':
 *   401 with one WWW-Authenticate per value of server.challenge({ stale: result.stale })
 *   // request with credentials:
 *   const result = server.verify({ method, uri: requestUri, authorization, password: lookup });
 *
 * Nonces are stateless: base64url(version | issued-at | random | HMAC tag), so any nonce this
 * server (or another instance sharing the secret) issued can be checked without a table, and
 * forged or altered ones cannot (RFC 7616 section 3.3 suggests exactly such a construction:
 * "time-stamp H(time-stamp ":" ETag ":" secret-data)"). They expire after nonceLifetimeMs; an
 * expired nonce with a correct response gets stale=true so the client retries silently with the
 * same credentials (RFC 7616 section 3.3 `stale`).
 *
 * The only state is the replay cache: per nonce, the highest nonce-count (nc) seen, so a
 * captured request cannot be replayed (RFC 7616 section 3.4, `nc`: it lets the server detect
 * replays by keeping its own copy of the count). It holds only nonces that authenticated successfully, so an
 * attacker without the password cannot fill it; it is a bounded LRU, and when it must evict a
 * live nonce it remembers the newest issue time it evicted: nonces issued up to then that it no
 * longer tracks are answered stale=true, so eviction never reopens a replay.
 *
 * verify() must see each request once: retransmissions are absorbed by the transaction layer
 * (RFC 3261 section 17.2) before the core authenticates, or a retransmitted INVITE would be
 * refused as a replay.
 *
 * Nothing here logs, and no result carries a password or H(A1).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import {
  computeDigestResponse,
  digestHexLength,
  isSessionAlgorithm,
  parseDigestAlgorithm,
  parseNonceCount,
  uriMatches,
  type DigestAlgorithm,
  type UriMatchMode,
} from './core.ts';
import { formatDigestChallenge, parseAuthHeader, toDigestCredentials, type DigestCredentials } from './params.ts';

/** A millisecond clock; injectable so tests control time. */
export interface DigestClock {
  now(): number;
}

/** Wall-clock time, so nonces stay checkable across a restart when the secret is configured. */
export const wallClock: DigestClock = { now: () => Date.now() };

export interface DigestServerOptions {
  /** The realm of every challenge (RFC 3261 section 22.1: a host or domain name is typical). */
  realm: string;
  /**
   * Key of the nonce HMAC, at least 16 bytes. Default: 32 random bytes per instance (nonces
   * then do not survive a restart; clients just get a new challenge).
   */
  secret?: string | Uint8Array;
  /** Algorithms offered, one challenge each, most preferred first (RFC 8760 section 2.4). */
  algorithms?: readonly DigestAlgorithm[];
  /** qop values offered. Default ['auth']; 'auth-int' needs verify({ body }). */
  qop?: readonly ('auth' | 'auth-int')[];
  /** How long a nonce is fresh. Default 300 s. */
  nonceLifetimeMs?: number;
  /** Accept RFC 2069 style credentials without qop (no nc: single-use nonces). Default false. */
  allowNoQop?: boolean;
  /** How the credentials' uri must match the Request-URI. Default 'equivalent'. */
  uriMatch?: UriMatchMode;
  /** Most nonces tracked for replay protection. Default 10,000. */
  replayCacheSize?: number;
  /**
   * Out-of-order nonce-counts accepted below the highest seen, each once (0..32). Default 0:
   * every nc must be greater than the last one (strict).
   */
  replayWindow?: number;
  clock?: DigestClock;
}

/** Why verification failed; stable strings for logs and metrics. */
export type DigestFailureReason =
  /** No Digest credentials at all: send a challenge. */
  | 'no_credentials'
  /** The header cannot be parsed or misses a required parameter. */
  | 'malformed'
  /** Credentials only for another realm (RFC 3261 section 22.1: challenge for ours). */
  | 'realm_mismatch'
  /** An algorithm we do not offer. */
  | 'unsupported_algorithm'
  /** No qop while qop is required, or a qop we do not offer. */
  | 'unsupported_qop'
  /** A nonce we did not issue, altered, bound to another source, or a wrong opaque. */
  | 'bad_nonce'
  /** The uri parameter does not name the Request-URI (RFC 2617 section 3.2.2.5). */
  | 'uri_mismatch'
  /** The username is unknown. */
  | 'unknown_user'
  /** The response is wrong: wrong password (or wrong username/realm/uri hashed). */
  | 'bad_response'
  /** Correct response but the nonce expired (or its replay state was evicted): stale=true. */
  | 'stale_nonce'
  /** Correct response with a nonce-count already used: a replay. */
  | 'replayed_nc';

/**
 * What the UAS should answer:
 *  - 'challenge': 401 (or 407) with fresh challenges, stale=true when `stale`.
 *  - 'forbidden': 403: the credentials are wrong (DESIGN.md: bad credentials get 403 after the
 *    challenge). Count it against the source (auth-rate-limit.ts).
 *  - 'bad_request': 400 with the reason (RFC 2617 section 3.2.2.5 for a uri mismatch; RFC
 *    3261 section 21.4.1 for a malformed header). Count it against the source too.
 */
export type DigestAction = 'challenge' | 'forbidden' | 'bad_request';

const ACTION: Record<DigestFailureReason, DigestAction> = {
  no_credentials: 'challenge',
  malformed: 'bad_request',
  realm_mismatch: 'challenge',
  unsupported_algorithm: 'challenge',
  unsupported_qop: 'challenge',
  bad_nonce: 'challenge',
  uri_mismatch: 'bad_request',
  unknown_user: 'forbidden',
  bad_response: 'forbidden',
  stale_nonce: 'challenge',
  replayed_nc: 'challenge',
};

/** The action for a failure reason (see DigestAction). */
export function digestFailureAction(reason: DigestFailureReason): DigestAction {
  return ACTION[reason];
}

/** An account found by username; `data` comes back in the result (e.g. the trunk). */
export interface DigestAccount<T> {
  password: string;
  data: T;
}

/** What a username lookup answers: its password, or an account, or undefined when unknown. */
export type DigestLookup<T> = string | DigestAccount<T> | undefined;

export interface DigestVerifyInput<T> {
  /** The method of the request line. */
  method: string;
  /** The Request-URI of the request line, as received. */
  uri: string;
  /** The Authorization (or Proxy-Authorization) values of the request; undefined when none. */
  authorization: string | readonly string[] | undefined;
  /** Looks up a username: its password, or an account, or undefined when unknown. */
  password: (username: string) => DigestLookup<T>;
  /** The message body, needed only for qop=auth-int. */
  body?: string | Uint8Array;
  /** The value the nonce was bound to in challenge() (e.g. the source address), if any. */
  binding?: string;
}

export type DigestVerifyResult<T = undefined> =
  | {
      ok: true;
      username: string;
      algorithm: DigestAlgorithm;
      /** The nonce-count accepted; undefined without qop. */
      nc: number | undefined;
      /** The account data when password() returned an account. */
      account: T | undefined;
    }
  | {
      ok: false;
      reason: DigestFailureReason;
      action: DigestAction;
      /** Re-challenge with stale=true (RFC 7616 section 3.3). */
      stale: boolean;
      /** Human-readable, safe to log (no secret). */
      detail: string;
      /** The username claimed, when the credentials parsed (not a secret; useful in logs). */
      username?: string;
      algorithm?: DigestAlgorithm;
    };

export interface ChallengeOptions {
  /** Mark the challenges stale=true (after a 'stale_nonce' or 'replayed_nc' result). */
  stale?: boolean;
  /** Bind the nonce to a value (e.g. the source address); verify() must pass the same. */
  binding?: string;
}

const NONCE_VERSION = 1;
const NONCE_BYTES = 32; // version 1 | issued-at ms 6 | random 9 | tag 16
const NONCE_SIGNED = 16;
const NONCE_B64_LENGTH = 43;
const NONCE_RE = /^[A-Za-z0-9_-]{43}$/;
/** Nonces from the future beyond this are treated as expired (clock stepped back). */
const MAX_CLOCK_SKEW_MS = 60_000;
const SWEEP_INTERVAL_MS = 1000;

function fail<T>(reason: DigestFailureReason, detail: string, extra?: { stale?: boolean; username?: string; algorithm?: DigestAlgorithm }): DigestVerifyResult<T> {
  const out: DigestVerifyResult<T> = { ok: false, reason, action: ACTION[reason], stale: extra?.stale ?? false, detail };
  if (extra?.username !== undefined) out.username = extra.username;
  if (extra?.algorithm !== undefined) out.algorithm = extra.algorithm;
  return out;
}

interface ReplayEntry {
  issuedAt: number;
  highest: number;
  /** Bit i set: nc = highest - i was seen (bit 0 is highest itself). */
  seen: number;
}

/**
 * Per-nonce highest nonce-count, a bounded LRU (Map iteration order is insertion order; a hit
 * re-inserts the entry at the end).
 */
class ReplayCache {
  readonly #entries = new Map<string, ReplayEntry>();
  /** Newest issue time of a live nonce evicted for room; untracked nonces up to it are refused. */
  #evictedUpTo = -Infinity;
  #lastSweep = -Infinity;

  constructor(
    readonly maxEntries: number,
    readonly window: number,
    readonly lifetimeMs: number,
  ) {}

  get size(): number {
    return this.#entries.size;
  }

  /**
   * Records nc for a nonce whose response verified. 'ok' when accepted, 'replay' when seen
   * before (or too far below the highest), 'evicted' when the nonce's state may have been lost.
   */
  accept(nonce: string, issuedAt: number, nc: number, now: number): 'ok' | 'replay' | 'evicted' {
    const entry = this.#entries.get(nonce);
    if (entry === undefined) {
      if (issuedAt <= this.#evictedUpTo) return 'evicted';
      this.#makeRoom(now);
      this.#entries.set(nonce, { issuedAt, highest: nc, seen: 1 });
      return 'ok';
    }
    if (nc > entry.highest) {
      const shift = nc - entry.highest;
      entry.seen = shift >= 32 ? 1 : ((entry.seen << shift) | 1) >>> 0;
      entry.highest = nc;
    } else {
      const back = entry.highest - nc;
      if (back >= this.window) return 'replay';
      const bit = (1 << back) >>> 0;
      if ((entry.seen & bit) !== 0) return 'replay';
      entry.seen = (entry.seen | bit) >>> 0;
    }
    // LRU: move to the most recently used end.
    this.#entries.delete(nonce);
    this.#entries.set(nonce, entry);
    return 'ok';
  }

  #expired(e: ReplayEntry, now: number): boolean {
    return now - e.issuedAt > this.lifetimeMs;
  }

  #makeRoom(now: number): void {
    if (this.#entries.size < this.maxEntries) return;
    // Expired entries go first: their nonces are refused as stale anyway.
    if (now - this.#lastSweep >= SWEEP_INTERVAL_MS) {
      this.#lastSweep = now;
      for (const [k, e] of this.#entries) if (this.#expired(e, now)) this.#entries.delete(k);
    }
    while (this.#entries.size >= this.maxEntries) {
      const head = this.#entries.entries().next();
      if (head.done === true) break;
      const [k, e] = head.value;
      this.#entries.delete(k);
      if (!this.#expired(e, now)) this.#evictedUpTo = Math.max(this.#evictedUpTo, e.issuedAt);
    }
  }
}

function toKey(secret: string | Uint8Array, label: string): Buffer {
  return createHmac('sha256', secret).update(label).digest();
}

/** The server side of Digest: issues challenges, verifies credentials. */
export class DigestServer {
  readonly realm: string;
  readonly algorithms: readonly DigestAlgorithm[];
  readonly qop: readonly ('auth' | 'auth-int')[];
  readonly nonceLifetimeMs: number;
  readonly allowNoQop: boolean;
  readonly uriMatch: UriMatchMode;
  readonly #clock: DigestClock;
  readonly #nonceKey: Buffer;
  readonly #opaque: string;
  readonly #replay: ReplayCache;

  /** @throws RangeError on an empty algorithm list, a short secret or an out-of-range option. */
  constructor(options: DigestServerOptions) {
    this.realm = options.realm;
    this.algorithms = Object.freeze([...(options.algorithms ?? ['SHA-256', 'MD5'])]);
    if (this.algorithms.length === 0) throw new RangeError('at least one digest algorithm must be offered');
    for (const a of this.algorithms) {
      if (parseDigestAlgorithm(a) !== a) throw new RangeError(`unknown digest algorithm ${String(a)}`);
    }
    this.qop = Object.freeze([...(options.qop ?? ['auth'])]);
    this.nonceLifetimeMs = options.nonceLifetimeMs ?? 300_000;
    if (!(this.nonceLifetimeMs > 0)) throw new RangeError('nonceLifetimeMs must be positive');
    this.allowNoQop = options.allowNoQop ?? false;
    if (this.qop.length === 0 && !this.allowNoQop) throw new RangeError('no qop offered and allowNoQop is false');
    this.uriMatch = options.uriMatch ?? 'equivalent';
    const secret = options.secret ?? randomBytes(32);
    const secretLength = typeof secret === 'string' ? Buffer.byteLength(secret) : secret.length;
    if (secretLength < 16) throw new RangeError('the digest secret must be at least 16 bytes');
    this.#nonceKey = toKey(secret, 'callbridge digest nonce v1');
    this.#opaque = createHmac('sha256', toKey(secret, 'callbridge digest opaque v1'))
      .update(this.realm)
      .digest()
      .subarray(0, 12)
      .toString('base64url');
    const size = options.replayCacheSize ?? 10_000;
    const window = options.replayWindow ?? 0;
    if (!Number.isInteger(size) || size < 1) throw new RangeError('replayCacheSize must be a positive integer');
    if (!Number.isInteger(window) || window < 0 || window > 32) throw new RangeError('replayWindow must be 0..32');
    this.#replay = new ReplayCache(size, window, this.nonceLifetimeMs);
    this.#clock = options.clock ?? wallClock;
  }

  /** How many nonces the replay cache tracks now (bounded by replayCacheSize). */
  get trackedNonces(): number {
    return this.#replay.size;
  }

  /**
   * The values of the WWW-Authenticate (or Proxy-Authenticate) header fields of a 401 (407):
   * one per offered algorithm, most preferred first, all with the same fresh nonce (RFC 8760
   * section 2.4; RFC 3261 section 7.3.1: one challenge per header field).
   */
  challenge(options: ChallengeOptions = {}): string[] {
    const nonce = this.#issueNonce(options.binding ?? '');
    const qop = this.qop.length > 0 ? this.qop : undefined;
    return this.algorithms.map((algorithm) =>
      formatDigestChallenge({ realm: this.realm, nonce, opaque: this.#opaque, algorithm, qop, stale: options.stale === true }),
    );
  }

  /**
   * Verifies the credentials of a request. Never throws on peer input (an exception thrown by
   * the caller's password() lookup propagates).
   */
  verify<T = undefined>(input: DigestVerifyInput<T>): DigestVerifyResult<T> {
    const picked = this.#pickCredentials(input.authorization);
    if (!picked.ok) return fail(picked.reason, picked.detail);
    const cred = picked.cred;
    const username = cred.username;

    // Algorithm and qop (RFC 7616 section 3.4; RFC 8760 section 2.4).
    const algorithm = parseDigestAlgorithm(cred.algorithm);
    if (algorithm === undefined || !this.algorithms.includes(algorithm)) {
      return fail('unsupported_algorithm', `algorithm ${cred.algorithm ?? 'MD5'} not offered`, { username });
    }
    const ctx = { username, algorithm };
    if (cred.userhash) return fail('malformed', 'userhash was not offered', ctx);
    let nc: number | undefined;
    if (cred.qop === undefined) {
      if (!this.allowNoQop) return fail('unsupported_qop', 'qop is required', ctx);
      if (isSessionAlgorithm(algorithm) && cred.cnonce === undefined) return fail('malformed', `${algorithm} without cnonce`, ctx);
    } else {
      if (!(this.qop as readonly string[]).includes(cred.qop)) return fail('unsupported_qop', `qop ${cred.qop} not offered`, ctx);
      nc = parseNonceCount(cred.nc ?? '');
      if (nc === undefined) return fail('malformed', 'bad nc', ctx);
    }
    const response = cred.response.toLowerCase();
    if (response.length !== digestHexLength(algorithm) || !/^[0-9a-f]+$/.test(response)) {
      return fail('malformed', `response is not ${digestHexLength(algorithm)} hex digits`, ctx);
    }

    // The nonce is ours and unaltered (freshness is checked after the response, see below).
    const issuedAt = this.#checkNonce(cred.nonce, input.binding ?? '');
    if (issuedAt === undefined) return fail('bad_nonce', 'nonce not issued by this server', ctx);
    if (cred.opaque !== undefined && cred.opaque !== this.#opaque) return fail('bad_nonce', 'opaque mismatch', ctx);

    // RFC 2617 section 3.2.2.5: the uri names the resource of the request line.
    if (!uriMatches(this.uriMatch, cred.uri, input.uri)) return fail('uri_mismatch', 'uri parameter does not match the Request-URI', ctx);

    const found = input.password(username);
    const password = typeof found === 'string' ? found : found?.password;
    const responseInput = {
      algorithm,
      username,
      realm: cred.realm,
      password: password ?? '',
      method: input.method,
      uri: cred.uri,
      nonce: cred.nonce,
      qop: cred.qop,
      nc: cred.nc,
      cnonce: cred.cnonce,
      body: input.body,
    };
    const expected = Buffer.from(computeDigestResponse(responseInput), 'latin1');
    if (password === undefined) return fail('unknown_user', 'unknown username', ctx); // computed anyway: same timing
    if (!timingSafeEqual(expected, Buffer.from(response, 'latin1'))) return fail('bad_response', 'wrong response', ctx);

    // The client knows the password. RFC 7616 section 3.3: stale only now, "with a valid digest".
    const now = this.#clock.now();
    const age = now - issuedAt;
    if (age > this.nonceLifetimeMs || age < -MAX_CLOCK_SKEW_MS) return fail('stale_nonce', 'nonce expired', { ...ctx, stale: true });

    // Replay protection, recorded only after the response verified so that forged requests
    // cannot poison a nonce's count. Without qop the nonce is single-use (count 1).
    const verdict = this.#replay.accept(cred.nonce, issuedAt, nc ?? 1, now);
    if (verdict === 'evicted') return fail('stale_nonce', 'nonce no longer tracked for replay', { ...ctx, stale: true });
    if (verdict === 'replay') return fail('replayed_nc', `nonce-count ${cred.nc ?? '(none)'} already used`, { ...ctx, stale: true });

    const account = found !== undefined && typeof found !== 'string' ? found.data : undefined;
    return { ok: true, username, algorithm, nc, account };
  }

  /**
   * verify() with a password lookup that may be asynchronous (a store on the network): the
   * username the credentials claim is looked up first, then verify() runs with the answer.
   * Rejects when the lookup does; never on peer input.
   */
  async verifyAsync<T = undefined>(
    input: Omit<DigestVerifyInput<T>, 'password'> & { password: (username: string) => DigestLookup<T> | Promise<DigestLookup<T>> },
  ): Promise<DigestVerifyResult<T>> {
    const picked = this.#pickCredentials(input.authorization);
    const found = picked.ok ? await input.password(picked.cred.username) : undefined;
    return this.verify({ ...input, password: () => found });
  }

  #issueNonce(binding: string): string {
    const buf = Buffer.alloc(NONCE_BYTES);
    buf[0] = NONCE_VERSION;
    const ts = Math.min(Math.max(0, Math.floor(this.#clock.now())), 2 ** 48 - 1);
    buf.writeUIntBE(ts, 1, 6);
    randomBytes(9).copy(buf, 7);
    this.#tag(buf.subarray(0, NONCE_SIGNED), binding).copy(buf, NONCE_SIGNED);
    return buf.toString('base64url');
  }

  #tag(signed: Uint8Array, binding: string): Buffer {
    return createHmac('sha256', this.#nonceKey)
      .update(`${this.realm}\0${binding}\0`)
      .update(signed)
      .digest()
      .subarray(0, NONCE_BYTES - NONCE_SIGNED);
  }

  /** The issue time of a nonce this server made (for this realm and binding), else undefined. */
  #checkNonce(nonce: string, binding: string): number | undefined {
    if (nonce.length !== NONCE_B64_LENGTH || !NONCE_RE.test(nonce)) return undefined;
    const buf = Buffer.from(nonce, 'base64url');
    // Canonical encoding only: the 2 spare bits of the last character must be zero, or two
    // strings would name one nonce.
    if (buf.length !== NONCE_BYTES || buf.toString('base64url') !== nonce || buf[0] !== NONCE_VERSION) return undefined;
    const tag = this.#tag(buf.subarray(0, NONCE_SIGNED), binding);
    if (!timingSafeEqual(tag, buf.subarray(NONCE_SIGNED))) return undefined;
    return buf.readUIntBE(1, 6);
  }

  #pickCredentials(
    authorization: string | readonly string[] | undefined,
  ): { ok: true; cred: DigestCredentials } | { ok: false; reason: DigestFailureReason; detail: string } {
    const values = authorization === undefined ? [] : typeof authorization === 'string' ? [authorization] : authorization;
    let malformed: string | undefined;
    let otherRealm: string | undefined;
    for (const value of values) {
      if (typeof value !== 'string') continue;
      const parsed = parseAuthHeader(value);
      if (!parsed.ok) {
        malformed ??= parsed.error;
        continue;
      }
      for (const c of parsed.value) {
        if (c.scheme.toLowerCase() !== 'digest') continue;
        const realm = c.params.get('realm');
        if (realm !== undefined && realm !== this.realm) {
          otherRealm ??= realm;
          continue;
        }
        const cred = toDigestCredentials(c);
        if (!cred.ok) {
          malformed ??= cred.error;
          continue;
        }
        return { ok: true, cred: cred.value };
      }
    }
    if (malformed !== undefined) return { ok: false, reason: 'malformed', detail: malformed };
    if (otherRealm !== undefined) return { ok: false, reason: 'realm_mismatch', detail: `credentials for realm ${JSON.stringify(otherRealm)}` };
    return { ok: false, reason: 'no_credentials', detail: 'no Digest credentials' };
  }
}
