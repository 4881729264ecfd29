/**
 * The grammar of the Digest authentication header values, on plain strings so any layer can use
 * it (the SIP message parser hands us the header value; nothing here knows about messages).
 *
 *   WWW-Authenticate / Proxy-Authenticate  (RFC 3261 section 20.44 / 20.27, 25.1 `challenge`)
 *     Digest realm="biloxi.com", nonce="...", opaque="...", algorithm=SHA-256, qop="auth"
 *   Authorization / Proxy-Authorization    (RFC 3261 section 20.7 / 20.28, 25.1 `credentials`)
 *     Digest username="bob", realm="biloxi.com", nonce="...", uri="sip:bob@biloxi.com",
 *            response="...", algorithm=SHA-256, cnonce="...", qop=auth, nc=00000001
 *
 * Grammar (RFC 3261 section 25.1, RFC 7235 section 2.1, RFC 7616 section 3.3 / 3.4):
 *   auth-param    = token EQUAL ( token / quoted-string )
 *   quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
 *   quoted-pair   = "\" ( %x00-09 / %x0B-0C / %x0E-7F )
 * Parameter names are case-insensitive (RFC 7235 section 2.1) and each occurs at most once per
 * challenge (same section: "each parameter name MUST only occur once per challenge").
 *
 * Parsing is liberal in what it accepts (RFC 3261 section 2 / Postel): any parameter may be
 * quoted or not (many PBXs send `qop="auth"` or `algorithm="MD5"` in credentials), empty list
 * elements are skipped (RFC 7230 section 7), folded whitespace (CRLF + WSP) counts as a space.
 * It never throws on peer input: every function returns a result with a reason.
 *
 * Formatting is strict in what it sends: RFC 7616 section 3.4 / RFC 3261 section 25.1 quoting
 * (username, realm, nonce, uri, response, cnonce, opaque quoted; algorithm, qop, nc, stale not).
 * SIP does not combine these header fields with commas (RFC 3261 section 7.3.1), so several
 * challenges are several header field values: formatting returns one string per challenge.
 */

/** A parse result: the value, or why the input was rejected (safe to log: never a secret). */
export type ParseResult<T> = { ok: true; value: T } | { ok: false; error: string };

/** One challenge or credentials of any scheme, as parsed (RFC 7235 section 2.1). */
export interface AuthChallenge {
  /** The auth-scheme as sent (compare case-insensitively: RFC 7235 section 2.1). */
  scheme: string;
  /** Parameters by lower-cased name; values unquoted and unescaped. */
  params: ReadonlyMap<string, string>;
  /** The token68 form (`Basic dXNlcg==`), for schemes that use it. */
  token68?: string;
}

/** Longest header value we parse; longer values are rejected (no legitimate one comes close). */
export const MAX_AUTH_HEADER_LENGTH = 8192;
/** Most parameters in one challenge or credentials. */
export const MAX_AUTH_PARAMS = 64;

// RFC 3261 section 25.1: token = 1*(alphanum / "-" / "." / "!" / "%" / "*" / "_" / "+" / "`" / "'" / "~")
// RFC 7230 section 3.2.6 adds "#" "$" "&" "^" "|"; accept both sets when parsing.
const TOKEN_CHARS = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  const ch = String.fromCharCode(c);
  if (/[A-Za-z0-9]/.test(ch) || "-.!%*_+`'~#$&^|".includes(ch)) TOKEN_CHARS[c] = 1;
}

function isTokenChar(code: number): boolean {
  return code < 128 && TOKEN_CHARS[code] === 1;
}

/** Whether s is a non-empty token (RFC 3261 section 25.1), so it may be sent unquoted. */
export function isToken(s: string): boolean {
  if (s.length === 0) return false;
  for (let i = 0; i < s.length; i++) if (!isTokenChar(s.charCodeAt(i))) return false;
  return true;
}

const SP = 0x20;
const HTAB = 0x09;
const CR = 0x0d;
const LF = 0x0a;
const DQUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const EQUAL = 0x3d;

class Cursor {
  pos = 0;
  constructor(readonly s: string) {}

  get done(): boolean {
    return this.pos >= this.s.length;
  }

  peek(): number {
    return this.pos < this.s.length ? this.s.charCodeAt(this.pos) : -1;
  }

  /** Skips LWS (RFC 3261 section 25.1: SP, HTAB, and CRLF folds); returns how much it skipped. */
  skipWs(): number {
    const start = this.pos;
    for (;;) {
      const c = this.peek();
      if (c === SP || c === HTAB || c === CR || c === LF) this.pos++;
      else break;
    }
    return this.pos - start;
  }

