import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import * as sdpTransform from 'sdp-transform';
import {
  LocalSdpSession,
  SDP_DIRECTIONS,
  SdpNegotiationError,
  SdpParseError,
  answerDirection,
  createOffer,
  isSameSdpVersion,
  isSdpError,
  negotiate,
  parseAnswer,
  parseOffer,
  parseSdp,
  reverseDirection,
  type NegotiateOptions,
  type NegotiatedMedia,
  type SdpDirection,
} from '../../src/sip/sdp/index.ts';

const FIXTURES = fileURLToPath(new URL('../fixtures/sdp/', import.meta.url));
const fixture = (name: string): string => readFileSync(`${FIXTURES}${name}`, 'utf8');
/** More runs on demand: SDP_FUZZ_RUNS=100000 npx vitest run test/sip/sdp.test.ts */
const FUZZ_RUNS = Number(process.env.SDP_FUZZ_RUNS ?? 2000);
const ALL_FIXTURES = readdirSync(FIXTURES).filter((f) => f.endsWith('.sdp')).sort();

const LOCAL = { localAddress: '203.0.113.9', localPort: 40000, sessionId: '4242', sessionVersion: 7 } as const;
const answer = (offer: string, extra: Partial<NegotiateOptions> = {}) => negotiate(offer, { ...LOCAL, ...extra });

/** Replaces the a=<direction> line (or appends one) and optionally the connection address. */
function withDirection(sdp: string, dir: SdpDirection | undefined, address?: string): string {
  let s = sdp.replace(/^a=(sendrecv|sendonly|recvonly|inactive)\r\n/gm, '');
  if (dir) s = `${s}a=${dir}\r\n`;
  if (address) s = s.replace(/^c=IN IP4 \S+/gm, `c=IN IP4 ${address}`);
  return s;
}

/**
 * The RFC 3264 section 6 / 6.1 rules every answer must meet, checked on the wire text with
 * sdp-transform (an independent parser).
 */
function expectValidAnswer(offerText: string, answerText: string, chosenIndex: number): void {
  const offer = sdpTransform.parse(offerText);
  const ans = sdpTransform.parse(answerText);
  expect(answerText.endsWith('\r\n')).toBe(true);
  expect(answerText).not.toMatch(/[^\r]\n/);
  expect(ans.version).toBe(0);
  expect(ans.origin?.username).toBe('-');
  expect(ans.name).toBe('-');
  expect(ans.connection?.ip).toBeDefined();
  // Same number of m-lines, same media types, in the same order.
  expect(ans.media.length).toBe(offer.media.length);
  // The t= line equals the offer's (section 6).
  const { start, stop } = parseSdp(offerText).timing;
  expect(/^t=(.*)$/m.exec(answerText)?.[1]).toBe(`${start} ${stop}`);
  // m-lines read as text: sdp-transform's m= grammar knows fewer proto characters than RFC 4566.
  const mlines = (text: string) =>
    text.split(/\r\n|\r|\n/).filter((l) => l.startsWith('m=')).map((l) => {
      const [type, port, proto, ...fmts] = l.slice(2).trim().split(/ +/);
      return { type, port: Number(port?.split('/')[0]), proto, fmts };
    });
  const offeredLines = mlines(offerText);
  const answerLines = mlines(answerText);
  expect(answerLines.length).toBe(offeredLines.length);
  answerLines.forEach((m, i) => {
    const o = offeredLines[i]!;
    expect(m.type).toBe(o.type);
    expect(m.proto).toBe(o.proto);
    expect(m.fmts.length).toBeGreaterThan(0); // at least one format, rejected or not
    if (i !== chosenIndex) {
      expect(m.port).toBe(0); // rejected
      return;
    }
    expect(m.port).toBeGreaterThan(0);
    const offeredMedia = offer.media[i]!;
    const answerMedia = ans.media[i]!;
    const ours = m.fmts.map(Number);
    for (const pt of ours) {
      expect(o.fmts.map(Number)).toContain(pt); // our PTs are a subset of the offer's
      const mine = answerMedia.rtp.find((r) => r.payload === pt);
      expect(mine, `rtpmap for PT ${pt}`).toBeDefined();
      // (An rtpmap sdp-transform reads with an empty name is one we ignore: the static table holds.)
      const theirs = offeredMedia.rtp.find((r) => r.payload === pt && String(r.codec) !== '' && Number(r.rate) > 0);
      if (theirs) expect(mine!.codec.toLowerCase()).toBe(String(theirs.codec).toLowerCase());
    }
    expect(answerMedia.ptime).toBe(20);
  });
  // Our own parser reads our answer back.
  expect(() => parseSdp(answerText)).not.toThrow();
}

