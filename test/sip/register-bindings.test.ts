/**
 * The RFC 3261 10.3 rules of register-bindings.ts as a pure function: what the socket tests in
 * registrar.test.ts cannot reach cheaply (URI equivalence, the default expiry, the binding cap,
 * ordering with "*", a refused request leaving everything as it was).
 */
import { describe, expect, it } from 'vitest';
import { parseUri } from '../../src/sip/message/index.ts';
import { applyRegister, DEFAULT_REGISTRAR_LIMITS, remainingSecs, type RegisterRequest, type RegistrationBinding } from '../../src/sip/ua/register-bindings.ts';

const NOW = 1_800_000_000_000;
const flow = { transport: 'udp' as const, sourceAddress: '192.0.2.10', sourcePort: 5060 };

function req(o: Partial<RegisterRequest> & { contacts?: RegisterRequest['contacts'] }): RegisterRequest {
  return { wildcard: false, contacts: [], expires: undefined, callId: 'call-1', cseq: 2, flow, now: NOW, ...o };
}

function contact(uri: string, expires?: number): RegisterRequest['contacts'][number] {
  return { uri: parseUri(uri), expires };
}

function binding(uri: string, o: Partial<RegistrationBinding> = {}): RegistrationBinding {
  return { contact: uri, expiresAt: NOW + 60_000, callId: 'call-1', cseq: 1, ...flow, updatedAt: NOW - 1000, ...o };
}

describe('applyRegister (RFC 3261 10.3)', () => {
  it('a Contact without expires parameter or Expires header gets the default (3600 s)', () => {
    const out = applyRegister([], req({ contacts: [contact('sip:pbx@192.0.2.10')] }), DEFAULT_REGISTRAR_LIMITS);
    expect(out.ok && out.bindings.map((b) => remainingSecs(b, NOW))).toEqual([3600]);
  });

  it('the Contact expires parameter wins over the Expires header', () => {
    const out = applyRegister([], req({ contacts: [contact('sip:a@192.0.2.10', 120), contact('sip:b@192.0.2.10')], expires: 300 }), DEFAULT_REGISTRAR_LIMITS);
    expect(out.ok && Object.fromEntries(out.bindings.map((b) => [b.contact, remainingSecs(b, NOW)]))).toEqual({ 'sip:a@192.0.2.10': 120, 'sip:b@192.0.2.10': 300 });
  });

  it('compares Contacts as URIs (19.1.4): a host in other case refreshes the same binding', () => {
    const out = applyRegister([binding('sip:pbx@pbx.example.com:5060')], req({ contacts: [contact('sip:pbx@PBX.Example.COM:5060', 90)] }), DEFAULT_REGISTRAR_LIMITS);
    expect(out.ok).toBe(true);
    if (!out.ok) return;
    expect(out).toMatchObject({ added: 0, refreshed: 1, removed: 0 });
    expect(out.bindings).toHaveLength(1);
    expect(remainingSecs(out.bindings[0]!, NOW)).toBe(90);
  });

  it('a refused request changes nothing: 423 for one Contact leaves the other unbound', () => {
    const current = [binding('sip:old@192.0.2.10')];
    const out = applyRegister(current, req({ contacts: [contact('sip:new@192.0.2.10', 3600), contact('sip:old@192.0.2.10', 5)] }), DEFAULT_REGISTRAR_LIMITS);
    expect(out).toMatchObject({ ok: false, status: 423, headers: [['Min-Expires', '60']] });
    expect(current).toEqual([binding('sip:old@192.0.2.10')]);
  });

  it('Contact: * is refused when a binding of the same Call-ID has a CSeq not lower than the request', () => {
    const out = applyRegister([binding('sip:a@192.0.2.10', { cseq: 7 })], req({ wildcard: true, expires: 0, cseq: 7 }), DEFAULT_REGISTRAR_LIMITS);
    expect(out).toMatchObject({ ok: false, status: 400, reason: 'Invalid CSeq number' });
    const later = applyRegister([binding('sip:a@192.0.2.10', { cseq: 7 })], req({ wildcard: true, expires: 0, cseq: 8 }), DEFAULT_REGISTRAR_LIMITS);
    expect(later).toMatchObject({ ok: true, bindings: [], removed: 1 });
  });

  it('refuses tel: Contacts, over-long Contact URIs and more bindings than the cap', () => {
    expect(applyRegister([], req({ contacts: [contact('tel:+15551234567')] }), DEFAULT_REGISTRAR_LIMITS)).toMatchObject({ ok: false, status: 400 });
    expect(applyRegister([], req({ contacts: [contact(`sip:${'u'.repeat(600)}@192.0.2.10`)] }), DEFAULT_REGISTRAR_LIMITS)).toMatchObject({ ok: false, status: 400, reason: 'Contact too long' });
    const many = Array.from({ length: 11 }, (_, i) => contact(`sip:c${i}@192.0.2.10`));
    expect(applyRegister([], req({ contacts: many }), DEFAULT_REGISTRAR_LIMITS)).toMatchObject({ ok: false, status: 403 });
  });

  it('expired bindings are not carried over, and the newest binding comes first', () => {
    const out = applyRegister([binding('sip:gone@192.0.2.10', { expiresAt: NOW - 1 }), binding('sip:kept@192.0.2.10')], req({ contacts: [contact('sip:new@192.0.2.10', 600)] }), DEFAULT_REGISTRAR_LIMITS);
    expect(out.ok && out.bindings.map((b) => b.contact)).toEqual(['sip:new@192.0.2.10', 'sip:kept@192.0.2.10']);
  });
});
