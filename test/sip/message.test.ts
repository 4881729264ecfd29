import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  buildStatelessResponse,
  canonicalName,
  createRequest,
  createResponse,
  createVia,
  CSeq,
  generateBranch,
  generateCallId,
  generateTag,
  NameAddr,
  parseMessage,
  parseNameAddr,
  parseVia,
  quote,
  SipParseError,
  SipRequest,
  SipResponse,
  SipStreamFramer,
  SipTooLargeError,
  SipUri,
  SipVersionError,
  splitList,
  tryExtractResponseContext,
  type SipMessageAny,
} from '../../src/sip/message/index.ts';

// --- fixtures ------------------------------------------------------------------------------------
//
// test/fixtures/sip/*.txt hold the messages as text with LF line ends; each LF is a CRLF on the
// wire, and <hex>..</hex> stands for raw octets (RFC 4475 2.2). The RFC 4475 messages are typed
// from the RFC (docs/sip-message.md lists them); the others are ordinary messages.

const FIXTURES = join(import.meta.dirname, '../fixtures/sip');

function fixture(name: string): Buffer {
  const text = readFileSync(join(FIXTURES, `${name}.txt`), 'utf8').replace(/\n/g, '\r\n');
  const parts: Buffer[] = [];
  let pos = 0;
  for (const m of text.matchAll(/<hex>([0-9A-Fa-f]*)<\/hex>/g)) {
    parts.push(Buffer.from(text.slice(pos, m.index), 'utf8'), Buffer.from(m[1]!, 'hex'));
    pos = m.index + m[0].length;
  }
  parts.push(Buffer.from(text.slice(pos), 'utf8'));
  return Buffer.concat(parts);
}

function req(name: string): SipRequest {
  const m = parseMessage(fixture(name));
  if (!(m instanceof SipRequest)) throw new Error(`${name} is not a request`);
  return m;
}

function res(name: string): SipResponse {
  const m = parseMessage(fixture(name));
  if (!(m instanceof SipResponse)) throw new Error(`${name} is not a response`);
  return m;
}

function asResponseMessage(input: Buffer | string): SipResponse {
  const m = parseMessage(input);
  if (!(m instanceof SipResponse)) throw new Error('not a response');
  return m;
}

function parseError(input: Buffer | string, opts?: { stream?: boolean }): SipParseError {
  try {
    parseMessage(input, opts);
  } catch (err) {
    if (err instanceof SipParseError) return err;
    throw err;
  }
  throw new Error('parsed without error');
}

/** What must survive serialization: start line, headers (but Content-Length) and body. */
function semantic(m: SipMessageAny): unknown {
  return {
    start: m.startLine(),
    headers: m.headers().filter(([n]) => n !== 'Content-Length'),
    body: m.body.toString('hex'),
  };
}

const VALID = ['wsinv', 'intmeth', 'esc01', 'escnull', 'esc02', 'lwsdisp', 'longreq', 'dblreq', 'semiuri', 'transports', 'mpart01', 'unreason', 'noreason'];
/** RFC 4475 3.1.2 "liberal" cases this parser accepts (it may, the RFC says). */
const LIBERAL_ACCEPTED = ['lwsstart', 'trws', 'baddate', 'regbadct', 'badaspec'];
/** RFC 4475 3.2, 3.3, 3.4: syntactically valid; rejecting them is the application's job. */
const SEMANTIC = ['badbranch', 'unkscm', 'novelsc', 'unksm2', 'bext01', 'invut', 'regaut01', 'bcast', 'zeromf', 'cparam01', 'cparam02', 'regescrt', 'sdp01', 'inv2543'];
const NORMAL = ['invite-carrier', 'ok-200', 'register-compact', 'refer', 'notify-sipfrag', 'invite-replaces'];
const ALL_PARSEABLE = [...VALID, ...LIBERAL_ACCEPTED, ...SEMANTIC, ...NORMAL];

const INVITE = fixture('invite-carrier');

// --- RFC 4475 valid messages ---------------------------------------------------------------------

describe('RFC 4475 3.1.1 valid messages', () => {
  it('wsinv: a short tortuous INVITE', () => {
    const m = req('wsinv');
    expect(m.method).toBe('INVITE');
    const uri = m.uri as SipUri;
    expect([uri.user, uri.host, uri.params.get('unknownparam')]).toEqual(['vivekg', 'chair-dnrc.example.com', null]);
    expect(m.to.displayName).toBeUndefined();
    expect(m.to.uri.toString()).toBe('sip:vivekg@chair-dnrc.example.com');
    expect(m.to.tag).toBe('1918181833n');
    expect(m.from.displayName).toBe('J Rosenberg \\"');
    expect(m.from.uri.toString()).toBe('sip:jdrosen@example.com');
    expect(m.from.tag).toBe('98asjd8');
    expect(m.maxForwards).toBe(68);
    expect(m.callId).toBe('wsinv.ndaksdj@192.0.2.1');
    expect([m.cseq.seq, m.cseq.method]).toEqual([9, 'INVITE']);
    expect(m.via.map((v) => [v.transport, v.host, v.port, v.branch])).toEqual([
      ['UDP', '192.0.2.2', undefined, '390skdjuw'],
      ['TCP', 'spindle.example.com', undefined, 'z9hG4bK9ikj8'],
      ['UDP', '192.168.255.111', undefined, 'z9hG4bK30239'],
    ]);
    expect(m.via[0]!.isRfc3261Branch).toBe(false);
    expect(m.via[1]!.isRfc3261Branch).toBe(true);
    expect(m.get('Subject')).toBe('');
    expect(m.get('s')).toBe('');
    expect(m.get('NewFangledHeader')).toBe('newfangled value continued newfangled value');
    expect(m.get('unknownheaderwithunusualvalue')).toBe(';;,,;;,;');
    expect(m.contentType?.mime).toBe('application/sdp');
    expect(m.routes).toHaveLength(1);
    const route = m.routes[0]!.uri as SipUri;
    expect([route.host, route.lr, route.params.get('unknownwith'), route.params.get('unknown-no-value')]).toEqual(['services.example.com', true, 'value', null]);
    expect(m.contacts).toHaveLength(1);
    const c = m.contacts[0]!;
    expect(c.displayName).toBe('Quoted string ""');
    expect(c.params.get('newparam')).toBe('newvalue');
    expect(c.params.get('secondparam')).toBeNull();
    expect(c.q).toBe(0.33);
    expect(m.body.length).toBe(150);
    expect(m.body.toString().startsWith('v=0\r\no=mhandley')).toBe(true);
  });

  it('intmeth: a wide range of valid characters', () => {
    const m = req('intmeth');
    expect(m.method).toBe("!interesting-Method0123456789_*+`.%indeed'~");
    const uri = m.uri as SipUri;
    expect(uri.user).toBe("1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*");
    expect(uri.password).toBe("&it+has=1,weird!*pas$wo~d_too.(doesn't-it)");
    expect(m.via[0]!.branch).toBe("z9hG4bK-.!%66*_+`'~");
    expect(m.to.displayName).toBe('BEL:\u0007 NUL:\u0000 DEL:\u007f');
    expect((m.to.uri as SipUri).user).toBe("1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*");
    expect(m.from.displayName).toBe("token1~` token2'+_ token3*%!.-");
    expect(m.from.params.getUnquoted("fromParam''~+*_!.-%")).toBe('работающий');
    expect(m.from.tag).toBe("_token~1'+`*%!-.");
    expect(m.callId).toBe('intmeth.word%ZK-!.*_+\'@word`~)(><:\\/"][?}{');
    expect([m.cseq.seq, m.cseq.method]).toEqual([139122385, m.method]);
    expect(m.maxForwards).toBe(255);
    expect(m.get("extensionHeader-!.%*+_`'~")).toBe('\ufeff大停電');
  });

  it('esc01: valid use of the % escaping mechanism', () => {
    const m = req('esc01');
    expect((m.uri as SipUri).user).toBe('sips:user@example.com');
    expect((m.to.uri as SipUri).user).toBe('user');
    expect((m.from.uri as SipUri).user).toBe('I have spaces');
    const contact = m.contacts[0]!.uri as SipUri;
    expect(contact.user).toBe('caller');
    expect(contact.params.get('lr')).toBeNull();
    expect(contact.params.get('name')).toBe('value%41');
    expect(m.callId).toBe('esc01.239409asdfakjkn23onasd0-3234');
    expect(m.contentType?.mime).toBe('application/sdp');
  });

  it('escnull: escaped nulls in URIs', () => {
    const m = req('escnull');
    expect((m.to.uri as SipUri).user).toBe('null-\u0000-null');
    expect(m.contacts.map((c) => (c.uri as SipUri).user)).toEqual(['\u0000', '\u0000\u0000']);
    expect(m.body.length).toBe(0);
  });

  it('esc02: % where it is not an escape', () => {
    const m = req('esc02');
    expect(m.method).toBe('RE%47IST%45R');
    expect(m.to.displayName).toBe('%Z%45');
    expect(m.via[0]!.branch).toBe('z9hG4bK209%fzsnel234');
    expect(m.contacts.map((c) => (c.uri as SipUri).host)).toEqual(['host1.example.com', 'host3.example.com']);
    expect(m.get('C%6Fntact')).toBe('<sip:alias2@host2.example.com>');
  });

  it('lwsdisp: no LWS between display name and <', () => {
    const m = req('lwsdisp');
    expect(m.from.displayName).toBe('caller');
    expect(m.from.tag).toBe('323');
  });

  it('longreq: long values in header fields', () => {
    const m = req('longreq');
    expect(m.via).toHaveLength(34);
    expect(m.via[0]!.host).toBe('sip33.example.com');
    expect(m.via[32]!.host).toBe('sip1.example.com');
    const last = m.via[33]!;
    expect(last.received).toBe('192.0.2.5');
    expect(last.branch).toMatch(/^very(long)+branchvalue$/);
    expect(m.to.displayName).toMatch(/^I have a user name of (extreme)+ proportion$/);
    expect((m.to.uri as SipUri).port).toBe(6000);
    expect((m.to.uri as SipUri).params.size).toBe(3);
    expect(m.from.tag).toMatch(/^12(982)+424$/);
    expect(m.from.params.size).toBe(3);
    expect(m.callId).toMatch(/^longreq\.one(really)+longcallid$/);
    expect(m.body.length).toBe(150);
  });

  it('dblreq: extra octets after the body are ignored on a datagram', () => {
    const m = req('dblreq');
    expect(m.method).toBe('REGISTER');
    expect(m.body.length).toBe(0);
    expect(m.callId).toBe('dblreq.0ha0isndaksdj99sdfafnl3lk233412');
    expect(m.contacts[0]!.uri.toString()).toBe('sip:j.user@host.example.com');
  });

  it('semiuri: semicolons in the Request-URI user part', () => {
    const m = req('semiuri');
    expect((m.uri as SipUri).user).toBe('user;par=u@example.net');
    expect((m.uri as SipUri).host).toBe('example.com');
    expect(m.getAll('Accept')).toEqual(['application/sdp', 'application/pkcs7-mime', 'multipart/mixed', 'multipart/signed', 'message/sip', 'message/sipfrag']);
  });

  it('transports: varied and unknown transport types', () => {
    expect(req('transports').via.map((v) => v.transport)).toEqual(['UDP', 'SCTP', 'TLS', 'UNKNOWN', 'TCP']);
  });

  it('mpart01: a multipart body with NULs is framed by Content-Length', () => {
    const m = req('mpart01');
    const v = m.topVia!;
    expect([v.host, v.port, v.rport, v.branch]).toEqual(['127.0.0.1', 5070, null, 'z9hG4bK-d87543-4dade06d0bdb11ee-1--d87543-']);
    expect(m.contentType?.mime).toBe('multipart/mixed');
    expect(m.contentType?.params.get('boundary')).toBe('7a9cbec02ceef655');
    expect(m.body.length).toBe(Number(m.get('Content-Length')));
    expect(m.body.includes(0)).toBe(true);
    expect(m.get('Date')).toBe('Sat, 15 Oct 2005 04:44:56 GMT');
    expect(m.get('User-Agent')).toBe('SIPimp.org/0.2.5 (curses)');
    expect((m.routes[0]!.uri as SipUri).port).toBe(5080);
  });

  it('unreason: an unusual reason phrase', () => {
    const m = res('unreason');
    expect(m.status).toBe(200);
    expect(m.reason).toBe('= 2**3 * 5**2 но сто девяносто девять - простое');
    expect(m.to.tag).toBe('2229');
    expect(m.body.length).toBe(154);
  });

  it('noreason: an empty reason phrase', () => {
    const m = res('noreason');
    expect([m.status, m.reason]).toEqual([100, '']);
    expect(parseMessage('SIP/2.0 180\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n\r\n')).toBeInstanceOf(SipResponse);
  });
});

