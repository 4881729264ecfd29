/**
 * SIP messages (RFC 3261 section 7, grammar in 25): parse bytes into a SipRequest or
 * SipResponse, read and change header fields through typed accessors, serialize back to bytes.
 * The bottom of src/sip/: it imports nothing of ours outside src/sip/message-*.ts and errors.ts.
 *
 *   start-line        INVITE sip:bob@biloxi.example.com SIP/2.0         | SIP/2.0 200 OK
 *   message-header*   Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds
 *                     To: Bob <sip:bob@biloxi.example.com>
 *                     v: SIP/2.0/UDP p1;branch=z9hG4bKa, SIP/2.0/UDP p2    (compact, list)
 *                     Subject: a folded
 *                       value                                               (continuation)
 *   CRLF
 *   [ message-body ]  Content-Length octets
 *
 * Parsing (parseMessage) unfolds continuation lines, maps compact names to full ones, splits
 * list headers (Via, Contact, Route...; others when first read) into one entry per value,
 * and parses the header fields
 * every layer above needs (Via, From, To, Call-ID, CSeq, Max-Forwards, Contact, Route,
 * Record-Route, Content-Type, Content-Length) at once, so a message that parses is one the
 * transaction and dialog layers can use without further checks. Other known headers (Expires,
 * Session-Expires, Event, Refer-To...) are parsed when first read; their accessors throw
 * SipParseError when the value is malformed, which the caller answers with 400. Unknown headers
 * are kept verbatim.
 *
 * Bad input throws SipParseError carrying the status (400, 505, 513), a reason phrase for the
 * response ("Bad Request: missing CSeq") and, for requests, the fields a stateless response
 * needs (context.ts). Nothing else is thrown for any input: the fuzz tests feed random
 * and mutated bytes to check that.
 *
 * Serialization (toBuffer) writes the start line, each header entry on its own line (typed
 * values through their toString(), so changes made through accessors are kept) and a
 * Content-Length computed from the body, which is the only source of truth for it.
 */
import { SipParseError, SipTooLargeError, SipVersionError } from './errors.ts';
import { tryExtractResponseContext } from './context.ts';
import {
  CSeq,
  headerDef,
  MediaType,
  NameAddr,
  parseCSeq,
  parseDelta,
  parseMediaType,
  parseNameAddr,
  parseTokenList,
  parseValueWithParams,
  parseVia,
  splitList,
  ValueWithParams,
  Via,
} from './headers.ts';
import { generateBranch, generateCallId, generateTag } from './ids.ts';
import { BARE_LF_REASON, isToken, isVisible, parseUint, sanitize, trimWs } from './syntax.ts';
import { parseUri, SipUri, type Uri } from './uri.ts';

export { SipParseError, SipTooLargeError, SipVersionError } from './errors.ts';
export type { ResponseContext } from './errors.ts';
export { buildStatelessResponse, tryExtractResponseContext } from './context.ts';
export {
  BRANCH_COOKIE,
  canonicalName,
  compactName,
  CSeq,
  headerDef,
  MediaType,
  NameAddr,
  parseCSeq,
  parseMediaType,
  parseNameAddr,
  parseVia,
  splitList,
  ValueWithParams,
  Via,
} from './headers.ts';
export { generateBranch, generateCallId, generateTag } from './ids.ts';
export { Params, quote, unquote } from './syntax.ts';
export { AbsoluteUri, hostKind, parseUri, SipUri, TelUri, UriParams, uriEquals, type SipUriInit, type Uri } from './uri.ts';
export { SipStreamFramer, type SipStreamFramerOptions } from './framer.ts';

// --- header entries -----------------------------------------------------------------------------

/** What a header value can be set to: text, a number, or one of the typed values. */
export type HeaderValue = string | number | Via | NameAddr | CSeq | MediaType | ValueWithParams;

type Kind = 'via' | 'nameaddr' | 'contact' | 'cseq' | 'mediatype' | 'vwp';

/**
 * One header field value. `raw` is the text as received (unfolded, trimmed) or as set; once a
 * typed accessor has parsed it, `parsed` holds the object and is what gets serialized.
 */
interface Entry {
  /** Canonical name for known headers, the received spelling for unknown ones. */
  name: string;
  /** Lower-cased full name. */
  key: string;
  raw: string;
  parsed: Via | NameAddr | CSeq | MediaType | ValueWithParams | '*' | undefined;
  kind: Kind | undefined;
  /**
   * `raw` is a whole comma-separated list still to be split (RFC 3261 7.3.1). The parser splits
   * the core lists at once and leaves the others (Allow, Supported, Accept...) whole until a
   * value is read or the message is written: most are only ever forwarded or ignored, and
   * splitting an 11-method Allow costs more than parsing a Via.
   */
  multi?: boolean;
}

function entryText(e: Entry): string {
  return e.parsed === undefined ? e.raw : e.parsed.toString();
}

/** The kinds of typed value, by header key; the parser fills them for the core set eagerly. */
const KIND = new Map<string, Kind>([
  ['via', 'via'],
  ['from', 'nameaddr'],
  ['to', 'nameaddr'],
  ['contact', 'contact'],
  ['route', 'nameaddr'],
  ['record-route', 'nameaddr'],
  ['refer-to', 'nameaddr'],
  ['referred-by', 'nameaddr'],
  ['reply-to', 'nameaddr'],
  ['p-asserted-identity', 'nameaddr'],
  ['p-preferred-identity', 'nameaddr'],
  ['path', 'nameaddr'],
  ['service-route', 'nameaddr'],
  ['cseq', 'cseq'],
  ['content-type', 'mediatype'],
  ['event', 'vwp'],
  ['replaces', 'vwp'],
  ['session-expires', 'vwp'],
  ['min-se', 'vwp'],
  ['subscription-state', 'vwp'],
  ['content-disposition', 'vwp'],
]);

