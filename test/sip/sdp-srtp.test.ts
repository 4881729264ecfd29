/**
 * SDES-SRTP in SDP offer/answer (RFC 4568 on RTP/SAVP): a=crypto parsing, the answer's suite
 * and fresh key, our offers, parseAnswer, the trunk's policy (none / allow / require, over TLS
 * or not) and the 488 reasons, re-offers that keep or change keys.
 */
import { inspect } from 'node:util';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createOffer, LocalSdpSession, negotiate, parseAnswer, parseSdp, SdpNegotiationError, type NegotiateOptions, type SrtpPolicy } from '../../src/sip/sdp/index.ts';

const LOCAL = { localAddress: '203.0.113.9', localPort: 40000, sessionId: '4242', sessionVersion: 7 } as const;
const KEY80 = randomBytes(30).toString('base64');
const KEY32 = randomBytes(30).toString('base64');
const TLS_ALLOW: SrtpPolicy = { mode: 'allow', sdesAllowed: true };
const TLS_REQUIRE: SrtpPolicy = { mode: 'require', sdesAllowed: true };

function offer(proto: string, cryptoLines: string[], extraMedia = ''): string {
  return [
    'v=0',
    'o=- 5000 5001 IN IP4 192.0.2.70',
    's=-',
    'c=IN IP4 192.0.2.70',
    't=0 0',
    `m=audio 40000 ${proto} 0 101`,
    'a=rtpmap:0 PCMU/8000',
    'a=rtpmap:101 telephone-event/8000',
    ...cryptoLines,
    ...(extraMedia ? [extraMedia, 'a=rtpmap:0 PCMU/8000'] : []),
    '',
  ].join('\r\n');
}

const answer = (sdp: string, srtp: SrtpPolicy | undefined, extra: Partial<NegotiateOptions> = {}) => negotiate(sdp, { ...LOCAL, ...(srtp ? { srtp } : {}), ...extra });

function refusal(fn: () => unknown): SdpNegotiationError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SdpNegotiationError);
    return err as SdpNegotiationError;
  }
  throw new Error('expected a 488');
}

describe('a=crypto parsing', () => {
  it('keeps the lines we can use, in order, and skips unknown suites, MKI, bad keys, session parameters', () => {
    const sdp = offer('RTP/SAVP', [
      `a=crypto:1 AES_256_CM_HMAC_SHA1_80 inline:${randomBytes(46).toString('base64')}`,
      `a=crypto:2 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}|2^20|1:32`,
      `a=crypto:3 AES_CM_128_HMAC_SHA1_80 inline:${randomBytes(29).toString('base64')}`,
      `a=crypto:4 AES_CM_128_HMAC_SHA1_80 inline:${KEY80} UNENCRYPTED_SRTP`,
      `a=crypto:5 AES_CM_128_HMAC_SHA1_32 inline:${KEY32}|2^31`,
      `a=crypto:6 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`,
      'a=crypto:7 AES_CM_128_HMAC_SHA1_80 inline:!!notbase64!!',
    ]);
    const m = parseSdp(sdp).media[0]!;
    expect(m.cryptoLines).toBe(7);
    expect(m.crypto.map((c) => [c.tag, c.suite])).toEqual([
      [5, 'AES_CM_128_HMAC_SHA1_32'],
      [6, 'AES_CM_128_HMAC_SHA1_80'],
    ]);
    expect(Buffer.from(m.crypto[0]!.key).toString('base64')).toBe(KEY32);
  });
});

