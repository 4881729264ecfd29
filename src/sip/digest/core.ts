/**
 * The Digest computation shared by the server (UAS) and client (UAC) sides.
 *
 * RFC 7616 section 3.4.1 (and RFC 2617 section 3.2.2.1, RFC 3261 section 22.4, RFC 8760
 * section 2):
 *   response = KD(H(A1), unq(nonce) ":" nc ":" unq(cnonce) ":" unq(qop) ":" H(A2))   with qop
 *   response = KD(H(A1), unq(nonce) ":" H(A2))                                      RFC 2069
 *   KD(secret, data) = H(secret ":" data)
 * RFC 7616 section 3.4.2:
 *   A1 = unq(username) ":" unq(realm) ":" passwd
 *   A1 = H(unq(username) ":" unq(realm) ":" passwd) ":" unq(nonce) ":" unq(cnonce)   (-sess)
 * RFC 7616 section 3.4.3:
 *   A2 = Method ":" request-uri                                                     (auth)
 *   A2 = Method ":" request-uri ":" H(entity-body)                                  (auth-int)
 * where request-uri is the `uri` parameter as sent, not the Request-URI of the request (the
 * server checks separately that both name the same resource, see uriMatches()).
 *
 * H is hex-encoded lower case (RFC 7616 section 3.4.1 "LHEX"). Strings are hashed as UTF-8.
 */
import { createHash } from 'node:crypto';

/** The algorithms of the IANA "HTTP Digest Algorithm Values" registry that SIP uses (RFC 8760 section 2.3). */
export const DIGEST_ALGORITHMS = ['MD5', 'MD5-sess', 'SHA-256', 'SHA-256-sess', 'SHA-512-256', 'SHA-512-256-sess'] as const;
export type DigestAlgorithm = (typeof DIGEST_ALGORITHMS)[number];

/** Strongest first: the order a client prefers when several challenges are offered. */
export const DIGEST_ALGORITHM_STRENGTH: readonly DigestAlgorithm[] = Object.freeze([
  'SHA-512-256',
  'SHA-512-256-sess',
  'SHA-256',
  'SHA-256-sess',
  'MD5',
  'MD5-sess',
]);

const NODE_HASH: Record<DigestAlgorithm, string> = {
  MD5: 'md5',
  'MD5-sess': 'md5',
  'SHA-256': 'sha256',
  'SHA-256-sess': 'sha256',
  'SHA-512-256': 'sha512-256',
  'SHA-512-256-sess': 'sha512-256',
};

/** Hex length of a response for each algorithm (32 for MD5, 64 for the SHA-2 family). */
export function digestHexLength(algorithm: DigestAlgorithm): number {
  return algorithm.startsWith('MD5') ? 32 : 64;
}

/**
 * The algorithm named by a challenge or credentials parameter, matched case-insensitively;
 * absent means MD5 (RFC 7616 section 3.3). undefined when not one we implement.
 */
export function parseDigestAlgorithm(name: string | undefined): DigestAlgorithm | undefined {
  if (name === undefined) return 'MD5';
  const lower = name.trim().toLowerCase();
  return DIGEST_ALGORITHMS.find((a) => a.toLowerCase() === lower);
}

/** Whether the algorithm is a "-sess" variant (RFC 7616 section 3.4.2). */
export function isSessionAlgorithm(algorithm: DigestAlgorithm): boolean {
  return algorithm.endsWith('-sess');
}

function hash(algorithm: DigestAlgorithm, data: string | Uint8Array): string {
  return createHash(NODE_HASH[algorithm]).update(data).digest('hex');
}

/** Everything a response depends on. */
export interface DigestResponseInput {
  algorithm: DigestAlgorithm;
  username: string;
  realm: string;
  password: string;
  /** The request method (for SIP: the method of the request line, RFC 3261 section 22.4). */
  method: string;
  /** The `uri` parameter value, exactly as sent. */
  uri: string;
  nonce: string;
  /** 'auth' or 'auth-int'; undefined for RFC 2069 style (no cnonce, no nc). */
  qop?: string;
  /** The nonce-count as sent (8LHEX), with a qop. */
  nc?: string;
  /** The client nonce, with a qop or a -sess algorithm. */
  cnonce?: string;
  /** The message body, for qop=auth-int (RFC 7616 section 3.4.3); empty when absent. */
  body?: string | Uint8Array;
}