function parseKind(kind: Kind, name: string, v: string): NonNullable<Entry['parsed']> {
  switch (kind) {
    case 'via':
      return parseVia(v);
    case 'nameaddr':
      return parseNameAddr(v, name);
    case 'contact':
      return trimWs(v) === '*' ? '*' : parseNameAddr(v, 'Contact');
    case 'cseq':
      return parseCSeq(v);
    case 'mediatype':
      return parseMediaType(v, name);
    case 'vwp':
      return parseValueWithParams(v, name);
  }
}

function matchesKind(kind: Kind, v: HeaderValue): boolean {
  switch (kind) {
    case 'via':
      return v instanceof Via;
    case 'nameaddr':
    case 'contact':
      return v instanceof NameAddr;
    case 'cseq':
      return v instanceof CSeq;
    case 'mediatype':
      return v instanceof MediaType;
    case 'vwp':
      return v instanceof ValueWithParams;
  }
}

function makeEntries(name: string, value: HeaderValue): Entry[] {
  const def = headerDef(name);
  if (!def && !isToken(name)) throw new TypeError(`header name "${sanitize(name)}" is not a token`);
  const key = def?.key ?? name.toLowerCase();
  const canonical = def?.name ?? name;
  const kind = KIND.get(key);
  if (typeof value === 'object') {
    if (kind === undefined || !matchesKind(kind, value)) throw new TypeError(`a ${value.constructor.name} cannot be the value of ${canonical}`);
    return [{ name: canonical, key, raw: '', parsed: value, kind }];
  }
  const text = String(value);
  if (/[\r\n\0]/.test(text)) throw new TypeError(`the value of ${canonical} contains CR, LF or NUL`);
  const parts = def?.list ? splitList(text).filter((p) => p.length > 0) : [trimWs(text)];
  // The scalars the parser checks, checked here too, so that a message built by hand reads
  // back the way a parsed one does.
  if ((key === 'call-id' && !isVisible(parts[0]!)) || ((key === 'max-forwards' || key === 'content-length') && parseUint(parts[0]!, key === 'max-forwards' ? 255 : 0x7fffffff) < 0)) {
    throw new TypeError(`invalid ${canonical} value "${sanitize(text)}"`);
  }
  return parts.map((raw) => {
    const e: Entry = { name: canonical, key, raw, parsed: undefined, kind: undefined };
    if (kind !== undefined) {
      try {
        e.parsed = parseKind(kind, canonical, raw);
        e.kind = kind;
      } catch (err) {
        throw new TypeError(`invalid ${canonical} value "${sanitize(raw)}"`, { cause: err });
      }
    }
    return e;
  });
}

// --- messages -----------------------------------------------------------------------------------

export interface ToBufferOptions {
  /** Write compact header names (RFC 3261 7.3.3), e.g. to keep a UDP request under the MTU. */
  compact?: boolean;
}

/** What SipRequest and SipResponse share: header fields and the body. */
export abstract class SipMessage {
  /** @internal The header entries, in order; list headers hold one value per entry. */
  protected entries: Entry[] = [];
  /** The body octets (SDP, sipfrag...); its length is the Content-Length written. */
  body: Buffer = EMPTY;

  abstract readonly isRequest: boolean;
  /** The start line without CRLF. */
  abstract startLine(): string;

  // --- generic access ---

  /** Splits the not yet split list entries (of one key, or all) into one entry per value. */
  private expand(key?: string): void {
    let i = 0;
    while (i < this.entries.length) {
      const e = this.entries[i]!;
      if (e.multi !== true || (key !== undefined && e.key !== key)) {
        i++;
        continue;
      }
      const parts = splitList(e.raw).filter((p) => p.length > 0);
      this.entries.splice(i, 1, ...parts.map((raw) => ({ name: e.name, key: e.key, raw, parsed: undefined, kind: undefined })));
      i += parts.length;
    }
  }

  /** True when at least one header field of the name (any case, compact forms too) exists. */
  has(name: string): boolean {
    const key = keyOf(name);
    return this.entries.some((e) => e.key === key);
  }

  /** The first value of a header field as text, or undefined. */
  get(name: string): string | undefined {
    const key = keyOf(name);
    this.expand(key);
    const e = this.entries.find((x) => x.key === key);
    return e ? entryText(e) : undefined;
  }

  /** All values of a header field as text, in order (a list header gives one string per value). */
  getAll(name: string): string[] {
    const key = keyOf(name);
    this.expand(key);
    const out: string[] = [];
    for (const e of this.entries) if (e.key === key) out.push(entryText(e));
    return out;
  }

  /** [name, value] of every header entry in order (canonical names). */
  headers(): [string, string][] {
    this.expand();
    return this.entries.map((e) => [e.name, entryText(e)]);
  }

  /**
   * Replaces every value of the header with `values` (none: removes it). Text of a list header
   * is split at its commas; text of a typed header is parsed now.
   * @throws TypeError for a name that is not a token, text with CR/LF, text that does not parse
   *   for a typed header, or a typed value of the wrong kind.
   */
  set(name: string, ...values: HeaderValue[]): this {
    const key = keyOf(name);
    const fresh = values.flatMap((v) => makeEntries(name, v));
    const at = this.entries.findIndex((e) => e.key === key);
    this.entries = this.entries.filter((e) => e.key !== key);
    this.entries.splice(at < 0 ? this.entries.length : at, 0, ...fresh);
    return this;
  }

  /** Adds values after the existing ones (at the end of the header section). @throws TypeError as set(). */
  append(name: string, ...values: HeaderValue[]): this {
    this.entries.push(...values.flatMap((v) => makeEntries(name, v)));
    return this;
  }

  /**
   * Adds values before the first existing value of the header (at the top of the header
   * section when there is none): where a new Via or Record-Route goes (RFC 3261 8.1.1.7, 16.6).
   * @throws TypeError as set().
   */
  prepend(name: string, ...values: HeaderValue[]): this {
    const key = keyOf(name);
    const at = this.entries.findIndex((e) => e.key === key);
    this.entries.splice(at < 0 ? 0 : at, 0, ...values.flatMap((v) => makeEntries(name, v)));
    return this;
  }

  /** Removes every value of the header; returns how many there were. */
  remove(name: string): number {
    const key = keyOf(name);
    this.expand(key);
    const before = this.entries.length;
    this.entries = this.entries.filter((e) => e.key !== key);
    return before - this.entries.length;
  }

