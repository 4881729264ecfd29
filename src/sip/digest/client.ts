/**
 * Digest credentials for outbound requests (the UAC side, RFC 3261 section 22.2 / 22.3,
 * RFC 7616 section 3.4, RFC 8760).
 *
 *   const client = new DigestClient({ username, password });
 *   // a 401 (407) came back for a request:
 *   const r = client.respond({
 *     challenges: response.headers('WWW-Authenticate'),   // or Proxy-Authenticate for 407
 *     method: 'INVITE',
 *     uri: requestUriAsSent,            // e.g. 'sip:+15551234@203.0.113.5:5080;transport=tcp'
 *     previous: request.headers('Authorization'),         // what the challenged request carried
 *   });
 *   if (!r.ok) give up (r.reason 'rejected': wrong credentials; do not loop)
 *   else resend with CSeq + 1 and one Authorization (Proxy-Authorization) per r.authorizations
 *
 * Choices:
 *  - Among several challenges of a realm, the strongest algorithm we support wins
 *    (SHA-512-256 > SHA-256 > MD5). RFC 8760 section 2.4 says the UAC SHOULD use the topmost
 *    supported header field "unless a local policy dictates otherwise"; servers list the
 *    strongest first, so the two agree in practice, and a server that lists MD5 first does not
 *    downgrade us.
 *  - qop=auth when offered, else auth-int (with the body), else RFC 2069 style (no qop).
 *  - The `uri` parameter is exactly the Request-URI string given (port, transport and every
 *    other parameter included): a strict carrier compares it with its Request-URI and would
 *    otherwise answer 401 again.
 *  - The nonce-count counts up per nonce across requests that reuse it (RFC 7616 section 3.4:
 *    "nc ... count of the number of requests ... that the client has sent with the nonce").
 *  - A fresh random cnonce per request.
 *  - Credentials were rejected when the request that got the challenge already carried our
 *    credentials for that realm, and the new challenge is not stale=true, or repeats the nonce
 *    we answered (RFC 7616 section 3.3: without stale, "the username and/or password are
 *    invalid"). Then respond() fails with 'rejected' so the UAC gives up instead of looping.
 *
 * Nothing here logs, and no result carries the password or H(A1).
 */
import { randomBytes } from 'node:crypto';
import {
  computeDigestResponse,
  DIGEST_ALGORITHM_STRENGTH,
  formatNonceCount,
  parseDigestAlgorithm,
  type DigestAlgorithm,
} from './core.ts';
import { formatDigestCredentials, parseAuthHeader, parseDigestChallenges, type DigestChallenge } from './params.ts';

export interface DigestClientOptions {
  username: string;
  password: string;
  /** Algorithms we accept, most preferred first. Default: all, strongest first. */
  algorithms?: readonly DigestAlgorithm[];
  /** Answer only challenges of these realms (default: any realm). */
  realms?: readonly string[];
  /** Makes a client nonce; default 16 random bytes in hex. Injectable for tests. */
  cnonce?: () => string;
  /** Most nonces whose count is remembered. Default 32. */
  maxNonces?: number;
}

/** One Authorization (or Proxy-Authorization) value, with what it was computed from. */
export interface DigestAuthorization {
  /** The header value: `Digest username="...", ...`. */
  value: string;
  realm: string;
  algorithm: DigestAlgorithm;
  nonce: string;
  /** The nonce-count sent; undefined without qop. */
  nc: number | undefined;
  qop: 'auth' | 'auth-int' | undefined;
}

/** Why no credentials were produced. */
export type DigestClientFailureReason =
  /** The server refused our credentials for this realm: give up (wrong username/password). */
  | 'rejected'
  /** No Digest challenge we can answer (unknown algorithms or qop, other realms, malformed). */
  | 'no_usable_challenge';

export type DigestRespondResult =
  | { ok: true; authorizations: DigestAuthorization[] }
  | { ok: false; reason: DigestClientFailureReason; detail: string; realm?: string };

export interface DigestRespondInput {
  /** The WWW-Authenticate (for 401) or Proxy-Authenticate (for 407) values of the response. */
  challenges: string | readonly string[];
  /** The method of the request being resent. */
  method: string;
  /** The Request-URI exactly as it is sent; becomes the `uri` parameter unchanged. */
  uri: string;
  /** The body, needed only for qop=auth-int. */
  body?: string | Uint8Array;
  /**
   * The Authorization (Proxy-Authorization) values the challenged request carried, if any:
   * how the client tells a stale nonce from rejected credentials.
   */
  previous?: string | readonly string[];
}

export interface DigestRequestInput {
  method: string;
  uri: string;
  body?: string | Uint8Array;
}

