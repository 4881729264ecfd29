import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  applyCallerIdTransforms,
  applyTrunkPatch,
  checkTrunk,
  formatCidr,
  ipInCidr,
  isHost,
  normalizeTransforms,
  outboundTarget,
  parseCidr,
  parseOutboundHost,
  PBX_PRESETS,
  PBX_TYPES,
  trunkForCreate,
  type CallerIdTransform,
  type SipTrunkSettings,
} from '../../src/domain/sip-trunk.ts';
import { DomainError } from '../../src/domain/errors.ts';

/** The validation message thrown by fn (fails the test when nothing is thrown). */
function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(DomainError);
    expect((err as DomainError).kind).toBe('validation');
    return (err as DomainError).message;
  }
  throw new Error('expected a validation error');
}

const base = (over: Partial<SipTrunkSettings> = {}): SipTrunkSettings => ({
  pbx: 'generic',
  name: '',
  inbound_auth_type: 'none',
  inbound_host: '',
  inbound_acl: [],
  inbound_sip_username: '',
  outbound_host: '',
  outbound_sip_username: '',
  register: false,
  remain_in_dialog: false,
  caller_id_transforms: [],
  media_encryption: 'none',
  header_variables: [],
  ...over,
});

describe('CIDR', () => {
  it('parses IPv4 and IPv6 networks and clears host bits', () => {
    expect(formatCidr(parseCidr('203.0.113.0/24'))).toBe('203.0.113.0/24');
    expect(formatCidr(parseCidr('203.0.113.77/24'))).toBe('203.0.113.0/24');
    expect(formatCidr(parseCidr('0.0.0.0/0'))).toBe('0.0.0.0/0');
    expect(formatCidr(parseCidr('2001:DB8::1/32'))).toBe('2001:db8::/32');
    expect(formatCidr(parseCidr('::/0'))).toBe('::/0');
    expect(formatCidr(parseCidr('::ffff:192.0.2.1/128'))).toBe('::ffff:c000:201/128');
    expect(formatCidr(parseCidr('2001:db8:0:1:0:0:0:1/128'))).toBe('2001:db8:0:1::1/128');
  });

  it('takes a bare address as a one-host network', () => {
    expect(formatCidr(parseCidr('198.51.100.9'))).toBe('198.51.100.9/32');
    expect(formatCidr(parseCidr('2001:db8::9'))).toBe('2001:db8::9/128');
  });

  it.each(['203.0.113.0/33', '2001:db8::/129', '203.0.113.0/', '203.0.113.0/-1', '203.0.113.0/2a', '256.0.0.0/8', 'example.com/24', '', '10.0.0/8'])(
    'rejects %j naming the field',
    (bad) => {
      expect(messageOf(() => parseCidr(bad, 'body.inbound_acl.0'))).toMatch(/^body\.inbound_acl\.0 /);
    },
  );

  it('matches addresses inside a network only', () => {
    const v4 = parseCidr('203.0.113.0/24');
    expect(ipInCidr('203.0.113.200', v4)).toBe(true);
    expect(ipInCidr('203.0.114.1', v4)).toBe(false);
    expect(ipInCidr('::ffff:203.0.113.5', v4)).toBe(true);
    expect(ipInCidr('2001:db8::1', v4)).toBe(false);
    const v6 = parseCidr('2001:db8::/32');
    expect(ipInCidr('2001:db8:ffff::1', v6)).toBe(true);
    expect(ipInCidr('2001:db9::1', v6)).toBe(false);
    expect(ipInCidr('203.0.113.5', v6)).toBe(false);
  });

  it('round-trips every IPv4 network through its text form', () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.integer({ min: 0, max: 32 }), (ip, prefix) => {
        const c = parseCidr(`${ip}/${prefix}`);
        expect(parseCidr(formatCidr(c))).toEqual(c);
        expect(ipInCidr(ip, c)).toBe(true);
      }),
    );
  });

  it('round-trips every IPv6 network through its text form', () => {
    fc.assert(
      fc.property(fc.ipV6(), fc.integer({ min: 0, max: 128 }), (ip, prefix) => {
        const c = parseCidr(`${ip}/${prefix}`);
        expect(parseCidr(formatCidr(c))).toEqual(c);
        expect(ipInCidr(ip, c)).toBe(true);
      }),
    );
  });
});