  /**
   * The typed values of a header, parsed on first use and cached (the objects are live: change
   * them and the message serializes the change).
   * @throws SipParseError when a value is malformed (only possible for headers the parser does
   *   not check eagerly).
   */
  protected typed<T extends NonNullable<Entry['parsed']>>(key: string, kind: Kind): T[] {
    const out: T[] = [];
    this.expand(key);
    for (const e of this.entries) {
      if (e.key !== key) continue;
      if (e.kind !== kind) {
        const parsed = parseKind(kind, e.name, entryText(e));
        if (e.kind !== undefined) {
          out.push(parsed as T); // parsed as something else before: don't overwrite that object
          continue;
        }
        e.parsed = parsed;
        e.kind = kind;
      }
      out.push(e.parsed as T);
    }
    return out;
  }

  private required<T extends NonNullable<Entry['parsed']>>(key: string, kind: Kind, name: string): T {
    const v = this.typed<T>(key, kind)[0];
    if (v === undefined) throw new TypeError(`the message has no ${name} header`);
    return v;
  }

  // --- typed accessors: the core set, checked when parsed ---

  /** Via values, top first (RFC 3261 20.42). */
  get via(): Via[] {
    return this.typed<Via>('via', 'via');
  }

  /** The top Via: the one that names this hop (RFC 3261 17.2.3, 18.2.1). */
  get topVia(): Via | undefined {
    return this.via[0];
  }

  /** From (RFC 3261 20.20). @throws TypeError when absent (never for a parsed message). */
  get from(): NameAddr {
    return this.required<NameAddr>('from', 'nameaddr', 'From');
  }
  set from(v: NameAddr) {
    this.set('From', v);
  }

  /** To (RFC 3261 20.39). @throws TypeError when absent (never for a parsed message). */
  get to(): NameAddr {
    return this.required<NameAddr>('to', 'nameaddr', 'To');
  }
  set to(v: NameAddr) {
    this.set('To', v);
  }

  /** Call-ID (RFC 3261 20.8). @throws TypeError when absent (never for a parsed message). */
  get callId(): string {
    const v = this.get('call-id');
    if (v === undefined) throw new TypeError('the message has no Call-ID header');
    return v;
  }
  set callId(v: string) {
    if (!isVisible(v)) throw new TypeError(`invalid Call-ID "${sanitize(v)}"`);
    this.set('Call-ID', v);
  }

  /** CSeq (RFC 3261 20.16). @throws TypeError when absent (never for a parsed message). */
  get cseq(): CSeq {
    return this.required<CSeq>('cseq', 'cseq', 'CSeq');
  }
  set cseq(v: CSeq) {
    this.set('CSeq', v);
  }

  /**
   * Max-Forwards (RFC 3261 20.22). RFC 3261 8.1.1.6 makes it mandatory in requests, but a UAS
   * loses nothing by accepting a request without it, so a missing header reads as the
   * recommended initial value, 70.
   */
  get maxForwards(): number {
    const v = this.get('max-forwards');
    return v === undefined ? 70 : parseUint(trimWs(v), 255);
  }
  set maxForwards(n: number) {
    if (!Number.isInteger(n) || n < 0 || n > 255) throw new RangeError(`Max-Forwards ${n} is not in 0..255`);
    this.set('Max-Forwards', n);
  }

  /** Content-Type (RFC 3261 20.15), or undefined. Setting undefined removes it. */
  get contentType(): MediaType | undefined {
    return this.typed<MediaType>('content-type', 'mediatype')[0];
  }
  set contentType(v: MediaType | string | undefined) {
    if (v === undefined) this.remove('Content-Type');
    else this.set('Content-Type', v);
  }

  /** The body length; Content-Length is always written from it. */
  get contentLength(): number {
    return this.body.length;
  }

  /** Contact values (RFC 3261 20.10); empty for "Contact: *" (see isContactWildcard). */
  get contacts(): NameAddr[] {
    return this.typed<NameAddr | '*'>('contact', 'contact').filter((c): c is NameAddr => c !== '*');
  }

  /** "Contact: *" (a REGISTER removing all bindings, RFC 3261 10.2.2). */
  get isContactWildcard(): boolean {
    return this.typed<NameAddr | '*'>('contact', 'contact').includes('*');
  }

  /** Route values in order (RFC 3261 20.34). */
  get routes(): NameAddr[] {
    return this.typed<NameAddr>('route', 'nameaddr');
  }

  /** Record-Route values in order (RFC 3261 20.30). */
  get recordRoutes(): NameAddr[] {
    return this.typed<NameAddr>('record-route', 'nameaddr');
  }

  // --- typed accessors: parsed when read (throw SipParseError when malformed) ---

  /** Any name-addr header (Refer-To, Referred-By, P-Asserted-Identity, Path...). @throws SipParseError */
  nameAddrs(name: string): NameAddr[] {
    return this.typed<NameAddr>(keyOf(name), 'nameaddr');
  }

  /** Any value-with-parameters header (Event, Replaces, Subscription-State...). @throws SipParseError */
  valueWithParams(name: string): ValueWithParams | undefined {
    return this.typed<ValueWithParams>(keyOf(name), 'vwp')[0];
  }

  /** The tokens of a token-list header (Supported, Require, Allow...), from every value. @throws SipParseError */
  tokens(name: string): string[] {
    return parseTokenList(this.getAll(name), canonicalOf(name));
  }

  /** Supported option tags (RFC 3261 20.37), e.g. ["timer", "replaces"]. @throws SipParseError */
  get supported(): string[] {
    return this.tokens('supported');
  }

  /** Require option tags (RFC 3261 20.32). @throws SipParseError */
  get require(): string[] {
    return this.tokens('require');
  }

  /** Expires in seconds (RFC 3261 20.19; huge values clamp to 2**32-1). @throws SipParseError */
  get expires(): number | undefined {
    return this.deltaOf('expires', 'Expires');
  }

