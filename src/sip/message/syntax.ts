/**
 * Lexical building blocks of the SIP grammar (RFC 3261 25.1): character classes, a scanner over
 * one header field value, quoted strings, % escaping and parameter lists. Everything here works
 * on JavaScript strings holding one unfolded header field value (index.ts has already joined
 * continuation lines, RFC 3261 7.3.1), indexes them with charCodeAt and allocates only the
 * substrings it returns: the parser's cost is dominated by these loops.
 *
 * Bad input throws SipParseError (errors.ts); callers higher up rewrap it with the name of the
 * header field so the 400's reason phrase says what was wrong.
 */
import { SipParseError } from './errors.ts';

// --- character classes (RFC 3261 25.1) ----------------------------------------------------------

const ALPHANUM = 1;
/** token: alphanum / "-" / "." / "!" / "%" / "*" / "_" / "+" / "`" / "'" / "~" */
export const C_TOKEN = 2;
/** unreserved: alphanum / mark; mark: "-" / "_" / "." / "!" / "~" / "*" / "'" / "(" / ")" */
export const C_UNRESERVED = 4;
/** user: unreserved / escaped / user-unreserved ("&" / "=" / "+" / "$" / "," / ";" / "?" / "/") */
export const C_USER = 8;
/** password: unreserved / escaped / "&" / "=" / "+" / "$" / "," */
export const C_PASSWORD = 16;
/** paramchar: param-unreserved ("[" / "]" / "/" / ":" / "&" / "+" / "$") / unreserved / escaped */
export const C_PARAM = 32;
/** hname / hvalue: hnv-unreserved ("[" / "]" / "/" / "?" / ":" / "+" / "$") / unreserved / escaped */
export const C_HNV = 64;
/** hostname characters (alphanum, "-", "."), plus "_" which real DNS names carry. */
export const C_HOST = 128;
/**
 * Characters of an unquoted header parameter value: token / host (gen-value, RFC 3261 7.3.1),
 * i.e. token plus ":" "[" "]" of IPv6 addresses; also "/" and "@", seen in the wild in
 * extension parameters and harmless here because the value ends at ";", "," or ">".
 */
export const C_PVALUE = 256;

const CLASS = new Uint16Array(128);
(function init(): void {
  const add = (chars: string, flag: number): void => {
    for (const ch of chars) CLASS[ch.charCodeAt(0)]! |= flag;
  };
  const alnum = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  add(alnum, ALPHANUM | C_TOKEN | C_UNRESERVED | C_USER | C_PASSWORD | C_PARAM | C_HNV | C_HOST | C_PVALUE);
  add("-.!%*_+`'~", C_TOKEN | C_PVALUE);
  add("-_.!~*'()", C_UNRESERVED | C_USER | C_PASSWORD | C_PARAM | C_HNV);
  add('&=+$,;?/', C_USER);
  add('&=+$,', C_PASSWORD);
  add('[]/:&+$', C_PARAM);
  add('[]/?:+$', C_HNV);
  add('-._', C_HOST);
  add(':[]/@', C_PVALUE);
})();

/** True when the UTF-16 code unit `c` is ASCII and in every class of `flags`. */
export function isClass(c: number, flags: number): boolean {
  return c < 128 && (CLASS[c]! & flags) === flags;
}

export function isTokenChar(c: number): boolean {
  return c < 128 && (CLASS[c]! & C_TOKEN) !== 0;
}

export function isWs(c: number): boolean {
  return c === 0x20 || c === 0x09;
}

/**
 * `s` without leading and trailing SP / HT: the only whitespace SIP knows (LWS, RFC 3261 25.1).
 * String.prototype.trim() would also eat U+FEFF, NBSP and a bare CR, which are data here
 * (RFC 4475 3.1.1.2 puts a BOM at the start of a header value).
 */
export function trimWs(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && isWs(s.charCodeAt(a))) a++;
  while (b > a && isWs(s.charCodeAt(b - 1))) b--;
  return a === 0 && b === s.length ? s : s.slice(a, b);
}

/** True when `s` is a non-empty token (RFC 3261 25.1): methods, header names, parameter names. */
export function isToken(s: string): boolean {
  if (s.length === 0) return false;
  for (let i = 0; i < s.length; i++) if (!isTokenChar(s.charCodeAt(i))) return false;
  return true;
}

