/**
 * SRTP/SRTCP (src/media/srtp.ts): the RFC 3711 Appendix B vectors, round trips for both suites,
 * tampering, replay, the ROC across sequence wraps, and an independent AES-128-CTR computation
 * of the whole SRTP packet (createCipheriv 'aes-128-ctr' + HMAC over packet || ROC).
 */
import { createCipheriv, createHmac, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  aesCmKeystream,
  deriveSrtpKey,
  SRTP_AUTH_FAILED,
  SRTP_MALFORMED,
  SRTP_REPLAY_WINDOW,
  SRTP_REPLAYED,
  SRTP_SUITES,
  SrtpSession,
  type SrtpSuite,
} from '../../src/media/srtp.ts';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

function rtp(seq: number, ssrc = 0x11223344, payload: Uint8Array = Buffer.alloc(160, 0x55), ts = seq * 160): Buffer {
  const b = Buffer.alloc(12 + payload.length + 16);
  b[0] = 0x80;
  b[1] = 0;
  b.writeUInt16BE(seq & 0xffff, 2);
  b.writeUInt32BE(ts >>> 0, 4);
  b.writeUInt32BE(ssrc, 8);
  b.set(payload, 12);
  return b;
}

function pair(suite: SrtpSuite = 'AES_CM_128_HMAC_SHA1_80'): { a: SrtpSession; b: SrtpSession } {
  const ka = randomBytes(30);
  const kb = randomBytes(30);
  return { a: new SrtpSession({ suite, sendKey: ka, receiveKey: kb }), b: new SrtpSession({ suite, sendKey: kb, receiveKey: ka }) };
}

describe('RFC 3711 Appendix B vectors', () => {
  it('B.3 key derivation (KDR 0): cipher key, cipher salt, auth key', () => {
    const key = hex('E1F97A0D3E018BE0D64FA32C06DE4139');
    const salt = hex('0EC675AD498AFEEBB6960B3AABE6');
    expect(deriveSrtpKey(key, salt, 0, 16).toString('hex').toUpperCase()).toBe('C61E7A93744F39EE10734AFE3FF7A087');
    expect(deriveSrtpKey(key, salt, 2, 14).toString('hex').toUpperCase()).toBe('30CBBC08863D8C85D49DB34A9AE1');
    expect(deriveSrtpKey(key, salt, 1, 94).toString('hex').toUpperCase()).toBe(
      'CEBE321F6FF7716B6FD4AB49AF256A156D38BAA48F0A0ACF3C34E2359E6CDBCEE049646C43D9327AD175578EF72270986371C10C9A369AC2F94A8C5FBCDDDC256D6E919A48B610EF17C2041E474035766B68642C59BBFC2F34DB60DBDFB2',
    );
  });

  it('B.2 AES-CM keystream (session key, salt, SSRC 0, index 0)', () => {
    const ks = aesCmKeystream(hex('2B7E151628AED2A6ABF7158809CF4F3C'), hex('F0F1F2F3F4F5F6F7F8F9FAFBFCFD'), 0, 0, 48);
    expect(ks.subarray(0, 16).toString('hex').toUpperCase()).toBe('E03EAD0935C95E80E166B16DD92B4EB4');
    expect(ks.subarray(16, 32).toString('hex').toUpperCase()).toBe('D23513162B02D0F72A43A2FE4A5F97AB');
    expect(ks.subarray(32, 48).toString('hex').toUpperCase()).toBe('41E95B3BB0A2E8DD477901E4FCA894C0');
  });
});