describe('parseOffer', () => {
  it('reads the SIPp default offer (captured from sipp -sn uac)', () => {
    const o = parseOffer(fixture('sipp-uac-pcmu.sdp'));
    expect(o.origin).toEqual({ username: 'user1', sessionId: '53655765', sessionVersion: '2353687637', addressType: 'IP4', address: '127.0.0.1' });
    expect(o.timing).toEqual({ start: '0', stop: '0' });
    expect(o.media).toHaveLength(1);
    expect(o.audio).toBe(o.media[0]);
    expect(o.audio).toMatchObject({ type: 'audio', port: 6000, protocol: 'RTP/AVP', direction: 'sendrecv', legacyHold: false, rtcpMux: false, telephoneEvents: [] });
    expect(o.audio?.connection).toEqual({ addressType: 'IP4', address: '127.0.0.1', multicast: false });
    expect(o.audio?.rtp).toEqual([{ payloadType: 0, encoding: 'PCMU', clockRate: 8000, fromStaticTable: false }]);
  });

  it('reads baresip 1.0.0 (captured): codecs, fmtp, ptime, telephone-event', () => {
    const o = parseOffer(fixture('baresip-1.0.0.sdp'));
    const a = o.audio!;
    expect(a.rtp.map((r) => `${r.payloadType} ${r.encoding}/${r.clockRate}${r.channels ? `/${r.channels}` : ''}`)).toEqual([
      '0 PCMU/8000',
      '8 PCMA/8000',
      '9 G722/8000',
      '96 opus/48000/2',
      '101 telephone-event/8000',
    ]);
    expect(a.rtp.find((r) => r.payloadType === 96)?.fmtp).toBe('stereo=1;sprop-stereo=1');
    expect(a.ptime).toBe(20);
    expect(a.telephoneEvents).toEqual([{ payloadType: 101, clockRate: 8000, events: '0-15' }]);
  });

  it('takes payload types 0 and 8 from the RFC 3551 table when there is no rtpmap', () => {
    const a = parseOffer(fixture('carrier-static-pts.sdp')).audio!;
    expect(a.rtp.slice(0, 2)).toEqual([
      { payloadType: 0, encoding: 'PCMU', clockRate: 8000, fromStaticTable: true },
      { payloadType: 8, encoding: 'PCMA', clockRate: 8000, fromStaticTable: true },
    ]);
    expect(a.maxptime).toBe(40);
    expect(a.connection?.address).toBe('198.51.100.21'); // session-level c=, not o='s address
  });

  it('lets an rtpmap override the static table (baresip mapping telephone-event to PT 10)', () => {
    const a = parseOffer(fixture('baresip-opus-first.sdp')).audio!;
    expect(a.rtp.find((r) => r.payloadType === 10)).toMatchObject({ encoding: 'telephone-event', clockRate: 8000, fromStaticTable: false });
    expect(a.telephoneEvents).toEqual([{ payloadType: 10, clockRate: 8000, events: '0-15' }]);
  });

  it('reads a=rtcp, a=rtcp-mux, a 64-bit session id and media-level c=', () => {
    const o = parseOffer(fixture('webrtc-opus-only.sdp'));
    expect(o.origin.sessionId).toBe('4611731400430051336'); // beyond 2^53: kept as text
    expect(o.connection).toBeUndefined();
    expect(o.audio).toMatchObject({ protocol: 'RTP/AVPF', rtcpMux: true, rtcpPort: 49201, rtcpAddress: '198.51.100.7' });
    expect(o.audio?.connection?.address).toBe('198.51.100.7');
    expect(parseOffer(fixture('freeswitch-cn.sdp')).audio?.rtcpPort).toBe(24581);
  });

  it('reads IPv6 offers', () => {
    const o = parseOffer(fixture('ipv6-linphone.sdp'));
    expect(o.origin.addressType).toBe('IP6');
    expect(o.audio?.connection).toEqual({ addressType: 'IP6', address: '2001:db8::10', multicast: false });
    const loop = parseOffer(fixture('sipp-uac-pcmu.sdp').replace(/IN IP4 127\.0\.0\.1/g, 'IN IP6 ::1'));
    expect(loop.audio?.connection?.address).toBe('::1');
  });

  it('reads direction at media level, session level, and the legacy 0.0.0.0 hold', () => {
    expect(parseOffer(fixture('hold-sendonly.sdp')).audio).toMatchObject({ direction: 'sendonly', legacyHold: false });
    expect(parseOffer(fixture('hold-session-sendonly.sdp')).audio).toMatchObject({ direction: 'sendonly' });
    expect(parseOffer(fixture('hold-legacy-0000.sdp')).audio).toMatchObject({ direction: 'sendrecv', legacyHold: true });
    expect(parseOffer(fixture('inactive.sdp')).audio?.direction).toBe('inactive');
  });

  it('skips unusable audio streams when choosing `audio`', () => {
    const o = parseOffer(fixture('best-effort-srtp.sdp'));
    expect(o.media.map((m) => m.protocol)).toEqual(['RTP/SAVP', 'RTP/AVP']);
    expect(o.audio?.index).toBe(1);
    expect(parseOffer(fixture('srtp-only.sdp')).audio).toBeUndefined();
    expect(parseOffer(fixture('video-only.sdp')).audio).toBeUndefined();
  });

  it('accepts LF-only line ends and blank trailing lines', () => {
    const lf = fixture('3cx-pcma-g729.sdp').replace(/\r\n/g, '\n') + '\n\n';
    expect(parseOffer(lf).audio?.rtp[0]?.encoding).toBe('PCMA');
  });

  it('isSameSdpVersion compares the o= line', () => {
    const a = parseOffer(fixture('sipp-uac-pcmu.sdp'));
    expect(isSameSdpVersion(a, parseOffer(fixture('sipp-uac-pcmu.sdp')))).toBe(true);
    expect(isSameSdpVersion(a, parseOffer(fixture('hold-sendonly.sdp')))).toBe(false);
  });
});