describe('hosts', () => {
  it('accepts names and addresses', () => {
    for (const h of ['pbx.example.com', 'localhost', 'a-b.c', '203.0.113.5', '[2001:db8::1]', 'example.com.']) expect(isHost(h)).toBe(true);
    expect(isHost('2001:db8::1', { bareIpv6: true })).toBe(true);
  });

  it('rejects what is neither', () => {
    for (const h of ['', '-bad.example', 'bad-.example', 'a..b', 'has space', '999.1.1.1', '1.2.3', '2001:db8::1', '[203.0.113.5]', 'a_b.com']) {
      expect(isHost(h)).toBe(false);
    }
  });
});

describe('parseOutboundHost', () => {
  it('parses host, port and transport', () => {
    expect(parseOutboundHost('pbx.example.com')).toEqual({ host: 'pbx.example.com', transport: 'udp' });
    expect(parseOutboundHost('pbx.example.com:5080')).toEqual({ host: 'pbx.example.com', port: 5080, transport: 'udp' });
    expect(parseOutboundHost('pbx.example.com;transport=TCP')).toEqual({ host: 'pbx.example.com', transport: 'tcp' });
    expect(parseOutboundHost('203.0.113.5:5061;transport=tls')).toEqual({ host: '203.0.113.5', port: 5061, transport: 'tls' });
    expect(parseOutboundHost('[2001:db8::1]:5060;transport=udp')).toEqual({ host: '[2001:db8::1]', port: 5060, transport: 'udp' });
  });

  it('uses the default transport when none is named', () => {
    expect(parseOutboundHost('gw.example.com', 'f', 'tls').transport).toBe('tls');
    expect(parseOutboundHost('gw.example.com;transport=udp', 'f', 'tls').transport).toBe('udp');
  });

  it.each([
    ['', /host\[:port\]/],
    ['sip:pbx.example.com', /host\[:port\]/],
    ['pbx.example.com:0', /port must be between 1 and 65535/],
    ['pbx.example.com:70000', /port must be between 1 and 65535/],
    ['pbx.example.com:abc', /host\[:port\]/],
    ['pbx.example.com;transport=sctp', /transport must be one of udp, tcp, tls/],
    ['pbx.example.com;user=phone', /host\[:port\]/],
    ['2001:db8::1', /host\[:port\]/],
    ['pbx .example.com', /host\[:port\]/],
  ])('rejects %j', (bad, message) => {
    expect(messageOf(() => parseOutboundHost(bad, 'body.outbound_host'))).toMatch(message);
  });

  it('outboundTarget takes the transport of the PBX preset', () => {
    expect(outboundTarget({ pbx: 'webex', outbound_host: 'gw.example.com' })).toEqual({ host: 'gw.example.com', transport: 'tls' });
    expect(outboundTarget({ pbx: 'generic', outbound_host: 'gw.example.com' })?.transport).toBe('udp');
    expect(outboundTarget({ pbx: 'generic', outbound_host: '' })).toBeUndefined();
  });
});