describe('SrtpSession', () => {
  it('matches an independent AES-128-CTR + HMAC-SHA1 computation of the packet (ROC 1)', () => {
    const master = randomBytes(30);
    const s = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: master, receiveKey: master });
    const ssrc = 0xdeadbeef;
    // Walk the sender over a wrap so the ROC is 1.
    for (const seq of [65534, 65535]) s.protectRtp(rtp(seq, ssrc), 172);
    const plain = rtp(3, ssrc, randomBytes(160));
    const mine = Buffer.from(plain);
    const n = s.protectRtp(mine, 172);
    expect(n).toBe(182);

    const key = master.subarray(0, 16);
    const salt = master.subarray(16);
    const ek = deriveSrtpKey(key, salt, 0, 16);
    const ak = deriveSrtpKey(key, salt, 1, 20);
    const ks = deriveSrtpKey(key, salt, 2, 14);
    const index = 1 * 65536 + 3;
    const iv = Buffer.alloc(16);
    ks.copy(iv, 0);
    const x = Buffer.alloc(16);
    x.writeUInt32BE(ssrc, 4);
    x.writeUIntBE(index, 8, 6);
    for (let i = 0; i < 16; i++) iv[i]! ^= x[i]!;
    const c = createCipheriv('aes-128-ctr', ek, iv);
    const enc = Buffer.concat([plain.subarray(0, 12), c.update(plain.subarray(12, 172))]);
    const roc = Buffer.alloc(4);
    roc.writeUInt32BE(1);
    const tag = createHmac('sha1', ak).update(enc).update(roc).digest().subarray(0, 10);
    expect(mine.subarray(0, 182).toString('hex')).toBe(Buffer.concat([enc, tag]).toString('hex'));
  });

  for (const suite of SRTP_SUITES) {
    it(`${suite}: protect then unprotect gives the packet back; the payload on the wire differs`, () => {
      const { a, b } = pair(suite);
      for (let seq = 100; seq < 140; seq++) {
        const payload = randomBytes(160);
        const p = rtp(seq, 7, payload);
        const n = a.protectRtp(p, 172);
        expect(n).toBe(172 + (suite.endsWith('_80') ? 10 : 4));
        expect(Buffer.compare(p.subarray(12, 172), payload)).not.toBe(0);
        expect(b.unprotectRtp(p, n)).toBe(172);
        expect(Buffer.compare(p.subarray(12, 172), payload)).toBe(0);
      }
      expect(b.counters).toEqual({ authFailed: 0, replayed: 0, malformed: 0 });
    });
  }

  it('a tampered packet (payload, header, tag) fails authentication, is counted and not decrypted', () => {
    const { a, b } = pair();
    for (const at of [20, 2, 175]) {
      const p = rtp(500 + at, 7);
      const n = a.protectRtp(p, 172);
      p[at]! ^= 0x01;
      const before = Buffer.from(p.subarray(0, n));
      expect(b.unprotectRtp(p, n)).toBe(SRTP_AUTH_FAILED);
      expect(Buffer.compare(p.subarray(0, n), before)).toBe(0); // left as it came: never decoded
    }
    expect(b.counters.authFailed).toBe(3);
    // A key of someone else fails too.
    const other = pair().a;
    const p = rtp(9, 7);
    expect(b.unprotectRtp(p, other.protectRtp(p, 172))).toBe(SRTP_AUTH_FAILED);
  });

  it('a replayed packet is dropped; reordered ones in the window pass; older than the window drop', () => {
    const { a, b } = pair();
    const wire = new Map<number, Buffer>();
    for (let seq = 1000; seq < 1000 + SRTP_REPLAY_WINDOW + 10; seq++) {
      const p = rtp(seq, 7);
      const n = a.protectRtp(p, 172);
      wire.set(seq, Buffer.from(p.subarray(0, n)));
    }
    const deliver = (seq: number): number => {
      const d = Buffer.from(wire.get(seq)!);
      return b.unprotectRtp(d, d.length);
    };
    expect(deliver(1000)).toBe(172);
    expect(deliver(1000)).toBe(SRTP_REPLAYED);
    expect(deliver(1005)).toBe(172);
    expect(deliver(1002)).toBe(172); // late but new
    expect(deliver(1002)).toBe(SRTP_REPLAYED);
    expect(deliver(1000 + SRTP_REPLAY_WINDOW + 9)).toBe(172);
    expect(deliver(1001)).toBe(SRTP_REPLAYED); // now beyond the window
    expect(b.counters.replayed).toBe(3);
    // A tampered packet does not move the window: the genuine one still passes.
    const t = Buffer.from(wire.get(1000 + SRTP_REPLAY_WINDOW + 5)!);
    t[30]! ^= 1;
    expect(b.unprotectRtp(t, t.length)).toBe(SRTP_AUTH_FAILED);
    expect(deliver(1000 + SRTP_REPLAY_WINDOW + 5)).toBe(172);
  });

  it('ROC: the stream crosses 16-bit wraps (twice, with reordering around the wrap) and stays readable', () => {
    const { a, b } = pair('AES_CM_128_HMAC_SHA1_32');
    const packets: { seq: number; data: Buffer; payload: Buffer }[] = [];
    for (let i = 0; i < 2 * 65536 + 200; i += 1) {
      const seq = (65000 + i) & 0xffff;
      if (i % 97 !== 0 && !(i > 500 && i < 1100) && !(i > 66000 && i < 66100)) continue; // thin out, keep the wraps dense
      const payload = randomBytes(20);
      const p = rtp(seq, 9, payload);
      const n = a.protectRtp(p, 32);
      packets.push({ seq, data: Buffer.from(p.subarray(0, n)), payload });
    }
    // Swap neighbours around the first wrap: 65535 after 0.
    const w = packets.findIndex((p) => p.seq === 0);
    [packets[w - 1], packets[w]] = [packets[w]!, packets[w - 1]!];
    for (const p of packets) {
      expect(b.unprotectRtp(p.data, p.data.length)).toBe(32);
      expect(Buffer.compare(p.data.subarray(12, 32), p.payload)).toBe(0);
    }
    expect(b.counters).toEqual({ authFailed: 0, replayed: 0, malformed: 0 });
  });

  it('SRTCP: E flag and index, round trip, tamper and replay rejected, tag of 80 bits for _32', () => {
    const { a, b } = pair('AES_CM_128_HMAC_SHA1_32');
    const rr = Buffer.from('81c90007' + '11223344' + '55667788' + '00000000' + '00000001' + '00000000' + '00000000' + '00000000', 'hex');
    const s1 = a.protectRtcp(rr);
    expect(s1.length).toBe(rr.length + 4 + 10);
    expect(s1.readUInt32BE(rr.length)).toBe(0x80000000);
    expect(Buffer.compare(s1.subarray(8, rr.length), rr.subarray(8))).not.toBe(0);
    const s2 = a.protectRtcp(rr);
    expect(s2.readUInt32BE(rr.length)).toBe(0x80000001);
    const copy = Buffer.from(s1);
    expect(b.unprotectRtcp(copy, copy.length)).toBe(rr.length);
    expect(Buffer.compare(copy.subarray(0, rr.length), rr)).toBe(0);
    expect(b.unprotectRtcp(Buffer.from(s1), s1.length)).toBe(SRTP_REPLAYED);
    const t = Buffer.from(s2);
    t[12]! ^= 4;
    expect(b.unprotectRtcp(t, t.length)).toBe(SRTP_AUTH_FAILED);
    expect(b.unprotectRtcp(Buffer.from(s2), s2.length)).toBe(rr.length);
    expect(b.unprotectRtcp(Buffer.alloc(10), 10)).toBe(SRTP_MALFORMED);
  });

  it('garbage never throws on unprotect', () => {
    const { b } = pair();
    for (let i = 0; i < 2000; i++) {
      const g = randomBytes(i % 200);
      if (g.length > 0) g[0] = 0x80 | (g[0]! & 0x3f);
      expect(b.unprotectRtp(g, g.length)).toBeLessThan(0);
      expect(b.unprotectRtcp(g, g.length)).toBeLessThan(0);
    }
  });

  it('refuses keys that are not 30 bytes', () => {
    expect(() => new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: randomBytes(29), receiveKey: randomBytes(30) })).toThrow(RangeError);
  });
});