describe('RFC 4475 messages a parser must accept although an element may reject them', () => {
  it.each([...LIBERAL_ACCEPTED, ...SEMANTIC])('%s parses', (name) => {
    expect(() => parseMessage(fixture(name))).not.toThrow();
  });

  it('lwsstart and trws: extra SP in the Request-Line is not forwarded', () => {
    expect(req('lwsstart').startLine()).toBe('INVITE sip:user@example.com SIP/2.0');
    expect(req('trws').startLine()).toBe('OPTIONS sip:remote-target@example.com SIP/2.0');
  });

  it('badaspec: spaces inside <> are dropped; quoted commas stay in the display name', () => {
    const m = req('badaspec');
    expect(m.to.uri.toString()).toBe('sip:t.watson@example.org');
    expect(m.from.displayName).toBe('Bell, Alexander');
  });

  it('regbadct and regescrt: URI headers in Contact', () => {
    expect((req('regbadct').contacts[0]!.uri as SipUri).headers).toEqual([['Route', '<sip:sip.example.com>']]);
    expect((req('regescrt').contacts[0]!.uri as SipUri).headers).toEqual([['Route', '<sip:sip.example.com>']]);
  });

  it('badbranch: the magic cookie without an identifier', () => {
    expect(req('badbranch').topVia!.branch).toBe('z9hG4bK');
  });

  it('unkscm, novelsc, unksm2: unknown schemes are kept opaque', () => {
    expect(req('unkscm').uri.kind).toBe('absolute');
    expect(req('novelsc').uri.toString()).toBe('soap.beep://192.0.2.103:3002');
    const m = req('unksm2');
    expect(m.to.uri.toString()).toBe('isbn:2983792873');
    expect(m.from.uri.toString()).toBe('http://www.example.com');
    expect(m.contacts[0]!.uri.toString()).toBe('name:John_Smith');
  });

  it('bext01: Require and Proxy-Require lists', () => {
    const m = req('bext01');
    expect(m.require).toEqual(['nothingSupportsThis', 'nothingSupportsThisEither']);
    expect(m.tokens('Proxy-Require')).toEqual(['noProxiesSupportThis', 'norDoAnyProxiesSupportThis']);
  });

  it('regaut01: an Authorization value is never split at its commas', () => {
    expect(req('regaut01').getAll('Authorization')).toEqual(['NoOneKnowsThisScheme opaque-data=here']);
    expect(req('register-compact').getAll('Authorization')).toHaveLength(1);
  });

  it('zeromf, inv2543: Max-Forwards 0, and a missing one reads as 70', () => {
    expect(req('zeromf').maxForwards).toBe(0);
    const m = req('inv2543');
    expect(m.has('Max-Forwards')).toBe(false);
    expect(m.maxForwards).toBe(70);
    // No Content-Length on a datagram: the body is the rest of it.
    expect(m.body.toString()).toBe('v=0\r\no=mhandley 29739 7272939 IN IP4 192.0.2.5\r\ns=-\r\nc=IN IP4 192.0.2.5\r\nt=0 0\r\nm=audio 49217 RTP/AVP 0\r\n');
    expect(m.topVia!.branch).toBeUndefined();
    // An addr-spec's parameters belong to the header field (RFC 3261 20.10), not the URI.
    expect(m.to.params.get('user')).toBe('phone');
    expect((m.from.uri as SipUri).userParam).toBe('phone');
  });

  it('cparam01 / cparam02: a parameter after an addr-spec is a header parameter, inside <> a URI parameter', () => {
    const a = req('cparam01').contacts[0]!;
    expect(a.params.get('unknownparam')).toBeNull();
    expect((a.uri as SipUri).params.has('unknownparam')).toBe(false);
    const b = req('cparam02').contacts[0]!;
    expect(b.params.has('unknownparam')).toBe(false);
    expect((b.uri as SipUri).params.get('unknownparam')).toBeNull();
  });

  it('bcast: a 200 with two Vias', () => {
    expect(res('bcast').via.map((v) => v.host)).toEqual(['192.0.2.198', '255.255.255.255']);
  });
});

// --- RFC 4475 invalid messages -------------------------------------------------------------------

