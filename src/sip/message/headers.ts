/**
 * Header fields: the table of known names (canonical spelling, compact form, whether the field
 * is a comma-separated list), splitting of list values, and the typed values the upper layers
 * use: Via, name-addr (From, To, Contact, Route, Record-Route, Refer-To...), CSeq, media types,
 * value-with-parameters (Event, Replaces, Session-Expires...), token lists (Supported...).
 *
 * Every typed value is a small mutable object whose toString() is its header field value, so
 * the transport can write `received`/`rport` into the top Via (RFC 3581) and the message
 * serializes the change. Parsers throw SipParseError with the header's name in the reason
 * ("Bad Request: malformed Via").
 */
import { SipParseError } from './errors.ts';
import {
  C_HOST,
  isTokenChar,
  isVisible,
  Params,
  parseParams,
  parseUint,
  quote,
  sanitize,
  scanClass,
  scanQuoted,
  scanToken,
  skipWs,
  syntaxError,
  trimWs,
  unquote,
} from './syntax.ts';
import { parseUri, SipUri, type Uri } from './uri.ts';
import { isIPv6 } from 'node:net';

// --- the table of header names ------------------------------------------------------------------

export interface HeaderDef {
  /** Canonical spelling, e.g. "Call-ID", "CSeq", "WWW-Authenticate". */
  readonly name: string;
  /** Lower-cased canonical name: the key every lookup uses. */
  readonly key: string;
  /** Compact form (RFC 3261 7.3.3 and extensions), lower-case. */
  readonly compact?: string;
  /**
   * A comma-separated list (RFC 3261 7.3.1): split into one entry per value when parsed. Fields
   * whose values legitimately contain commas (WWW-Authenticate, Authorization, Date, ...) and
   * every unknown field are never split.
   */
  readonly list: boolean;
  /** Position in the table (0..HEADER_COUNT-1), for per-header lookup tables of other modules. */
  readonly index: number;
}

// [canonical name, compact form or '', is a list]
const KNOWN: [string, string, boolean][] = [
  ['Accept', '', true],
  ['Accept-Contact', 'a', true], // RFC 3841
  ['Accept-Encoding', '', true],
  ['Accept-Language', '', true],
  ['Alert-Info', '', true],
  ['Allow', '', true],
  ['Allow-Events', 'u', true], // RFC 6665
  ['Authentication-Info', '', false],
  ['Authorization', '', false],
  ['Call-ID', 'i', false],
  ['Call-Info', '', true],
  ['Contact', 'm', true],
  ['Content-Disposition', '', false],
  ['Content-Encoding', 'e', true],
  ['Content-Language', '', true],
  ['Content-Length', 'l', false],
  ['Content-Type', 'c', false],
  ['CSeq', '', false],
  ['Date', '', false],
  ['Diversion', '', true], // RFC 5806
  ['Error-Info', '', true],
  ['Event', 'o', false], // RFC 6665
  ['Expires', '', false],
  ['From', 'f', false],
  ['History-Info', '', true], // RFC 7044
  ['Identity', 'y', false], // RFC 8224
  ['Identity-Info', 'n', false], // RFC 4474
  ['In-Reply-To', '', true],
  ['Max-Forwards', '', false],
  ['MIME-Version', '', false],
  ['Min-Expires', '', false],
  ['Min-SE', '', false], // RFC 4028
  ['Organization', '', false],
  ['P-Asserted-Identity', '', true], // RFC 3325
  ['P-Preferred-Identity', '', true], // RFC 3325
  ['Path', '', true], // RFC 3327
  ['Priority', '', false],
  ['Privacy', '', false], // RFC 3323
  ['Proxy-Authenticate', '', false],
  ['Proxy-Authorization', '', false],
  ['Proxy-Require', '', true],
  ['RAck', '', false], // RFC 3262
  ['Reason', '', true], // RFC 3326
  ['Record-Route', '', true],
  ['Refer-Sub', '', false], // RFC 4488
  ['Refer-To', 'r', false], // RFC 3515
  ['Referred-By', 'b', false], // RFC 3892
  ['Reject-Contact', 'j', true], // RFC 3841
  ['Remote-Party-ID', '', true],
  ['Replaces', '', false], // RFC 3891
  ['Reply-To', '', false],
  ['Request-Disposition', 'd', true], // RFC 3841
  ['Require', '', true],
  ['Retry-After', '', false],
  ['Route', '', true],
  ['RSeq', '', false], // RFC 3262
  ['Server', '', false],
  ['Service-Route', '', true], // RFC 3608
  ['Session-Expires', 'x', false], // RFC 4028
  ['Subject', 's', false],
  ['Subscription-State', '', false], // RFC 6665
  ['Supported', 'k', true],
  ['Timestamp', '', false],
  ['To', 't', false],
  ['Unsupported', '', true],
  ['User-Agent', '', false],
  ['Via', 'v', true],
  ['Warning', '', true],
  ['WWW-Authenticate', '', false],
];

