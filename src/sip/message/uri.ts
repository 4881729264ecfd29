/**
 * SIP and SIPS URIs (RFC 3261 19.1, grammar in 25.1), tel URIs (RFC 3966, passed through) and
 * any other absolute URI (kept opaque, so a Request-URI of an unknown scheme parses and the UA
 * can answer 416, RFC 3261 8.2.2.1 / RFC 4475 3.3.2).
 *
 *   sip:user:password@host:port;uri-parameters?headers
 *   sips:alice@[2001:db8::1]:5061;transport=tcp;lr?Subject=hi&Priority=urgent
 *
 * User, password, parameter names and values and header names and values are stored with their
 * % escapes resolved ("%75se%72" is "user", RFC 4475 3.1.1.3) and escaped again on output with
 * exactly the characters the grammar requires, so a URI survives parse -> toString -> parse with
 * the same meaning (not always the same spelling). An IPv6 host is stored without its brackets.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { SipParseError } from './errors.ts';
import {
  C_HNV,
  C_HOST,
  C_PARAM,
  C_PASSWORD,
  C_USER,
  escapePct,
  isClass,
  Params,
  scanClass,
  syntaxError,
  unescapePct,
} from './syntax.ts';

/** URI parameters: names and values unescaped; serialized with % escapes (RFC 3261 25.1 paramchar). */
export class UriParams extends Params {
  /** Anything can be escaped, so only an empty name is refused. */
  protected override check(name: string): void {
    if (name.length === 0) throw new TypeError('empty URI parameter name');
  }

  override toString(): string {
    let out = '';
    for (let i = 0; i < this.size; i++) {
      const v = this.valueAt(i);
      const n = escapePct(this.nameAt(i), C_PARAM);
      out += v === null || v === undefined ? `;${n}` : `;${n}=${escapePct(v, C_PARAM)}`;
    }
    return out;
  }
}

/** Passed by the parser, which has validated the parts, to skip the constructor's checks. */
const TRUSTED: unique symbol = Symbol('trusted');

export interface SipUriInit {
  scheme?: 'sip' | 'sips';
  user?: string;
  password?: string;
  host: string;
  port?: number;
  params?: Record<string, string | null>;
  headers?: [string, string][];
}

/** sip: / sips: URI. */
export class SipUri {
  readonly kind = 'sip' as const;
  scheme: 'sip' | 'sips';
  /** Unescaped user part ("alice", "+15551234567", "user;par=u@example.net"); undefined when absent. */
  user: string | undefined;
  /** Unescaped password (deprecated by RFC 3261 19.1.1, parsed for completeness). */
  password: string | undefined;
  /** Host name, IPv4 address, or IPv6 address without brackets. */
  host: string;
  /** Port; undefined when the URI names none (not the same as 5060, RFC 3261 19.1.4). */
  port: number | undefined;
  readonly params = new UriParams();
  /** Header components (`?name=value&...`), unescaped, in order. */
  headers: [string, string][] = [];

  /**
   * @throws TypeError when the host is empty or contains characters no host may contain.
   * @throws RangeError when the port is not an integer in 0..65535.
   */
  constructor(init: SipUriInit, trusted?: typeof TRUSTED) {
    this.scheme = init.scheme ?? 'sip';
    this.user = init.user;
    this.password = init.password;
    if (trusted === TRUSTED) {
      // The parser has checked host and port already.
      this.host = init.host;
      this.port = init.port;
      return;
    }
    if (!validHost(init.host)) throw new TypeError(`invalid host "${init.host}"`);
    this.host = stripBrackets(init.host);
    if (init.port !== undefined && !(Number.isInteger(init.port) && init.port >= 0 && init.port <= 65535)) {
      throw new RangeError(`invalid port ${init.port}`);
    }
    this.port = init.port;
    if (init.params) for (const [k, v] of Object.entries(init.params)) this.params.set(k, v);
    if (init.headers) this.headers = init.headers.map(([n, v]) => [n, v]);
  }

  /** `transport` parameter, lower-cased ("udp", "tcp", "tls", "ws"...). */
  get transport(): string | undefined {
    const v = this.params.get('transport');
    return typeof v === 'string' ? v.toLowerCase() : undefined;
  }
  set transport(v: string | undefined) {
    if (v === undefined) this.params.delete('transport');
    else this.params.set('transport', v);
  }

  /** `lr` parameter present: a loose router (RFC 3261 16.12, 19.1.1). */
  get lr(): boolean {
    return this.params.has('lr');
  }
  set lr(on: boolean) {
    if (on) this.params.set('lr', null);
    else this.params.delete('lr');
  }

