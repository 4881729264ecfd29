import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  DigestClient,
  DigestServer,
  authorizationHeaderName,
  authorize,
  challengeHeaderName,
  computeDigestResponse,
  digestFailureAction,
  formatDigestChallenge,
  formatDigestCredentials,
  parseAuthHeader,
  parseDigestChallenges,
  parseDigestCredentials,
  sipUrisEquivalent,
  type DigestAlgorithm,
  type DigestFailureReason,
} from '../../src/sip/digest/index.ts';

class VirtualClock {
  t = 1_700_000_000_000;
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

const SECRET = 'test-secret-0123456789abcdef';
const REALM = 'callbridge.test';
const RURI = 'sip:+15551234567@callbridge.test:5080;transport=tcp';

function setup(options: Partial<ConstructorParameters<typeof DigestServer>[0]> = {}) {
  const clock = new VirtualClock();
  const server = new DigestServer({ realm: REALM, secret: SECRET, clock, ...options });
  const users = new Map([['trunk1', 'pa55word']]);
  const password = (u: string) => users.get(u);
  return { clock, server, password };
}

function param(header: string, name: string): string | undefined {
  const parsed = parseAuthHeader(header);
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.value[0]?.params.get(name);
}

const ALL_REASONS: DigestFailureReason[] = [
  'no_credentials',
  'malformed',
  'realm_mismatch',
  'unsupported_algorithm',
  'unsupported_qop',
  'bad_nonce',
  'uri_mismatch',
  'unknown_user',
  'bad_response',
  'stale_nonce',
  'replayed_nc',
];

describe('header grammar', () => {
  it('parses quoted and token values with case-insensitive names', () => {
    const r = parseDigestChallenges('Digest REALM="biloxi.com", Nonce=abc123, QOP="auth,auth-int", algorithm=sha-256, opaque="o"');
    expect(r.errors).toEqual([]);
    expect(r.challenges).toHaveLength(1);
    const c = r.challenges[0]!;
    expect(c.realm).toBe('biloxi.com');
    expect(c.nonce).toBe('abc123');
    expect(c.qop).toEqual(['auth', 'auth-int']);
    expect(c.algorithm).toBe('sha-256');
    expect(c.opaque).toBe('o');
    expect(c.stale).toBe(false);
  });

  it('unescapes quoted-pairs and keeps commas and equals signs inside quotes', () => {
    const r = parseDigestCredentials(
      'Digest username="a\\"b\\\\c", realm="r, with = signs", nonce="n", uri="sip:x@y;transport=tcp", response="00"',
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value.username).toBe('a"b\\c');
    expect(r.value.realm).toBe('r, with = signs');
    expect(r.value.uri).toBe('sip:x@y;transport=tcp');
    expect(r.value.qop).toBeUndefined();
  });

  it('accepts folded whitespace, empty list elements and quoted tokens', () => {
    const r = parseDigestCredentials(
      'Digest username="bob",\r\n realm="r",, nonce="n" ,uri="sip:a@b",\r\n\tresponse="x", qop="auth", nc=00000001, cnonce="c", algorithm="MD5"',
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.value.qop).toBe('auth');
    expect(r.value.algorithm).toBe('MD5');
    expect(r.value.nc).toBe('00000001');
  });

  it('splits several challenges in one value and skips other schemes', () => {
    const parsed = parseAuthHeader('Basic dXNlcjpwYXNz==, Digest realm="a", nonce="1", Bearer, Digest realm="b", nonce="2", algorithm=SHA-256');
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(parsed.value.map((c) => c.scheme)).toEqual(['Basic', 'Digest', 'Bearer', 'Digest']);
    expect(parsed.value[0]!.token68).toBe('dXNlcjpwYXNz==');
    const r = parseDigestChallenges(['Basic realm="x"', 'Digest realm="a", nonce="1"', 'Digest realm="b", nonce="2", algorithm=SHA-256']);
    expect(r.challenges.map((c) => `${c.realm}/${c.algorithm}`)).toEqual(['a/MD5', 'b/SHA-256']);
  });

  it('rejects malformed values with a reason', () => {
    const bad = [
      '',
      '   ',
      'Digest realm="unterminated',
      'Digest realm="a", realm="b", nonce="n"',
      'Digest realm="a" nonce="n"',
      'Digest realm=',
      'Digest realm="a\\\r\n"',
      'Digest realm="a\u0001"',
      'Digest realm="a\\\u0001"',
      '=x',
      'Digest realm==="x"',
      ',realm="x"',
    ];
    for (const v of bad) {
      const r = parseAuthHeader(v);
      if (r.ok) {
        // a few parse as a grammar but are not usable Digest
        expect(parseDigestChallenges(v).challenges).toEqual([]);
      } else {
        expect(typeof r.error).toBe('string');
      }
    }
    expect(parseDigestChallenges('Digest nonce="n"').errors).toEqual(['challenge without realm']);
    expect(parseDigestCredentials('Digest username="u", realm="r", nonce="n", uri="u", response="r", qop=auth')).toEqual({
      ok: false,
      error: 'qop without cnonce',
    });
    expect(parseAuthHeader('x'.repeat(10_000)).ok).toBe(false);
  });

  it('formats challenges and credentials with RFC 7616 quoting', () => {
    expect(
      formatDigestChallenge({ realm: 'r', nonce: 'n', opaque: 'o', algorithm: 'SHA-256', qop: ['auth'], stale: true }),
    ).toBe('Digest realm="r", nonce="n", opaque="o", algorithm=SHA-256, qop="auth", stale=true');
    expect(
      formatDigestCredentials({
        username: 'u"1',
        realm: 'r',
        nonce: 'n',
        uri: 'sip:a@b:5061;transport=tls',
        response: 'abc',
        algorithm: 'MD5',
        cnonce: 'c',
        opaque: 'o',
        qop: 'auth',
        nc: '00000001',
      }),
    ).toBe(
      'Digest username="u\\"1", realm="r", nonce="n", uri="sip:a@b:5061;transport=tls", response="abc", algorithm=MD5, cnonce="c", opaque="o", qop=auth, nc=00000001',
    );
  });

  it('refuses to format a value that would inject a header line', () => {
    expect(() => formatDigestChallenge({ realm: 'r\r\nX-Evil: 1', nonce: 'n' })).toThrow(TypeError);
    expect(() => formatDigestCredentials({ username: 'u', realm: 'r', nonce: 'n', uri: 'u', response: 'r', qop: 'auth int' })).toThrow(TypeError);
  });

  it('round-trips arbitrary printable values through format and parse', () => {
    const printable = fc.string({ unit: fc.constantFrom(...'abcXYZ019 "\\,;=:@/-_.~\t'.split('')), maxLength: 40 });
    fc.assert(
      fc.property(printable, printable.filter((s) => s.length > 0), printable, (realm, nonce, uri) => {
        const [c] = parseDigestChallenges(formatDigestChallenge({ realm, nonce, opaque: uri, qop: ['auth'] })).challenges;
        expect(c?.realm).toBe(realm);
        expect(c?.nonce).toBe(nonce);
        expect(c?.opaque).toBe(uri);
        const cred = parseDigestCredentials(formatDigestCredentials({ username: realm, realm, nonce, uri, response: 'ff' }));
        expect(cred.ok && cred.value.uri === uri && cred.value.username === realm).toBe(true);
      }),
    );
  });

  it('never throws on arbitrary input', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 300 }), (s) => {
        const r = parseAuthHeader(s);
        expect(typeof r.ok).toBe('boolean');
        parseDigestChallenges(s);
        parseDigestCredentials(s);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('RFC test vectors', () => {
  it('RFC 2617 section 3.5 (MD5, qop=auth)', () => {
    expect(
      computeDigestResponse({
        algorithm: 'MD5',
        username: 'Mufasa',
        realm: 'testrealm@host.com',
        password: 'Circle Of Life',
        method: 'GET',
        uri: '/dir/index.html',
        nonce: 'dcd98b7102dd2f0e8b11d0f600bfb0c093',
        qop: 'auth',
        nc: '00000001',
        cnonce: '0a4f113b',
      }),
    ).toBe('6629fae49393a05397450978507c4ef1');
  });

  it('RFC 2617 section 3.5 through the client, from the challenge text', () => {
    const client = new DigestClient({ username: 'Mufasa', password: 'Circle Of Life', cnonce: () => '0a4f113b' });
    const r = client.respond({
      challenges:
        'Digest realm="testrealm@host.com", qop="auth,auth-int", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"',
      method: 'GET',
      uri: '/dir/index.html',
    });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.authorizations[0]!.value).toBe(
      'Digest username="Mufasa", realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/dir/index.html", ' +
        'response="6629fae49393a05397450978507c4ef1", cnonce="0a4f113b", opaque="5ccc069c403ebaf9f0171e9517f40e41", qop=auth, nc=00000001',
    );
  });

  // RFC 7616 section 3.9.1; the password is "Circle of Life" with a lower-case "of" (erratum 4495).
  const rfc7616 = {
    challenges: [
      'Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=SHA-256, nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"',
      'Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=MD5, nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"',
    ],
    cnonce: 'f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ',
  };

  it('RFC 7616 section 3.9.1 (SHA-256 and MD5) as computations', () => {
    const base = {
      username: 'Mufasa',
      realm: 'http-auth@example.org',
      password: 'Circle of Life',
      method: 'GET',
      uri: '/dir/index.html',
      nonce: '7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v',
      qop: 'auth',
      nc: '00000001',
      cnonce: rfc7616.cnonce,
    };
    expect(computeDigestResponse({ ...base, algorithm: 'SHA-256' })).toBe('753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1');
    expect(computeDigestResponse({ ...base, algorithm: 'MD5' })).toBe('8ca523f5e9506fed4657c9700eebdbec');
  });

  it('RFC 7616 section 3.9.1 through the client: SHA-256 preferred, opaque echoed', () => {
    const client = new DigestClient({ username: 'Mufasa', password: 'Circle of Life', cnonce: () => rfc7616.cnonce });
    const r = client.respond({ challenges: rfc7616.challenges, method: 'GET', uri: '/dir/index.html' });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const [a] = r.authorizations;
    expect(a!.algorithm).toBe('SHA-256');
    expect(a!.value).toBe(
      'Digest username="Mufasa", realm="http-auth@example.org", nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", uri="/dir/index.html", ' +
        'response="753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1", algorithm=SHA-256, ' +
        'cnonce="f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS", qop=auth, nc=00000001',
    );
    const md5 = new DigestClient({ username: 'Mufasa', password: 'Circle of Life', cnonce: () => rfc7616.cnonce, algorithms: ['MD5'] });
    const m = md5.respond({ challenges: rfc7616.challenges, method: 'GET', uri: '/dir/index.html' });
    expect(m.ok && param(m.authorizations[0]!.value, 'response')).toBe('8ca523f5e9506fed4657c9700eebdbec');
  });
});

describe('DigestServer', () => {
  it('challenges with SHA-256 then MD5, one nonce, qop=auth and opaque', () => {
    const { server } = setup();
    const values = server.challenge();
    expect(values).toHaveLength(2);
    const { challenges } = parseDigestChallenges(values);
    expect(challenges.map((c) => c.algorithm)).toEqual(['SHA-256', 'MD5']);
    expect(challenges[0]!.nonce).toBe(challenges[1]!.nonce);
    expect(challenges[0]!.nonce).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(challenges.every((c) => c.realm === REALM && c.qop.join() === 'auth' && c.opaque !== undefined && !c.stale)).toBe(true);
    expect(parseDigestChallenges(server.challenge({ stale: true })).challenges.every((c) => c.stale)).toBe(true);
    expect(server.challenge()[0]).not.toBe(values[0]); // fresh nonce each time
    expect(new DigestServer({ realm: REALM, algorithms: ['MD5'] }).challenge()).toHaveLength(1);
  });

  for (const algorithm of ['MD5', 'MD5-sess', 'SHA-256', 'SHA-256-sess', 'SHA-512-256', 'SHA-512-256-sess'] as DigestAlgorithm[]) {
    it(`round-trips client to server with ${algorithm}`, () => {
      const { server } = setup({ algorithms: [algorithm] });
      const client = new DigestClient({ username: 'trunk1', password: 'pa55word' });
      const r = client.respond({ challenges: server.challenge(), method: 'INVITE', uri: RURI });
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      expect(param(r.authorizations[0]!.value, 'uri')).toBe(RURI);
      const trunk = { id: 't-1' };
      const v = server.verify({
        method: 'INVITE',
        uri: RURI,
        authorization: r.authorizations[0]!.value,
        password: (u) => (u === 'trunk1' ? { password: 'pa55word', data: trunk } : undefined),
      });
      expect(v).toEqual({ ok: true, username: 'trunk1', algorithm, nc: 1, account: trunk });
    });
  }

  it('wrong password -> bad_response (403), never echoing the password', () => {
    const { server, password } = setup();
    const r = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'trunk1', password: 'guess' });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const v = server.verify({ method: 'INVITE', uri: RURI, authorization: r.authorizations[0]!.value, password });
    expect(v).toMatchObject({ ok: false, reason: 'bad_response', action: 'forbidden', stale: false, username: 'trunk1', algorithm: 'SHA-256' });
    expect(JSON.stringify(v)).not.toContain('pa55word');
    expect(JSON.stringify(v)).not.toContain('guess');
  });

  it('unknown user -> unknown_user (403)', () => {
    const { server, password } = setup();
    const r = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'nobody', password: 'x' });
    const v = server.verify({ method: 'INVITE', uri: RURI, authorization: r.ok ? r.authorizations[0]!.value : '', password });
    expect(v).toMatchObject({ ok: false, reason: 'unknown_user', action: 'forbidden', username: 'nobody' });
  });

  it('expired nonce with a correct response -> stale_nonce, stale=true; with a wrong one -> bad_response', () => {
    const { server, clock, password } = setup({ nonceLifetimeMs: 300_000 });
    const challenges = server.challenge();
    const good = authorize({ challenges, method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word' });
    const bad = authorize({ challenges, method: 'INVITE', uri: RURI, username: 'trunk1', password: 'nope' });
    if (!good.ok || !bad.ok) throw new Error('no credentials');
    clock.advance(300_001);
    const v = server.verify({ method: 'INVITE', uri: RURI, authorization: good.authorizations[0]!.value, password });
    expect(v).toMatchObject({ ok: false, reason: 'stale_nonce', stale: true, action: 'challenge' });
    const w = server.verify({ method: 'INVITE', uri: RURI, authorization: bad.authorizations[0]!.value, password });
    expect(w).toMatchObject({ ok: false, reason: 'bad_response', stale: false });
  });

  it('a nonce just inside its lifetime is accepted', () => {
    const { server, clock, password } = setup({ nonceLifetimeMs: 1000 });
    const r = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word' });
    clock.advance(1000);
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: r.ok ? r.authorizations[0]!.value : '', password }).ok).toBe(true);
  });

  it('replayed nc -> replayed_nc; increasing nc on the same nonce accepted', () => {
    const { server, password } = setup();
    const client = new DigestClient({ username: 'trunk1', password: 'pa55word' });
    const first = client.respond({ challenges: server.challenge(), method: 'INVITE', uri: RURI });
    if (!first.ok) throw new Error('no credentials');
    const h1 = first.authorizations[0]!.value;
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: h1, password })).toMatchObject({ ok: true, nc: 1 });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: h1, password })).toMatchObject({
      ok: false,
      reason: 'replayed_nc',
      action: 'challenge',
    });
    const [h2] = client.preemptive({ method: 'OPTIONS', uri: RURI });
    const [h3] = client.preemptive({ method: 'INVITE', uri: RURI });
    expect(h2!.nc).toBe(2);
    expect(h3!.nc).toBe(3);
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: h3!.value, password })).toMatchObject({ ok: true, nc: 3 });
    // strict by default: nc=2 arriving after nc=3 is refused
    expect(server.verify({ method: 'OPTIONS', uri: RURI, authorization: h2!.value, password })).toMatchObject({ reason: 'replayed_nc' });
  });

  it('with a replay window accepts reordered counts once each', () => {
    const { server, password } = setup({ replayWindow: 8 });
    const client = new DigestClient({ username: 'trunk1', password: 'pa55word' });
    const first = client.respond({ challenges: server.challenge(), method: 'INVITE', uri: RURI });
    if (!first.ok) throw new Error('no credentials');
    const hs = [first.authorizations[0]!, ...Array.from({ length: 11 }, () => client.preemptive({ method: 'INVITE', uri: RURI })[0]!)];
    const verify = (i: number) => server.verify({ method: 'INVITE', uri: RURI, authorization: hs[i - 1]!.value, password });
    expect(verify(3).ok).toBe(true);
    expect(verify(1).ok).toBe(true); // 2 below the highest: inside the window
    expect(verify(1)).toMatchObject({ reason: 'replayed_nc' });
    expect(verify(12).ok).toBe(true);
    expect(verify(3)).toMatchObject({ reason: 'replayed_nc' }); // 9 below: outside the window
    expect(verify(5).ok).toBe(true); // 7 below: inside
    expect(verify(5)).toMatchObject({ reason: 'replayed_nc' });
  });

  it('tampered, foreign, rebound or non-canonical nonces -> bad_nonce', () => {
    const { server, password } = setup();
    const other = new DigestServer({ realm: REALM, secret: 'another-secret-0123456789' });
    const nonce = parseDigestChallenges(server.challenge()).challenges[0]!.nonce;
    const foreign = parseDigestChallenges(other.challenge()).challenges[0]!.nonce;
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
    const lastChar = nonce[42]!;
    const nonCanonical = nonce.slice(0, 42) + 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'[('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'.indexOf(lastChar) ^ 1)];
    const cases = [flip(nonce, 3), flip(nonce, 20), flip(nonce, 40), foreign, nonCanonical, nonce + 'A', 'dcd98b7102dd2f0e8b11d0f600bfb0c093'];
    for (const n of cases) {
      const auth = credentialsFor({ nonce: n });
      expect(server.verify({ method: 'INVITE', uri: RURI, authorization: auth, password })).toMatchObject({ ok: false, reason: 'bad_nonce' });
    }
    // bound to a source address
    const bound = parseDigestChallenges(server.challenge({ binding: '198.51.100.7' })).challenges[0]!.nonce;
    const auth = credentialsFor({ nonce: bound });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: auth, password, binding: '198.51.100.8' })).toMatchObject({ reason: 'bad_nonce' });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: auth, password, binding: '198.51.100.7' }).ok).toBe(true);
    // a wrong opaque
    const withOpaque = credentialsFor({ nonce: parseDigestChallenges(server.challenge()).challenges[0]!.nonce, opaque: 'forged' });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: withOpaque, password })).toMatchObject({ reason: 'bad_nonce' });
  });

  it('servers sharing a secret accept each other\'s nonces (restart, several instances)', () => {
    const { server, password } = setup();
    const twin = new DigestServer({ realm: REALM, secret: SECRET, clock: new VirtualClock() });
    const r = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word' });
    expect(twin.verify({ method: 'INVITE', uri: RURI, authorization: r.ok ? r.authorizations[0]!.value : '', password }).ok).toBe(true);
    // but not across realms
    const otherRealm = new DigestServer({ realm: 'other', secret: SECRET, clock: new VirtualClock() });
    const nonce = parseDigestChallenges(server.challenge()).challenges[0]!.nonce;
    const auth = credentialsFor({ nonce, realm: 'other' });
    expect(otherRealm.verify({ method: 'INVITE', uri: RURI, authorization: auth, password })).toMatchObject({ reason: 'bad_nonce' });
  });

  it('uri must name the Request-URI: exact, equivalent forms, or off', () => {
    const { server, password } = setup();
    const sign = (uri: string) => credentialsFor({ nonce: parseDigestChallenges(server.challenge()).challenges[0]!.nonce, uri });
    const verify = (s: DigestServer, uri: string, requestUri: string) =>
      s.verify({ method: 'INVITE', uri: requestUri, authorization: credentialsFor({ nonce: parseDigestChallenges(s.challenge()).challenges[0]!.nonce, uri }), password });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: sign('sip:+15551234567@callbridge.test'), password })).toMatchObject({
      reason: 'uri_mismatch',
      action: 'bad_request',
    });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: sign('sip:+15559999999@callbridge.test:5080;transport=tcp'), password })).toMatchObject({
      reason: 'uri_mismatch',
    });
    // RFC 3261 19.1.4 equivalents
    expect(verify(server, 'SIP:+15551234567@CallBridge.TEST:5080;Transport=TCP', RURI).ok).toBe(true);
    expect(verify(server, 'sip:%2B15551234567@callbridge.test:5080;transport=tcp', 'sip:+15551234567@callbridge.test:5080;transport=tcp').ok).toBe(false); // + is reserved
    expect(verify(server, 'sip:%61lice@h;lr;transport=udp', 'sip:alice@h;transport=udp;lr').ok).toBe(true);
    const exact = new DigestServer({ realm: REALM, secret: SECRET, uriMatch: 'exact' });
    expect(verify(exact, 'SIP:+15551234567@CallBridge.TEST:5080;Transport=TCP', RURI)).toMatchObject({ reason: 'uri_mismatch' });
    expect(verify(exact, RURI, RURI).ok).toBe(true);
    const off = new DigestServer({ realm: REALM, secret: SECRET, uriMatch: 'off' });
    expect(verify(off, 'sip:somewhere@else', RURI).ok).toBe(true);
  });

  it('maps missing, foreign-realm, unsupported and malformed credentials to reasons', () => {
    const { server, password } = setup({ algorithms: ['SHA-256'] });
    const nonce = () => parseDigestChallenges(server.challenge()).challenges[0]!.nonce;
    const verify = (authorization: string | string[] | undefined) => server.verify({ method: 'INVITE', uri: RURI, authorization, password });
    expect(verify(undefined)).toMatchObject({ reason: 'no_credentials', action: 'challenge' });
    expect(verify([])).toMatchObject({ reason: 'no_credentials' });
    expect(verify('Basic dXNlcjpwYXNz')).toMatchObject({ reason: 'no_credentials' });
    expect(verify(credentialsFor({ nonce: nonce(), realm: 'elsewhere' }))).toMatchObject({ reason: 'realm_mismatch', action: 'challenge' });
    expect(verify(credentialsFor({ nonce: nonce(), algorithm: 'MD5' }))).toMatchObject({ reason: 'unsupported_algorithm' });
    expect(verify(credentialsFor({ nonce: nonce(), algorithm: 'SHA-1' }))).toMatchObject({ reason: 'unsupported_algorithm' });
    expect(verify(credentialsFor({ nonce: nonce(), qop: null }))).toMatchObject({ reason: 'unsupported_qop' });
    expect(verify(credentialsFor({ nonce: nonce(), qop: 'auth-int' }))).toMatchObject({ reason: 'unsupported_qop' });
    expect(verify(credentialsFor({ nonce: nonce(), nc: 'zz' }))).toMatchObject({ reason: 'malformed', action: 'bad_request' });
    expect(verify(credentialsFor({ nonce: nonce(), nc: '00000000' }))).toMatchObject({ reason: 'malformed' });
    expect(verify(credentialsFor({ nonce: nonce(), response: 'abc' }))).toMatchObject({ reason: 'malformed' });
    expect(verify('Digest username="trunk1", realm="callbridge.test"')).toMatchObject({ reason: 'malformed' });
    expect(verify('Digest realm="callbridge.test", "')).toMatchObject({ reason: 'malformed' });
    // credentials for our realm are found among others
    const ours = credentialsFor({ nonce: nonce() });
    expect(verify(['Digest username="x", realm="proxy.example", nonce="n", uri="u", response="r"', 'garbage "', ours]).ok).toBe(true);
  });

  it('RFC 2069 style (no qop) only when allowed, and then single-use nonces', () => {
    const { server, password } = setup({ allowNoQop: true, qop: [] });
    const challenges = server.challenge();
    expect(param(challenges[0]!, 'qop')).toBeUndefined();
    const r = authorize({ challenges, method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word' });
    if (!r.ok) throw new Error('no credentials');
    expect(param(r.authorizations[0]!.value, 'nc')).toBeUndefined();
    const h = r.authorizations[0]!.value;
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: h, password })).toMatchObject({ ok: true, nc: undefined });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: h, password })).toMatchObject({ reason: 'replayed_nc', stale: true });
  });

  it('qop=auth-int when offered covers the body', () => {
    const { server, password } = setup({ qop: ['auth-int'] });
    const body = 'v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\n';
    const r = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word', body });
    if (!r.ok) throw new Error('no credentials');
    expect(r.authorizations[0]!.qop).toBe('auth-int');
    const h = r.authorizations[0]!.value;
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: h, password, body: 'tampered' })).toMatchObject({ reason: 'bad_response' });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: h, password, body }).ok).toBe(true);
  });

  it('keeps the replay cache bounded, and an evicted live nonce is re-challenged, not replayable', () => {
    const { server, password, clock } = setup({ replayCacheSize: 100 });
    const client = new DigestClient({ username: 'trunk1', password: 'pa55word', maxNonces: 4 });
    const first = client.respond({ challenges: server.challenge(), method: 'INVITE', uri: RURI });
    if (!first.ok) throw new Error('no credentials');
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: first.authorizations[0]!.value, password }).ok).toBe(true);
    for (let i = 0; i < 2000; i++) {
      clock.advance(1);
      const r = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word' });
      if (!r.ok) throw new Error('no credentials');
      expect(server.verify({ method: 'INVITE', uri: RURI, authorization: r.authorizations[0]!.value, password }).ok).toBe(true);
      expect(server.trackedNonces).toBeLessThanOrEqual(100);
    }
    expect(server.trackedNonces).toBe(100);
    // The first nonce was evicted while still fresh: replaying it must not pass as new.
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: first.authorizations[0]!.value, password })).toMatchObject({
      reason: 'stale_nonce',
      stale: true,
    });
    const [next] = client.preemptive({ method: 'INVITE', uri: RURI });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: next!.value, password })).toMatchObject({ reason: 'stale_nonce' });
    // expired entries make room without raising the eviction mark
    clock.advance(400_000);
    const fresh = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word' });
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: fresh.ok ? fresh.authorizations[0]!.value : '', password }).ok).toBe(true);
    expect(server.trackedNonces).toBe(1);
  });

  it('never throws on random or mutated credentials; only equivalent spellings can pass', () => {
    const { server, password } = setup();
    const valid = authorize({ challenges: server.challenge(), method: 'INVITE', uri: RURI, username: 'trunk1', password: 'pa55word' });
    if (!valid.ok) throw new Error('no credentials');
    const header = valid.authorizations[0]!.value;
    const noisy = fc.oneof(
      fc.string({ maxLength: 400 }),
      fc.string({ unit: 'binary', maxLength: 200 }).map((s) => 'Digest ' + s),
      fc.tuple(fc.nat(header.length), fc.string({ minLength: 1, maxLength: 5 })).map(([i, s]) => header.slice(0, i) + s + header.slice(i + 1)),
      fc.nat(header.length).map((i) => header.slice(0, i)),
    );
    fc.assert(
      fc.property(noisy, (authorization) => {
        const v = server.verify({ method: 'INVITE', uri: RURI, authorization, password });
        if (v.ok) {
          // Only a mutation that leaves the credentials equivalent can pass (spacing, a char
          // replaced by itself), once: the nonce-count then makes any repeat a replay.
          expect(v.username).toBe('trunk1');
          return;
        }
        expect(ALL_REASONS).toContain(v.reason);
        expect(v.action).toBe(digestFailureAction(v.reason));
      }),
      { numRuns: 3000 },
    );
    const garbage = fc.string({ maxLength: 200 }).filter((s) => /^\s*digest\s/i.test(s) === false);
    fc.assert(
      fc.property(garbage, (s) => {
        const v = server.verify({ method: 'INVITE', uri: RURI, authorization: 'Digest ' + s + ' "', password });
        expect(v).toMatchObject({ ok: false, reason: 'malformed' });
      }),
      { numRuns: 1000 },
    );
  });

  it('rejects bad options', () => {
    expect(() => new DigestServer({ realm: 'r', secret: 'short' })).toThrow(RangeError);
    expect(() => new DigestServer({ realm: 'r', algorithms: [] })).toThrow(RangeError);
    expect(() => new DigestServer({ realm: 'r', algorithms: ['SHA-1' as DigestAlgorithm] })).toThrow(RangeError);
    expect(() => new DigestServer({ realm: 'r', replayWindow: 33 })).toThrow(RangeError);
    expect(() => new DigestServer({ realm: 'r', nonceLifetimeMs: 0 })).toThrow(RangeError);
  });
});