/** The header field that carries credentials for a challenge status (RFC 3261 section 22.2 / 22.3). */
export function authorizationHeaderName(status: 401 | 407): 'Authorization' | 'Proxy-Authorization' {
  return status === 407 ? 'Proxy-Authorization' : 'Authorization';
}

/** The header field that carries challenges for a status (RFC 3261 section 20.44 / 20.27). */
export function challengeHeaderName(status: 401 | 407): 'WWW-Authenticate' | 'Proxy-Authenticate' {
  return status === 407 ? 'Proxy-Authenticate' : 'WWW-Authenticate';
}

function chooseQop(offered: readonly string[]): 'auth' | 'auth-int' | undefined | null {
  if (offered.length === 0) return undefined; // RFC 2069 style
  if (offered.includes('auth')) return 'auth';
  if (offered.includes('auth-int')) return 'auth-int';
  return null; // only qop values we do not know
}

/** The realm and nonce of each Digest credentials in header values (unparsable ones skipped). */
function previousNonces(values: string | readonly string[] | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (values === undefined) return out;
  for (const v of typeof values === 'string' ? [values] : values) {
    const parsed = parseAuthHeader(v);
    if (!parsed.ok) continue;
    for (const c of parsed.value) {
      if (c.scheme.toLowerCase() !== 'digest') continue;
      const realm = c.params.get('realm');
      const nonce = c.params.get('nonce');
      if (realm !== undefined && nonce !== undefined && !out.has(realm)) out.set(realm, nonce);
    }
  }
  return out;
}

/** The client side of Digest, for one set of credentials (e.g. one trunk's outbound account). */
export class DigestClient {
  readonly username: string;
  readonly #password: string;
  readonly #algorithms: readonly DigestAlgorithm[];
  readonly #realms: ReadonlySet<string> | undefined;
  readonly #cnonce: () => string;
  readonly #maxNonces: number;
  /** Nonce-count per nonce, LRU-bounded. */
  readonly #counts = new Map<string, number>();
  /** The last challenge answered per realm, for preemptive credentials (RFC 3261 section 22.3). */
  readonly #lastChallenge = new Map<string, { challenge: DigestChallenge; algorithm: DigestAlgorithm }>();