const BY_KEY = new Map<string, HeaderDef>();
/** Same map, also keyed by exact common spellings, so most lookups skip toLowerCase(). */
const BY_SPELLING = new Map<string, HeaderDef>();
/** Number of known headers; HeaderDef.index is below it. */
export const HEADER_COUNT = KNOWN.length;

for (let index = 0; index < KNOWN.length; index++) {
  const [name, compact, list] = KNOWN[index]!;
  const def: HeaderDef = { name, key: name.toLowerCase(), list, index, ...(compact ? { compact } : {}) };
  BY_KEY.set(def.key, def);
  BY_SPELLING.set(name, def);
  BY_SPELLING.set(def.key, def);
  if (compact) {
    BY_KEY.set(compact, def);
    BY_SPELLING.set(compact, def);
    BY_SPELLING.set(compact.toUpperCase(), def);
  }
}

/** The definition of a known header (any case, compact forms included), or undefined. */
export function headerDef(name: string): HeaderDef | undefined {
  return BY_SPELLING.get(name) ?? BY_KEY.get(name.toLowerCase());
}

/** Canonical name of a header: "v" and "VIA" give "Via"; unknown names are returned as given. */
export function canonicalName(name: string): string {
  return headerDef(name)?.name ?? name;
}

/** The compact form of a header name, when it has one (RFC 3261 7.3.3). */
export function compactName(name: string): string | undefined {
  return headerDef(name)?.compact;
}

// --- list splitting -----------------------------------------------------------------------------

/**
 * Splits a list header value at the commas that separate values (RFC 3261 7.3.1), ignoring
 * commas inside quoted strings and inside <...> (a URI's user part may contain one, RFC 4475
 * 3.1.1.2). Elements are trimmed; empty elements are kept (the caller decides whether ",," is
 * an error). A quote or "<" that is never closed swallows the rest, which then fails to parse
 * as a value.
 */
export function splitList(v: string): string[] {
  if (v.indexOf(',') < 0) return [trimWs(v)];
  const out: string[] = [];
  let start = 0;
  let angle = false;
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c === 0x22) {
      const q = scanQuoted(v, i);
      if (q < 0) break;
      i = q - 1;
    } else if (c === 0x3c) angle = true;
    else if (c === 0x3e) angle = false;
    else if (c === 0x2c && !angle) {
      out.push(trimWs(v.slice(start, i)));
      start = i + 1;
    }
  }
  out.push(trimWs(v.slice(start)));
  return out;
}

/** Rewraps an error of a header value's grammar with the header's name. */
export function headerError(header: string, value: string, cause: unknown): SipParseError {
  const reason = `Bad Request: malformed ${header}`;
  if (cause instanceof SipParseError && cause.reason === reason) return cause;
  let why = String(cause);
  if (cause instanceof SipParseError) {
    const inner = cause.reason.replace(/^Bad Request: /, '');
    why = cause.detail ? `${inner} ${cause.detail}` : inner;
  }
  return new SipParseError(reason, `"${sanitize(value)}": ${why}`, { cause });
}

// --- name-addr ----------------------------------------------------------------------------------

/**
 * A name-addr or addr-spec with header parameters (RFC 3261 20.10, 25.1): From, To, Contact,
 * Route, Record-Route, Refer-To, Referred-By, P-Asserted-Identity...
 *
 *   "Alice \"A\" Smith" <sip:alice@example.com;transport=tcp>;tag=1928301774
 *   sip:bob@example.com;tag=a6c85cf          (addr-spec: ";tag" is a header parameter)
 */
export class NameAddr {
  /** Display name with quoted-pairs resolved; undefined when there is none. */
  displayName: string | undefined;
  uri: Uri;
  readonly params = new Params();