describe('DigestClient', () => {
  const challenge = (o: { nonce?: string; algorithm?: string; realm?: string; stale?: boolean; qop?: string[] } = {}) =>
    formatDigestChallenge({
      realm: o.realm ?? 'carrier.example',
      nonce: o.nonce ?? 'n1',
      algorithm: o.algorithm,
      qop: o.qop ?? ['auth'],
      stale: o.stale,
    });

  it('uses exactly the Request-URI given as uri, port and transport included', () => {
    const uri = 'sip:+442071234567@203.0.113.10:5080;transport=tcp;user=phone';
    const r = authorize({ challenges: challenge(), method: 'INVITE', uri, username: 'acct', password: 'pw' });
    expect(r.ok && param(r.authorizations[0]!.value, 'uri')).toBe(uri);
  });

  it('picks the strongest supported algorithm whatever the order, within preferences', () => {
    const offered = [challenge({ algorithm: 'MD5' }), challenge({ algorithm: 'SHA-256' }), challenge({ algorithm: 'SHA-999' })];
    const r = authorize({ challenges: offered, method: 'INVITE', uri: 'sip:a@b', username: 'u', password: 'p' });
    expect(r.ok && r.authorizations.map((a) => a.algorithm)).toEqual(['SHA-256']);
    const md5only = new DigestClient({ username: 'u', password: 'p', algorithms: ['MD5'] });
    const m = md5only.respond({ challenges: offered, method: 'INVITE', uri: 'sip:a@b' });
    expect(m.ok && m.authorizations[0]!.algorithm).toBe('MD5');
    // algorithm omitted in the challenge means MD5, and is omitted in the answer too
    const plain = authorize({ challenges: challenge(), method: 'INVITE', uri: 'sip:a@b', username: 'u', password: 'p' });
    expect(plain.ok && plain.authorizations[0]!.algorithm).toBe('MD5');
    expect(plain.ok && param(plain.authorizations[0]!.value, 'algorithm')).toBeUndefined();
  });

  it('answers each challenged realm once, and only allowed realms', () => {
    const offered = [challenge({ realm: 'a' }), challenge({ realm: 'b', algorithm: 'SHA-256' }), challenge({ realm: 'a', algorithm: 'SHA-256' })];
    const r = authorize({ challenges: offered, method: 'INVITE', uri: 'sip:a@b', username: 'u', password: 'p' });
    expect(r.ok && r.authorizations.map((a) => `${a.realm}/${a.algorithm}`)).toEqual(['a/SHA-256', 'b/SHA-256']);
    const picky = new DigestClient({ username: 'u', password: 'p', realms: ['b'] });
    const p = picky.respond({ challenges: offered, method: 'INVITE', uri: 'sip:a@b' });
    expect(p.ok && p.authorizations.map((a) => a.realm)).toEqual(['b']);
    expect(new DigestClient({ username: 'u', password: 'p', realms: ['z'] }).respond({ challenges: offered, method: 'INVITE', uri: 'x' })).toMatchObject({
      ok: false,
      reason: 'no_usable_challenge',
    });
  });

  it('reports unusable challenges', () => {
    const cases = [challenge({ algorithm: 'SHA-1' }), challenge({ qop: ['foo'] }), 'Basic realm="x"', 'Digest realm="x"', 'garbage "'];
    for (const c of cases) {
      const r = authorize({ challenges: c, method: 'INVITE', uri: 'sip:a@b', username: 'u', password: 'p' });
      expect(r).toMatchObject({ ok: false, reason: 'no_usable_challenge' });
    }
  });

  it('counts nc up per nonce and uses a fresh cnonce each time', () => {
    const client = new DigestClient({ username: 'u', password: 'p' });
    const a = client.respond({ challenges: challenge({ nonce: 'N' }), method: 'INVITE', uri: 'sip:a@b' });
    const b = client.respond({ challenges: challenge({ nonce: 'N' }), method: 'INVITE', uri: 'sip:a@b' });
    const c = client.respond({ challenges: challenge({ nonce: 'M' }), method: 'INVITE', uri: 'sip:a@b' });
    if (!a.ok || !b.ok || !c.ok) throw new Error('no credentials');
    expect([a, b, c].map((r) => param(r.authorizations[0]!.value, 'nc'))).toEqual(['00000001', '00000002', '00000001']);
    expect(param(a.authorizations[0]!.value, 'cnonce')).not.toBe(param(b.authorizations[0]!.value, 'cnonce'));
    expect(client.preemptive({ method: 'BYE', uri: 'sip:a@b' }).map((x) => `${x.nonce}/${x.nc}`)).toEqual(['M/2']);
    client.reset();
    expect(client.preemptive({ method: 'BYE', uri: 'sip:a@b' })).toEqual([]);
  });

  it('gives up when its credentials were refused, retries on stale=true', () => {
    const client = new DigestClient({ username: 'u', password: 'p' });
    const first = client.respond({ challenges: challenge({ nonce: 'N1' }), method: 'INVITE', uri: 'sip:a@b' });
    if (!first.ok) throw new Error('no credentials');
    const sent = first.authorizations.map((a) => a.value);
    // new nonce, not stale: the server refused the credentials
    expect(client.respond({ challenges: challenge({ nonce: 'N2' }), method: 'INVITE', uri: 'sip:a@b', previous: sent })).toMatchObject({
      ok: false,
      reason: 'rejected',
      realm: 'carrier.example',
    });
    // the same nonce again, even flagged stale: refused, do not loop
    expect(
      client.respond({ challenges: challenge({ nonce: 'N1', stale: true }), method: 'INVITE', uri: 'sip:a@b', previous: sent }),
    ).toMatchObject({ ok: false, reason: 'rejected' });
    // stale with a new nonce: same credentials, new nonce
    const retry = client.respond({ challenges: challenge({ nonce: 'N3', stale: true }), method: 'INVITE', uri: 'sip:a@b', previous: sent });
    expect(retry.ok && retry.authorizations[0]!.nonce).toBe('N3');
    // a challenge for another realm than the one answered is not a rejection
    const proxy = client.respond({ challenges: challenge({ realm: 'proxy', nonce: 'P' }), method: 'INVITE', uri: 'sip:a@b', previous: sent });
    expect(proxy.ok).toBe(true);
  });

  it('never throws on arbitrary challenges', () => {
    const client = new DigestClient({ username: 'u', password: 'p' });
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.string({ maxLength: 200 }), fc.string({ maxLength: 100 }).map((s) => 'Digest realm="r", nonce=' + s)), { maxLength: 3 }), (values) => {
        const r = client.respond({ challenges: values, method: 'INVITE', uri: 'sip:a@b', previous: values });
        expect(typeof r.ok).toBe('boolean');
      }),
      { numRuns: 2000 },
    );
  });

  it('does not reveal the password', () => {
    const client = new DigestClient({ username: 'u', password: 'hunter2' });
    expect(JSON.stringify(client)).not.toContain('hunter2');
    const r = client.respond({ challenges: challenge(), method: 'INVITE', uri: 'sip:a@b' });
    expect(JSON.stringify(r)).not.toContain('hunter2');
  });

  it('names the header fields for 401 and 407', () => {
    expect(challengeHeaderName(401)).toBe('WWW-Authenticate');
    expect(authorizationHeaderName(401)).toBe('Authorization');
    expect(challengeHeaderName(407)).toBe('Proxy-Authenticate');
    expect(authorizationHeaderName(407)).toBe('Proxy-Authorization');
  });

  it('refuses caller input that would inject a header line', () => {
    expect(() => authorize({ challenges: challenge(), method: 'INVITE', uri: 'sip:a@b\r\nX: y', username: 'u', password: 'p' })).toThrow(TypeError);
  });
});