  /**
   * Session-Expires (RFC 4028 4): the interval in seconds and who refreshes, when named.
   * @throws SipParseError
   */
  get sessionExpires(): { seconds: number; refresher: 'uac' | 'uas' | undefined } | undefined {
    const v = this.valueWithParams('session-expires');
    if (!v) return undefined;
    const seconds = parseDelta(v.value);
    if (seconds < 0) throw new SipParseError('Bad Request: malformed Session-Expires', `"${sanitize(v.value)}"`);
    const r = v.params.get('refresher')?.toLowerCase();
    return { seconds, refresher: r === 'uac' || r === 'uas' ? r : undefined };
  }

  /** Min-SE in seconds (RFC 4028 5). @throws SipParseError */
  get minSE(): number | undefined {
    const v = this.valueWithParams('min-se');
    if (!v) return undefined;
    const n = parseDelta(v.value);
    if (n < 0) throw new SipParseError('Bad Request: malformed Min-SE', `"${sanitize(v.value)}"`);
    return n;
  }

  /** Event (RFC 6665 8.2.1): the package in `value`, `id` in params. @throws SipParseError */
  get event(): ValueWithParams | undefined {
    return this.valueWithParams('event');
  }

  /** Refer-To (RFC 3515 2.1). @throws SipParseError */
  get referTo(): NameAddr | undefined {
    return this.nameAddrs('refer-to')[0];
  }

  /** Referred-By (RFC 3892). @throws SipParseError */
  get referredBy(): NameAddr | undefined {
    return this.nameAddrs('referred-by')[0];
  }

  /** Replaces (RFC 3891 6.1): the dialog it names. @throws SipParseError */
  get replaces(): { callId: string; toTag: string; fromTag: string; earlyOnly: boolean } | undefined {
    const v = this.valueWithParams('replaces');
    if (!v) return undefined;
    const toTag = v.params.getUnquoted('to-tag');
    const fromTag = v.params.getUnquoted('from-tag');
    if (toTag === undefined || fromTag === undefined) throw new SipParseError('Bad Request: malformed Replaces', 'to-tag and from-tag are required');
    return { callId: v.value, toTag, fromTag, earlyOnly: v.params.has('early-only') };
  }

  private deltaOf(key: string, name: string): number | undefined {
    const v = this.get(key);
    if (v === undefined) return undefined;
    const n = parseDelta(v);
    if (n < 0) throw new SipParseError(`Bad Request: malformed ${name}`, `"${sanitize(v)}"`);
    return n;
  }

  // --- output ---

  /**
   * The message as bytes, in a new buffer the caller owns: start line, one line per header
   * entry, Content-Length from the body (replacing any Content-Length entry in place, or
   * appended last), the empty line, the body.
   * @throws TypeError when a value set by a caller would break the header section (CR or LF).
   */
  toBuffer(opts: ToBufferOptions = {}): Buffer {
    const compact = opts.compact === true;
    // One line per value, whether or not a list has been read yet: the output depends on the
    // message's content only.
    this.expand();
    let head = this.startLine() + '\r\n';
    let wroteLength = false;
    for (const e of this.entries) {
      if (e.key === 'content-length') {
        if (wroteLength) continue;
        wroteLength = true;
        head += (compact ? 'l' : 'Content-Length') + ': ' + this.body.length + '\r\n';
        continue;
      }
      const text = entryText(e);
      if (text.indexOf('\n') >= 0 || text.indexOf('\r') >= 0) throw new TypeError(`the value of ${e.name} contains CR or LF`);
      const name = compact ? (headerDef(e.key)?.compact ?? e.name) : e.name;
      head += name + ': ' + text + '\r\n';
    }
    if (!wroteLength) head += (compact ? 'l' : 'Content-Length') + ': ' + this.body.length + '\r\n';
    head += '\r\n';
    const headLen = Buffer.byteLength(head, 'utf8');
    const out = Buffer.allocUnsafe(headLen + this.body.length);
    out.write(head, 0, 'utf8');
    this.body.copy(out, headLen);
    return out;
  }

  /** The serialized message as text (the body read as UTF-8). */
  toString(): string {
    return this.toBuffer().toString('utf8');
  }

  /**
   * One line per header for logs and assertions: the start line, "Name: value" lines, then
   * "body: <n> bytes <type> <preview>" with at most 48 characters of the body, escaped.
   */
  dump(): string {
    this.expand();
    const lines = [this.startLine()];
    for (const e of this.entries) if (e.key !== 'content-length') lines.push(`${e.name}: ${entryText(e)}`);
    if (this.body.length === 0) lines.push('body: 0 bytes');
    else {
      const type = this.get('content-type');
      const preview = JSON.stringify(this.body.toString('utf8', 0, Math.min(48, this.body.length)));
      lines.push(`body: ${this.body.length} bytes ${type === undefined ? '' : type + ' '}${preview}${this.body.length > 48 ? '...' : ''}`);
    }
    return lines.join('\n');
  }

  /** Copies header entries (typed values cloned) and the body into `target`. */
  protected copyInto<T extends SipMessage>(target: T): T {
    target.entries = this.entries.map((e) => ({ ...e, parsed: cloneParsed(e.parsed) }));
    target.body = Buffer.from(this.body);
    return target;
  }
}

function cloneParsed(p: Entry['parsed']): Entry['parsed'] {
  if (p === undefined || p === '*') return p;
  if (p instanceof CSeq) return new CSeq(p.seq, p.method);
  if (p instanceof MediaType) {
    const m = new MediaType(p.type, p.subtype);
    m.params.copyFrom(p.params);
    return m;
  }
  if (p instanceof ValueWithParams) {
    const v = new ValueWithParams(p.value);
    v.params.copyFrom(p.params);
    return v;
  }
  return p.clone();
}

const EMPTY = Buffer.alloc(0);

function keyOf(name: string): string {
  return headerDef(name)?.key ?? name.toLowerCase();
}

function canonicalOf(name: string): string {
  return headerDef(name)?.name ?? name;
}

/** A SIP request (RFC 3261 7.1). */
export class SipRequest extends SipMessage {
  readonly isRequest = true as const;
  /** The method, case-sensitive ("INVITE"; "invite" is another, unknown method: RFC 3261 7.1). */
  readonly method: string;
  /** The Request-URI. */
  uri: Uri;