  /** Reads a token, or '' when none starts here. */
  token(): string {
    const start = this.pos;
    while (!this.done && isTokenChar(this.peek())) this.pos++;
    return this.s.slice(start, this.pos);
  }
}

/**
 * Reads a quoted-string whose opening DQUOTE is at the cursor (RFC 3261 section 25.1).
 * Returns the unescaped content, or an error.
 */
function readQuoted(cur: Cursor): ParseResult<string> {
  cur.pos++; // opening quote
  let out = '';
  let runStart = cur.pos;
  for (;;) {
    if (cur.done) return { ok: false, error: 'unterminated quoted string' };
    const c = cur.peek();
    if (c === DQUOTE) {
      out += cur.s.slice(runStart, cur.pos);
      cur.pos++;
      return { ok: true, value: out };
    }
    if (c === BACKSLASH) {
      out += cur.s.slice(runStart, cur.pos);
      const next = cur.pos + 1 < cur.s.length ? cur.s.charCodeAt(cur.pos + 1) : -1;
      // quoted-pair = "\" (%x00-09 / %x0B-0C / %x0E-7F): no CR, no LF, ASCII only. Escaped
      // controls are refused too: no peer uses them, and echoing one would break a header.
      if (next < 0 || next > 0x7e || (next < 0x20 && next !== HTAB)) {
        return { ok: false, error: 'bad escape in quoted string' };
      }
      out += String.fromCharCode(next);
      cur.pos += 2;
      runStart = cur.pos;
      continue;
    }
    if (c === CR || c === LF) {
      // A fold inside the string (RFC 3261 section 7.3.1): [CR] LF followed by WSP is one SP.
      let p = cur.pos;
      if (c === CR) p++;
      if (cur.s.charCodeAt(p) !== LF) return { ok: false, error: 'bare CR in quoted string' };
      p++;
      const w = cur.s.charCodeAt(p);
      if (w !== SP && w !== HTAB) return { ok: false, error: 'line break in quoted string' };
      out += cur.s.slice(runStart, cur.pos) + ' ';
      while (cur.s.charCodeAt(p) === SP || cur.s.charCodeAt(p) === HTAB) p++;
      cur.pos = p;
      runStart = p;
      continue;
    }
    // qdtext excludes the other controls (RFC 3261 section 25.1); UTF-8 above 0x7F is allowed.
    if ((c < 0x20 && c !== HTAB) || c === 0x7f) return { ok: false, error: 'control character in quoted string' };
    cur.pos++;
  }
}

/** Reads an unquoted parameter value: liberal, up to a comma or whitespace. */
function readBare(cur: Cursor): ParseResult<string> {
  const start = cur.pos;
  for (;;) {
    const c = cur.peek();
    if (c < 0 || c === COMMA || c === SP || c === HTAB || c === CR || c === LF) break;
    if (c < 0x20 || c === 0x7f || c === DQUOTE || c === BACKSLASH) {
      return { ok: false, error: 'bad character in parameter value' };
    }
    cur.pos++;
  }
  if (cur.pos === start) return { ok: false, error: 'empty parameter value' };
  return { ok: true, value: cur.s.slice(start, cur.pos) };
}

/** Skips whitespace and any number of commas (empty list elements, RFC 7230 section 7). */
function skipSeparators(cur: Cursor): void {
  for (;;) {
    cur.skipWs();
    if (cur.peek() === COMMA) cur.pos++;
    else return;
  }
}

// RFC 7235 section 2.1: token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
function isToken68Char(code: number): boolean {
  return (
    (code >= 0x30 && code <= 0x39) ||
    (code >= 0x41 && code <= 0x5a) ||
    (code >= 0x61 && code <= 0x7a) ||
    code === 0x2d || code === 0x2e || code === 0x5f || code === 0x7e || code === 0x2b || code === 0x2f
  );
}

/** Reads a run of token and token68 characters (a parameter name or a token68). */
function readWord(cur: Cursor): string {
  const start = cur.pos;
  for (;;) {
    const c = cur.peek();
    if (c >= 0 && (isTokenChar(c) || isToken68Char(c))) cur.pos++;
    else break;
  }
  return cur.s.slice(start, cur.pos);
}

function atElementEnd(cur: Cursor): boolean {
  return cur.done || cur.peek() === COMMA;
}

/**
 * Parses a header value holding one or more challenges or credentials (RFC 7235 section 2.1:
 * `1#challenge`, `challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ]`). SIP sends one
 * per header field (RFC 3261 section 7.3.1), but HTTP-style comma-joined values are accepted.
 *
 * The value is read as comma-separated elements, each one of:
 *   `scheme`   `scheme token68`   `scheme name=value`   `name=value` (continues the challenge)
 */