/** Printable ASCII 0x21..0x7E and nothing else (Call-ID words, branch values we generate). */
export function isVisible(s: string): boolean {
  if (s.length === 0) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// --- errors -------------------------------------------------------------------------------------

/**
 * Reason phrase of the 400 to a message with an LF not preceded by CR in its header section
 * (the parser's and the stream framer's, so both say the same; RFC 3261 7: lines end in CRLF).
 */
export const BARE_LF_REASON = 'Bad Request: bare LF in header section';

/** Printable ASCII only, at most 40 characters: detail text may quote input, never inject. */
export function sanitize(s: string, max = 40): string {
  let out = '';
  for (let i = 0; i < s.length && out.length < max; i++) {
    const c = s.charCodeAt(i);
    out += c >= 0x20 && c <= 0x7e ? s[i] : '?';
  }
  return s.length > max ? out + '...' : out;
}

export function syntaxError(what: string, s: string, at: number): SipParseError {
  return new SipParseError(`Bad Request: malformed ${what}`, `at ${at} in "${sanitize(s, 60)}"`);
}

// --- scanning -----------------------------------------------------------------------------------

/** Index of the first non-whitespace (SP / HT) at or after i. */
export function skipWs(s: string, i: number, end = s.length): number {
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c !== 0x20 && c !== 0x09) break;
    i++;
  }
  return i;
}

/** Index just past the run of token characters starting at i (i itself when there is none). */
export function scanToken(s: string, i: number, end = s.length): number {
  while (i < end && isTokenChar(s.charCodeAt(i))) i++;
  return i;
}

/** Index just past the run of characters of `flags` starting at i. */
export function scanClass(s: string, i: number, flags: number, end = s.length): number {
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c >= 128 || (CLASS[c]! & flags) === 0) break;
    i++;
  }
  return i;
}

/**
 * Index just past the quoted-string that starts at i (s[i] must be '"'), or -1 when it is not
 * terminated. quoted-pair = "\" (%x00-09 / %x0B-0C / %x0E-7F) (RFC 3261 25.1); a backslash
 * before a non-ASCII character is accepted too (UTF-8 display names do that in the wild).
 */
export function scanQuoted(s: string, i: number, end = s.length): number {
  i++;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c === 0x5c) {
      const n = s.charCodeAt(i + 1);
      if (i + 1 >= end || n === 0x0a || n === 0x0d) return -1;
      i += 2;
      continue;
    }
    if (c === 0x0a || c === 0x0d) return -1;
    i++;
  }
  return -1;
}

/** The content of a quoted-string `q` (with its quotes), quoted-pairs resolved. */
export function unquote(q: string): string {
  const inner = q.slice(1, -1);
  if (inner.indexOf('\\') < 0) return inner;
  let out = '';
  for (let i = 0; i < inner.length; i++) {
    const c = inner[i];
    if (c === '\\' && i + 1 < inner.length) {
      out += inner[i + 1];
      i++;
    } else out += c;
  }
  return out;
}

/**
 * `s` as a quoted-string: '"' and '\' and control characters become quoted-pairs; CR and LF,
 * which no quoted-pair may carry (RFC 3261 25.1), become SP so a value can never break a header
 * line.
 */
export function quote(s: string): string {
  let plain = true;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22 || c === 0x5c || c < 0x20 || c === 0x7f) {
      plain = false;
      break;
    }
  }
  if (plain) return `"${s}"`;
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x0a || c === 0x0d) out += ' ';
    else if (c === 0x22 || c === 0x5c || (c < 0x20 && c !== 0x09) || c === 0x7f) out += '\\' + s[i];
    else out += s[i];
  }
  return out + '"';
}

// --- % escaping (RFC 3261 25.1 "escaped", RFC 3986 2.1) -----------------------------------------

function hexVal(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  return -1;
}

/**
 * Resolves % HEX HEX escapes once (never recursively: "v%61lue%25%34%31" is "value%41", RFC 4475
 * 3.1.1.3). The octets are read as UTF-8, so "%C3%A9" is "é".
 * @throws SipParseError when a "%" is not followed by two hex digits.
 */