describe('RFC 4475 invalid messages throw SipParseError', () => {
  it.each([
    ['badinv01', 400, /malformed (Via|Contact)/],
    ['clerr', 400, /Content-Length larger than message/],
    ['ncl', 400, /malformed Content-Length/],
    ['scalar02', 400, /malformed CSeq/],
    ['quotbal', 400, /malformed To/],
    ['ltgtruri', 400, /malformed Request-URI/],
    ['lwsruri', 400, /malformed Request-Line/],
    ['escruri', 400, /headers in Request-URI/],
    ['baddn', 400, /malformed (From|To)/],
    ['badvers', 505, /Version Not Supported/],
    ['mismatch01', 400, /CSeq method does not match/],
    ['mismatch02', 400, /CSeq method does not match/],
    ['insuf', 400, /missing (From|To|Call-ID)/],
    ['multi01', 400, /multiple (CSeq|Call-ID|From|To|Max-Forwards) header fields/],
    ['mcl01', 400, /multiple Content-Length header fields/],
  ])('%s: %i %s, with what a stateless response needs', (name, status, reason) => {
    const buf = fixture(name);
    const err = parseError(buf);
    expect(err.status).toBe(status);
    expect(err.reason).toMatch(reason);
    expect(err.reason).toMatch(/^[\x20-\x7e]+$/);
    expect(err.isResponse).toBe(false);
    expect(err.context?.via.length).toBeGreaterThan(0);
    expect(err.context?.cseq).toBeDefined();
    if (name === 'badvers') expect(err).toBeInstanceOf(SipVersionError);
    // The stateless response copies Via, Call-ID and CSeq, adds a To tag.
    const out = buildStatelessResponse(err)!.toString();
    expect(out.startsWith(`SIP/2.0 ${status} ${err.reason}\r\n`)).toBe(true);
    for (const v of err.context!.via) expect(out).toContain(`\r\nVia: ${v}\r\n`);
    expect(out).toContain(`\r\nCSeq: ${err.context!.cseq}\r\n`);
    if (err.context!.callId) expect(out).toContain(`\r\nCall-ID: ${err.context!.callId}\r\n`);
    if (err.context!.to) expect(out).toMatch(/\r\nTo: .*;tag=/);
    expect(out.endsWith('Content-Length: 0\r\n\r\n')).toBe(true);
  });

  it('the stateless 400 parses as a response to the request', () => {
    const err = parseError(fixture('mismatch01'));
    const r = parseMessage(buildStatelessResponse(err)!) as SipResponse;
    expect([r.status, r.reason]).toEqual([400, 'Bad Request: CSeq method does not match the request method']);
    expect(r.topVia!.branch).toBe('z9hG4bKkdjuw');
    expect(r.callId).toBe('mismatch01.dj0234sxdfl3');
    expect(r.to.tag).toBeDefined();
    expect(r.from.tag).toBe('34525');
  });

  it.each([
    ['scalarlg', /malformed CSeq/],
    ['bigcode', /malformed Status-Line/],
  ])('%s: a bad response is flagged and never answered', (name, reason) => {
    const err = parseError(fixture(name));
    expect(err.reason).toMatch(reason);
    expect(err.isResponse).toBe(true);
    expect(err.context).toBeUndefined();
    expect(buildStatelessResponse(err)).toBeUndefined();
  });
});

describe('errors and stateless responses', () => {
  const base = (over: Record<string, string | null>) => {
    const h: Record<string, string | null> = {
      Via: 'SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKabc;rport',
      From: '<sip:a@example.com>;tag=f1',
      To: '<sip:b@example.com>',
      'Call-ID': 'c1@example.com',
      CSeq: '1 INVITE',
      'Max-Forwards': '70',
      ...over,
    };
    let s = 'INVITE sip:b@example.com SIP/2.0\r\n';
    for (const [k, v] of Object.entries(h)) if (v !== null) s += `${k}: ${v}\r\n`;
    return s + 'Content-Length: 0\r\n\r\n';
  };

  it.each([
    ['Via', 'missing Via'],
    ['From', 'missing From'],
    ['To', 'missing To'],
    ['Call-ID', 'missing Call-ID'],
    ['CSeq', 'missing CSeq'],
  ])('a request without %s: "Bad Request: %s"', (header, reason) => {
    const err = parseError(base({ [header]: null }));
    expect(err.reason).toBe(`Bad Request: ${reason}`);
    expect(err.code).toBe('SIP_PARSE');
    expect(err.context?.method).toBe('INVITE');
  });

  it.each([
    ['CSeq', 'x INVITE', 'malformed CSeq'],
    ['CSeq', '1', 'malformed CSeq'],
    ['CSeq', '4294967296 INVITE', 'malformed CSeq'],
    ['Max-Forwards', '256', 'malformed Max-Forwards'],
    ['Max-Forwards', 'seventy', 'malformed Max-Forwards'],
    ['Call-ID', 'has space', 'malformed Call-ID'],
    ['Via', 'SIP/2.0/UDP', 'malformed Via'],
    ['Via', 'SIP/2.0 192.0.2.1', 'malformed Via'],
    ['Via', 'SIP/2.0/UDP 192.0.2.1:99999', 'malformed Via'],
    ['Via', 'SIP/2.0/UDP [::1;branch=z9hG4bK1', 'malformed Via'],
    ['From', '<sip:a@example.com', 'malformed From'],
    ['From', '"unterminated <sip:a@example.com>', 'malformed From'],
    ['To', 'sip:b@example.com;tag=', 'malformed To'],
    ['To', 'sip:b@example.com junk', 'malformed To'],
    ['To', '<sip:b@example.com>;=x', 'malformed To'],
    ['Contact', '<sip:a@b>,,<sip:c@d>', 'malformed Contact'],
    ['Content-Type', 'sdp', 'malformed Content-Type'],
  ])('%s: %j is "Bad Request: %s"', (header, value, reason) => {
    const err = parseError(base({ [header]: value }));
    expect(err.reason).toBe(`Bad Request: ${reason}`);
    expect(err.context?.cseq).toBe(header === 'CSeq' ? value : '1 INVITE');
  });

  it('start lines', () => {
    expect(parseError('').reason).toBe('Bad Request: empty message');
    expect(parseError('\r\n\r\n').reason).toBe('Bad Request: empty message');
    expect(parseError('INVITE sip:a@b SIP/2.0\r\nVia: x').reason).toBe('Bad Request: incomplete header section');
    expect(parseError('GET / HTTP/1.1\r\nHost: x\r\n\r\n').reason).toBe('Bad Request: malformed Request-Line');
    expect(parseError('INVITE sip:a@b\r\n\r\n').reason).toBe('Bad Request: malformed Request-Line');
    expect(parseError('IN VITE sip:a@b SIP/2.0\r\n\r\n').reason).toBe('Bad Request: malformed Request-Line');
    expect(parseError('INV"ITE sip:a@b SIP/2.0\r\n\r\n').reason).toBe('Bad Request: malformed Request-Line');
    expect(parseError('SIP/2.0 99 Low\r\n\r\n').isResponse).toBe(true);
    expect(parseError('SIP/2.0 700 High\r\n\r\n').isResponse).toBe(true);
    expect(parseError('SIP/3.0 200 OK\r\n\r\n')).toBeInstanceOf(SipVersionError);
    expect(parseError(base({}).replace('\r\nFrom', '\r\nFr om')).reason).toBe('Bad Request: malformed header line');
    expect(parseError(base({}).replace('\r\nFrom:', '\r\nFrom')).reason).toBe('Bad Request: malformed header line');
  });

  it('an ACK is never answered; noise and responses give no context', () => {
    const ack = base({}).replace('INVITE sip', 'ACK sip').replace('1 INVITE', '1 INV');
    const err = parseError(ack);
    expect(err.context?.method).toBe('ACK');
    expect(buildStatelessResponse(err)).toBeUndefined();
    expect(tryExtractResponseContext(Buffer.from([0, 1, 2, 3]))).toBeUndefined();
    expect(tryExtractResponseContext('jaK\n')).toBeUndefined();
    expect(tryExtractResponseContext('SIP/2.0 200 OK\r\nVia: x\r\n\r\n')).toBeUndefined();
    expect(tryExtractResponseContext('OPTIONS sip:x SIP/2.0\r\nv: a\r\nv: b,\r\n c\r\ni: id\r\n\r\n')).toEqual({ method: 'OPTIONS', via: ['a', 'b, c'], callId: 'id' });
  });

  it('buildStatelessResponse keeps an existing To tag and never copies CR or LF', () => {
    const out = buildStatelessResponse({ method: 'INVITE', via: ['SIP/2.0/UDP h;branch=z9hG4bK1\rInjected: yes'], to: '<sip:b@x>;tag=abc', cseq: '1 INVITE' }, 500, 'Oops\r\nX: y')!.toString();
    expect(out).toContain('\r\nTo: <sip:b@x>;tag=abc\r\n');
    expect(out).toContain('SIP/2.0 500 Oops  X: y\r\n');
    expect(out.split('\r\n').filter((l) => l.startsWith('Injected'))).toHaveLength(0);
  });

  it('header lines end in CRLF only: a bare LF is a 400 that says so, never a line end (RFC 3261 7, 25.1)', () => {
    // A header injection probe: the injected Via must not become a second Via.
    const injected = base({ Subject: 'hi\nVia: SIP/2.0/UDP 127.0.0.9:5999' });
    const err = parseError(injected);
    expect(err.reason).toBe('Bad Request: bare LF in header section');
    expect(err.isResponse).toBe(false);
    expect(err.context?.via).toEqual(['SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKabc;rport']);
    const out = buildStatelessResponse(err)!.toString();
    expect(out.startsWith('SIP/2.0 400 Bad Request: bare LF in header section\r\n')).toBe(true);
    expect(out).not.toContain('127.0.0.9');
    expect(asResponseMessage(out).via).toHaveLength(1);
    // A message written with LF line ends throughout: 400 too, and its own header fields
    // still come back so that the sender can match the answer.
    const lfOnly = 'OPTIONS sip:a@b SIP/2.0\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\nFrom: <sip:a@b>;tag=1\nTo: <sip:c@d>\nCall-ID: x\nCSeq: 1 OPTIONS\nContent-Length: 2\n\nhi';
    const lf = parseError(lfOnly);
    expect(lf.reason).toBe('Bad Request: bare LF in header section');
    expect(lf.context).toMatchObject({ method: 'OPTIONS', via: ['SIP/2.0/UDP h;branch=z9hG4bK1'], callId: 'x', cseq: '1 OPTIONS' });
    // Anywhere in the header section: after the start line, in the last header line; a response is dropped.
    expect(parseError(base({}).replace('SIP/2.0\r\n', 'SIP/2.0\n')).reason).toBe('Bad Request: bare LF in header section');
    expect(parseError(base({}).replace('Content-Length: 0\r\n\r\n', 'Content-Length: 0\n\r\n')).reason).toBe('Bad Request: bare LF in header section');
    const resp = parseError('SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nX: a\nVia: SIP/2.0/UDP evil\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\n\r\n');
    expect([resp.reason, resp.isResponse, resp.context]).toEqual(['Bad Request: bare LF in header section', true, undefined]);
    // Not in the header section: line ends before the start line (RFC 3261 7.5) and LFs in the body are fine.
    const ok = parseMessage('\n\r\n' + base({}).replace('Content-Length: 0', 'Content-Length: 5') + 'a\nb\nc');
    expect(ok.body.toString()).toBe('a\nb\nc');
  });
});