  get maddr(): string | undefined {
    const v = this.params.get('maddr');
    return typeof v === 'string' ? v : undefined;
  }

  /** `user` parameter ("phone" marks a telephone-subscriber user part, RFC 3261 19.1.1). */
  get userParam(): string | undefined {
    const v = this.params.get('user');
    return typeof v === 'string' ? v.toLowerCase() : undefined;
  }

  /** host[:port], IPv6 in brackets. */
  get hostport(): string {
    const h = this.host.includes(':') ? `[${this.host}]` : this.host;
    return this.port === undefined ? h : `${h}:${this.port}`;
  }

  clone(): SipUri {
    const host = this.host.includes(':') ? `[${this.host}]` : this.host;
    const u = new SipUri({ scheme: this.scheme, user: this.user, password: this.password, host, port: this.port });
    u.params.copyFrom(this.params);
    u.headers = this.headers.map(([n, v]) => [n, v]);
    return u;
  }

  toString(): string {
    let out = this.scheme + ':';
    if (this.user !== undefined) {
      out += escapePct(this.user, C_USER);
      if (this.password !== undefined) out += ':' + escapePct(this.password, C_PASSWORD);
      out += '@';
    }
    out += this.hostport + this.params.toString();
    for (let i = 0; i < this.headers.length; i++) {
      const [n, v] = this.headers[i]!;
      out += (i === 0 ? '?' : '&') + escapePct(n, C_HNV) + '=' + escapePct(v, C_HNV);
    }
    return out;
  }
}

/** tel: URI (RFC 3966), passed through: the number as written and its parameters. */
export class TelUri {
  readonly kind = 'tel' as const;
  readonly scheme = 'tel' as const;
  /** "+1-201-555-0123" or a local number; visual separators kept. */
  number: string;
  /** Parameters as written (phone-context, ext, isub...). */
  readonly params = new Params();

  /** @throws TypeError when the number is empty or contains whitespace, controls, ";", "<", ">" or '"'. */
  constructor(number: string) {
    if (!opaqueOk(number) || number.includes(';')) throw new TypeError(`invalid tel number "${number}"`);
    this.number = number;
  }

  clone(): TelUri {
    const t = new TelUri(this.number);
    t.params.copyFrom(this.params);
    return t;
  }

  toString(): string {
    return `tel:${this.number}${this.params.toString()}`;
  }
}

/** Any other absolute URI (http:, urn:, im:...): scheme and the rest, opaque. */
export class AbsoluteUri {
  readonly kind = 'absolute' as const;
  /** Lower-cased scheme. */
  readonly scheme: string;
  readonly opaque: string;

  /** @throws TypeError when the scheme is not a scheme or the rest holds whitespace, controls, "<", ">" or '"'. */
  constructor(scheme: string, opaque: string) {
    if (!/^[A-Za-z][A-Za-z0-9+.-]*$/.test(scheme)) throw new TypeError(`invalid URI scheme "${scheme}"`);
    if (!opaqueOk(opaque)) throw new TypeError(`invalid URI "${scheme}:${opaque}"`);
    this.scheme = scheme.toLowerCase();
    this.opaque = opaque;
  }

  clone(): AbsoluteUri {
    return new AbsoluteUri(this.scheme, this.opaque);
  }

  toString(): string {
    return `${this.scheme}:${this.opaque}`;
  }
}

export type Uri = SipUri | TelUri | AbsoluteUri;

/**
 * Non-empty, and no whitespace, controls or the characters that delimit a URI inside a header
 * field ("<", ">", '"'): what any URI may hold, whatever its scheme.
 */
function opaqueOk(s: string, start = 0, end = s.length): boolean {
  if (end <= start) return false;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f || c === 0x3c || c === 0x3e || c === 0x22) return false;
  }
  return true;
}

function stripBrackets(h: string): string {
  return h.length > 1 && h.charCodeAt(0) === 0x5b && h.charCodeAt(h.length - 1) === 0x5d ? h.slice(1, -1) : h;
}

/** True for a host name, an IPv4 address, or an IPv6 address (bracketed or not). */
export function validHost(h: string): boolean {
  if (h.length === 0) return false;
  const inner = stripBrackets(h);
  if (inner !== h || inner.includes(':')) return isIPv6(inner);
  return scanClass(h, 0, C_HOST) === h.length;
}