  constructor(uri: Uri, displayName?: string, params?: Record<string, string | null>) {
    this.uri = uri;
    this.displayName = displayName;
    if (params) for (const [k, v] of Object.entries(params)) this.params.set(k, v);
  }

  /** `tag` parameter (From, To; RFC 3261 19.3). */
  get tag(): string | undefined {
    const v = this.params.get('tag');
    return typeof v === 'string' ? v : undefined;
  }
  set tag(v: string | undefined) {
    if (v === undefined) this.params.delete('tag');
    else this.params.set('tag', v);
  }

  /** Contact `expires` parameter in seconds; undefined when absent or not a number (RFC 3261 10.2.1.1). */
  get expires(): number | undefined {
    const v = this.params.get('expires');
    if (typeof v !== 'string') return undefined;
    const n = parseDelta(v);
    return n < 0 ? undefined : n;
  }
  set expires(v: number | undefined) {
    if (v === undefined) this.params.delete('expires');
    else this.params.set('expires', String(Math.max(0, Math.floor(v))));
  }

  /** Contact `q` parameter (0..1); undefined when absent or malformed (RFC 3261 20.10). */
  get q(): number | undefined {
    const v = this.params.get('q');
    if (typeof v !== 'string' || !/^(0(\.\d{0,3})?|1(\.0{0,3})?)$/.test(v)) return undefined;
    return Number(v);
  }

  /** The URI when it is a SIP or SIPS URI. */
  get sipUri(): SipUri | undefined {
    return this.uri.kind === 'sip' ? this.uri : undefined;
  }

  clone(): NameAddr {
    const n = new NameAddr(this.uri.clone(), this.displayName);
    n.params.copyFrom(this.params);
    return n;
  }

  /** Always the name-addr form (angle brackets), which is valid for every URI (RFC 3261 20.10). */
  toString(): string {
    const dn = this.displayName === undefined ? '' : quote(this.displayName) + ' ';
    return `${dn}<${this.uri.toString()}>${this.params.toString()}`;
  }
}

/** Display names without quotes: tokens and LWS; UTF-8 is tolerated (RFC 3261 25.1 display-name). */
function isDisplayChar(c: number): boolean {
  return isTokenChar(c) || c === 0x20 || c === 0x09 || c >= 0x80;
}

/**
 * Parses one name-addr / addr-spec with its header parameters.
 * @throws SipParseError
 */
export function parseNameAddr(v: string, header = 'name-addr'): NameAddr {
  try {
    return parseNameAddrInner(v, header);
  } catch (err) {
    throw headerError(header, v, err);
  }
}

function parseNameAddrInner(v: string, what: string): NameAddr {
  const end = v.length;
  let i = skipWs(v, 0, end);
  let display: string | undefined;
  let lt = -1;
  if (i < end && v.charCodeAt(i) === 0x22) {
    const q = scanQuoted(v, i, end);
    if (q < 0) throw syntaxError(what, v, i);
    display = unquote(v.slice(i, q));
    i = skipWs(v, q, end);
    if (i >= end || v.charCodeAt(i) !== 0x3c) throw syntaxError(what, v, i);
    lt = i;
  } else {
    let j = i;
    while (j < end && isDisplayChar(v.charCodeAt(j))) j++;
    if (j < end && v.charCodeAt(j) === 0x3c) {
      // "*(token LWS) <" -- also without LWS before "<" (RFC 4475 3.1.1.6).
      const d = trimWs(v.slice(i, j));
      display = d.length > 0 ? d.replace(/[ \t]+/g, ' ') : undefined;
      lt = j;
    }
  }
  let uri: Uri;
  if (lt >= 0) {
    const gt = v.indexOf('>', lt + 1);
    if (gt < 0) throw syntaxError(what, v, lt);
    // Spaces inside the brackets are not allowed (RFC 4475 3.1.2.14) but carry no ambiguity;
    // tolerate them.
    const us = skipWs(v, lt + 1, gt);
    let ue = gt;
    while (ue > us && (v.charCodeAt(ue - 1) === 0x20 || v.charCodeAt(ue - 1) === 0x09)) ue--;
    uri = parseUri(v, us, ue);
    i = gt + 1;
  } else {
    // addr-spec: the URI ends at the first ";" -- what follows are header parameters
    // (RFC 3261 20.10), which is why URIs with ";" or "," must use name-addr form.
    let ue = i;
    while (ue < end) {
      const c = v.charCodeAt(ue);
      if (c === 0x3b || c === 0x20 || c === 0x09) break;
      ue++;
    }
    uri = parseUri(v, i, ue);
    i = ue;
  }
  const na = new NameAddr(uri, display);
  i = parseParams(v, i, na.params, what, end);
  if (skipWs(v, i, end) !== end) throw syntaxError(what, v, i);
  return na;
}