// --- header syntax -------------------------------------------------------------------------------

describe('header fields', () => {
  it('compact forms map to full names (RFC 3261 7.3.3 and extensions)', () => {
    const compact: [string, string][] = [
      ['i', 'Call-ID'],
      ['m', 'Contact'],
      ['e', 'Content-Encoding'],
      ['l', 'Content-Length'],
      ['c', 'Content-Type'],
      ['f', 'From'],
      ['s', 'Subject'],
      ['k', 'Supported'],
      ['t', 'To'],
      ['v', 'Via'],
      ['o', 'Event'],
      ['u', 'Allow-Events'],
      ['r', 'Refer-To'],
      ['b', 'Referred-By'],
      ['a', 'Accept-Contact'],
      ['j', 'Reject-Contact'],
      ['d', 'Request-Disposition'],
      ['x', 'Session-Expires'],
      ['y', 'Identity'],
      ['n', 'Identity-Info'],
    ];
    for (const [short, full] of compact) {
      expect(canonicalName(short)).toBe(full);
      expect(canonicalName(short.toUpperCase())).toBe(full);
    }
    const m = req('register-compact');
    expect(m.headers().map(([n]) => n)).toEqual(['Via', 'From', 'To', 'Call-ID', 'CSeq', 'Max-Forwards', 'Contact', 'Contact', 'Authorization', 'Date', 'Expires', 'Supported', 'Supported', 'Supported', 'Content-Length']);
    expect(m.supported).toEqual(['path', 'gruu', 'outbound']);
    expect(canonicalName('cAlL-iD')).toBe('Call-ID');
    expect(canonicalName('www-authenticate')).toBe('WWW-Authenticate');
    expect(canonicalName('X-Custom')).toBe('X-Custom');
    // Output can use them too.
    const text = m.toBuffer({ compact: true }).toString();
    expect(text).toContain('\r\nv: SIP/2.0/TLS');
    expect(text).toContain('\r\nl: 0\r\n');
    expect(semantic(parseMessage(text))).toEqual(semantic(m));
  });

  it('folded headers unfold to single spaces (RFC 3261 7.3.1)', () => {
    const m = parseMessage(
      'OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo:\r\n  <sip:c@d>\r\n\t;tag=2\r\nCall-ID: x\r\nCSeq:\r\n 1\r\n\t\tOPTIONS\r\nSubject: a  \r\n   b\r\n\t c\r\nX-Empty:\r\n \r\n\r\n',
    );
    expect(m.to.tag).toBe('2');
    expect(m.cseq.toString()).toBe('1 OPTIONS');
    expect(m.get('Subject')).toBe('a b c');
    expect(m.get('X-Empty')).toBe('');
  });

  it('list headers split at commas outside quotes and <>; others never', () => {
    expect(splitList('a, b ,c')).toEqual(['a', 'b', 'c']);
    expect(splitList('"Doe, John" <sip:a@b>, <sip:c,d@e;x=1>')).toEqual(['"Doe, John" <sip:a@b>', '<sip:c,d@e;x=1>']);
    expect(splitList('"a \\", b" <sip:a@b>, c')).toEqual(['"a \\", b" <sip:a@b>', 'c']);
    const m = parseMessage(
      'OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h1;branch=z9hG4bK1, SIP/2.0/TCP h2;branch=z9hG4bK2\r\nv: SIP/2.0/UDP h3\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\n' +
        'Contact: "Doe, John" <sip:a@b>;q=0.5, <sip:c@d>;expires=60\r\nRoute: <sip:p1;lr>, <sip:p2;lr>\r\nRecord-Route: <sip:r1;lr>\r\nRecord-Route: <sip:r2;lr>,<sip:r3;lr>\r\n' +
        'WWW-Authenticate: Digest realm="a,b", nonce="x", qop="auth,auth-int"\r\nDate: Sat, 13 Nov 2010 23:29:00 GMT\r\nX-List: a, b\r\nSupported: timer, , replaces\r\n\r\n',
    );
    expect(m.via.map((v) => v.host)).toEqual(['h1', 'h2', 'h3']);
    expect(m.contacts.map((c) => [c.displayName, c.q, c.expires])).toEqual([
      ['Doe, John', 0.5, undefined],
      [undefined, undefined, 60],
    ]);
    expect(m.routes.map(String)).toEqual(['<sip:p1;lr>', '<sip:p2;lr>']);
    expect(m.recordRoutes.map((r) => (r.uri as SipUri).host)).toEqual(['r1', 'r2', 'r3']);
    expect(m.getAll('WWW-Authenticate')).toEqual(['Digest realm="a,b", nonce="x", qop="auth,auth-int"']);
    expect(m.getAll('Date')).toEqual(['Sat, 13 Nov 2010 23:29:00 GMT']);
    expect(m.getAll('X-List')).toEqual(['a, b']);
    expect(m.supported).toEqual(['timer', 'replaces']);
  });

  it('Via: sent-by, transport, branch, rport with and without value, received, maddr, ttl, IPv6', () => {
    const v = parseVia('SIP / 2.0 / udp 192.0.2.1 : 5062 ;branch=z9hG4bKx ;rport=3456;received=198.51.100.7;maddr=224.0.1.75;ttl=16');
    expect([v.protocolName, v.protocolVersion, v.transport, v.host, v.port]).toEqual(['SIP', '2.0', 'UDP', '192.0.2.1', 5062]);
    expect([v.branch, v.rport, v.received, v.maddr, v.ttl]).toEqual(['z9hG4bKx', 3456, '198.51.100.7', '224.0.1.75', 16]);
    expect(parseVia('SIP/2.0/TCP h;rport').rport).toBeNull();
    expect(parseVia('SIP/2.0/TCP h').rport).toBeUndefined();
    const v6 = parseVia('SIP/2.0/UDP [2001:db8::9]:5070;branch=z9hG4bK1;received=2001:db8::10');
    expect([v6.host, v6.port, v6.sentBy, v6.received]).toEqual(['2001:db8::9', 5070, '[2001:db8::9]:5070', '2001:db8::10']);
    // What a transport does on receipt (RFC 3261 18.2.1, RFC 3581 4), visible in the output.
    const m = parseMessage(INVITE);
    m.topVia!.received = '203.0.113.77';
    m.topVia!.rport = 40000;
    expect(m.toString()).toContain('\r\nVia: SIP/2.0/UDP 198.51.100.20:5060;branch=z9hG4bK3f1c.9a7e21b4c2d0f;rport=40000;received=203.0.113.77\r\n');
    expect(m.via[1]!.rport).toBe(5080);
  });

  it('From / To / Contact: display names, URIs, tags, "*"', () => {
    const n = parseNameAddr('"Bob \\"B\\" \\\\ Smith" <sips:bob@example.com;transport=tls>;tag=xyz;custom="a, b"');
    expect([n.displayName, n.uri.toString(), n.tag, n.params.get('custom'), n.params.getUnquoted('custom')]).toEqual([
      'Bob "B" \\ Smith',
      'sips:bob@example.com;transport=tls',
      'xyz',
      '"a, b"',
      'a, b',
    ]);
    expect(n.toString()).toBe('"Bob \\"B\\" \\\\ Smith" <sips:bob@example.com;transport=tls>;tag=xyz;custom="a, b"');
    expect(parseNameAddr('Anonymous  Caller <sip:anonymous@anonymous.invalid>').displayName).toBe('Anonymous Caller');
    expect(parseNameAddr('<sip:a@b>').displayName).toBeUndefined();
    expect(parseNameAddr('"" <sip:a@b>').displayName).toBe('');
    expect(parseNameAddr('sip:a@b;tag=1').toString()).toBe('<sip:a@b>;tag=1');
    expect(parseNameAddr('tel:+15551234;tag=9').uri.toString()).toBe('tel:+15551234');
    const star = parseMessage('REGISTER sip:r SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@r>;tag=1\r\nTo: <sip:a@r>\r\nCall-ID: x\r\nCSeq: 2 REGISTER\r\nContact: *\r\nExpires: 0\r\n\r\n');
    expect(star.isContactWildcard).toBe(true);
    expect(star.contacts).toEqual([]);
    expect(star.expires).toBe(0);
    expect(req('invite-carrier').isContactWildcard).toBe(false);
  });

  it('typed accessors of the extension headers', () => {
    const m = req('invite-carrier');
    expect(m.sessionExpires).toEqual({ seconds: 1800, refresher: 'uac' });
    expect(m.minSE).toBe(90);
    expect(m.supported).toEqual(['replaces', 'timer', '100rel']);
    expect(m.tokens('Allow')).toContain('UPDATE');
    expect(m.nameAddrs('P-Asserted-Identity')[0]!.displayName).toBe('ACME Sales, Inc.');
    expect(m.recordRoutes[0]!.toString()).toBe('<sip:198.51.100.20;lr;ftag=as6c1e1d4b>');
    expect(m.expires).toBeUndefined();
    expect(m.event).toBeUndefined();

    const refer = req('refer');
    const target = refer.referTo!.uri as SipUri;
    expect(target.headers).toEqual([['Replaces', '425928@bobster.example.org;to-tag=7743;from-tag=6472']]);
    expect(refer.referredBy!.uri.toString()).toBe('sip:a@atlanta.example.com');

    const notify = req('notify-sipfrag');
    expect([notify.event!.value, notify.event!.params.get('id')]).toEqual(['refer', '93809823']);
    expect(notify.valueWithParams('Subscription-State')!.params.get('expires')).toBe('60');
    expect(notify.contentType!.params.get('version')).toBe('2.0');
    expect(notify.body.toString()).toBe('SIP/2.0 100 Trying\r\n');

    expect(req('invite-replaces').replaces).toEqual({ callId: '425928@bobster.example.org', toTag: '7743', fromTag: '6472', earlyOnly: true });
    const ok = res('ok-200');
    expect(ok.sessionExpires).toEqual({ seconds: 900, refresher: 'uas' });
    expect(ok.require).toEqual(['timer']);

    const reg = req('register-compact');
    expect(reg.expires).toBe(7200);
    expect(reg.contacts.map((c) => [c.expires, c.q])).toEqual([
      [3600, 0.7],
      [undefined, 0.1],
    ]);
    expect(reg.contacts[1]!.params.getUnquoted('+sip.instance')).toBe('<urn:uuid:00000000-0000-1000-8000-000A95A0E128>');
  });

  it('lazily parsed headers throw SipParseError when read, not when the message is parsed', () => {
    const text = INVITE.toString().replace('Session-Expires: 1800;refresher=uac', 'Session-Expires: soon').replace('Min-SE: 90', 'Min-SE: ;;');
    const m = parseMessage(text);
    expect(() => m.sessionExpires).toThrow(SipParseError);
    expect(() => m.minSE).toThrow(/malformed Min-SE/);
    m.set('Expires', 'never');
    expect(() => m.expires).toThrow(/malformed Expires/);
    m.set('Replaces', 'abc;to-tag=1');
    expect(() => m.replaces).toThrow(/malformed Replaces/);
    m.set('Supported', 'a b');
    expect(() => m.supported).toThrow(/malformed Supported/);
    // RFC 4475 3.1.2.4: huge expiry values read as the largest allowed.
    m.set('Expires', '1' + '0'.repeat(40));
    expect(m.expires).toBe(0xffffffff);
  });
});