/**
 * Computes the request-digest (the `response` parameter) in lower-case hex.
 * The password and H(A1) stay inside this function: neither is returned nor logged.
 * @throws TypeError when a -sess algorithm has no cnonce, a qop has no nc/cnonce, or the qop is
 *   neither auth nor auth-int.
 */
export function computeDigestResponse(input: DigestResponseInput): string {
  const { algorithm } = input;
  let ha1 = hash(algorithm, `${input.username}:${input.realm}:${input.password}`);
  if (isSessionAlgorithm(algorithm)) {
    if (input.cnonce === undefined) throw new TypeError(`${algorithm} needs a cnonce`);
    ha1 = hash(algorithm, `${ha1}:${input.nonce}:${input.cnonce}`);
  }
  let a2: string;
  if (input.qop === undefined || input.qop === 'auth') {
    a2 = `${input.method}:${input.uri}`;
  } else if (input.qop === 'auth-int') {
    a2 = `${input.method}:${input.uri}:${hash(algorithm, input.body ?? '')}`;
  } else {
    throw new TypeError(`unsupported qop ${input.qop}`);
  }
  const ha2 = hash(algorithm, a2);
  if (input.qop === undefined) return hash(algorithm, `${ha1}:${input.nonce}:${ha2}`);
  if (input.nc === undefined || input.cnonce === undefined) throw new TypeError('qop needs nc and cnonce');
  return hash(algorithm, `${ha1}:${input.nonce}:${input.nc}:${input.cnonce}:${input.qop}:${ha2}`);
}

/** Formats a nonce-count as 8LHEX (RFC 7616 section 3.4: "nc=00000001"). */
export function formatNonceCount(n: number): string {
  return n.toString(16).padStart(8, '0');
}

/** Parses a nonce-count (1 to 8 hex digits, liberal in case); undefined when not one or zero. */
export function parseNonceCount(s: string): number | undefined {
  if (!/^[0-9a-fA-F]{1,8}$/.test(s)) return undefined;
  const n = Number.parseInt(s, 16);
  return n > 0 ? n : undefined;
}

// ---------------------------------------------------------------------------------------------
// URI comparison (RFC 2617 section 3.2.2.5, RFC 3261 section 19.1.4)

/**
 * How the server compares the credentials' `uri` with the Request-URI:
 *  - 'exact': the same string.
 *  - 'equivalent' (default): the same string, or equivalent SIP/SIPS URIs under RFC 3261
 *    section 19.1.4 (case-insensitive scheme, host and parameters, parameter order ignored,
 *    escapes of unreserved characters equal to the characters).
 *  - 'off': not compared (only for a deployment where a proxy in front rewrites the
 *    Request-URI; the response still covers the uri the client sent).
 */
export type UriMatchMode = 'exact' | 'equivalent' | 'off';

// RFC 3261 section 25.1: reserved = ";" / "/" / "?" / ":" / "@" / "&" / "=" / "+" / "$" / ","
const RESERVED = new Set([';', '/', '?', ':', '@', '&', '=', '+', '$', ',']);

/** Decodes %HH escapes of unreserved characters and upper-cases the hex of the rest. */
function normalizeEscapes(s: string): string {
  return s.replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => {
    const code = Number.parseInt(hex, 16);
    const ch = String.fromCharCode(code);
    if (code < 0x21 || code > 0x7e || RESERVED.has(ch) || ch === '%') return '%' + hex.toUpperCase();
    return ch;
  });
}

interface LooseSipUri {
  scheme: string;
  userinfo: string | undefined;
  hostport: string;
  params: Map<string, string>;
  headers: Map<string, string>;
}