// --- Via ----------------------------------------------------------------------------------------

/**
 * One Via value (RFC 3261 20.42, 18.2.1; RFC 3581 rport):
 *
 *   SIP / 2.0 / UDP  192.0.2.1:5060 ;branch=z9hG4bK776asdhds ;received=198.51.100.7 ;rport=3456
 *   \______sent-protocol______/ \_sent-by__/ \__________________via-params_____________________/
 */
export class Via {
  protocolName = 'SIP';
  protocolVersion = '2.0';
  /** Upper-cased transport: "UDP", "TCP", "TLS", "SCTP", "WS", "WSS", or an extension. */
  transport: string;
  /** sent-by host; an IPv6 address is stored without brackets. */
  host: string;
  /** sent-by port; undefined when absent (then 5060, or 5061 for TLS: RFC 3261 18.2.2). */
  port: number | undefined;
  readonly params = new Params();

  constructor(transport: string, host: string, port?: number, params?: Record<string, string | null>) {
    this.transport = transport.toUpperCase();
    this.host = host.length > 1 && host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
    this.port = port;
    if (params) for (const [k, val] of Object.entries(params)) this.params.set(k, val);
  }

  /** `branch` parameter: the transaction id when it starts with z9hG4bK (RFC 3261 8.1.1.7). */
  get branch(): string | undefined {
    const v = this.params.get('branch');
    return typeof v === 'string' ? v : undefined;
  }
  set branch(v: string | undefined) {
    if (v === undefined) this.params.delete('branch');
    else this.params.set('branch', v);
  }

  /** True when the branch carries the RFC 3261 magic cookie "z9hG4bK". */
  get isRfc3261Branch(): boolean {
    return this.branch?.startsWith(BRANCH_COOKIE) ?? false;
  }

  /** `received` parameter (RFC 3261 18.2.1): the source address a server saw. */
  get received(): string | undefined {
    const v = this.params.get('received');
    return typeof v === 'string' ? v : undefined;
  }
  set received(v: string | undefined) {
    if (v === undefined) this.params.delete('received');
    else this.params.set('received', v);
  }

  /**
   * `rport` (RFC 3581): undefined when absent, null when present without a value (the client
   * asks for it), the port number once a server has filled it in.
   */
  get rport(): number | null | undefined {
    const v = this.params.get('rport');
    if (v === undefined) return undefined;
    if (v === null) return null;
    const n = parseUint(v, 65535);
    return n < 0 ? null : n;
  }
  set rport(v: number | null | undefined) {
    if (v === undefined) this.params.delete('rport');
    else this.params.set('rport', v === null ? null : String(v));
  }

  get maddr(): string | undefined {
    const v = this.params.get('maddr');
    return typeof v === 'string' ? v : undefined;
  }

  get ttl(): number | undefined {
    const v = this.params.get('ttl');
    if (typeof v !== 'string') return undefined;
    const n = parseUint(v, 255);
    return n < 0 ? undefined : n;
  }

  /** host[:port] as written in sent-by, IPv6 in brackets. */
  get sentBy(): string {
    const h = this.host.includes(':') ? `[${this.host}]` : this.host;
    return this.port === undefined ? h : `${h}:${this.port}`;
  }

  clone(): Via {
    const v = new Via(this.transport, this.host, this.port);
    v.protocolName = this.protocolName;
    v.protocolVersion = this.protocolVersion;
    v.params.copyFrom(this.params);
    return v;
  }

  toString(): string {
    return `${this.protocolName}/${this.protocolVersion}/${this.transport} ${this.sentBy}${this.params.toString()}`;
  }
}

/** The RFC 3261 branch prefix (8.1.1.7). */
export const BRANCH_COOKIE = 'z9hG4bK';

