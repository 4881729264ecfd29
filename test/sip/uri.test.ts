import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SipParseError } from '../../src/sip/message/errors.ts';
import { AbsoluteUri, hostKind, parseUri, SipUri, TelUri, uriEquals, type Uri } from '../../src/sip/message/uri.ts';

function sip(text: string): SipUri {
  const u = parseUri(text);
  if (u.kind !== 'sip') throw new Error(`not a SIP URI: ${text}`);
  return u;
}

describe('SIP URI parsing (RFC 3261 19.1.1)', () => {
  it('reads every component', () => {
    const u = sip('sips:alice:secret@atlanta.example.com:5061;transport=tcp;lr;maddr=239.255.255.1;user=phone?subject=project%20x&priority=urgent');
    expect(u.scheme).toBe('sips');
    expect(u.user).toBe('alice');
    expect(u.password).toBe('secret');
    expect(u.host).toBe('atlanta.example.com');
    expect(u.port).toBe(5061);
    expect(u.transport).toBe('tcp');
    expect(u.lr).toBe(true);
    expect(u.maddr).toBe('239.255.255.1');
    expect(u.userParam).toBe('phone');
    expect(u.headers).toEqual([
      ['subject', 'project x'],
      ['priority', 'urgent'],
    ]);
  });

  it('hosts: name, IPv4, IPv6 in brackets (stored without)', () => {
    expect(sip('sip:example.com').host).toBe('example.com');
    expect(sip('sip:example.com').user).toBeUndefined();
    expect(sip('sip:example.com').port).toBeUndefined();
    const v4 = sip('sip:+15551234567@192.0.2.4:5080');
    expect([v4.user, v4.host, v4.port, hostKind(v4.host)]).toEqual(['+15551234567', '192.0.2.4', 5080, 'ipv4']);
    const v6 = sip('sip:bob@[2001:db8::1]:5070;transport=udp');
    expect([v6.host, v6.port, hostKind(v6.host)]).toEqual(['2001:db8::1', 5070, 'ipv6']);
    expect(v6.hostport).toBe('[2001:db8::1]:5070');
    expect(v6.toString()).toBe('sip:bob@[2001:db8::1]:5070;transport=udp');
    expect(sip('sip:[::ffff:192.0.2.1]').host).toBe('::ffff:192.0.2.1');
    expect(hostKind('pbx.example.com')).toBe('name');
  });

  it('is case-insensitive in the scheme and keeps parameter spelling', () => {
    const u = sip('SIP:Alice@AtLanTa.CoM;Transport=TCP');
    expect(u.scheme).toBe('sip');
    expect(u.user).toBe('Alice');
    expect(u.transport).toBe('tcp');
    expect(u.params.get('TRANSPORT')).toBe('TCP');
  });

  it('resolves % escapes once and re-escapes on output (RFC 3261 25.1, RFC 4475 3.1.1.3)', () => {
    const u = sip('sip:sips%3Auser%40example.com@example.net');
    expect(u.user).toBe('sips:user@example.com');
    expect(u.toString()).toBe('sip:sips%3Auser%40example.com@example.net');
    const c = sip('sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31');
    expect(c.user).toBe('caller');
    expect(c.lr).toBe(true);
    expect(c.params.get('name')).toBe('value%41');
    expect(c.toString()).toBe('sip:caller@host5.example.net;lr;name=value%2541');
    expect(sip('sip:I%20have%20spaces@example.net').user).toBe('I have spaces');
    expect(sip('sip:null-%00-null@example.com').user).toBe('null-\u0000-null');
    expect(sip('sip:%C3%A9t%C3%A9@example.com').user).toBe('été');
    expect(new SipUri({ user: 'été 1', host: 'h' }).toString()).toBe('sip:%C3%A9t%C3%A9%201@h');
  });

  it('keeps the characters RFC 3261 allows unescaped in the user part (RFC 4475 3.1.1.2, 3.1.1.9)', () => {
    const u = sip("sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com");
    expect(u.user).toBe("1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*");
    expect(u.password).toBe("&it+has=1,weird!*pas$wo~d_too.(doesn't-it)");
    expect(u.host).toBe('example.com');
    expect(parseUri(u.toString()).toString()).toBe(u.toString());
    const semi = sip('sip:user;par=u%40example.net@example.com');
    expect(semi.user).toBe('user;par=u@example.net');
    expect(semi.params.size).toBe(0);
  });

  it('tel: and other schemes pass through', () => {
    const t = parseUri('tel:+1-201-555-0123;phone-context=example.com;ext=22');
    expect(t).toBeInstanceOf(TelUri);
    expect((t as TelUri).number).toBe('+1-201-555-0123');
    expect((t as TelUri).params.get('phone-context')).toBe('example.com');
    expect(t.toString()).toBe('tel:+1-201-555-0123;phone-context=example.com;ext=22');
    const a = parseUri('soap.beep://192.0.2.103:3002');
    expect(a).toBeInstanceOf(AbsoluteUri);
    expect([(a as AbsoluteUri).scheme, (a as AbsoluteUri).opaque]).toEqual(['soap.beep', '//192.0.2.103:3002']);
    expect(parseUri('urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6').toString()).toBe('urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6');
  });

  it.each([
    ['', 'empty'],
    ['example.com', 'no scheme'],
    ['sip:', 'no host'],
    ['sip:alice@', 'no host after userinfo'],
    ['sip:@example.com', 'empty user'],
    ['sip:alice@example.com:', 'empty port'],
    ['sip:alice@example.com:65536', 'port out of range'],
    ['sip:alice@example.com:99999', 'port out of range'],
    ['sip:alice@example.com:123456', 'port too long'],
    ['sip:alice@example.com:5x', 'port not digits'],
    ['sip:alice@exa mple.com', 'space in host'],
    ['sip:al ice@example.com', 'space in user'],
    ['sip:alice@[2001:db8::1', 'unterminated IPv6'],
    ['sip:alice@[zz::1]', 'bad IPv6'],
    ['sip:alice%ZZ@example.com', 'bad escape'],
    ['sip:alice%4@example.com', 'short escape'],
    ['sip:alice@example.com;', 'empty parameter'],
    ['sip:alice@example.com;a=', 'empty parameter value'],
    ['sip:alice@example.com?x', 'header without value'],
    ['sip:alice@example.com>', 'stray bracket'],
    ['<sip:alice@example.com>', 'bracketed'],
    ['tel:', 'empty tel'],
    ['x:', 'empty opaque'],
    ['1sip:alice@example.com', 'scheme starting with a digit'],
  ])('rejects %j (%s) with SipParseError', (text) => {
    expect(() => parseUri(text)).toThrow(SipParseError);
  });
});