describe('UAS and UAC together', () => {
  it('challenge, answer, accept; stale re-challenge after expiry; wrong password refused once', () => {
    const { server, clock, password } = setup();
    const client = new DigestClient({ username: 'trunk1', password: 'pa55word' });
    // 1. INVITE without credentials
    const none = server.verify({ method: 'INVITE', uri: RURI, authorization: undefined, password });
    expect(none).toMatchObject({ ok: false, action: 'challenge', stale: false });
    // 2. 401 with challenges; 3. INVITE with credentials
    const r = client.respond({ challenges: server.challenge(), method: 'INVITE', uri: RURI });
    if (!r.ok) throw new Error('no credentials');
    expect(server.verify({ method: 'INVITE', uri: RURI, authorization: r.authorizations[0]!.value, password }).ok).toBe(true);
    // later, an in-dialog request reusing the nonce after it expired
    clock.advance(301_000);
    const pre = client.preemptive({ method: 'BYE', uri: RURI }).map((a) => a.value);
    const stale = server.verify({ method: 'BYE', uri: RURI, authorization: pre, password });
    expect(stale).toMatchObject({ ok: false, reason: 'stale_nonce', stale: true });
    const again = client.respond({ challenges: server.challenge({ stale: stale.ok ? false : stale.stale }), method: 'BYE', uri: RURI, previous: pre });
    if (!again.ok) throw new Error('client gave up on a stale nonce');
    expect(server.verify({ method: 'BYE', uri: RURI, authorization: again.authorizations[0]!.value, password }).ok).toBe(true);

    // A PBX with the wrong password: 401, credentials, 403 (and the UAC would give up on a 401).
    const wrong = new DigestClient({ username: 'trunk1', password: 'typo' });
    const w = wrong.respond({ challenges: server.challenge(), method: 'INVITE', uri: RURI });
    if (!w.ok) throw new Error('no credentials');
    const verdict = server.verify({ method: 'INVITE', uri: RURI, authorization: w.authorizations[0]!.value, password });
    expect(verdict).toMatchObject({ ok: false, action: 'forbidden' });
    const loop = wrong.respond({ challenges: server.challenge(), method: 'INVITE', uri: RURI, previous: w.authorizations.map((a) => a.value) });
    expect(loop).toMatchObject({ ok: false, reason: 'rejected' });
  });
});