describe('malformed SDP', () => {
  const malformed = ALL_FIXTURES.filter((f) => f.startsWith('malformed-'));

  it.each(malformed)('%s is an SdpParseError for a 400', (name) => {
    let err: unknown;
    try {
      parseOffer(fixture(name));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SdpParseError);
    const e = err as SdpParseError;
    expect(e.code).toBe('SDP_PARSE');
    expect(e.status).toBe(400);
    expect(e.reason).toMatch(/^Bad Request: malformed SDP: /);
    expect(e.reason).toMatch(/^[\x20-\x7e]+$/);
    expect(() => answer(fixture(name))).toThrow(SdpParseError);
  });

  it.each([
    ['not a string', 42],
    ['null', null],
    ['a Buffer', Buffer.from('v=0\r\n')],
    ['empty', ''],
    ['only blank lines', '\r\n\r\n'],
    ['v=1', 'v=1\r\no=- 1 1 IN IP4 1.2.3.4\r\n'],
    ['two descriptions', `${fixture('sipp-uac-pcmu.sdp')}${fixture('sipp-uac-pcmu.sdp')}`],
    ['o= with 5 fields', 'v=0\r\no=- 1 1 IN IP4\r\n'],
    ['c= with an IPv6 address under IP4', 'v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 ::1\r\nm=audio 4000 RTP/AVP 0\r\n'],
    ['c= of nettype ATM', 'v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=ATM NSAP 47.0091\r\nm=audio 4000 RTP/AVP 0\r\n'],
    ['a port above 65535', 'v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.4\r\nm=audio 70000 RTP/AVP 0\r\n'],
    ['an m-line without formats', 'v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP\r\n'],
    ['a non-numeric RTP format', 'v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP PCMU\r\n'],
    ['a NUL byte', 'v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=\0\r\n'],
    ['too large', `v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\n${'a=x\r\n'.repeat(20_000)}`],
  ])('%s', (_name, input) => {
    expect(() => parseSdp(input)).toThrow(SdpParseError);
  });

  it('random strings never throw anything but SdpError', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ unit: fc.constantFrom('v', 'o', 'm', 'c', 'a', '=', ' ', '0', '\r', '\n', 'IN', 'IP4', 'RTP/AVP', ':', '/') , maxLength: 200 })), (text) => {
        try {
          negotiate(text, LOCAL);
        } catch (e) {
          if (!isSdpError(e)) throw e;
        }
      }),
      { numRuns: FUZZ_RUNS },
    );
  }, Math.max(30_000, FUZZ_RUNS));

  it('mutated fixtures never throw anything but SdpError, and every answer is valid', () => {
    const sources = ALL_FIXTURES.map(fixture);
    const tokens = ['0', '8', '101', '0.0.0.0', '::', 'IP6', 'IP4', 'a=sendonly', 'a=rtpmap:', 'opus/48000/2', 'PCMU/8000', 'telephone-event/48000', '/', ' ', '\r\n', '-1', '99999', 'm=audio 0 RTP/AVP 0', 'c=IN IP4 224.0.0.1/127', 'a=rtcp:', 'a=fmtp:101 ', 'x'];
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('delete-char' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 8 }) }),
      fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), text: fc.oneof(fc.constantFrom(...tokens), fc.string({ maxLength: 6 })) }),
      fc.record({ kind: fc.constant('drop-line' as const), at: fc.nat() }),
      fc.record({ kind: fc.constant('dup-line' as const), at: fc.nat() }),
      fc.record({ kind: fc.constant('swap-lines' as const), at: fc.nat(), to: fc.nat() }),
      fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
    );
    type Mutation = typeof mutation extends fc.Arbitrary<infer T> ? T : never;
    const apply = (text: string, m: Mutation): string => {
      const lines = text.split('\r\n');
      switch (m.kind) {
        case 'delete-char': {
          const at = m.at % (text.length + 1);
          return text.slice(0, at) + text.slice(at + m.len);
        }
        case 'insert': {
          const at = m.at % (text.length + 1);
          return text.slice(0, at) + m.text + text.slice(at);
        }
        case 'drop-line':
          lines.splice(m.at % lines.length, 1);
          return lines.join('\r\n');
        case 'dup-line': {
          const i = m.at % lines.length;
          lines.splice(i, 0, lines[i]!);
          return lines.join('\r\n');
        }
        case 'swap-lines': {
          const i = m.at % lines.length;
          const j = m.to % lines.length;
          [lines[i], lines[j]] = [lines[j]!, lines[i]!];
          return lines.join('\r\n');
        }
        case 'truncate':
          return text.slice(0, m.at % (text.length + 1));
      }
    };
    let answered = 0;
    fc.assert(
      fc.property(fc.nat({ max: sources.length - 1 }), fc.array(mutation, { minLength: 1, maxLength: 4 }), fc.boolean(), (i, mutations, cn) => {
        const text = mutations.reduce(apply, sources[i]!);
        try {
          const r = answer(text, { comfortNoise: cn });
          answered++;
          expectValidAnswer(text, r.answerSdp, r.mediaIndex);
        } catch (e) {
          if (!isSdpError(e)) throw e;
        }
      }),
      { numRuns: FUZZ_RUNS * 1.5 },
    );
    expect(answered).toBeGreaterThan(FUZZ_RUNS / 10); // the mutations did not all just break the input
  }, Math.max(30_000, FUZZ_RUNS));

  it('pathological long lines parse in linear time', () => {
    const long = (line: string) => `v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.4\r\n${line}\r\n`;
    const inputs = [
      long(`m=audio 4000 RTP/AVP 0${' '.repeat(60_000)}x`),
      long(`m=audio 4000 ${'RTP/'.repeat(15_000)}\u0001 0`),
      long(`c=IN IP4 ${'a'.repeat(60_000)}`),
      long(`o=${' x'.repeat(30_000)}`),
      long(`a=rtpmap:0 ${'P'.repeat(60_000)}/`),
      long(`a=fmtp:0 ${'x=1;'.repeat(15_000)}`),
    ];
    for (const text of inputs) {
      const start = performance.now();
      try {
        negotiate(text, LOCAL);
      } catch (e) {
        expect(isSdpError(e)).toBe(true);
      }
      expect(performance.now() - start).toBeLessThan(250);
    }
  });
});