export function parseAuthHeader(value: string): ParseResult<AuthChallenge[]> {
  if (typeof value !== 'string') return { ok: false, error: 'not a string' };
  if (value.length > MAX_AUTH_HEADER_LENGTH) return { ok: false, error: 'header value too long' };
  const cur = new Cursor(value);
  const out: AuthChallenge[] = [];
  let current: { challenge: AuthChallenge; params: Map<string, string> } | undefined;

  const addParam = (name: string): ParseResult<true> => {
    if (current === undefined) return { ok: false, error: `parameter ${name} before any auth-scheme` };
    if (current.challenge.token68 !== undefined) return { ok: false, error: 'parameters after a token68' };
    if (!isToken(name)) return { ok: false, error: `bad parameter name ${JSON.stringify(name)}` };
    // cursor is just past "=" and any whitespace
    const v = cur.peek() === DQUOTE ? readQuoted(cur) : readBare(cur);
    if (!v.ok) return { ok: false, error: `${name}: ${v.error}` };
    const key = name.toLowerCase();
    if (current.params.has(key)) return { ok: false, error: `duplicate parameter ${key}` };
    if (current.params.size >= MAX_AUTH_PARAMS) return { ok: false, error: 'too many parameters' };
    current.params.set(key, v.value);
    return { ok: true, value: true };
  };

  skipSeparators(cur);
  if (cur.done) return { ok: false, error: 'empty header value' };
  while (!cur.done) {
    const first = cur.token();
    if (first === '') return { ok: false, error: `unexpected character at ${cur.pos}` };
    const ws = cur.skipWs();
    if (cur.peek() === EQUAL) {
      // `name=value`: a further parameter of the current challenge.
      cur.pos++;
      cur.skipWs();
      const r = addParam(first);
      if (!r.ok) return r;
    } else {
      // `first` is an auth-scheme: a new challenge starts here.
      if (out.length >= MAX_AUTH_PARAMS) return { ok: false, error: 'too many challenges' };
      const params = new Map<string, string>();
      const challenge: AuthChallenge = { scheme: first, params };
      out.push(challenge);
      current = { challenge, params };
      if (!atElementEnd(cur)) {
        if (ws === 0) return { ok: false, error: 'auth-scheme must be followed by whitespace' };
        const word = readWord(cur);
        if (word === '') return { ok: false, error: `unexpected character at ${cur.pos}` };
        cur.skipWs();
        if (cur.peek() === EQUAL) {
          const eqStart = cur.pos;
          while (cur.peek() === EQUAL) cur.pos++;
          const eqCount = cur.pos - eqStart;
          cur.skipWs();
          if (atElementEnd(cur)) {
            challenge.token68 = word + '='.repeat(eqCount);
          } else {
            if (eqCount !== 1) return { ok: false, error: `bad "=" after ${word}` };
            const r = addParam(word);
            if (!r.ok) return r;
          }
        } else if (atElementEnd(cur)) {
          challenge.token68 = word;
        } else {
          return { ok: false, error: `expected "=" after ${word}` };
        }
      }
    }
    cur.skipWs();
    if (!atElementEnd(cur)) return { ok: false, error: `expected "," at ${cur.pos}` };
    skipSeparators(cur);
  }
  return { ok: true, value: out };
}

// ---------------------------------------------------------------------------------------------
// Digest challenge (WWW-Authenticate / Proxy-Authenticate)

/** A Digest challenge, validated (RFC 7616 section 3.3, RFC 3261 section 25.1 `digest-cln`). */
export interface DigestChallenge {
  realm: string;
  nonce: string;
  opaque?: string;
  /** The algorithm as sent; 'MD5' when absent (RFC 7616 section 3.3). */
  algorithm: string;
  /** qop-options tokens, lower-cased; empty when the challenge has no qop (RFC 2069 style). */
  qop: string[];
  /** stale=true: the nonce expired, retry with the same credentials (RFC 7616 section 3.3). */
  stale: boolean;
  domain?: string;
  /** userhash=true offered (RFC 7616 section 3.4.4). */
  userhash: boolean;
  /** Every parameter, names lower-cased. */
  params: ReadonlyMap<string, string>;
}

function isDigest(c: AuthChallenge): boolean {
  return c.scheme.toLowerCase() === 'digest';
}