describe('sipUrisEquivalent (RFC 3261 section 19.1.4)', () => {
  it('follows the section 19.1.4 examples', () => {
    const equal: [string, string][] = [
      ['sip:%61lice@atlanta.com;transport=TCP', 'sip:alice@AtLanTa.CoM;Transport=tcp'],
      ['sip:carol@chicago.com', 'sip:carol@chicago.com;newparam=5'],
      ['sip:carol@chicago.com;security=on', 'sip:carol@chicago.com;newparam=5'],
      ['sip:biloxi.com;transport=tcp;method=REGISTER?to=sip:bob%40biloxi.com', 'sip:biloxi.com;method=REGISTER;transport=tcp?to=sip:bob%40biloxi.com'],
      ['sip:alice@atlanta.com?subject=project%20x&priority=urgent', 'sip:alice@atlanta.com?priority=urgent&subject=project%20x'],
    ];
    const different: [string, string][] = [
      ['SIP:ALICE@AtLanTa.CoM;Transport=udp', 'sip:alice@AtLanTa.CoM;Transport=UDP'],
      ['sip:bob@biloxi.com', 'sip:bob@biloxi.com:5060'],
      ['sip:bob@biloxi.com', 'sip:bob@biloxi.com;user=phone'],
      ['sip:bob@biloxi.com:6000;transport=tcp', 'sip:bob@biloxi.com:6001;transport=tcp'],
      ['sip:carol@chicago.com', 'sip:carol@chicago.com?Subject=next%20meeting'],
      ['sip:bob@phone21.boxesbybob.com', 'sip:bob@192.0.2.4'],
      ['sip:a@b', 'sips:a@b'],
      ['sip:a@b;maddr=1.2.3.4', 'sip:a@b'],
      ['tel:+1555', 'tel:+1556'],
    ];
    for (const [a, b] of equal) {
      expect(sipUrisEquivalent(a, b), `${a} == ${b}`).toBe(true);
      expect(sipUrisEquivalent(b, a), `${b} == ${a}`).toBe(true);
    }
    for (const [a, b] of different) {
      expect(sipUrisEquivalent(a, b), `${a} != ${b}`).toBe(false);
      expect(sipUrisEquivalent(b, a), `${b} != ${a}`).toBe(false);
    }
    expect(sipUrisEquivalent('TEL:+1555', 'tel:+1555')).toBe(true);
  });

  it('never throws', () => {
    fc.assert(fc.property(fc.string(), fc.string(), (a, b) => typeof sipUrisEquivalent(a, b) === 'boolean'));
  });
});