// --- datagram and stream framing of one message ---------------------------------------------------

describe('body and Content-Length', () => {
  const head = 'MESSAGE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>\r\nCall-ID: x\r\nCSeq: 1 MESSAGE\r\nContent-Type: text/plain\r\n';

  it('datagram: missing means the rest, smaller truncates, larger is a 400', () => {
    expect(parseMessage(head + '\r\nhello').body.toString()).toBe('hello');
    expect(parseMessage(head + 'Content-Length: 3\r\n\r\nhello').body.toString()).toBe('hel');
    expect(parseError(head + 'Content-Length: 6\r\n\r\nhello').reason).toBe('Bad Request: Content-Length larger than message');
    expect(parseMessage(head + 'Content-Length: 005\r\n\r\nhello').body.toString()).toBe('hello');
  });

  it('stream: Content-Length is required', () => {
    expect(parseError(head + '\r\nhello', { stream: true }).reason).toBe('Bad Request: missing Content-Length');
    expect(parseMessage(head + 'l: 5\r\n\r\nhello', { stream: true }).body.toString()).toBe('hello');
  });

  it('bodies over the cap are 513', () => {
    const err = parseError(head + `Content-Length: 70000\r\n\r\n${'x'.repeat(70000)}`);
    expect(err).toBeInstanceOf(SipTooLargeError);
    expect([err.status, err.code, err.reason]).toEqual([513, 'SIP_TOO_LARGE', 'Message Too Large']);
    expect(parseMessage(head + `\r\n${'x'.repeat(70000)}`, { maxBodyBytes: 100000 }).body.length).toBe(70000);
  });

  it('the body is a copy, not a view of the input', () => {
    const buf = Buffer.from(head + 'Content-Length: 5\r\n\r\nhello');
    const m = parseMessage(buf);
    buf.fill(0x41);
    expect(m.body.toString()).toBe('hello');
  });
});

// --- building and serializing ----------------------------------------------------------------------