export function unescapePct(s: string, what: string): string {
  const first = s.indexOf('%');
  if (first < 0) return s;
  const src = Buffer.from(s, 'utf8');
  const out = Buffer.allocUnsafe(src.length);
  let j = 0;
  for (let i = 0; i < src.length; i++) {
    const b = src[i]!;
    if (b === 0x25) {
      const h = i + 2 < src.length ? hexVal(src[i + 1]!) : -1;
      const l = h >= 0 ? hexVal(src[i + 2]!) : -1;
      if (l < 0) throw syntaxError(what, s, i);
      out[j++] = (h << 4) | l;
      i += 2;
    } else out[j++] = b;
  }
  return out.toString('utf8', 0, j);
}

const HEX = '0123456789ABCDEF';

/** `s` with every character outside `flags` written as % HEX HEX of its UTF-8 octets. */
export function escapePct(s: string, flags: number): string {
  let i = 0;
  for (; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 128 || (CLASS[c]! & flags) === 0 || c === 0x25) break;
  }
  if (i === s.length) return s;
  let out = s.slice(0, i);
  for (; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 128 && (CLASS[c]! & flags) !== 0 && c !== 0x25) {
      out += s[i];
      continue;
    }
    // One code point (a surrogate pair when needed), as UTF-8.
    const cp = s.codePointAt(i)!;
    const ch = String.fromCodePoint(cp);
    if (cp > 0xffff) i++;
    for (const b of Buffer.from(ch, 'utf8')) out += '%' + HEX[b >> 4] + HEX[b & 15];
  }
  return out;
}

// --- parameters ---------------------------------------------------------------------------------

/**
 * An ordered list of parameters, `;name=value` or `;name`. Names keep their spelling and are
 * looked up case-insensitively (RFC 3261 7.3.1, 19.1.4). For header parameters the value is kept
 * as written, a quoted-string with its quotes (`getUnquoted` resolves it); for URI parameters
 * (UriParams) names and values are stored unescaped and escaped again when serialized.
 * A parameter without a value has the value `null`.
 */
export class Params {
  /**
   * Flat [name, lower-cased name, value, ...] triples: one array per parameter list, and none
   * until the first parameter (most URIs and many header values have none).
   */
  protected items: (string | null)[] | undefined;

  get size(): number {
    return this.items === undefined ? 0 : this.items.length / 3;
  }

  /** Name of the i-th parameter (for subclasses that serialize differently). */
  protected nameAt(i: number): string {
    return this.items![i * 3] as string;
  }

  /** Value of the i-th parameter. */
  protected valueAt(i: number): string | null {
    return this.items![i * 3 + 2] ?? null;
  }

  private index(name: string): number {
    const it = this.items;
    if (it === undefined) return -1;
    const key = name.toLowerCase();
    for (let i = 1; i < it.length; i += 3) if (it[i] === key) return i - 1;
    return -1;
  }

  has(name: string): boolean {
    return this.index(name) >= 0;
  }

  /** The value as stored; `null` for a parameter without value; `undefined` when absent. */
  get(name: string): string | null | undefined {
    const i = this.index(name);
    return i < 0 ? undefined : (this.items![i + 2] ?? null);
  }

  /** The value with a surrounding quoted-string resolved; `undefined` when absent or valueless. */
  getUnquoted(name: string): string | undefined {
    const v = this.get(name);
    if (v === null || v === undefined) return undefined;
    return v.length >= 2 && v.charCodeAt(0) === 0x22 ? unquote(v) : v;
  }

  /**
   * Checks a parameter set by a caller: header parameters need a token name and a gen-value
   * (token, host or quoted-string, RFC 3261 7.3.1), so that no value can break the header line.
   * @throws TypeError
   */
  protected check(name: string, value: string | null): void {
    if (!isToken(name)) throw new TypeError(`parameter name "${sanitize(name)}" is not a token`);
    if (value === null) return;
    if (value.length > 0 && value.charCodeAt(0) === 0x22) {
      if (scanQuoted(value, 0) === value.length) return;
    } else if (value.length > 0) {
      let ok = true;
      for (let i = 0; i < value.length && ok; i++) {
        const c = value.charCodeAt(i);
        if (c < 128 && (CLASS[c]! & C_PVALUE) === 0) ok = false;
      }
      if (ok) return;
    }
    throw new TypeError(`parameter value "${sanitize(value)}" is neither a token nor a quoted string`);
  }