  /** @throws TypeError when the method is not a token. */
  constructor(method: string, uri: Uri) {
    super();
    if (!isToken(method)) throw new TypeError(`method "${sanitize(method)}" is not a token`);
    this.method = method;
    this.uri = uri;
  }

  startLine(): string {
    return `${this.method} ${this.uri.toString()} SIP/2.0`;
  }

  clone(): SipRequest {
    return this.copyInto(new SipRequest(this.method, this.uri.clone()));
  }
}

/** A SIP response (RFC 3261 7.2). */
export class SipResponse extends SipMessage {
  readonly isRequest = false as const;
  readonly status: number;
  /** Reason-Phrase; may be empty (RFC 4475 3.1.1.13). */
  reason: string;

  /** @throws RangeError when the status is not in 100..699. */
  constructor(status: number, reason: string = defaultReason(status)) {
    super();
    if (!Number.isInteger(status) || status < 100 || status > 699) throw new RangeError(`status ${status} is not in 100..699`);
    this.status = status;
    this.reason = reason;
  }

  startLine(): string {
    return `SIP/2.0 ${this.status} ${this.reason.replace(/[\r\n]/g, ' ')}`;
  }

  clone(): SipResponse {
    return this.copyInto(new SipResponse(this.status, this.reason));
  }
}

export type SipMessageAny = SipRequest | SipResponse;

// --- parsing ------------------------------------------------------------------------------------

export interface ParseOptions {
  /**
   * The message came over a stream transport (TCP, TLS): Content-Length is mandatory (RFC 3261
   * 18.3, 20.14) and bytes after the body are ignored (the framer has cut them off). Default:
   * a datagram, where a missing Content-Length means "the rest of the datagram", a larger one is
   * an error and a smaller one truncates (RFC 3261 18.3).
   */
  stream?: boolean;
  /** Largest body accepted; default 64 KiB. Larger: SipTooLargeError (513). */
  maxBodyBytes?: number;
}

const DEFAULT_MAX_BODY = 65536;

/**
 * Parses one message from `input`.
 * @throws SipParseError (SipTooLargeError, SipVersionError) and nothing else, whatever the input.
 */
export function parseMessage(input: Uint8Array | string, opts: ParseOptions = {}): SipMessageAny {
  const buf = typeof input === 'string' ? Buffer.from(input, 'utf8') : Buffer.isBuffer(input) ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  try {
    return parseBuffer(buf, opts);
  } catch (err) {
    const e =
      err instanceof SipParseError
        ? err
        : // A bug of ours must still not take the transport down, nor leave the sender without
          // an answer: report it as a malformed message.
          new SipParseError('Bad Request', err instanceof Error ? err.message : String(err), { cause: err });
    if (!e.isResponse && e.context === undefined) e.context = tryExtractResponseContext(buf);
    throw e;
  }
}

const CRLF_CRLF = Buffer.from('\r\n\r\n');

function parseBuffer(buf: Buffer, opts: ParseOptions): SipMessageAny {
  // RFC 3261 7.5: CRLFs before the start line are ignored (keep-alives, sloppy senders). They
  // cannot end or split a header line, so stray LFs are let go here too.
  let start = 0;
  while (start < buf.length && (buf[start] === 0x0d || buf[start] === 0x0a)) start++;
  if (start >= buf.length) throw new SipParseError('Bad Request: empty message');
  const isResponse = buf.length - start >= 4 && (buf[start]! | 0x20) === 0x73 && (buf[start + 1]! | 0x20) === 0x69 && (buf[start + 2]! | 0x20) === 0x70 && buf[start + 3] === 0x2f;
  // The header section ends at the first empty line; every line of it ends in CRLF (RFC 3261
  // 7, 25.1: the grammar has no other line end). A bare LF is refused rather than read as a
  // line end: a parser that takes it as one sees another header than one that does not
  // ("Subject: hi<LF>Via: ..." is a second Via for the one and part of a Subject for the
  // other), and header injection lives in that gap. docs/sip-message.md, "Line ends".
  const end = buf.indexOf(CRLF_CRLF, start);
  const nl = end < 0 ? -1 : end + 1; // the LF that ends the last header line
  const bodyStart = end + 4;
  const limit = end < 0 ? buf.length : nl;
  for (let lf = buf.indexOf(0x0a, start); lf >= 0 && lf <= limit; lf = buf.indexOf(0x0a, lf + 1)) {
    if (buf[lf - 1] !== 0x0d) throw new SipParseError(BARE_LF_REASON, `at octet ${lf}`, { isResponse });
  }
  if (nl < 0) throw new SipParseError('Bad Request: incomplete header section', 'no empty line after the headers', { isResponse });
  const text = buf.toString('utf8', start, nl + 1);
  // A CR that does not end a line could end one for the next hop that reads this message.
  for (let cr = text.indexOf('\r'); cr >= 0; cr = text.indexOf('\r', cr + 2)) {
    if (text.charCodeAt(cr + 1) !== 0x0a) {
      const inStart = cr < text.indexOf('\n');
      throw new SipParseError(inStart ? (isResponse ? 'Bad Request: malformed Status-Line' : 'Bad Request: malformed Request-Line') : 'Bad Request: malformed header line', 'bare CR', { isResponse });
    }
  }
  const firstEol = text.indexOf('\n');
  const startLine = text.slice(0, firstEol > 0 && text.charCodeAt(firstEol - 1) === 0x0d ? firstEol - 1 : firstEol);
  const msg = isResponse ? parseStatusLine(startLine) : parseRequestLine(startLine);
  try {
    const length = parseHeaders(msg, text, firstEol + 1);
    setBody(msg, buf, bodyStart, length, opts);
  } catch (err) {
    if (err instanceof SipParseError && isResponse) err.isResponse = true;
    throw err;
  }
  return msg;
}

/** End of the line starting at `pos` in `text` (index of its LF, or text.length), without its CR. */
function lineEnd(text: string, eol: number): number {
  return eol > 0 && text.charCodeAt(eol - 1) === 0x0d ? eol - 1 : eol;
}