describe('re-keying one direction', () => {
  it('continueFrom: a send key that stays keeps its ROC (no keystream reuse), the new receive key starts fresh', () => {
    const ka = randomBytes(30);
    const kb = randomBytes(30);
    const a = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: ka, receiveKey: kb });
    const b = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: kb, receiveKey: ka });
    // a's stream wraps once: ROC 1.
    for (const seq of [65000, 65535, 0, 5]) {
      const p = rtp(seq, 7);
      expect(b.unprotectRtp(p, a.protectRtp(p, 172))).toBe(172);
    }
    // The peer re-keys its own direction only (kb -> kb2); a keeps ka.
    const kb2 = randomBytes(30);
    const a2 = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: ka, receiveKey: kb2 });
    a2.continueFrom(a);
    const b2 = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: kb2, receiveKey: ka });
    b2.continueFrom(b);
    // Same ciphertext as the old context would give at ROC 1: the ROC went on (not back to 0).
    const p1 = rtp(6, 7);
    const p2 = Buffer.from(p1);
    a.protectRtp(p1, 172);
    a2.protectRtp(p2, 172);
    expect(p2.subarray(0, 182).toString('hex')).toBe(p1.subarray(0, 182).toString('hex'));
    expect(b2.unprotectRtp(p2, 182)).toBe(172);
    // Without continueFrom the new context would start at ROC 0 and the receiver (ROC 1) fails it.
    const fresh = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: ka, receiveKey: kb2 });
    const p3 = rtp(7, 7);
    expect(b2.unprotectRtp(p3, fresh.protectRtp(p3, 172))).toBe(SRTP_AUTH_FAILED);
    // The changed direction: b2 -> a2 with the new key works from scratch.
    const q = rtp(300, 9);
    expect(a2.unprotectRtp(q, b2.protectRtp(q, 172))).toBe(172);
  });
});