describe('SIP URI building', () => {
  it('constructs, validates and clones', () => {
    const u = new SipUri({ scheme: 'sips', user: 'bob', host: '[2001:db8::2]', port: 5061, params: { transport: 'tls', lr: null } });
    expect(u.toString()).toBe('sips:bob@[2001:db8::2]:5061;transport=tls;lr');
    const c = u.clone();
    c.params.set('transport', 'tcp');
    c.user = 'carol';
    expect(u.toString()).toBe('sips:bob@[2001:db8::2]:5061;transport=tls;lr');
    expect(c.toString()).toBe('sips:carol@[2001:db8::2]:5061;transport=tcp;lr');
    u.lr = false;
    u.transport = undefined;
    expect(u.toString()).toBe('sips:bob@[2001:db8::2]:5061');
    expect(() => new SipUri({ host: 'bad host' })).toThrow(TypeError);
    expect(() => new SipUri({ host: '' })).toThrow(TypeError);
    expect(() => new SipUri({ host: 'h', port: 70000 })).toThrow(RangeError);
    expect(() => new TelUri('+1 555')).toThrow(TypeError);
    expect(() => new AbsoluteUri('http', 'a b')).toThrow(TypeError);
  });
});

describe('URI comparison (RFC 3261 19.1.4)', () => {
  const eq = (a: string, b: string): boolean => uriEquals(parseUri(a), parseUri(b));
  it.each([
    ['sip:%61lice@atlanta.com;transport=TCP', 'sip:alice@AtLanTa.CoM;Transport=tcp'],
    ['sip:carol@chicago.com', 'sip:carol@chicago.com;newparam=5'],
    ['sip:carol@chicago.com', 'sip:carol@chicago.com;security=on'],
    ['sip:biloxi.com;transport=tcp;method=REGISTER?to=sip:bob%40biloxi.com', 'sip:biloxi.com;method=REGISTER;transport=tcp?to=sip:bob%40biloxi.com'],
    ['sip:alice@atlanta.com?subject=project%20x&priority=urgent', 'sip:alice@atlanta.com?priority=urgent&subject=project%20x'],
    // A name given twice counts by its first value (what params.get and every reader of the URI
    // see); headers by all their values in order. Found by the round-trip property below.
    ['sip:%00@0.0.0.0;call;call=%00', 'sip:%00@0.0.0.0;call;call=%00'],
    ['sip:a@b.example;x=1;x=2', 'sip:a@b.example;x=1'],
    ['sip:a@b.example?h=1&h=2', 'sip:a@b.example?h=1&h=2'],
  ])('%s equals %s', (a, b) => {
    expect(eq(a, b)).toBe(true);
    expect(eq(b, a)).toBe(true);
  });
  it.each([
    ['SIP:ALICE@AtLanTa.CoM;Transport=udp', 'sip:alice@AtLanTa.CoM;Transport=UDP'],
    ['sip:bob@biloxi.com', 'sip:bob@biloxi.com:5060'],
    ['sip:bob@biloxi.com', 'sip:bob@biloxi.com;transport=udp'],
    ['sip:bob@biloxi.com', 'sip:bob@biloxi.com:6000;transport=tcp'],
    ['sip:carol@chicago.com', 'sip:carol@chicago.com?Subject=next%20meeting'],
    ['sip:bob@phone21.boxesbybob.com', 'sip:bob@192.0.2.4'],
    ['sip:carol@chicago.com;security=on', 'sip:carol@chicago.com;security=off'],
    ['sip:bob@biloxi.com', 'sips:bob@biloxi.com'],
    ['sip:bob@biloxi.com', 'tel:+15551234'],
    ['sip:a@b.example;x=1;x=2', 'sip:a@b.example;x=2'],
    ['sip:a@b.example?h=1&h=2', 'sip:a@b.example?h=2&h=1'],
    ['sip:a@b.example?h=1&h=2', 'sip:a@b.example?h=1&g=2'],
  ])('%s differs from %s', (a, b) => {
    expect(eq(a, b)).toBe(false);
  });
});