// Bits of the single-valued headers seen, for the duplicate and mandatory checks.
const SEEN_BIT: number[] = [];
for (const [name, bit] of [
  ['from', 1],
  ['to', 2],
  ['call-id', 4],
  ['cseq', 8],
  ['max-forwards', 16],
  ['content-length', 32],
  ['content-type', 64],
] as const) {
  SEEN_BIT[headerDef(name)!.index] = bit;
}
const MANDATORY: [number, string][] = [
  [1, 'From'],
  [2, 'To'],
  [4, 'Call-ID'],
  [8, 'CSeq'],
];

/**
 * Reads the header lines of `text` from `pos`: continuation lines (starting with SP or HT) are
 * joined to the previous one by a single SP (RFC 3261 7.3.1), compact names mapped, list values
 * split, the core headers typed and checked. Returns the Content-Length value (-1 when absent).
 * @throws SipParseError
 */
function parseHeaders(msg: SipMessageAny, text: string, pos: number): number {
  const entries: Entry[] = [];
  let seen = 0;
  let vias = 0;
  let length = -1;
  const n = text.length;
  while (pos < n) {
    let eol = text.indexOf('\n', pos);
    if (eol < 0) eol = n;
    const c0 = text.charCodeAt(pos);
    if (c0 === 0x20 || c0 === 0x09) throw new SipParseError('Bad Request: malformed header line', 'continuation line before the first header');
    const colon = text.indexOf(':', pos);
    if (colon < 0 || colon >= eol || colon === pos) throw new SipParseError('Bad Request: malformed header line', `"${sanitize(text.slice(pos, lineEnd(text, eol)))}"`);
    let ne = colon;
    while (ne > pos && (text.charCodeAt(ne - 1) === 0x20 || text.charCodeAt(ne - 1) === 0x09)) ne--;
    const name = text.slice(pos, ne);
    // The value: this line's rest, plus continuation lines.
    let value: string;
    let next = eol + 1;
    const more = next < n ? text.charCodeAt(next) : 0;
    if (more !== 0x20 && more !== 0x09) {
      let a = colon + 1;
      let b = lineEnd(text, eol);
      while (a < b && (text.charCodeAt(a) === 0x20 || text.charCodeAt(a) === 0x09)) a++;
      while (b > a && (text.charCodeAt(b - 1) === 0x20 || text.charCodeAt(b - 1) === 0x09)) b--;
      value = text.slice(a, b);
    } else {
      value = trimWs(text.slice(colon + 1, lineEnd(text, eol)));
      while (next < n && (text.charCodeAt(next) === 0x20 || text.charCodeAt(next) === 0x09)) {
        let e = text.indexOf('\n', next);
        if (e < 0) e = n;
        const part = trimWs(text.slice(next, lineEnd(text, e)));
        if (part.length > 0) value = value.length > 0 ? value + ' ' + part : part;
        next = e + 1;
      }
    }
    pos = next;

    const def = headerDef(name);
    if (def === undefined) {
      if (!isToken(name)) throw new SipParseError('Bad Request: malformed header line', `"${sanitize(name)}"`);
      entries.push({ name, key: name.toLowerCase(), raw: value, parsed: undefined, kind: undefined });
      continue;
    }
    const key = def.key;
    const bit = SEEN_BIT[def.index];
    if (bit !== undefined) {
      if ((seen & bit) !== 0) throw new SipParseError(`Bad Request: multiple ${def.name} header fields`);
      seen |= bit;
    }
    const kind = EAGER[def.index];
    if (def.list && kind === undefined) {
      const e: Entry = { name: def.name, key, raw: value, parsed: undefined, kind: undefined };
      if (value.indexOf(',') >= 0) e.multi = true;
      else if (value.length === 0) continue; // an empty list: nothing to keep
      entries.push(e);
      continue;
    }
    if (def.list && value.indexOf(',') >= 0) {
      for (const part of splitList(value)) {
        // Empty elements (",,") are an error in the lists every layer relies on (RFC 4475
        // 3.1.2.1); in other lists they are dropped when the list is split.
        if (part.length === 0) throw new SipParseError(`Bad Request: malformed ${def.name}`, 'empty list element');
        entries.push(typedEntry(def.name, key, part, kind));
        if (kind === 'via') vias++;
      }
      continue;
    }
    entries.push(typedEntry(def.name, key, value, kind));
    if (kind === 'via') vias++;
    else if (key === 'call-id') {
      if (!isVisible(value)) throw new SipParseError('Bad Request: malformed Call-ID', `"${sanitize(value)}"`);
    } else if (key === 'max-forwards') {
      if (parseUint(value, 255) < 0) throw new SipParseError('Bad Request: malformed Max-Forwards', `"${sanitize(value)}"`);
    } else if (key === 'content-length') {
      length = parseUint(value, 0x7fffffff);
      if (length < 0) throw new SipParseError('Bad Request: malformed Content-Length', `"${sanitize(value)}"`);
    }
  }
  // Friend access: the parser fills the protected entries list.
  (msg as unknown as { entries: Entry[] }).entries = entries;
  // RFC 3261 8.1.1: To, From, CSeq, Call-ID, Max-Forwards and Via are mandatory in requests;
  // Max-Forwards is let go (see SipMessage.maxForwards). A response lacking these is dropped by
  // the transport (RFC 3261 8.1.3.3, 18.1.2).
  if (vias === 0) throw new SipParseError('Bad Request: missing Via');
  for (const [bit, name] of MANDATORY) if ((seen & bit) === 0) throw new SipParseError(`Bad Request: missing ${name}`);
  if (msg instanceof SipRequest && msg.cseq.method !== msg.method) {
    // RFC 3261 8.1.1.5: the CSeq method MUST match the request's (RFC 4475 3.1.2.17, 3.1.2.18).
    throw new SipParseError('Bad Request: CSeq method does not match the request method', `${sanitize(msg.cseq.method)} vs ${sanitize(msg.method)}`);
  }
  return length;
}