/** Validates a parsed challenge as Digest: realm and nonce are required (RFC 7616 section 3.3). */
export function toDigestChallenge(c: AuthChallenge): ParseResult<DigestChallenge> {
  if (!isDigest(c)) return { ok: false, error: `scheme ${c.scheme} is not Digest` };
  if (c.token68 !== undefined) return { ok: false, error: 'Digest takes parameters, not token68' };
  const p = c.params;
  const realm = p.get('realm');
  const nonce = p.get('nonce');
  if (realm === undefined) return { ok: false, error: 'challenge without realm' };
  if (nonce === undefined || nonce === '') return { ok: false, error: 'challenge without nonce' };
  const qopRaw = p.get('qop');
  const qop = qopRaw === undefined ? [] : qopRaw.split(',').map((t) => t.trim().toLowerCase()).filter((t) => t !== '');
  const out: DigestChallenge = {
    realm,
    nonce,
    algorithm: p.get('algorithm') ?? 'MD5',
    qop,
    stale: (p.get('stale') ?? '').toLowerCase() === 'true',
    userhash: (p.get('userhash') ?? '').toLowerCase() === 'true',
    params: p,
  };
  const opaque = p.get('opaque');
  if (opaque !== undefined) out.opaque = opaque;
  const domain = p.get('domain');
  if (domain !== undefined) out.domain = domain;
  return { ok: true, value: out };
}

/**
 * The Digest challenges of one or more WWW-Authenticate / Proxy-Authenticate values, in order.
 * Other schemes are skipped; Digest challenges that are malformed are listed in `errors` (for
 * logs) and skipped, as RFC 7616 section 3.3 asks of challenges a client cannot use.
 */
export function parseDigestChallenges(values: string | readonly string[]): { challenges: DigestChallenge[]; errors: string[] } {
  const list = typeof values === 'string' ? [values] : values;
  const challenges: DigestChallenge[] = [];
  const errors: string[] = [];
  for (const v of list) {
    const parsed = parseAuthHeader(v);
    if (!parsed.ok) {
      errors.push(parsed.error);
      continue;
    }
    for (const c of parsed.value) {
      if (!isDigest(c)) continue;
      const d = toDigestChallenge(c);
      if (d.ok) challenges.push(d.value);
      else errors.push(d.error);
    }
  }
  return { challenges, errors };
}

/** What a challenge is built from. */
export interface DigestChallengeFields {
  realm: string;
  nonce: string;
  opaque?: string;
  algorithm?: string;
  /** qop-options, sent as `qop="auth"`; omitted when empty (RFC 3261 section 25.1). */
  qop?: readonly string[];
  stale?: boolean;
  domain?: string;
}

/** Wraps s in a quoted-string, escaping `"` and `\` (RFC 3261 section 25.1 quoted-pair). */
export function quoteString(s: string): string {
  assertHeaderSafe(s);
  return '"' + s.replace(/[\\"]/g, (m) => '\\' + m) + '"';
}

/**
 * Refuses values that would break the header line (header injection), i.e. any control
 * character other than HTAB.
 * @throws TypeError when s holds CR, LF or another control character.
 */
function assertHeaderSafe(s: string): void {
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x08\x0a-\x1f\x7f]/.test(s)) throw new TypeError('header parameter value contains a control character');
}

function bareToken(name: string, value: string): string {
  if (!isToken(value)) throw new TypeError(`${name} must be a token, got ${JSON.stringify(value)}`);
  return value;
}

/**
 * Formats one challenge (a WWW-Authenticate or Proxy-Authenticate value).
 * @throws TypeError when a value holds a control character or a token field is not a token.
 */
export function formatDigestChallenge(c: DigestChallengeFields): string {
  const parts = [`realm=${quoteString(c.realm)}`, `nonce=${quoteString(c.nonce)}`];
  if (c.opaque !== undefined) parts.push(`opaque=${quoteString(c.opaque)}`);
  if (c.algorithm !== undefined) parts.push(`algorithm=${bareToken('algorithm', c.algorithm)}`);
  if (c.qop !== undefined && c.qop.length > 0) {
    parts.push(`qop=${quoteString(c.qop.map((q) => bareToken('qop', q)).join(','))}`);
  }
  if (c.domain !== undefined) parts.push(`domain=${quoteString(c.domain)}`);
  if (c.stale === true) parts.push('stale=true');
  return 'Digest ' + parts.join(', ');
}

// ---------------------------------------------------------------------------------------------
// Digest credentials (Authorization / Proxy-Authorization)