/** 'ipv4' | 'ipv6' | 'name' for a host as stored in SipUri / Via (IPv6 without brackets). */
export function hostKind(host: string): 'ipv4' | 'ipv6' | 'name' {
  if (host.includes(':')) return 'ipv6';
  return isIPv4(host) ? 'ipv4' : 'name';
}

/** A scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) (RFC 3261 25.1, RFC 3986 3.1). */
function scanScheme(s: string, i: number, end: number): number {
  const c0 = s.charCodeAt(i) | 0x20;
  if (i >= end || c0 < 0x61 || c0 > 0x7a) return i;
  i++;
  while (i < end) {
    const c = s.charCodeAt(i);
    const l = c | 0x20;
    if ((l >= 0x61 && l <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2b || c === 0x2d || c === 0x2e) i++;
    else break;
  }
  return i;
}

const PCT = 0x25;

/** Index past the run of characters of class `flags` or "%" (escapes are checked when unescaping). */
function scanEscaped(s: string, i: number, flags: number, end: number, allowNonAscii: boolean): number {
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c === PCT || isClass(c, flags) || (allowNonAscii && c >= 128)) i++;
    else break;
  }
  return i;
}

/**
 * Parses the URI in s[start..end). Unknown schemes give an AbsoluteUri.
 * @throws SipParseError when the text is not a URI (no scheme, bad host or port, characters
 *   that no SIP URI may contain, a "%" without two hex digits).
 */
export function parseUri(s: string, start = 0, end = s.length): Uri {
  const what = 'URI';
  const schemeEnd = scanScheme(s, start, end);
  if (schemeEnd === start || schemeEnd >= end || s.charCodeAt(schemeEnd) !== 0x3a /* : */) throw syntaxError(what, s.slice(start, end), 0);
  const scheme = s.slice(start, schemeEnd).toLowerCase();
  const p = schemeEnd + 1;
  if (scheme === 'sip' || scheme === 'sips') return parseSipUri(s, scheme, p, end);
  if (!opaqueOk(s, p, end)) throw syntaxError(what, s.slice(start, end), 0);
  if (scheme === 'tel') {
    const semi = s.indexOf(';', p);
    const numEnd = semi < 0 || semi > end ? end : semi;
    if (numEnd === p) throw syntaxError(what, s.slice(start, end), p - start);
    const t = new TelUri(s.slice(p, numEnd));
    let i = numEnd;
    while (i < end) {
      // ;name[=value], values as written (RFC 3966 keeps its own escaping rules).
      let j = i + 1;
      while (j < end && s.charCodeAt(j) !== 0x3b) j++;
      const seg = s.slice(i + 1, j);
      if (seg.length === 0) throw syntaxError(what, s.slice(start, end), i - start);
      const eq = seg.indexOf('=');
      t.params.add(eq < 0 ? seg : seg.slice(0, eq), eq < 0 ? null : seg.slice(eq + 1));
      i = j;
    }
    return t;
  }
  return new AbsoluteUri(scheme, s.slice(p, end));
}