function typedEntry(name: string, key: string, raw: string, kind: Kind | undefined): Entry {
  return { name, key, raw, parsed: kind === undefined ? undefined : parseKind(kind, name, raw), kind };
}

function parseRequestLine(line: string): SipRequest {
  // Method SP Request-URI SP SIP-Version. Runs of SP between the elements and trailing SP are
  // tolerated (RFC 4475 3.1.2.9, 3.1.2.10 allow a liberal receiver that); LWS inside the
  // Request-URI is not (3.1.2.8: four elements instead of three).
  let a = 0;
  const parts: string[] = [];
  while (a < line.length && parts.length < 4) {
    while (line.charCodeAt(a) === 0x20) a++;
    if (a >= line.length) break;
    let b = line.indexOf(' ', a);
    if (b < 0) b = line.length;
    parts.push(line.slice(a, b));
    a = b;
  }
  if (parts.length !== 3) throw new SipParseError('Bad Request: malformed Request-Line', `"${sanitize(line)}"`);
  const method = parts[0]!;
  const uriText = parts[1]!;
  const version = parts[2]!;
  if (!isToken(method)) throw new SipParseError('Bad Request: malformed Request-Line', `method "${sanitize(method)}"`);
  checkVersion(version, false);
  let uri: Uri;
  try {
    uri = parseUri(uriText);
  } catch (err) {
    throw new SipParseError('Bad Request: malformed Request-URI', `"${sanitize(uriText)}"`, { cause: err });
  }
  // Header components make no sense in a Request-URI (RFC 3261 19.1.1 table 1); RFC 4475
  // 3.1.2.11 lets an element reject them.
  if (uri.kind === 'sip' && uri.headers.length > 0) throw new SipParseError('Bad Request: headers in Request-URI');
  return new SipRequest(method, uri);
}

function checkVersion(version: string, isResponse: boolean): void {
  if (version === 'SIP/2.0' || version.toUpperCase() === 'SIP/2.0') return;
  // Another SIP version is 505 (RFC 3261 21.5.6); anything else is not SIP at all.
  if (/^SIP\/\d+\.\d+$/i.test(version)) throw new SipVersionError(sanitize(version), { isResponse });
  throw new SipParseError(isResponse ? 'Bad Request: malformed Status-Line' : 'Bad Request: malformed Request-Line', `version "${sanitize(version)}"`, { isResponse });
}

function parseStatusLine(line: string): SipResponse {
  // SIP-Version SP Status-Code SP Reason-Phrase; the reason may be empty (RFC 4475 3.1.1.13),
  // and a missing SP before an empty reason is tolerated.
  const sp1 = line.indexOf(' ');
  const version = sp1 < 0 ? line : line.slice(0, sp1);
  checkVersion(version, true);
  const rest = line.slice(sp1 + 1);
  const m = /^ *(\d{3})(?: (.*))?$/.exec(rest);
  const status = m ? Number(m[1]) : 0;
  if (!m || status < 100 || status > 699) {
    throw new SipParseError('Bad Request: malformed Status-Line', `"${sanitize(line)}"`, { isResponse: true });
  }
  return new SipResponse(status, m[2] ?? '');
}

/** Keys whose typed value the parser builds eagerly (what the transaction and dialog layers use). */
const EAGER: (Kind | undefined)[] = [];
for (const [name, kind] of [
  ['via', 'via'],
  ['from', 'nameaddr'],
  ['to', 'nameaddr'],
  ['cseq', 'cseq'],
  ['contact', 'contact'],
  ['route', 'nameaddr'],
  ['record-route', 'nameaddr'],
  ['content-type', 'mediatype'],
] as const) {
  EAGER[headerDef(name)!.index] = kind;
}

function setBody(msg: SipMessage, buf: Buffer, bodyStart: number, length: number, opts: ParseOptions): void {
  const available = Math.max(0, buf.length - bodyStart);
  const max = opts.maxBodyBytes ?? DEFAULT_MAX_BODY;
  if (opts.stream) {
    // RFC 3261 18.3: on a stream the Content-Length is the only way to find the message's end.
    if (length < 0) throw new SipParseError('Bad Request: missing Content-Length');
    if (length > available) throw new SipParseError('Bad Request: Content-Length larger than message', `${length} > ${available}`);
  } else if (length < 0) {
    length = available;
  } else if (length > available) {
    // RFC 3261 18.3: a datagram shorter than its Content-Length is discarded -- with a 400 for
    // a request (RFC 4475 3.1.2.2). Fewer: the octets after the body are ignored (3.1.1.8).
    throw new SipParseError('Bad Request: Content-Length larger than message', `${length} > ${available}`);
  }
  if (length > max) throw new SipTooLargeError('body', length, max);
  // A copy: the caller may reuse its receive buffer, and a retained message should not pin a
  // whole TCP read.
  msg.body = length === 0 ? EMPTY : Buffer.from(buf.subarray(bodyStart, bodyStart + length));
}

// --- building -----------------------------------------------------------------------------------

/** Reason phrases of RFC 3261 21 and the extensions callbridge meets. */
const REASONS: Record<number, string> = {
  100: 'Trying',
  180: 'Ringing',
  181: 'Call Is Being Forwarded',
  182: 'Queued',
  183: 'Session Progress',
  199: 'Early Dialog Terminated',
  200: 'OK',
  202: 'Accepted',
  204: 'No Notification',
  300: 'Multiple Choices',
  301: 'Moved Permanently',
  302: 'Moved Temporarily',
  305: 'Use Proxy',
  380: 'Alternative Service',
  400: 'Bad Request',
  401: 'Unauthorized',
  402: 'Payment Required',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  406: 'Not Acceptable',
  407: 'Proxy Authentication Required',
  408: 'Request Timeout',
  410: 'Gone',
  413: 'Request Entity Too Large',
  414: 'Request-URI Too Long',
  415: 'Unsupported Media Type',
  416: 'Unsupported URI Scheme',
  420: 'Bad Extension',
  421: 'Extension Required',
  422: 'Session Interval Too Small',
  423: 'Interval Too Brief',
  429: 'Provide Referrer Identity',
  480: 'Temporarily Unavailable',
  481: 'Call/Transaction Does Not Exist',
  482: 'Loop Detected',
  483: 'Too Many Hops',
  484: 'Address Incomplete',
  485: 'Ambiguous',
  486: 'Busy Here',
  487: 'Request Terminated',
  488: 'Not Acceptable Here',
  489: 'Bad Event',
  491: 'Request Pending',
  493: 'Undecipherable',
  500: 'Server Internal Error',
  501: 'Not Implemented',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Server Time-out',
  505: 'Version Not Supported',
  513: 'Message Too Large',
  580: 'Precondition Failure',
  600: 'Busy Everywhere',
  603: 'Decline',
  604: 'Does Not Exist Anywhere',
  606: 'Not Acceptable',
};