/**
 * Parses one Via value: sent-protocol LWS sent-by *( SEMI via-params ), with optional
 * whitespace around "/" and ":" (RFC 3261 25.1 SLASH, COLON; RFC 4475 3.1.1.1).
 * @throws SipParseError
 */
export function parseVia(v: string): Via {
  try {
    return parseViaInner(v);
  } catch (err) {
    throw headerError('Via', v, err);
  }
}

function parseViaInner(v: string): Via {
  const what = 'Via';
  const end = v.length;
  // sent-protocol: name SLASH version SLASH transport, three tokens.
  let i = skipWs(v, 0, end);
  const nameEnd = scanToken(v, i, end);
  if (nameEnd === i) throw syntaxError(what, v, i);
  const protocolName = v.slice(i, nameEnd);
  i = slash(v, nameEnd, end);
  const versionEnd = scanToken(v, i, end);
  if (versionEnd === i) throw syntaxError(what, v, i);
  const protocolVersion = v.slice(i, versionEnd);
  i = slash(v, versionEnd, end);
  const transportEnd = scanToken(v, i, end);
  if (transportEnd === i) throw syntaxError(what, v, i);
  const transport = v.slice(i, transportEnd);
  i = transportEnd;
  const j = skipWs(v, i, end);
  if (j === i) throw syntaxError(what, v, i);
  i = j;
  let host: string;
  if (v.charCodeAt(i) === 0x5b) {
    const close = v.indexOf(']', i);
    if (close < 0) throw syntaxError(what, v, i);
    host = v.slice(i + 1, close);
    if (!isIPv6(host)) throw syntaxError(what, v, i);
    i = close + 1;
  } else {
    const s = i;
    i = scanClass(v, i, C_HOST, end);
    if (i === s) throw syntaxError(what, v, i);
    host = v.slice(s, i);
  }
  let port: number | undefined;
  const c = skipWs(v, i, end);
  if (c < end && v.charCodeAt(c) === 0x3a) {
    const ps = skipWs(v, c + 1, end);
    let pe = ps;
    while (pe < end && v.charCodeAt(pe) >= 0x30 && v.charCodeAt(pe) <= 0x39) pe++;
    const n = parseUint(v.slice(ps, pe), 65535);
    if (n < 0) throw syntaxError(what, v, ps);
    port = n;
    i = pe;
  }
  const via = new Via(transport, host, port);
  via.protocolName = protocolName;
  via.protocolVersion = protocolVersion;
  i = parseParams(v, i, via.params, what, end);
  if (skipWs(v, i, end) !== end) throw syntaxError(what, v, i);
  return via;
}

/** SLASH = SWS "/" SWS (RFC 3261 25.1): the index after it. */
function slash(v: string, i: number, end: number): number {
  i = skipWs(v, i, end);
  if (v.charCodeAt(i) !== 0x2f) throw syntaxError('Via', v, i);
  return skipWs(v, i + 1, end);
}

// --- CSeq ---------------------------------------------------------------------------------------

/** CSeq (RFC 3261 20.16): sequence number and method. */
export class CSeq {
  constructor(
    public seq: number,
    public method: string,
  ) {}

  toString(): string {
    return `${this.seq} ${this.method}`;
  }
}

/**
 * CSeq = 1*DIGIT LWS Method. The number must fit 32 bits (RFC 3261 8.1.1.5 asks for less than
 * 2**31 when generating; RFC 4475 3.1.2.4 rejects more than 2**32-1).
 * @throws SipParseError
 */
export function parseCSeq(v: string): CSeq {
  const end = v.length;
  let i = skipWs(v, 0, end);
  const ds = i;
  while (i < end && v.charCodeAt(i) >= 0x30 && v.charCodeAt(i) <= 0x39) i++;
  const seq = parseUint(v.slice(ds, i));
  const ms = skipWs(v, i, end);
  const me = scanToken(v, ms, end);
  if (seq < 0 || ms === i || me === ms || skipWs(v, me, end) !== end) throw new SipParseError('Bad Request: malformed CSeq', `"${sanitize(v)}"`);
  return new CSeq(seq, v.slice(ms, me));
}

// --- media types --------------------------------------------------------------------------------