describe('caller ID transforms', () => {
  it('applies each type', () => {
    expect(applyCallerIdTransforms('5551234', [{ type: 'add_prefix', value: '+1' }])).toBe('+15551234');
    expect(applyCallerIdTransforms('5551234', [{ type: 'add_suffix', value: '#' }])).toBe('5551234#');
    expect(applyCallerIdTransforms('+442071234567', [{ type: 'replace', value: '+44', value2: '0' }])).toBe('02071234567');
    expect(applyCallerIdTransforms('+15551234', [{ type: 'strip_digits_start', number: 2 }])).toBe('5551234');
    expect(applyCallerIdTransforms('5551234', [{ type: 'strip_digits_end', number: 3 }])).toBe('5551');
  });

  it('applies transforms in order', () => {
    const t: CallerIdTransform[] = [
      { type: 'strip_digits_start', number: 1 },
      { type: 'add_prefix', value: '00' },
      { type: 'replace', value: '001', value2: '+1' },
    ];
    expect(applyCallerIdTransforms('01555', t)).toBe('+1555');
  });

  it('replace changes the first occurrence only and may delete', () => {
    expect(applyCallerIdTransforms('1212', [{ type: 'replace', value: '12', value2: '9' }])).toBe('912');
    expect(applyCallerIdTransforms('99555', [{ type: 'replace', value: '99', value2: '' }])).toBe('555');
    expect(applyCallerIdTransforms('555', [{ type: 'replace', value: '7', value2: '8' }])).toBe('555');
    // "$&" is text, not a replacement pattern
    expect(applyCallerIdTransforms('555', [{ type: 'replace', value: '5', value2: '$&$&' }])).toBe('$&$&55');
  });

  it('stripping more than there is leaves an empty string', () => {
    expect(applyCallerIdTransforms('123', [{ type: 'strip_digits_start', number: 5 }])).toBe('');
    expect(applyCallerIdTransforms('123', [{ type: 'strip_digits_end', number: 5 }])).toBe('');
  });

  it('leaves the caller ID alone with no transforms', () => {
    expect(applyCallerIdTransforms('+15551234', [])).toBe('+15551234');
  });

  it('normalizes: keeps only the fields the type uses', () => {
    expect(
      normalizeTransforms([
        { type: 'add_prefix', value: '9', value2: 'x', number: 3 },
        { type: 'replace', value: '+1', value2: '' },
        { type: 'strip_digits_end', number: 2, value: '' },
      ]),
    ).toEqual([{ type: 'add_prefix', value: '9' }, { type: 'replace', value: '+1', value2: '' }, { type: 'strip_digits_end', number: 2 }]);
  });

  it.each([
    [{ type: 'add_prefix' }, /0\.value is required when type is add_prefix/],
    [{ type: 'add_suffix', value: '' }, /0\.value is required when type is add_suffix/],
    [{ type: 'replace', value: '1' }, /0\.value2 is required when type is replace/],
    [{ type: 'replace', value2: '1' }, /0\.value is required when type is replace/],
    [{ type: 'strip_digits_start' }, /0\.number must be a positive integer/],
    [{ type: 'strip_digits_end', number: 0 }, /0\.number must be a positive integer/],
    [{ type: 'strip_digits_end', number: 1.5 }, /0\.number must be a positive integer/],
    [{ type: 'add_prefix', value: 'a b' }, /0\.value may hold only/],
    [{ type: 'uppercase' }, /0\.type must be one of/],
  ])('rejects %j', (t, message) => {
    expect(messageOf(() => normalizeTransforms([t as CallerIdTransform]))).toMatch(new RegExp(`^body\\.caller_id_transforms\\.${message.source}`));
  });
});