/** A light parse of a SIP or SIPS URI, enough for RFC 3261 section 19.1.4; undefined if not one. */
function parseLooseSipUri(s: string): LooseSipUri | undefined {
  const colon = s.indexOf(':');
  if (colon <= 0) return undefined;
  const scheme = s.slice(0, colon).toLowerCase();
  if (scheme !== 'sip' && scheme !== 'sips') return undefined;
  let rest = s.slice(colon + 1);
  let userinfo: string | undefined;
  // No '@' may appear unescaped in parameters or headers (RFC 3261 section 25.1), so the first
  // '@' ends the userinfo.
  const at = rest.indexOf('@');
  if (at >= 0) {
    userinfo = normalizeEscapes(rest.slice(0, at));
    rest = rest.slice(at + 1);
  }
  const q = rest.indexOf('?');
  const headerPart = q >= 0 ? rest.slice(q + 1) : '';
  if (q >= 0) rest = rest.slice(0, q);
  const [hostport = '', ...paramList] = rest.split(';');
  if (hostport === '') return undefined;
  const params = new Map<string, string>();
  for (const p of paramList) {
    if (p === '') continue;
    const eq = p.indexOf('=');
    const name = normalizeEscapes(eq >= 0 ? p.slice(0, eq) : p).toLowerCase();
    const value = eq >= 0 ? normalizeEscapes(p.slice(eq + 1)).toLowerCase() : '';
    if (params.has(name)) return undefined;
    params.set(name, value);
  }
  const headers = new Map<string, string>();
  if (headerPart !== '') {
    for (const h of headerPart.split('&')) {
      const eq = h.indexOf('=');
      const name = normalizeEscapes(eq >= 0 ? h.slice(0, eq) : h).toLowerCase();
      const value = eq >= 0 ? normalizeEscapes(h.slice(eq + 1)) : '';
      if (headers.has(name)) return undefined;
      headers.set(name, value);
    }
  }
  return { scheme, userinfo, hostport: normalizeEscapes(hostport).toLowerCase(), params, headers };
}

/**
 * Whether two SIP/SIPS URIs are equivalent under RFC 3261 section 19.1.4. Other schemes (tel:,
 * ...) compare equal only as the same string with the scheme case-insensitive.
 */
export function sipUrisEquivalent(a: string, b: string): boolean {
  if (a === b) return true;
  const ua = parseLooseSipUri(a);
  const ub = parseLooseSipUri(b);
  if (ua === undefined || ub === undefined) {
    if (ua !== undefined || ub !== undefined) return false;
    const ca = a.indexOf(':');
    const cb = b.indexOf(':');
    return ca > 0 && cb > 0 && a.slice(0, ca).toLowerCase() === b.slice(0, cb).toLowerCase() && a.slice(ca) === b.slice(cb);
  }
  // SIP and SIPS never match; userinfo is case-sensitive; host and port must match, and an
  // omitted port does not match an explicit default one.
  if (ua.scheme !== ub.scheme || ua.userinfo !== ub.userinfo || ua.hostport !== ub.hostport) return false;
  // Parameters in both must match; user, ttl, method and maddr must be in both or neither;
  // any other parameter in only one is ignored.
  for (const [name, value] of ua.params) {
    const other = ub.params.get(name);
    if (other === undefined) {
      if (name === 'user' || name === 'ttl' || name === 'method' || name === 'maddr') return false;
    } else if (other !== value) {
      return false;
    }
  }
  for (const name of ['user', 'ttl', 'method', 'maddr']) {
    if (ub.params.has(name) && !ua.params.has(name)) return false;
  }
  // Headers are never ignored: the same set, equal values.
  if (ua.headers.size !== ub.headers.size) return false;
  for (const [name, value] of ua.headers) if (ub.headers.get(name) !== value) return false;
  return true;
}

/** Compares the credentials' uri with the Request-URI under a mode (see UriMatchMode). */
export function uriMatches(mode: UriMatchMode, credentialsUri: string, requestUri: string): boolean {
  if (mode === 'off') return true;
  if (credentialsUri === requestUri) return true;
  return mode === 'equivalent' && sipUrisEquivalent(credentialsUri, requestUri);
}