function parseSipUri(s: string, scheme: 'sip' | 'sips', p: number, end: number): SipUri {
  const what = 'SIP URI';
  let user: string | undefined;
  let password: string | undefined;
  // userinfo ends at the first "@": "@" may appear in no user, password, host, parameter or
  // header character class, while ";", "?", "/" and "," may appear in the user part (RFC 3261
  // 19.1.1, RFC 4475 3.1.1.2 and 3.1.1.9), so the "@" is the only reliable delimiter.
  let at = s.indexOf('@', p);
  if (at >= end) at = -1;
  let i = p;
  if (at >= 0) {
    const uEnd = scanEscaped(s, p, C_USER, at, true);
    if (uEnd === p) throw uriError(s, p, end, p);
    user = unescapePct(s.slice(p, uEnd), what);
    if (uEnd < at) {
      if (s.charCodeAt(uEnd) !== 0x3a) throw uriError(s, p, end, uEnd);
      const pwEnd = scanEscaped(s, uEnd + 1, C_PASSWORD, at, true);
      if (pwEnd !== at) throw uriError(s, p, end, pwEnd);
      password = unescapePct(s.slice(uEnd + 1, at), what);
    }
    i = at + 1;
  }
  // host
  let host: string;
  if (s.charCodeAt(i) === 0x5b /* [ */) {
    const close = s.indexOf(']', i);
    if (close < 0 || close >= end) throw uriError(s, p, end, i);
    host = s.slice(i + 1, close);
    if (!isIPv6(host)) throw uriError(s, p, end, i);
    i = close + 1;
  } else {
    const hEnd = scanClass(s, i, C_HOST, end);
    if (hEnd === i) throw uriError(s, p, end, i);
    host = s.slice(i, hEnd);
    i = hEnd;
  }
  let port: number | undefined;
  if (i < end && s.charCodeAt(i) === 0x3a) {
    let j = i + 1;
    let n = 0;
    while (j < end && j - i <= 5) {
      const d = s.charCodeAt(j) - 0x30;
      if (d < 0 || d > 9) break;
      n = n * 10 + d;
      j++;
    }
    if (j === i + 1 || n > 65535 || (j < end && isDigit(s.charCodeAt(j)))) throw uriError(s, p, end, i);
    port = n;
    i = j;
  }
  const uri = new SipUri({ scheme, host, port, user, password }, TRUSTED);
  // uri-parameters
  while (i < end && s.charCodeAt(i) === 0x3b) {
    const nEnd = scanEscaped(s, i + 1, C_PARAM, end, false);
    if (nEnd === i + 1) throw uriError(s, p, end, i + 1);
    const name = unescapePct(s.slice(i + 1, nEnd), what);
    i = nEnd;
    if (i < end && s.charCodeAt(i) === 0x3d) {
      const vEnd = scanEscaped(s, i + 1, C_PARAM, end, false);
      if (vEnd === i + 1) throw uriError(s, p, end, i + 1);
      uri.params.add(name, unescapePct(s.slice(i + 1, vEnd), what));
      i = vEnd;
    } else uri.params.add(name, null);
  }
  // headers
  if (i < end && s.charCodeAt(i) === 0x3f /* ? */) {
    do {
      const nEnd = scanEscaped(s, i + 1, C_HNV, end, false);
      if (nEnd === i + 1 || nEnd >= end || s.charCodeAt(nEnd) !== 0x3d) throw uriError(s, p, end, nEnd);
      const vEnd = scanEscaped(s, nEnd + 1, C_HNV, end, false);
      uri.headers.push([unescapePct(s.slice(i + 1, nEnd), what), unescapePct(s.slice(nEnd + 1, vEnd), what)]);
      i = vEnd;
    } while (i < end && s.charCodeAt(i) === 0x26 /* & */);
  }
  if (i !== end) throw uriError(s, p, end, i);
  return uri;
}

function uriError(s: string, p: number, end: number, at: number): SipParseError {
  return syntaxError('SIP URI', s.slice(p, end), at - p);
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

/**
 * URI equality of RFC 3261 19.1.4 for SIP URIs: user and password compared case-sensitively
 * after unescaping, host case-insensitively, ports equal (absent is not 5060); parameters
 * present in both must match case-insensitively, and user, ttl, method, maddr, transport must be
 * in both or neither; header components must match. Other URIs compare by their text,
 * case-insensitively in the scheme only.
 */
export function uriEquals(a: Uri, b: Uri): boolean {
  if (a.kind !== 'sip' || b.kind !== 'sip') {
    if (a.kind === 'sip' || b.kind === 'sip') return false;
    return a.toString() === b.toString();
  }
  if (a.scheme !== b.scheme || a.user !== b.user || a.password !== b.password) return false;
  if (a.host.toLowerCase() !== b.host.toLowerCase() || a.port !== b.port) return false;
  for (const special of ['user', 'ttl', 'method', 'maddr', 'transport']) {
    if (a.params.has(special) !== b.params.has(special)) return false;
  }
  // A name given twice (the parser keeps duplicates) counts by its first value, the one every
  // reader of the URI gets from params.get: compared value by value, a URI with ";x;x=1" did not
  // equal itself (found by the round-trip property test).
  for (const [name] of a.params.entries()) {
    if (!b.params.has(name)) continue;
    if ((a.params.get(name) ?? '').toLowerCase() !== (b.params.get(name) ?? '').toLowerCase()) return false;
  }
  // Headers are never ignored (19.1.4): every name with the same values, in the same order.
  if (a.headers.length !== b.headers.length) return false;
  const hb = headerValues(b.headers);
  for (const [n, values] of headerValues(a.headers)) {
    const other = hb.get(n);
    if (other === undefined || other.length !== values.length || values.some((v, i) => v !== other[i])) return false;
  }
  return true;
}

/** A URI's header values by lower-cased name, in order. */
function headerValues(headers: readonly [string, string][]): Map<string, string[]> {
  const byName = new Map<string, string[]>();
  for (const [n, v] of headers) {
    const key = n.toLowerCase();
    const values = byName.get(key);
    if (values === undefined) byName.set(key, [v]);
    else values.push(v);
  }
  return byName;
}