/** Credentials for trunk1/pa55word on REALM, computed directly so single fields can be varied. */
function credentialsFor(o: {
  nonce: string;
  realm?: string;
  uri?: string;
  algorithm?: string;
  qop?: string | null;
  nc?: string;
  response?: string;
  opaque?: string;
}): string {
  const realm = o.realm ?? REALM;
  const uri = o.uri ?? RURI;
  const algorithm = o.algorithm ?? 'SHA-256';
  const qop = o.qop === null ? undefined : (o.qop ?? 'auth');
  const nc = o.nc ?? '00000001';
  const cnonce = 'c0ffee';
  const known = ['MD5', 'SHA-256'].includes(algorithm) ? (algorithm as DigestAlgorithm) : 'SHA-256';
  const response =
    o.response ??
    computeDigestResponse({
      algorithm: known,
      username: 'trunk1',
      realm,
      password: 'pa55word',
      method: 'INVITE',
      uri,
      nonce: o.nonce,
      qop,
      nc: qop === undefined ? undefined : nc,
      cnonce: qop === undefined ? undefined : cnonce,
    });
  return formatDigestCredentials({
    username: 'trunk1',
    realm,
    nonce: o.nonce,
    uri,
    response,
    algorithm,
    qop,
    nc: qop === undefined ? undefined : nc,
    cnonce: qop === undefined ? undefined : cnonce,
    opaque: o.opaque,
  });
}