/** The usual reason phrase of a status code ("Unknown" for codes without one). */
export function defaultReason(status: number): string {
  return REASONS[status] ?? (status >= 100 && status < 200 ? 'Progress' : 'Unknown');
}

export interface CreateResponseOptions {
  /**
   * Tag to put in To when the request's To has none. RFC 3261 8.2.6.2: a UAS adds one to every
   * response except 100 Trying, the same for all responses of one dialog -- so the caller
   * passes it (generateTag() once per dialog).
   */
  toTag?: string;
  /**
   * Copy Record-Route into the response: what a UAS does for responses that establish a dialog
   * (RFC 3261 12.1.1).
   */
  copyRecordRoute?: boolean;
  /** Extra headers, appended in order. */
  headers?: [string, HeaderValue][];
  body?: Buffer | string;
  /** Content-Type of the body ("application/sdp"). */
  contentType?: string;
}

/**
 * A response to `req`: Via (all, in order), From, To, Call-ID and CSeq copied (RFC 3261
 * 8.2.6.2), a To tag added when asked and missing, no tag for 100 Trying.
 * @throws RangeError when the status is not in 100..699; TypeError for a bad extra header.
 */
export function createResponse(req: SipRequest, status: number, reason?: string, opts: CreateResponseOptions = {}): SipResponse {
  const res = new SipResponse(status, reason ?? defaultReason(status));
  const copy = (key: string): void => {
    for (const e of (req as unknown as { entries: Entry[] }).entries) {
      if (e.key === key) (res as unknown as { entries: Entry[] }).entries.push({ ...e, parsed: cloneParsed(e.parsed) });
    }
  };
  copy('via');
  if (opts.copyRecordRoute) copy('record-route');
  copy('from');
  copy('to');
  copy('call-id');
  copy('cseq');
  if (opts.toTag !== undefined && status !== 100) {
    const to = res.to;
    if (to.tag === undefined) to.tag = opts.toTag;
  }
  for (const [name, value] of opts.headers ?? []) res.append(name, value);
  if (opts.body !== undefined) res.body = typeof opts.body === 'string' ? Buffer.from(opts.body, 'utf8') : opts.body;
  if (opts.contentType !== undefined) res.set('Content-Type', opts.contentType);
  return res;
}

export interface CreateRequestOptions {
  method: string;
  uri: Uri | string;
  from: NameAddr | string;
  to: NameAddr | string;
  /** Default: generateCallId(). */
  callId?: string;
  /** Default: 1. */
  cseq?: number;
  /**
   * The Via this UA adds (RFC 3261 8.1.1.7). Usually filled by the transport, which knows the
   * sent-by; give a Via here or leave it out and prepend one before sending.
   */
  via?: Via;
  /** Default 70 (RFC 3261 8.1.1.6). */
  maxForwards?: number;
  contact?: NameAddr | string;
  /** Route set, in order (RFC 3261 8.1.1.1, 12.2.1.1). */
  routes?: (NameAddr | string)[];
  /** Extra headers, appended in order. */
  headers?: [string, HeaderValue][];
  body?: Buffer | string;
  contentType?: string;
}

/**
 * A new request with the headers RFC 3261 8.1.1 requires, in the usual order: Via (when
 * given), Max-Forwards, Route, From, To, Call-ID, CSeq, Contact, extra headers, Content-Type.
 * The From tag is added when missing (8.1.1.3).
 * @throws TypeError for a method that is not a token or a header value that does not parse.
 */
export function createRequest(o: CreateRequestOptions): SipRequest {
  let uri: Uri;
  try {
    uri = typeof o.uri === 'string' ? parseUri(o.uri) : o.uri;
  } catch (err) {
    throw new TypeError(`invalid Request-URI "${sanitize(String(o.uri))}"`, { cause: err });
  }
  const req = new SipRequest(o.method, uri);
  if (o.via) req.append('Via', o.via);
  req.append('Max-Forwards', o.maxForwards ?? 70);
  for (const r of o.routes ?? []) req.append('Route', r);
  req.append('From', o.from);
  if (req.from.tag === undefined) req.from.tag = generateTag();
  req.append('To', o.to);
  req.append('Call-ID', o.callId ?? generateCallId());
  req.append('CSeq', new CSeq(o.cseq ?? 1, o.method));
  if (o.contact !== undefined) req.append('Contact', o.contact);
  for (const [name, value] of o.headers ?? []) req.append(name, value);
  if (o.body !== undefined) req.body = typeof o.body === 'string' ? Buffer.from(o.body, 'utf8') : o.body;
  if (o.contentType !== undefined) req.append('Content-Type', o.contentType);
  return req;
}

/** A new top Via for a request this UA sends: branch generated, rport asked for (RFC 3581 3). */
export function createVia(transport: string, host: string, port?: number, branch: string = generateBranch()): Via {
  const via = new Via(transport, host, port);
  via.branch = branch;
  via.rport = null;
  return via;
}

/** Convenience for tests and tools: a SIP URI from text. @throws TypeError when it is not a sip:/sips: URI. */
export function sipUri(text: string): SipUri {
  let u: Uri;
  try {
    u = parseUri(text);
  } catch (err) {
    throw new TypeError(`invalid SIP URI "${sanitize(text)}"`, { cause: err });
  }
  if (u.kind !== 'sip') throw new TypeError(`not a SIP URI: "${sanitize(text)}"`);
  return u;
}