describe('building messages', () => {
  it('createResponse copies Via, From, To, Call-ID, CSeq (RFC 3261 8.2.6.2)', () => {
    const request = req('invite-carrier');
    const r = createResponse(request, 180, undefined, { toTag: 'totag1', copyRecordRoute: true });
    expect(r.startLine()).toBe('SIP/2.0 180 Ringing');
    expect(r.via.map(String)).toEqual(request.via.map(String));
    expect(r.from.toString()).toBe(request.from.toString());
    expect(r.to.tag).toBe('totag1');
    expect(request.to.tag).toBeUndefined();
    expect(r.callId).toBe(request.callId);
    expect(r.cseq.toString()).toBe('102 INVITE');
    expect(r.recordRoutes.map(String)).toEqual(request.recordRoutes.map(String));
    expect(r.headers().map(([n]) => n)).toEqual(['Via', 'Via', 'Record-Route', 'From', 'To', 'Call-ID', 'CSeq']);
    // Independent copies.
    r.topVia!.received = '192.0.2.99';
    expect(request.topVia!.received).toBeUndefined();

    const trying = createResponse(request, 100, undefined, { toTag: 'x' });
    expect(trying.to.tag).toBeUndefined();
    expect(trying.has('Record-Route')).toBe(false);
    const ok = createResponse(parseMessage(fixture('lwsdisp')) as SipRequest, 200, 'OK', {
      toTag: 'ignored',
      headers: [['Allow', 'INVITE, ACK, BYE']],
      body: 'v=0\r\n',
      contentType: 'application/sdp',
    });
    expect(ok.getAll('Allow')).toEqual(['INVITE', 'ACK', 'BYE']);
    expect(ok.to.tag).toBe('ignored');
    const text = ok.toString();
    expect(text).toContain('\r\nContent-Type: application/sdp\r\nContent-Length: 5\r\n\r\nv=0\r\n');
    const again = parseMessage(text) as SipResponse;
    expect(again.body.toString()).toBe('v=0\r\n');
    expect(again.callId).toBe('lwsdisp.1234abcd@funky.example.com');
    expect(createResponse(request, 486).reason).toBe('Busy Here');
    expect(() => createResponse(request, 99)).toThrow(RangeError);
  });

  it('createRequest adds the mandatory headers (RFC 3261 8.1.1) and a From tag', () => {
    const r = createRequest({
      method: 'INVITE',
      uri: 'sip:+15551230001@carrier.example.net;transport=tcp',
      from: '"Agent" <sip:+15557654321@callbridge.example.com>',
      to: '<sip:+15551230001@carrier.example.net>',
      via: createVia('TCP', '192.0.2.10', 5060),
      contact: '<sip:callbridge@192.0.2.10:5060;transport=tcp>',
      routes: ['<sip:edge.example.net;lr>'],
      cseq: 7,
      headers: [['Supported', 'timer, replaces']],
      body: Buffer.from('v=0\r\n'),
      contentType: 'application/sdp',
    });
    expect(r.headers().map(([n]) => n)).toEqual(['Via', 'Max-Forwards', 'Route', 'From', 'To', 'Call-ID', 'CSeq', 'Contact', 'Supported', 'Supported', 'Content-Type']);
    expect(r.from.tag).toMatch(/^[A-Za-z0-9_-]{12}$/);
    expect(r.topVia!.branch).toMatch(/^z9hG4bK[A-Za-z0-9_-]{16}$/);
    expect(r.topVia!.rport).toBeNull();
    expect(r.cseq.toString()).toBe('7 INVITE');
    expect(r.maxForwards).toBe(70);
    const back = parseMessage(r.toBuffer({}), { stream: true }) as SipRequest;
    expect(semantic(back)).toEqual(semantic(r));
    expect(back.contentLength).toBe(5);
    expect(() => createRequest({ method: 'IN VITE', uri: 'sip:a@b', from: '<sip:a@b>', to: '<sip:a@b>' })).toThrow(TypeError);
    expect(() => createRequest({ method: 'INVITE', uri: 'nope', from: '<sip:a@b>', to: '<sip:a@b>' })).toThrow(TypeError);
    expect(() => createRequest({ method: 'INVITE', uri: 'sip:a@b', from: 'not an address', to: '<sip:a@b>' })).toThrow(TypeError);
  });

  it('set, append, prepend, remove; typed values are live', () => {
    const m = req('invite-carrier');
    m.prepend('Via', createVia('UDP', '192.0.2.1', 5060, 'z9hG4bKnew'));
    expect(m.via.map((v) => v.branch)).toEqual(['z9hG4bKnew', 'z9hG4bK3f1c.9a7e21b4c2d0f', 'z9hG4bK-524287-1---a1b2c3d4e5f60718']);
    expect(m.remove('via')).toBe(3);
    expect(m.via).toEqual([]);
    m.append('v', 'SIP/2.0/UDP a;branch=z9hG4bK1, SIP/2.0/UDP b;branch=z9hG4bK2');
    expect(m.via.map((v) => v.host)).toEqual(['a', 'b']);
    m.set('X-Custom', 'one', 'two');
    expect(m.getAll('x-custom')).toEqual(['one', 'two']);
    m.to.tag = 'abc';
    m.cseq.seq = 103;
    m.maxForwards = 10;
    m.callId = 'new-call-id@example.com';
    m.contentType = 'application/sdp;charset=utf-8';
    m.from = new NameAddr(new SipUri({ user: 'alice', host: 'example.com' }), 'Alice', { tag: 't1' });
    m.cseq = new CSeq(104, 'INVITE');
    const back = parseMessage(m.toBuffer());
    expect(back.to.tag).toBe('abc');
    expect(back.cseq.seq).toBe(104);
    expect(back.maxForwards).toBe(10);
    expect(back.callId).toBe('new-call-id@example.com');
    expect(back.contentType?.params.get('charset')).toBe('utf-8');
    expect(back.from.toString()).toBe('"Alice" <sip:alice@example.com>;tag=t1');
    expect(() => m.set('Via', 'garbage')).toThrow(TypeError);
    expect(() => m.set('X-Bad', 'a\r\nInjected: 1')).toThrow(TypeError);
    expect(() => m.set('Bad Name', 'x')).toThrow(TypeError);
    expect(() => m.set('Via', new CSeq(1, 'X'))).toThrow(TypeError);
    expect(() => m.to.params.set('tag', 'a b')).toThrow(TypeError);
    expect(() => m.to.params.set('t ag', 'a')).toThrow(TypeError);
    expect(() => (m.maxForwards = 256)).toThrow(RangeError);
    expect(() => (m.callId = 'a b')).toThrow(TypeError);
    expect(() => m.set('Max-Forwards', 'many')).toThrow(TypeError);
    expect(() => m.set('Call-ID', '')).toThrow(TypeError);
    m.contentType = undefined;
    expect(m.has('Content-Type')).toBe(false);
    // Lists not read yet still count value by value.
    expect(m.remove('Allow')).toBe(11);
  });

  it('header names that are also Object.prototype properties are just unknown headers', () => {
    const text = INVITE.toString().replace('User-Agent:', 'constructor: a\r\n__proto__: b\r\ntoString:');
    const m = parseMessage(text);
    expect([m.get('constructor'), m.get('__proto__'), m.get('tostring')]).toEqual(['a', 'b', 'CarrierSBC/4.2']);
    expect(semantic(parseMessage(m.toBuffer()))).toEqual(semantic(m));
  });

  it('Content-Length is always computed from the body', () => {
    const m = req('esc01');
    m.body = Buffer.from('short');
    const text = m.toString();
    expect(text).toContain('\r\nContent-Length: 5\r\n\r\nshort');
    expect(text.match(/Content-Length/g)).toHaveLength(1);
    const noLength = req('inv2543');
    expect(noLength.toString()).toMatch(/\r\nContent-Length: 105\r\n\r\nv=0/);
  });

  it('clone() is deep', () => {
    const a = req('invite-carrier');
    const b = a.clone();
    b.topVia!.branch = 'z9hG4bKother';
    b.to.tag = 'x';
    b.body[0] = 0x41;
    (b.uri as SipUri).user = 'changed';
    expect(a.topVia!.branch).toBe('z9hG4bK3f1c.9a7e21b4c2d0f');
    expect(a.to.tag).toBeUndefined();
    expect(a.body[0]).toBe(0x76);
    expect((a.uri as SipUri).user).toBe('+15551230001');
    expect(res('ok-200').clone().toString()).toBe(res('ok-200').toString());
  });

  it('generators: branch with the magic cookie, tags, Call-IDs -- token characters, unique', () => {
    const n = 10000;
    const branches = new Set(Array.from({ length: n }, generateBranch));
    const tags = new Set(Array.from({ length: n }, generateTag));
    const ids = new Set(Array.from({ length: n }, () => generateCallId()));
    expect([branches.size, tags.size, ids.size]).toEqual([n, n, n]);
    for (const b of [...branches].slice(0, 100)) expect(b).toMatch(/^z9hG4bK[A-Za-z0-9_-]{16}$/);
    for (const t of [...tags].slice(0, 100)) expect(t).toMatch(/^[A-Za-z0-9_-]{12}$/);
    expect(generateCallId('host.example.com')).toMatch(/^[A-Za-z0-9_-]{20}@host\.example\.com$/);
  });

  it('dump(): one line per header and a short body preview', () => {
    const d = req('invite-carrier').dump();
    const lines = d.split('\n');
    expect(lines[0]).toBe('INVITE sip:+15551230001@203.0.113.10:5060;transport=udp SIP/2.0');
    expect(lines).toContain('CSeq: 102 INVITE');
    expect(lines).toContain('Via: SIP/2.0/UDP 198.51.100.20:5060;branch=z9hG4bK3f1c.9a7e21b4c2d0f;rport');
    const last = lines[lines.length - 1]!;
    expect(last).toMatch(/^body: \d+ bytes application\/sdp "v=0\\r\\no=- 1627384950/);
    expect(last.length).toBeLessThan(120);
    expect(req('lwsdisp').dump().split('\n').pop()).toBe('body: 0 bytes');
  });
});

// --- round trips -----------------------------------------------------------------------------------

describe('round trip: parse(serialize(parse(x))) equals parse(x)', () => {
  it.each(ALL_PARSEABLE)('%s', (name) => {
    const a = parseMessage(fixture(name));
    const wire = a.toBuffer();
    const b = parseMessage(wire, { stream: true });
    expect(semantic(b)).toEqual(semantic(a));
    // Serialization is a fixed point after the first pass.
    expect(b.toBuffer().equals(wire)).toBe(true);
    expect(semantic(parseMessage(a.toBuffer({ compact: true })))).toEqual(semantic(a));
  });
});

// --- properties ------------------------------------------------------------------------------------

/** Text without CR / LF (which a header value cannot carry; quote() turns them into SP). */
const lineText = fc.string({ unit: 'binary', maxLength: 24 }).map((s) => s.replace(/[\r\n]/g, ''));
const tokenText = fc.string({ unit: fc.constantFrom(...'abcXYZ019-.!%*_+`\'~'.split('')), minLength: 1, maxLength: 12 });

describe('properties', () => {
  it('display names, URI users and quoted parameter values with quotes, commas and escapes round-trip', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ display: fc.option(lineText, { nil: undefined }), user: fc.string({ unit: 'binary', minLength: 1, maxLength: 16 }), tag: tokenText, note: lineText }), {
          minLength: 1,
          maxLength: 4,
        }),
        lineText,
        (contacts, subject) => {
          const m = createRequest({ method: 'REGISTER', uri: 'sip:registrar.example.com', from: '<sip:a@example.com>', to: '<sip:a@example.com>', via: createVia('UDP', '192.0.2.1') });
          for (const c of contacts) {
            const na = new NameAddr(new SipUri({ user: c.user, host: 'example.com' }), c.display, { tag: c.tag });
            na.params.set('note', quote(c.note));
            m.append('Contact', na);
          }
          // Header text may not carry NUL (set() refuses it); SIP trims only SP and HT.
          const subj = subject.replace(/\0/g, '').replace(/^[ \t]+|[ \t]+$/g, '');
          m.set('Subject', subj);
          const back = parseMessage(m.toBuffer());
          expect(back.contacts).toHaveLength(contacts.length);
          back.contacts.forEach((na, i) => {
            const c = contacts[i]!;
            expect(na.displayName).toBe(c.display);
            expect((na.uri as SipUri).user).toBe(c.user);
            expect(na.tag).toBe(c.tag);
            expect(na.params.getUnquoted('note')).toBe(c.note);
          });
          expect(back.get('Subject')).toBe(subj);
          expect(semantic(back)).toEqual(semantic(m));
        },
      ),
      { numRuns: 2000 },
    );
  });

  /** Parses; whatever is accepted must serialize into something that parses to the same message. */
  function robust(bytes: Uint8Array, stream = false): void {
    let m: SipMessageAny;
    try {
      m = parseMessage(bytes, { stream });
    } catch (err) {
      if (!(err instanceof SipParseError)) throw err;
      expect(err.reason).toMatch(/^[\x20-\x7e]*$/);
      if (err.context) buildStatelessResponse(err);
      return;
    }
    const again = parseMessage(m.toBuffer(), { stream: true });
    expect(semantic(again)).toEqual(semantic(m));
    m.dump();
  }

  it('random bytes never throw anything but SipParseError (10,000 cases)', () => {
    const sipish = fc.constantFrom(...'INVITE sip:@;=,"<>\\%\r\n\t :/SIP2.0Via v f t i CSeq 1 Call-ID From To Content-Length l '.split(' ').flatMap((w) => [w, ' ']));
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 600 }),
          fc.array(sipish, { maxLength: 200 }).map((parts) => Buffer.from(parts.join(''))),
        ),
        (bytes) => robust(bytes),
      ),
      { numRuns: 10000 },
    );
  });

  it('mutated valid messages never throw anything but SipParseError (12,000 cases)', () => {
    const sources = ALL_PARSEABLE.map(fixture);
    const interesting = [0x20, 0x09, 0x0d, 0x0a, 0x3a, 0x3b, 0x2c, 0x22, 0x3c, 0x3e, 0x25, 0x5c, 0x40, 0x3d, 0x3f, 0x5b, 0x5d, 0x2f, 0x00, 0xff, 0xc3, 0x30, 0x39];
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
      fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), byte: fc.constantFrom(...interesting) }),
      fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 16 }) }),
      fc.record({ kind: fc.constant('dup' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 40 }) }),
      fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.nat({ max: sources.length - 1 }), fc.array(mutation, { minLength: 1, maxLength: 6 }), fc.boolean(), (which, muts, stream) => {
        let b = Buffer.from(sources[which]!);
        for (const mu of muts) {
          const at = b.length === 0 ? 0 : mu.at % b.length;
          if (mu.kind === 'flip') b[at] = mu.byte;
          else if (mu.kind === 'insert') b = Buffer.concat([b.subarray(0, at), Buffer.from([mu.byte]), b.subarray(at)]);
          else if (mu.kind === 'delete') b = Buffer.concat([b.subarray(0, at), b.subarray(at + mu.len)]);
          else if (mu.kind === 'dup') b = Buffer.concat([b.subarray(0, at + mu.len), b.subarray(at)]);
          else b = b.subarray(0, at);
        }
        robust(b, stream);
      }),
      { numRuns: 12000 },
    );
  });
});