/** Digest credentials, validated (RFC 7616 section 3.4, RFC 3261 section 25.1 `digest-response`). */
export interface DigestCredentials {
  username: string;
  realm: string;
  nonce: string;
  uri: string;
  /** The response as sent (hex; compare case-insensitively). */
  response: string;
  /** As sent; undefined means MD5 (RFC 7616 section 3.4). */
  algorithm?: string;
  cnonce?: string;
  opaque?: string;
  /** The chosen qop, lower-cased; undefined for RFC 2069 style credentials. */
  qop?: string;
  /** The nonce-count as sent (8LHEX); used verbatim in the digest. */
  nc?: string;
  userhash: boolean;
  params: ReadonlyMap<string, string>;
}

/**
 * Validates parsed credentials as Digest: username, realm, nonce, uri and response are required
 * (RFC 3261 section 22.4, RFC 7616 section 3.4); with a qop, cnonce and nc are too.
 */
export function toDigestCredentials(c: AuthChallenge): ParseResult<DigestCredentials> {
  if (!isDigest(c)) return { ok: false, error: `scheme ${c.scheme} is not Digest` };
  if (c.token68 !== undefined) return { ok: false, error: 'Digest takes parameters, not token68' };
  const p = c.params;
  const required = ['username', 'realm', 'nonce', 'uri', 'response'] as const;
  for (const k of required) if (p.get(k) === undefined) return { ok: false, error: `credentials without ${k}` };
  const out: DigestCredentials = {
    username: p.get('username') ?? '',
    realm: p.get('realm') ?? '',
    nonce: p.get('nonce') ?? '',
    uri: p.get('uri') ?? '',
    response: p.get('response') ?? '',
    userhash: (p.get('userhash') ?? '').toLowerCase() === 'true',
    params: p,
  };
  const algorithm = p.get('algorithm');
  if (algorithm !== undefined) out.algorithm = algorithm;
  const opaque = p.get('opaque');
  if (opaque !== undefined) out.opaque = opaque;
  const qop = p.get('qop');
  if (qop !== undefined) {
    out.qop = qop.trim().toLowerCase();
    const cnonce = p.get('cnonce');
    const nc = p.get('nc');
    if (cnonce === undefined || cnonce === '') return { ok: false, error: 'qop without cnonce' };
    if (nc === undefined) return { ok: false, error: 'qop without nc' };
    out.cnonce = cnonce;
    out.nc = nc;
  } else {
    const cnonce = p.get('cnonce');
    if (cnonce !== undefined) out.cnonce = cnonce;
  }
  return { ok: true, value: out };
}

/**
 * Parses one Authorization / Proxy-Authorization value holding Digest credentials. Exactly one
 * credentials per value (RFC 3261 section 7.3.1 and 25.1: `credentials` is not a list).
 */
export function parseDigestCredentials(value: string): ParseResult<DigestCredentials> {
  const parsed = parseAuthHeader(value);
  if (!parsed.ok) return parsed;
  if (parsed.value.length !== 1) return { ok: false, error: 'expected exactly one credentials' };
  const [only] = parsed.value;
  if (only === undefined) return { ok: false, error: 'expected exactly one credentials' };
  return toDigestCredentials(only);
}

/** What credentials are built from. */
export interface DigestCredentialsFields {
  username: string;
  realm: string;
  nonce: string;
  uri: string;
  response: string;
  algorithm?: string;
  cnonce?: string;
  opaque?: string;
  qop?: string;
  nc?: string;
}

/**
 * Formats credentials (an Authorization or Proxy-Authorization value) with RFC 7616 section
 * 3.4 / RFC 3261 section 25.1 quoting. The uri is sent exactly as given (only `"` and `\` are
 * escaped, which unescaping restores).
 * @throws TypeError when a value holds a control character or a token field is not a token.
 */
export function formatDigestCredentials(c: DigestCredentialsFields): string {
  const parts = [
    `username=${quoteString(c.username)}`,
    `realm=${quoteString(c.realm)}`,
    `nonce=${quoteString(c.nonce)}`,
    `uri=${quoteString(c.uri)}`,
    `response=${quoteString(c.response)}`,
  ];
  if (c.algorithm !== undefined) parts.push(`algorithm=${bareToken('algorithm', c.algorithm)}`);
  if (c.cnonce !== undefined) parts.push(`cnonce=${quoteString(c.cnonce)}`);
  if (c.opaque !== undefined) parts.push(`opaque=${quoteString(c.opaque)}`);
  if (c.qop !== undefined) parts.push(`qop=${bareToken('qop', c.qop)}`);
  if (c.nc !== undefined) parts.push(`nc=${bareToken('nc', c.nc)}`);
  return 'Digest ' + parts.join(', ');
}