/** Content-Type / Accept value: type "/" subtype *( SEMI m-parameter ) (RFC 3261 20.15). */
export class MediaType {
  readonly params = new Params();
  constructor(
    public type: string,
    public subtype: string,
    params?: Record<string, string | null>,
  ) {
    if (params) for (const [k, v] of Object.entries(params)) this.params.set(k, v);
  }

  /** "application/sdp", lower-cased, without parameters: what to compare against. */
  get mime(): string {
    return `${this.type}/${this.subtype}`.toLowerCase();
  }

  toString(): string {
    return `${this.type}/${this.subtype}${this.params.toString()}`;
  }
}

/** @throws SipParseError */
export function parseMediaType(v: string, header = 'Content-Type'): MediaType {
  const end = v.length;
  let i = skipWs(v, 0, end);
  const ts = i;
  i = scanToken(v, i, end);
  const type = v.slice(ts, i);
  i = skipWs(v, i, end);
  if (type.length === 0 || v.charCodeAt(i) !== 0x2f) throw new SipParseError(`Bad Request: malformed ${header}`, `"${sanitize(v)}"`);
  i = skipWs(v, i + 1, end);
  const ss = i;
  i = scanToken(v, i, end);
  const subtype = v.slice(ss, i);
  if (subtype.length === 0) throw new SipParseError(`Bad Request: malformed ${header}`, `"${sanitize(v)}"`);
  const mt = new MediaType(type, subtype);
  try {
    i = parseParams(v, i, mt.params, header, end);
  } catch (err) {
    throw headerError(header, v, err);
  }
  if (skipWs(v, i, end) !== end) throw new SipParseError(`Bad Request: malformed ${header}`, `"${sanitize(v)}"`);
  return mt;
}

// --- value with parameters ----------------------------------------------------------------------

/**
 * A value followed by header parameters: Event ("dialog;id=1", RFC 6665), Replaces
 * ("callid;to-tag=a;from-tag=b", RFC 3891), Session-Expires ("1800;refresher=uac", RFC 4028),
 * Min-SE, Subscription-State, Content-Disposition, Reason...
 */
export class ValueWithParams {
  readonly params = new Params();
  constructor(
    public value: string,
    params?: Record<string, string | null>,
  ) {
    if (params) for (const [k, v] of Object.entries(params)) this.params.set(k, v);
  }

  toString(): string {
    return this.value + this.params.toString();
  }
}

/**
 * `value *( SEMI generic-param )` where the value runs to the first ";" (or whitespace) and
 * must be visible ASCII -- a token, a Call-ID word, a number.
 * @throws SipParseError
 */
export function parseValueWithParams(v: string, header: string): ValueWithParams {
  const end = v.length;
  const s = skipWs(v, 0, end);
  let i = s;
  while (i < end) {
    const c = v.charCodeAt(i);
    if (c === 0x3b || c === 0x20 || c === 0x09) break;
    i++;
  }
  const value = v.slice(s, i);
  if (!isVisible(value)) throw new SipParseError(`Bad Request: malformed ${header}`, `"${sanitize(v)}"`);
  const out = new ValueWithParams(value);
  try {
    i = parseParams(v, i, out.params, header, end);
  } catch (err) {
    throw headerError(header, v, err);
  }
  if (skipWs(v, i, end) !== end) throw new SipParseError(`Bad Request: malformed ${header}`, `"${sanitize(v)}"`);
  return out;
}

// --- scalars ------------------------------------------------------------------------------------

/**
 * delta-seconds (RFC 3261 25.1): 1*DIGIT. Values beyond 2**32-1 are clamped to it, the largest
 * expiry RFC 3261 20.19 allows (RFC 4475 3.1.2.4 lets an element treat them so); -1 when not
 * digits.
 */
export function parseDelta(v: string): number {
  const t = trimWs(v);
  if (!/^\d+$/.test(t)) return -1;
  const n = parseUint(t);
  return n < 0 ? 0xffffffff : n;
}

/** A token list value (Supported, Require, Allow...): the tokens; empty elements are dropped. */
export function parseTokenList(values: string[], header: string): string[] {
  const out: string[] = [];
  for (const v of values) {
    const t = trimWs(v);
    if (t.length === 0) continue;
    for (let i = 0; i < t.length; i++) {
      if (!isTokenChar(t.charCodeAt(i))) throw new SipParseError(`Bad Request: malformed ${header}`, `"${sanitize(t)}"`);
    }
    out.push(t);
  }
  return out;
}