describe('answering RTP/SAVP', () => {
  it('allow over TLS: answers SAVP with the first suite we support, its tag and a fresh key of ours', () => {
    const sdp = offer('RTP/SAVP', [`a=crypto:3 AES_CM_128_HMAC_SHA1_32 inline:${KEY32}`, `a=crypto:4 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`]);
    const a = answer(sdp, TLS_ALLOW);
    expect(a.answerSdp).toMatch(/^m=audio 40000 RTP\/SAVP 0 101\r$/m);
    const lines = a.answerSdp.split('\r\n').filter((l) => l.startsWith('a=crypto:'));
    expect(lines).toHaveLength(1);
    const [, tag, suite, inline] = /^a=crypto:(\d+) (\S+) inline:(\S+)$/.exec(lines[0]!)!;
    expect([tag, suite]).toEqual(['3', 'AES_CM_128_HMAC_SHA1_32']);
    expect(Buffer.from(inline!, 'base64')).toHaveLength(30);
    expect(inline).not.toBe(KEY32);
    expect(a.srtp?.suite).toBe('AES_CM_128_HMAC_SHA1_32');
    expect(Buffer.from(a.srtp!.receiveKey).toString('base64')).toBe(KEY32);
    expect(Buffer.from(a.srtp!.sendKey).toString('base64')).toBe(inline);
    // Another answer to the same offer: another key.
    expect(answer(sdp, TLS_ALLOW).answerSdp).not.toBe(a.answerSdp);
  });

  it('keys never show in JSON or inspect output of the negotiated media', () => {
    const a = answer(offer('RTP/SAVP', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`]), TLS_REQUIRE);
    const { answerSdp: _sdp, ...media } = a;
    const shown = JSON.stringify(media) + inspect(media, { depth: 5 });
    expect(shown).toContain('[redacted]');
    expect(shown).not.toContain(KEY80);
    expect(shown).not.toContain(Buffer.from(a.srtp!.sendKey).toString('base64'));
    expect(shown).not.toMatch(/sendKey|receiveKey/);
    // Structured clone (postMessage to a media worker) still carries the keys.
    const cloned = structuredClone(a.srtp!);
    expect(Buffer.from(cloned.receiveKey).toString('base64')).toBe(KEY80);
  });

  it('RTP/SAVPF is taken as SAVP', () => {
    const a = answer(offer('RTP/SAVPF', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`]), TLS_ALLOW);
    expect(a.answerSdp).toMatch(/^m=audio 40000 RTP\/SAVPF /m);
    expect(a.srtp?.suite).toBe('AES_CM_128_HMAC_SHA1_80');
  });

  it('none: an SAVP-only offer is refused 488 as before; a best-effort offer gets its RTP/AVP line', () => {
    const e = refusal(() => answer(offer('RTP/SAVP', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`]), undefined));
    expect(e.code).toBe('SDP_INCOMPATIBLE_TRANSPORT');
    const both = offer('RTP/SAVP', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`], 'm=audio 40002 RTP/AVP 0');
    const a = answer(both, { mode: 'none', sdesAllowed: true });
    expect(a.srtp).toBeUndefined();
    expect(a.mediaIndex).toBe(1);
    expect(a.answerSdp).not.toContain('a=crypto');
  });

  it('allow: SAVP over TLS is taken first in a best-effort offer; over UDP/TCP the plain line', () => {
    const both = offer('RTP/SAVP', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`], 'm=audio 40002 RTP/AVP 0');
    expect(answer(both, TLS_ALLOW).mediaIndex).toBe(0);
    const plain = answer(both, { mode: 'allow', sdesAllowed: false });
    expect(plain.mediaIndex).toBe(1);
    expect(plain.srtp).toBeUndefined();
    expect(plain.answerSdp).not.toContain('a=crypto');
    // Plain RTP alone is fine for allow.
    expect(answer(offer('RTP/AVP', []), TLS_ALLOW).srtp).toBeUndefined();
  });

  it('require: plain RTP is 488 "SRTP required by the trunk"', () => {
    const e = refusal(() => answer(offer('RTP/AVP', []), TLS_REQUIRE));
    expect(e.code).toBe('SDP_SRTP_REQUIRED');
    expect(e.status).toBe(488);
    expect(e.warningHeader('cb')).toBe('302 cb "SRTP required by the trunk"');
    expect(e.reasonHeader()).toContain('SRTP required by the trunk');
    expect(refusal(() => answer(offer('RTP/AVP', []), { mode: 'require', sdesAllowed: false })).code).toBe('SDP_SRTP_REQUIRED');
  });

  it('require or allow: SDES keys over a transport that is not TLS are 488 "SDES keys only over TLS"', () => {
    for (const mode of ['require', 'allow'] as const) {
      const e = refusal(() => answer(offer('RTP/SAVP', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`]), { mode, sdesAllowed: false }));
      expect(e.code).toBe('SDP_SDES_NEEDS_TLS');
      expect(e.warningText).toBe('SDES keys only over TLS');
    }
  });

  it('require: SAVP without a usable crypto line is 488 naming the suites we take', () => {
    const e = refusal(() => answer(offer('RTP/SAVP', [`a=crypto:1 AES_256_CM_HMAC_SHA1_80 inline:${randomBytes(46).toString('base64')}`]), TLS_REQUIRE));
    expect(e.code).toBe('SDP_NO_CRYPTO');
    expect(e.message).toContain('AES_CM_128_HMAC_SHA1_80');
  });

  it('a re-offer with the same key keeps ours (srtpChanged false); a new key of the peer gets a new key of ours', () => {
    const sdp = offer('RTP/SAVP', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}`]);
    const first = answer(sdp, TLS_REQUIRE);
    const again = answer(sdp.replace('a=rtpmap:101', 'a=sendonly\r\na=rtpmap:101'), TLS_REQUIRE, { previous: first });
    expect(again.srtpChanged).toBe(false);
    expect(Buffer.compare(again.srtp!.sendKey, first.srtp!.sendKey)).toBe(0);
    const KEY2 = randomBytes(30).toString('base64');
    const rekey = answer(offer('RTP/SAVP', [`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${KEY2}`]), TLS_REQUIRE, { previous: first });
    expect(rekey.srtpChanged).toBe(true);
    expect(Buffer.compare(rekey.srtp!.sendKey, first.srtp!.sendKey)).not.toBe(0);
    // An unchanged re-offer through LocalSdpSession gives the identical answer (session refresh).
    const local = new LocalSdpSession();
    const a1 = local.answer(sdp, { localAddress: LOCAL.localAddress, localPort: 40000, srtp: TLS_REQUIRE });
    const a2 = local.answer(sdp, { localAddress: LOCAL.localAddress, localPort: 40000, srtp: TLS_REQUIRE, previous: a1 });
    expect(a2.answerSdp).toBe(a1.answerSdp);
  });
});

describe('offering RTP/SAVP', () => {
  it('offers both suites with distinct keys; parseAnswer takes the answered line', () => {
    const o = createOffer({ ...LOCAL, srtp: true });
    expect(o.protocol).toBe('RTP/SAVP');
    expect(o.sdp).toMatch(/^m=audio 40000 RTP\/SAVP /m);
    const lines = o.sdp.split('\r\n').filter((l) => l.startsWith('a=crypto:'));
    expect(lines.map((l) => l.split(' ')[0] + ' ' + l.split(' ')[1])).toEqual(['a=crypto:1 AES_CM_128_HMAC_SHA1_80', 'a=crypto:2 AES_CM_128_HMAC_SHA1_32']);
    expect(new Set(lines.map((l) => l.split('inline:')[1])).size).toBe(2);
    // The SDP text carries the keys (it goes only over TLS); the rest of the offer prints none.
    expect(JSON.stringify({ ...o, sdp: '' })).not.toMatch(/crypto|inline/);

    // The answerer is our own negotiate(): the keys cross over.
    const ans = negotiate(o.sdp, { ...LOCAL, localPort: 50000, srtp: TLS_REQUIRE });
    const media = parseAnswer(ans.answerSdp, o);
    expect(media.srtp?.suite).toBe('AES_CM_128_HMAC_SHA1_80');
    expect(Buffer.compare(media.srtp!.sendKey, ans.srtp!.receiveKey)).toBe(0);
    expect(Buffer.compare(media.srtp!.receiveKey, ans.srtp!.sendKey)).toBe(0);
  });

  it('an answer without a matching crypto line is SDP_NO_CRYPTO (the UAC hangs up with a Reason)', () => {
    const o = createOffer({ ...LOCAL, srtp: true });
    const noCrypto = ['v=0', 'o=- 1 1 IN IP4 192.0.2.1', 's=-', 'c=IN IP4 192.0.2.1', 't=0 0', 'm=audio 30000 RTP/SAVP 0', ''].join('\r\n');
    expect(refusal(() => parseAnswer(noCrypto, o)).code).toBe('SDP_NO_CRYPTO');
    const wrongTag = noCrypto + `a=crypto:9 AES_CM_128_HMAC_SHA1_80 inline:${KEY80}\r\n`;
    expect(refusal(() => parseAnswer(wrongTag, o)).code).toBe('SDP_NO_CRYPTO');
    const plain = noCrypto.replace('RTP/SAVP', 'RTP/AVP');
    expect(refusal(() => parseAnswer(plain, o)).code).toBe('SDP_ANSWER_MISMATCH');
  });

  it('a re-offer (hold) keeps the agreed suite, tag and key', () => {
    const o = createOffer({ ...LOCAL, srtp: true });
    const ans = negotiate(o.sdp, { ...LOCAL, localPort: 50000, srtp: TLS_REQUIRE });
    const media = parseAnswer(ans.answerSdp, o);
    const hold = createOffer({ ...LOCAL, srtp: true, previous: media, direction: 'sendonly' });
    const lines = hold.sdp.split('\r\n').filter((l) => l.startsWith('a=crypto:'));
    expect(lines).toEqual([`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${Buffer.from(media.srtp!.sendKey).toString('base64')}`]);
  });
});