describe('URI properties', () => {
  // Any text, including characters that need escaping, quotes, commas, "@", ":" and non-ASCII.
  const text = fc.string({ unit: 'binary', minLength: 1, maxLength: 20 });
  const host = fc.oneof(
    fc.domain(),
    fc.ipV4(),
    fc.ipV6().map((h) => `[${h}]`),
  );

  it('user, password, parameters and headers survive toString -> parse', () => {
    fc.assert(
      fc.property(
        text,
        fc.option(text, { nil: undefined }),
        host,
        fc.option(fc.integer({ min: 0, max: 65535 }), { nil: undefined }),
        fc.array(fc.tuple(text, fc.option(text, { nil: null })), { maxLength: 4 }),
        fc.array(fc.tuple(text, fc.string({ unit: 'binary', maxLength: 10 })), { maxLength: 3 }),
        (user, password, h, port, params, headers) => {
          const u = new SipUri({ user, password, host: h, port, headers });
          for (const [k, v] of params) u.params.add(k, v);
          const back = parseUri(u.toString()) as Uri;
          expect(back.kind).toBe('sip');
          const s = back as SipUri;
          expect(s.user).toBe(user);
          expect(s.password).toBe(password);
          expect(s.host.toLowerCase()).toBe(u.host.toLowerCase());
          expect(s.port).toBe(port);
          expect(s.params.entries()).toEqual(u.params.entries());
          expect(s.headers).toEqual(headers);
          expect(uriEquals(s, u)).toBe(true);
          expect(s.toString()).toBe(u.toString());
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('arbitrary text never throws anything but SipParseError', () => {
    const alphabet = fc.constantFrom(...'sip:tel@[]:;?&=%<>" ,\\/0123456789abcdefABCDEF.-_+*~!\'()$\t\r\n\u00e9\u0000'.split(''));
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary', maxLength: 60 }), fc.string({ unit: alphabet, maxLength: 60 }).map((s) => 'sip:' + s)), (s) => {
        try {
          const u = parseUri(s);
          // Whatever parses must print as something that parses to the same URI.
          expect(uriEquals(parseUri(u.toString()), u)).toBe(true);
        } catch (err) {
          if (!(err instanceof SipParseError)) throw err;
        }
      }),
      { numRuns: 5000 },
    );
  });
});