  /** @throws RangeError on an empty or unknown algorithm list or a bad maxNonces. */
  constructor(options: DigestClientOptions) {
    this.username = options.username;
    this.#password = options.password;
    this.#algorithms = Object.freeze([...(options.algorithms ?? DIGEST_ALGORITHM_STRENGTH)]);
    if (this.#algorithms.length === 0) throw new RangeError('at least one digest algorithm is needed');
    for (const a of this.#algorithms) {
      if (parseDigestAlgorithm(a) !== a) throw new RangeError(`unknown digest algorithm ${String(a)}`);
    }
    this.#realms = options.realms === undefined ? undefined : new Set(options.realms);
    this.#cnonce = options.cnonce ?? (() => randomBytes(16).toString('hex'));
    this.#maxNonces = options.maxNonces ?? 32;
    if (!Number.isInteger(this.#maxNonces) || this.#maxNonces < 1) throw new RangeError('maxNonces must be a positive integer');
  }

  /** Does not print the password. */
  toJSON(): { username: string } {
    return { username: this.username };
  }

  /**
   * Credentials answering a 401/407: one per challenged realm we can answer.
   * Never throws on peer input.
   * @throws TypeError when method or uri (caller input) holds a control character.
   */
  respond(input: DigestRespondInput): DigestRespondResult {
    const { challenges, errors } = parseDigestChallenges(input.challenges);
    const previous = previousNonces(input.previous);

    // Per realm (in order of first appearance), the strongest usable challenge.
    const best = new Map<string, { challenge: DigestChallenge; algorithm: DigestAlgorithm; rank: number }>();
    const skipped: string[] = [...errors];
    for (const challenge of challenges) {
      if (this.#realms !== undefined && !this.#realms.has(challenge.realm)) {
        skipped.push(`realm ${JSON.stringify(challenge.realm)} not ours`);
        continue;
      }
      const algorithm = parseDigestAlgorithm(challenge.algorithm);
      const rank = algorithm === undefined ? -1 : this.#algorithms.indexOf(algorithm);
      if (algorithm === undefined || rank < 0) {
        skipped.push(`algorithm ${challenge.algorithm} not supported`);
        continue;
      }
      if (chooseQop(challenge.qop) === null) {
        skipped.push(`qop ${challenge.qop.join(',')} not supported`);
        continue;
      }
      const current = best.get(challenge.realm);
      if (current === undefined || rank < current.rank) best.set(challenge.realm, { challenge, algorithm, rank });
    }
    if (best.size === 0) {
      return { ok: false, reason: 'no_usable_challenge', detail: skipped.length > 0 ? skipped.join('; ') : 'no Digest challenge' };
    }

    // Loop protection (RFC 7616 section 3.3 `stale`).
    for (const [realm, { challenge }] of best) {
      const answered = previous.get(realm);
      if (answered === undefined) continue;
      if (answered === challenge.nonce) {
        return { ok: false, reason: 'rejected', detail: 'challenged again with the nonce already answered', realm };
      }
      if (!challenge.stale) return { ok: false, reason: 'rejected', detail: 'credentials refused (challenge not stale)', realm };
    }

    const authorizations: DigestAuthorization[] = [];
    for (const [realm, { challenge, algorithm }] of best) {
      const auth = this.#authorize(challenge, algorithm, input);
      if (auth === undefined) return { ok: false, reason: 'no_usable_challenge', detail: 'nonce-count exhausted', realm };
      this.#lastChallenge.delete(realm);
      this.#lastChallenge.set(realm, { challenge, algorithm });
      if (this.#lastChallenge.size > this.#maxNonces) {
        const oldest = this.#lastChallenge.keys().next();
        if (oldest.done !== true) this.#lastChallenge.delete(oldest.value);
      }
      authorizations.push(auth);
    }
    return { ok: true, authorizations };
  }

  /**
   * Credentials for a new request reusing the last nonce of each realm answered before, with the
   * next nonce-count (RFC 3261 section 22.3: UAs SHOULD cache credentials and reuse them; RFC
   * 7616 section 3.4 nc). Empty when nothing was answered yet. If the server then challenges the
   * request, pass these values as `previous` to respond().
   * @throws TypeError when method or uri holds a control character.
   */
  preemptive(input: DigestRequestInput): DigestAuthorization[] {
    const out: DigestAuthorization[] = [];
    for (const { challenge, algorithm } of this.#lastChallenge.values()) {
      const auth = this.#authorize(challenge, algorithm, input);
      if (auth !== undefined) out.push(auth);
    }
    return out;
  }

  /** Forgets cached nonces and counts (e.g. after the trunk's credentials change). */
  reset(): void {
    this.#counts.clear();
    this.#lastChallenge.clear();
  }

  #nextCount(nonce: string): number | undefined {
    const n = (this.#counts.get(nonce) ?? 0) + 1;
    if (n > 0xffffffff) return undefined;
    this.#counts.delete(nonce);
    this.#counts.set(nonce, n);
    if (this.#counts.size > this.#maxNonces) {
      const oldest = this.#counts.keys().next();
      if (oldest.done !== true) this.#counts.delete(oldest.value);
    }
    return n;
  }

  #authorize(challenge: DigestChallenge, algorithm: DigestAlgorithm, input: DigestRequestInput): DigestAuthorization | undefined {
    const qop = chooseQop(challenge.qop);
    if (qop === null) return undefined;
    let nc: number | undefined;
    let cnonce: string | undefined;
    if (qop !== undefined) {
      nc = this.#nextCount(challenge.nonce);
      if (nc === undefined) return undefined;
      cnonce = this.#cnonce();
    } else if (algorithm.endsWith('-sess')) {
      cnonce = this.#cnonce();
    }
    const ncText = nc === undefined ? undefined : formatNonceCount(nc);
    const response = computeDigestResponse({
      algorithm,
      username: this.username,
      realm: challenge.realm,
      password: this.#password,
      method: input.method,
      uri: input.uri,
      nonce: challenge.nonce,
      qop,
      nc: ncText,
      cnonce,
      body: input.body,
    });
    const value = formatDigestCredentials({
      username: this.username,
      realm: challenge.realm,
      nonce: challenge.nonce,
      uri: input.uri,
      response,
      // Echo the algorithm as the server spelled it; omit it when the challenge did (MD5).
      algorithm: challenge.params.get('algorithm') === undefined ? undefined : challenge.algorithm.trim(),
      cnonce,
      opaque: challenge.opaque,
      qop,
      nc: ncText,
    });
    return { value, realm: challenge.realm, algorithm, nonce: challenge.nonce, nc, qop };
  }
}

export interface AuthorizeInput extends DigestRespondInput {
  username: string;
  password: string;
}

/**
 * One-shot form of DigestClient.respond(): the credentials answering a 401/407 with nc=1 (no
 * state kept). Use a DigestClient per account to reuse nonces across requests.
 * @throws TypeError when method or uri holds a control character.
 */
export function authorize(input: AuthorizeInput): DigestRespondResult {
  return new DigestClient({ username: input.username, password: input.password }).respond(input);
}