  /**
   * Replaces the value of `name` (keeping its position) or appends it. `null`: no value.
   * @throws TypeError when the name or value could not be written into a header field.
   */
  set(name: string, value: string | null): this {
    this.check(name, value);
    const i = this.index(name);
    if (i >= 0) this.items![i + 2] = value;
    else this.add(name, value);
    return this;
  }

  /** Appends without looking for an existing parameter of the name (the parser keeps duplicates). */
  add(name: string, value: string | null): this {
    if (this.items === undefined) this.items = [name, name.toLowerCase(), value];
    else this.items.push(name, name.toLowerCase(), value);
    return this;
  }

  delete(name: string): boolean {
    const i = this.index(name);
    if (i < 0) return false;
    this.items!.splice(i, 3);
    return true;
  }

  /** [name, value] pairs in order. */
  entries(): [string, string | null][] {
    const out: [string, string | null][] = [];
    for (let i = 0; i < this.size; i++) out.push([this.nameAt(i), this.valueAt(i)]);
    return out;
  }

  copyFrom(other: Params): this {
    this.items = other.items === undefined ? undefined : other.items.slice();
    return this;
  }

  /** `;a=1;b` (empty string when there are none). */
  toString(): string {
    const it = this.items;
    if (it === undefined) return '';
    let out = '';
    for (let i = 0; i < it.length; i += 3) {
      const v = it[i + 2];
      out += v === null || v === undefined ? `;${it[i]}` : `;${it[i]}=${v}`;
    }
    return out;
  }
}

/**
 * Parses `*( SEMI generic-param )` from s[i..end) into `params` (RFC 3261 7.3.1, 25.1):
 * generic-param = token [ EQUAL gen-value ], gen-value = token / host / quoted-string, with
 * optional whitespace around ";" and "=" (SEMI, EQUAL). Stops at `end` or at a character that
 * cannot continue the list, returning its index.
 * @throws SipParseError for an empty parameter (";;"), a name that is not a token, a bad value.
 */
export function parseParams(s: string, i: number, params: Params, what: string, end = s.length): number {
  for (;;) {
    i = skipWs(s, i, end);
    if (i >= end || s.charCodeAt(i) !== 0x3b /* ; */) return i;
    i = skipWs(s, i + 1, end);
    const nameStart = i;
    i = scanToken(s, i, end);
    if (i === nameStart) throw syntaxError(what, s, i);
    const name = s.slice(nameStart, i);
    let j = skipWs(s, i, end);
    if (j < end && s.charCodeAt(j) === 0x3d /* = */) {
      j = skipWs(s, j + 1, end);
      let vEnd: number;
      if (j < end && s.charCodeAt(j) === 0x22) {
        vEnd = scanQuoted(s, j, end);
        if (vEnd < 0) throw syntaxError(what, s, j);
      } else {
        vEnd = j;
        while (vEnd < end) {
          const c = s.charCodeAt(vEnd);
          // Non-ASCII (UTF-8) values are accepted, as RFC 4475 3.1.1.2 expects.
          if (c < 128 && (CLASS[c]! & C_PVALUE) === 0) break;
          vEnd++;
        }
        if (vEnd === j) throw syntaxError(what, s, j);
      }
      params.add(name, s.slice(j, vEnd));
      i = vEnd;
    } else {
      params.add(name, null);
    }
  }
}

/**
 * `s` as an unsigned decimal integer (1*DIGIT, leading zeros allowed: "0009" is 9, RFC 4475
 * 3.1.1.1), or -1 when it is not one or exceeds `maxValue`.
 */
export function parseUint(s: string, maxValue = 0xffffffff): number {
  if (s.length === 0 || s.length > 16) {
    // Leading zeros are legal ("0009", RFC 4475 3.1.1.1); strip them before giving up on length.
    let k = 0;
    while (k < s.length - 1 && s.charCodeAt(k) === 0x30) k++;
    if (s.length === 0 || s.length - k > 16) return -1;
    s = s.slice(k);
  }
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i) - 0x30;
    if (c < 0 || c > 9) return -1;
    n = n * 10 + c;
  }
  return n > maxValue ? -1 : n;
}