describe('negotiate: every fixture', () => {
  type Expect =
    | { codec: string; pt: number; dtmf?: number; cn?: number; direction: SdpDirection; hold: boolean; remote: [string, number, number?]; index?: number; rtcpMux?: boolean }
    | { error: string; warning: number };
  const expected: Record<string, Expect> = {
    '3cx-pcma-g729.sdp': { codec: 'PCMA', pt: 8, dtmf: 101, direction: 'sendrecv', hold: false, remote: ['203.0.113.50', 9008, 9009] },
    'audio-video.sdp': { codec: 'PCMU', pt: 0, direction: 'sendrecv', hold: false, remote: ['192.0.2.60', 49170, 49171] },
    // Offer order: PCMU is first in baresip's own list.
    'baresip-1.0.0.sdp': { codec: 'PCMU', pt: 0, dtmf: 101, direction: 'sendrecv', hold: false, remote: ['192.0.2.2', 10004, 10005] },
    // Opus has no telephone-event/48000 here: the first 8 kHz codec with DTMF wins (PCMA before PCMU).
    'baresip-opus-first.sdp': { codec: 'PCMA', pt: 8, dtmf: 10, direction: 'sendrecv', hold: false, remote: ['192.168.168.187', 8570, 8571] },
    'best-effort-srtp.sdp': { codec: 'PCMU', pt: 0, dtmf: 101, direction: 'sendrecv', hold: false, remote: ['192.0.2.70', 40002, 40003], index: 1 },
    'carrier-static-pts.sdp': { codec: 'PCMU', pt: 0, dtmf: 101, direction: 'sendrecv', hold: false, remote: ['198.51.100.21', 30000, 30001] },
    'freeswitch-cn.sdp': { codec: 'PCMU', pt: 0, dtmf: 101, direction: 'sendrecv', hold: false, remote: ['192.0.2.30', 24580, 24581] },
    'g729-only.sdp': { error: 'SDP_NO_COMMON_CODEC', warning: 305 },
    'hold-legacy-0000.sdp': { codec: 'PCMU', pt: 0, dtmf: 101, direction: 'recvonly', hold: true, remote: ['0.0.0.0', 6000, 6001] },
    'hold-sendonly.sdp': { codec: 'PCMU', pt: 0, dtmf: 101, direction: 'recvonly', hold: true, remote: ['127.0.0.1', 6000, 6001] },
    'hold-session-sendonly.sdp': { codec: 'PCMA', pt: 8, dtmf: 101, direction: 'recvonly', hold: true, remote: ['192.0.2.40', 16384, 16385] },
    'inactive.sdp': { codec: 'PCMU', pt: 0, direction: 'inactive', hold: true, remote: ['127.0.0.1', 6000, 6001] },
    'ipv6-linphone.sdp': { codec: 'PCMU', pt: 0, dtmf: 101, direction: 'sendrecv', hold: false, remote: ['2001:db8::10', 7078, 7079] },
    'sipp-uac-pcmu.sdp': { codec: 'PCMU', pt: 0, direction: 'sendrecv', hold: false, remote: ['127.0.0.1', 6000, 6001] },
    'srtp-only.sdp': { error: 'SDP_INCOMPATIBLE_TRANSPORT', warning: 302 },
    'video-only.sdp': { error: 'SDP_NO_AUDIO', warning: 304 },
    'webrtc-opus-only.sdp': { codec: 'opus', pt: 111, dtmf: 110, direction: 'sendrecv', hold: false, remote: ['198.51.100.7', 49200, 49200], rtcpMux: true },
    'yeastar-pcma.sdp': { codec: 'PCMA', pt: 8, dtmf: 101, direction: 'sendrecv', hold: false, remote: ['10.20.30.40', 10002, 10003] },
  };

  it('has an expectation for every non-malformed fixture', () => {
    expect(Object.keys(expected).sort()).toEqual(ALL_FIXTURES.filter((f) => !f.startsWith('malformed-')));
  });

  it.each(Object.entries(expected))('%s', (name, want) => {
    const text = fixture(name);
    if ('error' in want) {
      let err: unknown;
      try {
        answer(text);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(SdpNegotiationError);
      expect((err as SdpNegotiationError).code).toBe(want.error);
      expect((err as SdpNegotiationError).status).toBe(488);
      expect((err as SdpNegotiationError).warningCode).toBe(want.warning);
      return;
    }
    const r = answer(text);
    expect(r.codec.name).toBe(want.codec);
    expect(r.codec.payloadType).toBe(want.pt);
    expect(r.codec.receivePayloadType).toBe(want.pt);
    expect(r.dtmfPayloadType).toBe(want.dtmf);
    expect(r.dtmf?.payloadType).toBe(want.dtmf);
    expect(r.comfortNoisePayloadType).toBe(want.cn);
    expect(r.direction).toBe(want.direction);
    expect(r.hold).toBe(want.hold);
    expect([r.remote.address, r.remote.port, r.remote.rtcpPort]).toEqual(want.remote);
    expect(r.mediaIndex).toBe(want.index ?? 0);
    expect(r.rtcpMux).toBe(want.rtcpMux ?? false);
    expect(r.ptime).toBe(20);
    expect(r.codecChanged || r.remoteChanged || r.holdChanged).toBe(false);
    expectValidAnswer(text, r.answerSdp, r.mediaIndex);
    const ours = parseSdp(r.answerSdp);
    expect(ours.origin).toMatchObject({ sessionId: '4242', sessionVersion: '7', address: '203.0.113.9' });
    expect(ours.audio?.direction).toBe(want.direction);
    expect(ours.audio?.port).toBe(40000);
    if (want.dtmf !== undefined) expect(ours.audio?.telephoneEvents.map((t) => t.payloadType)).toEqual([want.dtmf]);
  });

  it('writes the expected answer for the SIPp offer', () => {
    expect(answer(fixture('sipp-uac-pcmu.sdp')).answerSdp).toBe(
      ['v=0', 'o=- 4242 7 IN IP4 203.0.113.9', 's=-', 'c=IN IP4 203.0.113.9', 't=0 0', 'm=audio 40000 RTP/AVP 0', 'a=rtpmap:0 PCMU/8000', 'a=ptime:20', 'a=sendrecv', ''].join('\r\n'),
    );
  });

  it('writes the expected answer for the Opus offer, with our Opus fmtp and rtcp-mux', () => {
    const r = answer(fixture('webrtc-opus-only.sdp'));
    expect(r.answerSdp).toContain('m=audio 40000 RTP/AVPF 111 110\r\n');
    expect(r.answerSdp).toContain('a=rtpmap:111 opus/48000/2\r\n');
    expect(r.answerSdp).toContain('a=fmtp:111 minptime=20;useinbandfec=1;stereo=0;sprop-stereo=0\r\n');
    expect(r.answerSdp).toContain('a=rtpmap:110 telephone-event/48000\r\n');
    expect(r.answerSdp).toContain('a=rtcp-mux\r\n');
    expect(r.codec).toMatchObject({ clockRate: 48000, channels: 2, fmtp: 'minptime=10;useinbandfec=1', fmtpParams: { minptime: '10', useinbandfec: '1' } });
  });

  it('rejects the extra streams with port 0 and their formats', () => {
    const r = answer(fixture('audio-video.sdp'));
    expect(r.answerSdp).toContain('m=video 0 RTP/AVP 31 32\r\n');
    expect(r.answerSdp).toContain('m=image 0 udptl t38\r\n');
    const srtp = answer(fixture('best-effort-srtp.sdp'));
    expect(srtp.answerSdp).toMatch(/m=audio 0 RTP\/SAVP 0 8 101\r\n[^]*m=audio 40000 RTP\/AVP 0 101\r\n/);
  });

  it('answers only the events 0-15 of a 0-16 offer (RFC 4733 section 2.4.1)', () => {
    const r = answer(fixture('3cx-pcma-g729.sdp'));
    expect(r.dtmf).toEqual({ payloadType: 101, receivePayloadType: 101, clockRate: 8000, events: '0-15' });
    expect(r.answerSdp).toContain('a=fmtp:101 0-15\r\n');
    const flashOnly = fixture('3cx-pcma-g729.sdp').replace('a=fmtp:101 0-16', 'a=fmtp:101 16');
    expect(answer(flashOnly).dtmf).toBeUndefined();
  });

  it('drops telephone-event whose clock rate is not the codec\'s (RFC 4733 section 2.1)', () => {
    const r = answer(fixture('baresip-1.0.0.sdp'), { preferences: ['opus'] });
    expect(r.codec.name).toBe('opus');
    expect(r.dtmfPayloadType).toBeUndefined();
    expect(r.answerSdp).not.toContain('telephone-event');
  });

  it('keeps the offer order by default, ours with codecOrder local', () => {
    expect(answer(fixture('3cx-pcma-g729.sdp')).codec.name).toBe('PCMA');
    expect(answer(fixture('3cx-pcma-g729.sdp'), { codecOrder: 'local' }).codec.name).toBe('PCMU');
    expect(answer(fixture('3cx-pcma-g729.sdp'), { codecOrder: 'local', preferences: ['PCMA', 'PCMU'] }).codec.name).toBe('PCMA');
    expect(answer(fixture('webrtc-opus-only.sdp'), { codecOrder: 'local' }).codec.name).toBe('opus');
  });

  it('takes Opus first when asked not to prefer a codec with DTMF', () => {
    const r = answer(fixture('baresip-opus-first.sdp'), { preferCodecWithDtmf: false });
    expect(r.codec).toMatchObject({ name: 'opus', payloadType: 98, clockRate: 48000, channels: 2 });
    expect(r.codec.fmtpParams).toMatchObject({ useinbandfec: '1', maxaveragebitrate: '28000', stereo: '0' });
    expect(r.dtmfPayloadType).toBeUndefined();
    expect(answer(fixture('ipv6-linphone.sdp'), { preferCodecWithDtmf: false }).codec.name).toBe('opus');
  });

  it('accepts CN/8000 at PT 13 only when enabled', () => {
    expect(answer(fixture('freeswitch-cn.sdp')).answerSdp).not.toContain('CN/8000');
    const r = answer(fixture('freeswitch-cn.sdp'), { comfortNoise: true });
    expect(r.comfortNoisePayloadType).toBe(13);
    expect(r.answerSdp).toContain('m=audio 40000 RTP/AVP 0 101 13\r\n');
    expect(r.answerSdp).toContain('a=rtpmap:13 CN/8000\r\n');
    expectValidAnswer(fixture('freeswitch-cn.sdp'), r.answerSdp, 0);
  });

  it('honours dtmf: false and rtcpMux: false', () => {
    const r = answer(fixture('webrtc-opus-only.sdp'), { dtmf: false, rtcpMux: false });
    expect(r.dtmf).toBeUndefined();
    expect(r.rtcpMux).toBe(false);
    expect(r.remote.rtcpPort).toBe(49201);
    expect(r.answerSdp).not.toContain('rtcp-mux');
  });

  it('uses IPv6 local addresses: c=IN IP6 ::1', () => {
    const r = answer(fixture('ipv6-linphone.sdp'), { localAddress: '::1' });
    expect(r.answerSdp).toContain('o=- 4242 7 IN IP6 ::1\r\n');
    expect(r.answerSdp).toContain('c=IN IP6 ::1\r\n');
    const loop = fixture('sipp-uac-pcmu.sdp').replace(/IN IP4 127\.0\.0\.1/g, 'IN IP6 ::1');
    const r2 = answer(loop, { localAddress: '::1' });
    expect(r2.remote.address).toBe('::1');
    expectValidAnswer(loop, r2.answerSdp, 0);
  });

  it('rejects a multicast-only offer with Warning 301', () => {
    const mc = fixture('sipp-uac-pcmu.sdp').replace('c=IN IP4 127.0.0.1', 'c=IN IP4 224.2.1.1/127');
    expect(() => answer(mc)).toThrow(expect.objectContaining({ code: 'SDP_INCOMPATIBLE_ADDRESS', warningCode: 301 }));
  });

  it('gives the 488 Warning and Reason texts', () => {
    let err: SdpNegotiationError | undefined;
    try {
      answer(fixture('g729-only.sdp'));
    } catch (e) {
      err = e as SdpNegotiationError;
    }
    expect(err?.warningText).toBe('Incompatible media format');
    expect(err?.warningHeader('sip.example.com')).toBe('305 sip.example.com "Incompatible media format"');
    expect(err?.warningHeader()).toBe('305 callbridge "Incompatible media format"');
    expect(err?.reasonHeader()).toBe('SIP ;cause=488 ;text="Incompatible media format"');
    expect(err?.message).toContain('G729/8000');
    // preferences narrow what is common.
    expect(() => answer(fixture('sipp-uac-pcmu.sdp'), { preferences: ['opus'] })).toThrow(expect.objectContaining({ code: 'SDP_NO_COMMON_CODEC', warningCode: 305 }));
  });

  it('copies a non-zero t= line exactly (RFC 3264 section 6)', () => {
    const t = fixture('sipp-uac-pcmu.sdp').replace('t=0 0', 't=3034423619 18446744073709551615');
    expect(answer(t).answerSdp).toContain('t=3034423619 18446744073709551615\r\n');
  });

  it('throws TypeError / RangeError for our own bad options', () => {
    const offer = fixture('sipp-uac-pcmu.sdp');
    expect(() => answer(offer, { localAddress: 'localhost' })).toThrow(TypeError);
    expect(() => answer(offer, { localPort: 0 })).toThrow(RangeError);
    expect(() => answer(offer, { sessionId: 'abc' })).toThrow(TypeError);
    expect(() => answer(offer, { sessionVersion: -1 })).toThrow(RangeError);
    expect(() => answer(offer, { ptime: 7 })).toThrow(RangeError);
    expect(() => answer(offer, { direction: 'both' as SdpDirection })).toThrow(TypeError);
    expect(() => answer(offer, { preferences: ['G729' as 'PCMU'] })).toThrow(RangeError);
  });
});

describe('directions (RFC 3264 section 6.1)', () => {
  const send = (d: SdpDirection) => d === 'sendrecv' || d === 'sendonly';
  const recv = (d: SdpDirection) => d === 'sendrecv' || d === 'recvonly';
  // The table of RFC 3264 6.1 when we want sendrecv.
  const table: Record<SdpDirection, SdpDirection> = { sendrecv: 'sendrecv', sendonly: 'recvonly', recvonly: 'sendonly', inactive: 'inactive' };

  it.each(SDP_DIRECTIONS)('an offer %s is answered per the table', (offered) => {
    expect(answerDirection(offered)).toBe(table[offered]);
    const r = answer(withDirection(fixture('sipp-uac-pcmu.sdp'), offered));
    expect(r.direction).toBe(table[offered]);
    expect(r.remoteDirection).toBe(offered);
    expect(r.hold).toBe(offered === 'sendonly' || offered === 'inactive');
    expect(parseSdp(r.answerSdp).audio?.direction).toBe(table[offered]);
  });

  it('no direction attribute means sendrecv', () => {
    expect(answer(withDirection(fixture('sipp-uac-pcmu.sdp'), undefined)).direction).toBe('sendrecv');
  });

  it('every offered x wanted pair obeys RFC 3264 6.1', () => {
    for (const offered of SDP_DIRECTIONS) {
      for (const wanted of SDP_DIRECTIONS) {
        const d = answerDirection(offered, wanted);
        // We send only if the offerer receives and we want to; likewise for receiving.
        expect(send(d)).toBe(recv(offered) && send(wanted));
        expect(recv(d)).toBe(send(offered) && recv(wanted));
        if (offered === 'sendonly') expect(['recvonly', 'inactive']).toContain(d);
        if (offered === 'recvonly') expect(['sendonly', 'inactive']).toContain(d);
        if (offered === 'inactive') expect(d).toBe('inactive');
        const r = answer(withDirection(fixture('sipp-uac-pcmu.sdp'), offered), { direction: wanted });
        expect(r.direction).toBe(d);
      }
      expect(reverseDirection(reverseDirection(offered))).toBe(offered);
    }
  });

  it.each(SDP_DIRECTIONS)('legacy hold c=0.0.0.0 with %s: we never send', (offered) => {
    const r = answer(withDirection(fixture('sipp-uac-pcmu.sdp'), offered, '0.0.0.0'));
    expect(send(r.direction)).toBe(false);
    expect(recv(r.direction)).toBe(send(offered));
    expect(r.hold).toBe(true);
    expect(r.remoteDirection).toBe(send(offered) ? 'sendonly' : 'inactive');
  });
});

describe('re-INVITE: hold, resume, codec change', () => {
  const initial = () => answer(fixture('baresip-1.0.0.sdp'));
  const reoffer = (edit: (s: string) => string) => edit(fixture('baresip-1.0.0.sdp').replace('674988821', '674988822'));

  it('hold keeps the codec and reports the change', () => {
    const first = initial();
    const held = answer(reoffer((s) => withDirection(s, 'sendonly')), { previous: first });
    expect(held).toMatchObject({ hold: true, holdChanged: true, codecChanged: false, remoteChanged: false, direction: 'recvonly' });
    expect(held.codec).toEqual(first.codec);
    const resumed = answer(reoffer((s) => withDirection(s, 'sendrecv')), { previous: held });
    expect(resumed).toMatchObject({ hold: false, holdChanged: true, codecChanged: false, direction: 'sendrecv' });
    const inactive = answer(reoffer((s) => withDirection(s, 'inactive')), { previous: resumed });
    expect(inactive).toMatchObject({ hold: true, holdChanged: true, direction: 'inactive' });
    const legacy = answer(reoffer((s) => s.replace(/c=IN IP4 192\.0\.2\.2/g, 'c=IN IP4 0.0.0.0')), { previous: resumed });
    expect(legacy).toMatchObject({ hold: true, holdChanged: true, remoteChanged: true, direction: 'recvonly' });
  });

  it('keeps the codec in use while the re-offer still has it, even if no longer first', () => {
    const first = initial();
    const r = answer(reoffer((s) => s.replace('RTP/AVP 0 8 9 96 101', 'RTP/AVP 8 96 0 101')), { previous: first });
    expect(r.codec.name).toBe('PCMU');
    expect(r.codecChanged).toBe(false);
  });

  it('changes codec when the re-offer drops ours', () => {
    const first = initial();
    const r = answer(reoffer((s) => s.replace('RTP/AVP 0 8 9 96 101', 'RTP/AVP 8 101')), { previous: first });
    expect(r.codec.name).toBe('PCMA');
    expect(r.codecChanged).toBe(true);
  });

  it('reports a new remote port', () => {
    const first = initial();
    const r = answer(reoffer((s) => s.replace('m=audio 10004', 'm=audio 10010')), { previous: first });
    expect(r.remoteChanged).toBe(true);
    expect(r.remote).toEqual({ address: '192.0.2.2', port: 10010, rtcpPort: 10011 });
  });

  it('a re-offer with no common codec is a 488 (the session goes on)', () => {
    const first = initial();
    expect(() => answer(reoffer((s) => s.replace('RTP/AVP 0 8 9 96 101', 'RTP/AVP 9 101')), { previous: first })).toThrow(SdpNegotiationError);
  });
});

describe('LocalSdpSession: o= versions in a dialog (RFC 3264 section 8)', () => {
  const opts = { localAddress: '203.0.113.9', localPort: 40000 };
  const versionOf = (sdp: string) => Number(/^o=\S+ \S+ (\d+)/m.exec(sdp)?.[1]);

  it('increments on each changed SDP and keeps the version of an unchanged one', () => {
    const local = new LocalSdpSession({ sessionId: '77' });
    expect(local.version).toBeUndefined();
    const a1 = local.answer(fixture('sipp-uac-pcmu.sdp'), opts);
    expect(versionOf(a1.answerSdp)).toBe(1);
    expect(a1.sessionVersion).toBe(1);
    // A session refresh: the same offer again, the same answer, the same version.
    const a2 = local.answer(fixture('sipp-uac-pcmu.sdp'), { ...opts, previous: a1 });
    expect(a2.answerSdp).toBe(a1.answerSdp);
    expect(local.version).toBe(1);
    // Hold: our answer changes (recvonly): version 2; resume: 3.
    const a3 = local.answer(fixture('hold-sendonly.sdp'), { ...opts, previous: a2 });
    expect(versionOf(a3.answerSdp)).toBe(2);
    const a4 = local.answer(fixture('sipp-uac-pcmu.sdp'), { ...opts, previous: a3 });
    expect(versionOf(a4.answerSdp)).toBe(3);
    // Our own re-offer to put the peer on hold: 4, and the id never changes.
    const o5 = local.offer({ ...opts, direction: 'sendonly', previous: a4 });
    expect(o5.sessionVersion).toBe(4);
    expect(o5.sdp).toMatch(/^o=- 77 4 IN IP4 203\.0\.113\.9\r$/m);
    expect(local.version).toBe(4);
  });

  it('does not consume a version when negotiation fails', () => {
    const local = new LocalSdpSession({ sessionId: '77', firstVersion: 10 });
    local.answer(fixture('sipp-uac-pcmu.sdp'), opts);
    expect(() => local.answer(fixture('g729-only.sdp'), opts)).toThrow(SdpNegotiationError);
    expect(local.version).toBe(10);
    expect(versionOf(local.answer(fixture('hold-sendonly.sdp'), opts).answerSdp)).toBe(11);
  });

  it('makes a numeric random session id by default', () => {
    const a = new LocalSdpSession();
    expect(a.sessionId).toMatch(/^\d+$/);
    expect(new LocalSdpSession().sessionId).not.toBe(a.sessionId);
    expect(() => new LocalSdpSession({ sessionId: 'x1' })).toThrow(TypeError);
  });
});

describe('createOffer / parseAnswer (UAC)', () => {
  const base = { localAddress: '203.0.113.9', localPort: 40000, sessionId: '900', sessionVersion: 1 } as const;
  const sdp = (lines: string[]) => `${lines.join('\r\n')}\r\n`;

  it('offers PCMU, PCMA, Opus and telephone-event at both rates', () => {
    const offer = createOffer(base);
    const parsed = sdpTransform.parse(offer.sdp);
    expect(parsed.media).toHaveLength(1);
    expect(parsed.media[0]).toMatchObject({ type: 'audio', port: 40000, protocol: 'RTP/AVP', payloads: '0 8 111 101 110', ptime: 20, direction: 'sendrecv' });
    expect(offer.sdp).toContain('a=rtpmap:111 opus/48000/2\r\n');
    expect(offer.sdp).toContain('a=rtpmap:101 telephone-event/8000\r\n');
    expect(offer.sdp).toContain('a=rtpmap:110 telephone-event/48000\r\n');
    expect(offer.sdp).toContain('a=fmtp:101 0-15\r\n');
    expect(offer.telephoneEvents).toEqual([
      { payloadType: 101, clockRate: 8000 },
      { payloadType: 110, clockRate: 48000 },
    ]);
    expect(parseSdp(offer.sdp).audio?.rtp.map((r) => r.encoding)).toEqual(['PCMU', 'PCMA', 'opus', 'telephone-event', 'telephone-event']);
  });

  it('honours codecs, dtmf, comfortNoise, rtcpMux, direction, payload types and IPv6', () => {
    const offer = createOffer({ ...base, localAddress: '::1', codecs: ['PCMA'], dtmf: false, comfortNoise: true, rtcpMux: true, direction: 'sendonly' });
    expect(offer.sdp).toContain('c=IN IP6 ::1\r\n');
    expect(offer.sdp).toContain('m=audio 40000 RTP/AVP 8 13\r\n');
    expect(offer.sdp).toContain('a=sendonly\r\n');
    expect(offer.sdp).toContain('a=rtcp-mux\r\n');
    expect(offer.comfortNoisePayloadType).toBe(13);
    const custom = createOffer({ ...base, codecs: ['opus'], payloadTypes: { opus: 96, telephoneEvent48000: 97 } });
    expect(custom.sdp).toContain('m=audio 40000 RTP/AVP 96 97\r\n');
    expect(() => createOffer({ ...base, codecs: ['opus'], payloadTypes: { opus: 97, telephoneEvent48000: 97 } })).toThrow(RangeError);
    expect(() => createOffer({ ...base, codecs: [] })).toThrow(RangeError);
  });

  it('reads a SIPp-like answer (PCMU only)', () => {
    const offer = createOffer(base);
    const r = parseAnswer(
      sdp(['v=0', 'o=user1 53655765 2353687637 IN IP4 127.0.0.1', 's=-', 'c=IN IP4 127.0.0.1', 't=0 0', 'm=audio 6000 RTP/AVP 0', 'a=rtpmap:0 PCMU/8000']),
      offer,
    );
    expect(r.codec).toMatchObject({ name: 'PCMU', payloadType: 0, receivePayloadType: 0, clockRate: 8000 });
    expect(r.dtmfPayloadType).toBeUndefined();
    expect(r).toMatchObject({ direction: 'sendrecv', hold: false, remote: { address: '127.0.0.1', port: 6000, rtcpPort: 6001 }, rtcpMux: false });
  });

  it('reads a baresip-like answer (several codecs, telephone-event)', () => {
    const offer = createOffer(base);
    const r = parseAnswer(
      sdp([
        'v=0',
        'o=- 1234 5678 IN IP4 192.0.2.2',
        's=-',
        'c=IN IP4 192.0.2.2',
        't=0 0',
        'a=tool:baresip 1.0.0',
        'm=audio 10004 RTP/AVP 8 0 111 101',
        'a=rtpmap:8 PCMA/8000',
        'a=rtpmap:0 PCMU/8000',
        'a=rtpmap:111 opus/48000/2',
        'a=fmtp:111 stereo=1;sprop-stereo=1',
        'a=rtpmap:101 telephone-event/8000',
        'a=fmtp:101 0-15',
        'a=sendrecv',
        'a=rtcp-rsize',
        'a=ptime:20',
      ]),
      offer,
    );
    expect(r.codec.name).toBe('PCMA'); // the answer's first listed codec is the one in use
    expect(r.dtmf).toEqual({ payloadType: 101, receivePayloadType: 101, clockRate: 8000, events: '0-15' });
    expect(r.remotePtime).toBe(20);
  });

  it('round-trips through our own negotiate() for every option combination', () => {
    const codecSets = [['PCMU'], ['PCMA'], ['opus'], ['PCMU', 'PCMA', 'opus'], ['opus', 'PCMA']] as const;
    fc.assert(
      fc.property(
        fc.constantFrom(...codecSets),
        fc.boolean(),
        fc.boolean(),
        fc.boolean(),
        fc.constantFrom(...SDP_DIRECTIONS),
        fc.constantFrom(...SDP_DIRECTIONS),
        fc.constantFrom('198.51.100.1', '::1'),
        (codecs, dtmf, cn, mux, ourDir, theirWish, addr) => {
          const offer = createOffer({ ...base, localAddress: addr, codecs, dtmf, comfortNoise: cn, rtcpMux: mux, direction: ourDir });
          const ans = negotiate(offer.sdp, { localAddress: '192.0.2.99', localPort: 50000, sessionId: 1, sessionVersion: 1, comfortNoise: cn, direction: theirWish });
          expectValidAnswer(offer.sdp, ans.answerSdp, 0);
          const got = parseAnswer(ans.answerSdp, offer);
          expect(got.codec.name).toBe(codecs[0]);
          expect(got.codec.payloadType).toBe(ans.codec.payloadType);
          expect(got.dtmfPayloadType).toBe(dtmf ? ans.dtmfPayloadType : undefined);
          expect(got.dtmfPayloadType !== undefined).toBe(dtmf);
          expect(got.comfortNoisePayloadType).toBe(cn && codecs[0] !== 'opus' ? 13 : undefined);
          expect(got.rtcpMux).toBe(mux);
          expect(got.remote.port).toBe(50000);
          // Both ends agree on who sends: our direction is the reverse of theirs.
          expect(got.direction).toBe(reverseDirection(ans.direction));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('uses the answerer\'s payload type to send and ours to receive', () => {
    const offer = createOffer({ ...base, codecs: ['opus'] });
    const r = parseAnswer(
      sdp(['v=0', 'o=- 1 1 IN IP4 192.0.2.5', 's=-', 'c=IN IP4 192.0.2.5', 't=0 0', 'm=audio 7000 RTP/AVP 96 97', 'a=rtpmap:96 opus/48000/2', 'a=rtpmap:97 telephone-event/48000']),
      offer,
    );
    expect(r.codec).toMatchObject({ name: 'opus', payloadType: 96, receivePayloadType: 111 });
    expect(r.dtmf).toMatchObject({ payloadType: 97, receivePayloadType: 110 });
  });

  it('reports hold and direction from the answer, never more than we offered', () => {
    const head = ['v=0', 'o=- 1 1 IN IP4 192.0.2.5', 's=-', 'c=IN IP4 192.0.2.5', 't=0 0', 'm=audio 7000 RTP/AVP 0'];
    const offer = createOffer(base);
    expect(parseAnswer(sdp([...head, 'a=recvonly']), offer)).toMatchObject({ direction: 'sendonly', hold: false, remoteDirection: 'recvonly' });
    expect(parseAnswer(sdp([...head, 'a=inactive']), offer)).toMatchObject({ direction: 'inactive', hold: true });
    const held = createOffer({ ...base, direction: 'sendonly' });
    // A sloppy answer of sendrecv to our sendonly: we still only send.
    expect(parseAnswer(sdp([...head, 'a=sendrecv']), held).direction).toBe('sendonly');
  });

  it('reports codec and remote changes against the previous negotiation', () => {
    const offer = createOffer(base);
    const a = parseAnswer(sdp(['v=0', 'o=- 1 1 IN IP4 192.0.2.5', 's=-', 'c=IN IP4 192.0.2.5', 't=0 0', 'm=audio 7000 RTP/AVP 0']), offer);
    const b = parseAnswer(sdp(['v=0', 'o=- 1 2 IN IP4 192.0.2.5', 's=-', 'c=IN IP4 192.0.2.6', 't=0 0', 'm=audio 7000 RTP/AVP 8']), offer, a);
    expect(b).toMatchObject({ codecChanged: true, remoteChanged: true, holdChanged: false });
    // A re-offer of ours keeps the agreed payload type numbers.
    const opus = parseAnswer(sdp(['v=0', 'o=- 1 1 IN IP4 192.0.2.5', 's=-', 'c=IN IP4 192.0.2.5', 't=0 0', 'm=audio 7000 RTP/AVP 111', 'a=rtpmap:111 opus/48000/2']), createOffer({ ...base, payloadTypes: { opus: 100 }, codecs: ['opus'] }));
    expect(opus.codec.receivePayloadType).toBe(100);
    expect(createOffer({ ...base, previous: opus }).sdp).toContain('a=rtpmap:100 opus/48000/2\r\n');
  });

  it.each([
    ['a codec we did not offer', ['m=audio 7000 RTP/AVP 18', 'a=rtpmap:18 G729/8000'], 'SDP_NO_COMMON_CODEC'],
    ['a rejected stream', ['m=audio 0 RTP/AVP 0'], 'SDP_ANSWER_REJECTED'],
    ['two m-lines', ['m=audio 7000 RTP/AVP 0', 'm=video 0 RTP/AVP 31'], 'SDP_ANSWER_MISMATCH'],
    ['another media type', ['m=video 7000 RTP/AVP 31'], 'SDP_ANSWER_MISMATCH'],
    ['another transport', ['m=audio 7000 RTP/SAVP 0'], 'SDP_ANSWER_MISMATCH'],
    ['a multicast address', ['m=audio 7000 RTP/AVP 0', 'c=IN IP4 239.1.1.1/16'], 'SDP_INCOMPATIBLE_ADDRESS'],
  ])('rejects an answer with %s', (_name, mlines, code) => {
    const offer = createOffer(base);
    const text = sdp(['v=0', 'o=- 1 1 IN IP4 192.0.2.5', 's=-', 'c=IN IP4 192.0.2.5', 't=0 0', ...mlines]);
    let err: unknown;
    try {
      parseAnswer(text, offer);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SdpNegotiationError);
    expect((err as SdpNegotiationError).code).toBe(code);
    expect((err as SdpNegotiationError).reasonHeader()).toMatch(/^SIP ;cause=488 ;text="[^"]+"$/);
  });

  it('rejects a malformed answer with SdpParseError and a Reason for the BYE', () => {
    const offer = createOffer(base);
    let err: unknown;
    try {
      parseAnswer('HTTP/1.1 200 OK', offer);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SdpParseError);
    expect((err as SdpParseError).reasonHeader()).toBe('SIP ;cause=400 ;text="Malformed SDP"');
  });

  it('random answers never throw anything but SdpError', () => {
    const offer = createOffer(base);
    const valid = sdp(['v=0', 'o=- 1 1 IN IP4 192.0.2.5', 's=-', 'c=IN IP4 192.0.2.5', 't=0 0', 'm=audio 7000 RTP/AVP 0 8 101', 'a=rtpmap:101 telephone-event/8000']);
    fc.assert(
      fc.property(fc.nat({ max: valid.length }), fc.nat({ max: 10 }), fc.string({ maxLength: 8 }), (at, del, ins) => {
        try {
          const r: NegotiatedMedia = parseAnswer(valid.slice(0, at) + ins + valid.slice(at + del), offer);
          expect(['PCMU', 'PCMA']).toContain(r.codec.name);
        } catch (e) {
          if (!isSdpError(e)) throw e;
        }
      }),
      { numRuns: 1000 },
    );
  });
});