describe('presets and merging', () => {
  it('fills every field not sent from the PBX preset', () => {
    for (const pbx of PBX_TYPES) {
      const s = trunkForCreate({ pbx });
      expect(s.inbound_auth_type).toBe(PBX_PRESETS[pbx].inbound_auth_type);
      expect(s.register).toBe(PBX_PRESETS[pbx].register);
      expect(s.remain_in_dialog).toBe(PBX_PRESETS[pbx].remain_in_dialog);
      expect(s).toMatchObject({ name: '', inbound_host: '', inbound_acl: [], inbound_sip_username: '', outbound_host: '', caller_id_transforms: [] });
    }
    expect(trunkForCreate({ pbx: '3cx' })).toMatchObject({ inbound_auth_type: 'digest', register: false, remain_in_dialog: true });
    expect(trunkForCreate({ pbx: 'webex' })).toMatchObject({ inbound_auth_type: 'acl', register: true });
  });

  it('keeps sent values over the preset', () => {
    const s = trunkForCreate({ pbx: '3cx', inbound_auth_type: 'acl', remain_in_dialog: false, register: true });
    expect(s).toMatchObject({ inbound_auth_type: 'acl', remain_in_dialog: false, register: true });
  });

  it('normalizes: trims and stores canonical CIDRs', () => {
    const s = trunkForCreate({ pbx: 'generic', name: ' main ', inbound_acl: ['203.0.113.9/24', '2001:DB8::/32'], inbound_sip_username: ' u1 ' });
    expect(s).toMatchObject({ name: 'main', inbound_acl: ['203.0.113.0/24', '2001:db8::/32'], inbound_sip_username: 'u1' });
  });

  it('rejects bad fields naming them', () => {
    expect(messageOf(() => trunkForCreate({ pbx: 'generic', inbound_acl: ['10.0.0.0/8', 'nope'] }))).toMatch(/^body\.inbound_acl\.1 /);
    expect(messageOf(() => trunkForCreate({ pbx: 'generic', inbound_host: 'pbx.example.com:5060' }))).toMatch(/^body\.inbound_host /);
    expect(messageOf(() => trunkForCreate({ pbx: 'generic', outbound_host: 'x:99999' }))).toMatch(/^body\.outbound_host /);
    expect(messageOf(() => trunkForCreate({ pbx: 'generic', inbound_sip_username: 'a"b' }))).toMatch(/^body\.inbound_sip_username /);
  });

  it('PATCH changes only what is sent and does not re-apply presets', () => {
    const current = trunkForCreate({ pbx: '3cx', name: 'a', inbound_sip_username: 'u' });
    const next = applyTrunkPatch({ ...current, id: 'x' } as SipTrunkSettings, { pbx: 'webex', name: 'b' });
    expect(next).toEqual({ ...current, pbx: 'webex', name: 'b' });
    expect(next).not.toHaveProperty('id');
  });
});

describe('checkTrunk', () => {
  const both = { inbound: true, outbound: true };
  it('digest needs a username and a password', () => {
    expect(messageOf(() => checkTrunk(base({ inbound_auth_type: 'digest' }), both))).toMatch(/inbound_sip_username is required/);
    expect(messageOf(() => checkTrunk(base({ inbound_auth_type: 'digest', inbound_sip_username: 'u' }), { inbound: false, outbound: true }))).toMatch(
      /inbound_sip_password is required/,
    );
    expect(() => checkTrunk(base({ inbound_auth_type: 'digest', inbound_sip_username: 'u' }), { inbound: true, outbound: false })).not.toThrow();
  });

  it('acl needs inbound_host or inbound_acl', () => {
    expect(messageOf(() => checkTrunk(base({ inbound_auth_type: 'acl' }), both))).toMatch(/inbound_host or a non-empty body\.inbound_acl/);
    expect(() => checkTrunk(base({ inbound_auth_type: 'acl', inbound_host: 'pbx.example.com' }), both)).not.toThrow();
    expect(() => checkTrunk(base({ inbound_auth_type: 'acl', inbound_acl: ['10.0.0.0/8'] }), both)).not.toThrow();
  });

  it('none needs nothing', () => {
    expect(() => checkTrunk(base(), { inbound: false, outbound: false })).not.toThrow();
  });

  it('register needs the outbound host, username and password', () => {
    const reg = { register: true, outbound_host: 'gw.example.com', outbound_sip_username: 'o' };
    expect(() => checkTrunk(base(reg), both)).not.toThrow();
    expect(messageOf(() => checkTrunk(base({ ...reg, outbound_host: '' }), both))).toMatch(/outbound_host is required when register/);
    expect(messageOf(() => checkTrunk(base({ ...reg, outbound_sip_username: '' }), both))).toMatch(/outbound_sip_username is required when register/);
    expect(messageOf(() => checkTrunk(base(reg), { inbound: true, outbound: false }))).toMatch(/outbound_sip_password is required when register/);
  });
});