// --- stream framing --------------------------------------------------------------------------------

describe('SipStreamFramer (RFC 3261 18.3, RFC 5626 3.5.1)', () => {
  const msgA = parseMessage(INVITE).toBuffer();
  const msgB = res('ok-200').toBuffer();
  const msgC = req('lwsdisp').toBuffer();

  it('reassembles a message split at every possible byte boundary', () => {
    for (let k = 0; k <= msgA.length; k++) {
      const f = new SipStreamFramer();
      const out = [...f.push(msgA.subarray(0, k)), ...f.push(msgA.subarray(k))];
      expect(out).toHaveLength(1);
      expect(out[0]!.equals(msgA)).toBe(true);
      expect(f.buffered).toBe(0);
    }
  });

  it('splits pipelined messages, fed whole or byte by byte', () => {
    const all = Buffer.concat([msgA, msgB, msgC]);
    const f = new SipStreamFramer();
    const out = f.push(all);
    expect(out.map((b) => b.length)).toEqual([msgA.length, msgB.length, msgC.length]);
    expect(Buffer.concat(out).equals(all)).toBe(true);
    const g = new SipStreamFramer();
    const bytewise: Buffer[] = [];
    for (let i = 0; i < all.length; i++) bytewise.push(...g.push(all.subarray(i, i + 1)));
    expect(Buffer.concat(bytewise).equals(all)).toBe(true);
    expect(bytewise).toHaveLength(3);
    for (const b of bytewise) expect(() => parseMessage(b, { stream: true })).not.toThrow();
  });

  it('random chunking of pipelined messages with keep-alives gives the same messages', () => {
    const crlf = Buffer.from('\r\n');
    const ping = Buffer.from('\r\n\r\n');
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(msgA, msgB, msgC, ping, crlf), { minLength: 1, maxLength: 8 }),
        fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 20 }),
        (items, sizes) => {
          // A pong is only distinguishable from half a ping once the next byte is known: end
          // the stream with a message so every keep-alive is followed by something.
          const seq = [...items, msgC];
          const stream = Buffer.concat(seq);
          const expected = seq.filter((b) => b !== ping && b !== crlf);
          let pings = 0;
          let pongs = 0;
          const f = new SipStreamFramer({ onPing: () => pings++, onPong: () => pongs++ });
          const out: Buffer[] = [];
          let pos = 0;
          for (let k = 0; pos < stream.length; k++) {
            const n = sizes[k % sizes.length]!;
            out.push(...f.push(stream.subarray(pos, pos + n)));
            pos += n;
          }
          expect(out.length).toBe(expected.length);
          out.forEach((b, i) => expect(b.equals(expected[i]!)).toBe(true));
          expect(f.buffered).toBe(0);
          // A run of n CRLFs between two messages is floor(n / 2) pings and n % 2 pongs,
          // however the run was cut into chunks ("\r\n" + "\r\n" is a ping too).
          let wantPings = 0;
          let wantPongs = 0;
          let run = 0;
          for (const b of seq) {
            if (b === ping) run += 2;
            else if (b === crlf) run += 1;
            else {
              wantPings += Math.floor(run / 2);
              wantPongs += run % 2;
              run = 0;
            }
          }
          expect([pings, pongs]).toEqual([wantPings, wantPongs]);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('answers pings, reports pongs, skips stray line ends', () => {
    let pings = 0;
    let pongs = 0;
    const f = new SipStreamFramer({ onPing: () => pings++, onPong: () => pongs++ });
    expect(f.push(Buffer.from('\r\n\r\n'))).toEqual([]);
    expect(pings).toBe(1);
    expect(f.push(Buffer.from('\r\n'))).toEqual([]);
    expect([pings, pongs, f.buffered]).toEqual([1, 0, 2]);
    expect(f.push(Buffer.from('\r\n'))).toEqual([]);
    expect([pings, pongs, f.buffered]).toEqual([2, 0, 0]);
    const out = f.push(Buffer.concat([Buffer.from('\r\n'), msgC, Buffer.from('\n\r\n\r\n'), msgC]));
    expect(out).toHaveLength(2);
    expect([pings, pongs]).toEqual([3, 1]);
  });

  it('a bare LF in a header section breaks the stream, wherever the chunks are cut; the 400 has only the real Via', () => {
    const text = msgC.toString();
    const eol = text.indexOf('\r\n', text.indexOf('\r\nVia:') + 2);
    const bad = Buffer.from(text.slice(0, eol) + '\r\nSubject: hi\nVia: SIP/2.0/TCP 127.0.0.9:5999' + text.slice(eol));
    for (let k = 0; k <= bad.length; k++) {
      const f = new SipStreamFramer();
      let err: unknown;
      try {
        f.push(bad.subarray(0, k));
        f.push(bad.subarray(k));
      } catch (e) {
        err = e;
      }
      expect(err, `cut at ${k}`).toBeInstanceOf(SipParseError);
      const e = err as SipParseError;
      expect(e.reason).toBe('Bad Request: bare LF in header section');
      if (k === 0 || k === bad.length) {
        expect(e.context?.via).toEqual(req('lwsdisp').getAll('Via'));
        expect(buildStatelessResponse(e)!.toString()).not.toContain('127.0.0.9');
      }
      expect(f.failed).toBe(e);
    }
    // LF line ends throughout (a sender that would end its header with LF LF): at the first one.
    const f = new SipStreamFramer();
    expect(() => f.push(Buffer.from('OPTIONS sip:a@b SIP/2.0\nVia: SIP/2.0/TCP h;branch=z9hG4bK1\n'))).toThrow(/bare LF/);
    // A response: no context, marked as one (the transport drops it).
    const g = new SipStreamFramer();
    let r: SipParseError | undefined;
    try {
      g.push(Buffer.from('SIP/2.0 200 OK\nVia: x\n'));
    } catch (e) {
      r = e as SipParseError;
    }
    expect([r?.isResponse, r?.context]).toEqual([true, undefined]);
    // A CR at the end of one chunk and its LF at the start of the next is a line end; LFs in a body are fine.
    const body = createRequest({ method: 'MESSAGE', uri: 'sip:a@b', from: '<sip:a@b>', to: '<sip:c@d>', body: 'a\nb\n\n', via: createVia('TCP', 'h') }).toBuffer();
    const h = new SipStreamFramer();
    const cr = body.indexOf('\r\n') + 1;
    expect([...h.push(body.subarray(0, cr)), ...h.push(body.subarray(cr))].map((b) => b.equals(body))).toEqual([true]);
  });

  it('inMessage: true from the first byte of a message to its last, never for keep-alives', () => {
    const f = new SipStreamFramer();
    expect(f.inMessage).toBe(false);
    f.push(Buffer.from('\r\n'));
    expect([f.buffered, f.inMessage]).toEqual([2, false]); // half a ping, maybe
    f.push(Buffer.from('\r\n'));
    f.push(msgC.subarray(0, 1));
    expect(f.inMessage).toBe(true);
    expect(f.push(msgC.subarray(1))).toHaveLength(1);
    expect(f.inMessage).toBe(false);
    f.push(Buffer.concat([msgC, msgA.subarray(0, 10)]));
    expect(f.inMessage).toBe(true);
  });

  it('caps the header section and the body', () => {
    const f = new SipStreamFramer({ maxHeaderBytes: 1024 });
    expect(() => f.push(Buffer.from('INVITE sip:a@b SIP/2.0\r\n' + 'X: y\r\n'.repeat(200)))).toThrow(SipTooLargeError);
    expect(f.failed).toBeInstanceOf(SipTooLargeError);
    expect(() => f.push(msgC)).toThrow(SipTooLargeError);

    const g = new SipStreamFramer({ maxBodyBytes: 100 });
    const big = createRequest({ method: 'MESSAGE', uri: 'sip:a@b', from: '<sip:a@b>', to: '<sip:c@d>', body: 'x'.repeat(101), via: createVia('TCP', 'h') }).toBuffer();
    let err: unknown;
    try {
      g.push(big.subarray(0, big.length - 101));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SipTooLargeError);
    const e = err as SipTooLargeError;
    expect(e.status).toBe(513);
    expect(e.context?.method).toBe('MESSAGE');
    expect(buildStatelessResponse(e)!.toString()).toMatch(/^SIP\/2\.0 513 Message Too Large\r\n/);
    // Default caps hold a large but sane message, and a slow sender is not a problem.
    const h = new SipStreamFramer();
    const long = createRequest({ method: 'MESSAGE', uri: 'sip:a@b', from: '<sip:a@b>', to: '<sip:c@d>', body: 'y'.repeat(60000), via: createVia('TCP', 'h') }).toBuffer();
    const parts: Buffer[] = [];
    for (let i = 0; i < long.length; i += 1000) parts.push(...h.push(long.subarray(i, i + 1000)));
    expect(parts).toHaveLength(1);
  });

  it('an unreadable or ambiguous Content-Length breaks the stream; a missing one is a 400 for that message only', () => {
    const bad = Buffer.from(msgC.toString().replace('Content-Length: 0', 'Content-Length: five'));
    expect(() => new SipStreamFramer().push(bad)).toThrow(/malformed Content-Length/);
    const two = Buffer.from(msgC.toString().replace('Content-Length: 0', 'Content-Length: 0\r\nl: 3'));
    expect(() => new SipStreamFramer().push(two)).toThrow(/multiple Content-Length/);
    const same = Buffer.from(msgC.toString().replace('Content-Length: 0', 'Content-Length: 0\r\nl: 0'));
    expect(new SipStreamFramer().push(same)).toHaveLength(1);
    const folded = Buffer.from(msgA.toString().replace(/Content-Length: (\d+)/, 'Content-Length:\r\n $1'));
    expect(new SipStreamFramer().push(folded)[0]!.equals(folded)).toBe(true);

    const none = Buffer.from(msgC.toString().replace('Content-Length: 0\r\n', ''));
    const f = new SipStreamFramer();
    const out = f.push(Buffer.concat([none, msgC]));
    expect(out).toHaveLength(2);
    expect(parseError(out[0]!, { stream: true }).reason).toBe('Bad Request: missing Content-Length');
    expect(parseMessage(out[1]!, { stream: true })).toBeInstanceOf(SipRequest);
  });
});

// --- the fixture set itself ------------------------------------------------------------------------

describe('fixtures', () => {
  it('every fixture file is covered by a test', () => {
    const covered = new Set([
      ...ALL_PARSEABLE,
      ...['badinv01', 'clerr', 'ncl', 'scalar02', 'scalarlg', 'quotbal', 'ltgtruri', 'lwsruri', 'escruri', 'baddn', 'badvers', 'mismatch01', 'mismatch02', 'bigcode', 'insuf', 'multi01', 'mcl01'],
    ]);
    const files = readdirSync(FIXTURES)
      .filter((f) => f.endsWith('.txt'))
      .map((f) => f.slice(0, -4));
    expect(files.filter((f) => !covered.has(f))).toEqual([]);
    expect([...covered].filter((f) => !files.includes(f))).toEqual([]);
  });
});
