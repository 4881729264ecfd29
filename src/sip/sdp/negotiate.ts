/**
 * SDP offer/answer (RFC 3264) for one audio stream: answer an offer (UAS, or a re-INVITE from
 * either side), build an offer (UAC, or a UAS answering an INVITE without SDP), check an answer.
 * Pure functions: the RTP port comes from media/'s PortAllocator, the versions from the caller
 * (or LocalSdpSession in session.ts), and nothing here touches a socket.
 *
 * Choosing the codec of an offer (RFC 3264 section 6.1 leaves the choice to the answerer):
 *
 *   1. Candidates: the offer's payload types, in the OFFER's order, that are PCMU/8000,
 *      PCMA/8000 or opus/48000/2 and allowed by `preferences`. RFC 3264 section 6.1 recommends
 *      keeping the offerer's order; `codecOrder: 'local'` sorts by `preferences` instead.
 *   2. In a re-offer, the codec in use wins while it is still offered (no needless media rebuild,
 *      RFC 3264 section 8.3.2); otherwise the choice starts over and `codecChanged` says so.
 *   3. Otherwise, when the offer has telephone-event at all, the first candidate whose clock rate
 *      has a telephone-event (RFC 4733 section 2.1: events share the audio stream's timestamp
 *      clock). baresip 1.0 offers opus/48000/2 with only telephone-event/8000: answering Opus
 *      would lose DTMF, which an IVR-style agent needs more than wideband audio, so PCMU/PCMA is
 *      taken. `preferCodecWithDtmf: false` turns this off.
 *   4. Otherwise the first candidate. None: SdpNegotiationError SDP_NO_COMMON_CODEC (488,
 *      Warning 305 "Incompatible media format").
 *
 * The answer lists only the chosen codec (plus telephone-event, plus CN when enabled), so the
 * peer cannot switch codecs mid-stream without a new offer: the media path has one decoder.
 */
import net from 'node:net';
import { randomBytes, randomInt } from 'node:crypto';
import { write as transformWrite, type MediaAttributes, type MediaDescription, type SessionDescription } from 'sdp-transform';
import { SUPPORTED_CODECS, codecInfo, type CodecInfo, type CodecName } from '../../media/codecs.ts';
import { COMFORT_NOISE_RTPMAP } from '../../media/comfort-noise.ts';
import { hideSrtpKeys, sameSrtpKeys, SRTP_MASTER_LENGTH, SRTP_SUITES, type SrtpKeys, type SrtpSuite } from '../../media/srtp.ts';
import { SdpNegotiationError } from './errors.ts';
import {
  audioUsability,
  isSavp,
  parseSdp,
  type AudioUsability,
  type ParsedSdp,
  type SdpCrypto,
  type SdpDirection,
  type SdpMedia,
  type SdpRtpFormat,
  type SdpTelephoneEvent,
} from './parse.ts';

/* ------------------------------------------------------------------------------------------ */
/* Directions (RFC 3264 section 6.1)                                                           */
/* ------------------------------------------------------------------------------------------ */

const SENDS: Record<SdpDirection, boolean> = { sendrecv: true, sendonly: true, recvonly: false, inactive: false };
const RECEIVES: Record<SdpDirection, boolean> = { sendrecv: true, sendonly: false, recvonly: true, inactive: false };

function directionFrom(send: boolean, recv: boolean): SdpDirection {
  return send ? (recv ? 'sendrecv' : 'sendonly') : recv ? 'recvonly' : 'inactive';
}

/** The same stream seen from the other end: sendonly <-> recvonly. */
export function reverseDirection(d: SdpDirection): SdpDirection {
  return directionFrom(RECEIVES[d], SENDS[d]);
}

/**
 * The direction to answer with (RFC 3264 section 6.1): we may send only if the offerer receives,
 * receive only if it sends, and never more than `wanted` (our own hold state). So sendonly is
 * answered recvonly, recvonly sendonly, inactive inactive, sendrecv with `wanted`.
 */
export function answerDirection(offered: SdpDirection, wanted: SdpDirection = 'sendrecv'): SdpDirection {
  return directionFrom(RECEIVES[offered] && SENDS[wanted], SENDS[offered] && RECEIVES[wanted]);
}

/**
 * The direction a stream really has from its writer's side: an RFC 2543 hold (c=0.0.0.0, RFC
 * 3264 section 8.4) says "do not send to me", whatever the attribute says.
 */
export function effectiveDirection(m: Pick<SdpMedia, 'direction' | 'legacyHold'>): SdpDirection {
  return m.legacyHold ? directionFrom(SENDS[m.direction], false) : m.direction;
}

/** A peer that does not want our media (sendonly, inactive, or c=0.0.0.0) has put us on hold. */
export function isHold(remoteDirection: SdpDirection): boolean {
  return !RECEIVES[remoteDirection];
}

/* ------------------------------------------------------------------------------------------ */
/* Results                                                                                      */
/* ------------------------------------------------------------------------------------------ */

export interface NegotiatedCodec {
  name: CodecName;
  /** Payload type to SEND with: the number in the peer's SDP (RFC 3264 section 6.1). */
  payloadType: number;
  /**
   * Payload type we RECEIVE with: the number in our SDP. Equal to payloadType when we answered
   * (the answer echoes the offer's numbers); a UAC's answerer may, rarely, differ.
   */
  receivePayloadType: number;
  clockRate: number;
  /** rtpmap channels: 1 for G.711, 2 for Opus (RFC 7587 section 7; we still send mono). */
  channels: number;
  /** The peer's fmtp for this codec as written (what it wants to receive), if any. */
  fmtp?: string;
  /** The same, split: keys lower-cased ("useinbandfec" -> "1", "maxplaybackrate" -> "16000"). */
  fmtpParams: Readonly<Record<string, string>>;
}

export interface NegotiatedDtmf {
  /** telephone-event PT to send with (the peer's). */
  payloadType: number;
  /** telephone-event PT we receive with (ours). */
  receivePayloadType: number;
  /** Always the codec's clock rate (RFC 4733 section 2.1). */
  clockRate: number;
  /** Events both sides accept, e.g. "0-15" (RFC 4733 section 2.4.1). */
  events: string;
}

/** Where to send RTP and RTCP; assignable to media/'s SdpRemote. */
export interface NegotiatedRemote {
  /** IP literal, or a domain name the bridge must resolve (RFC 4566 allows both). */
  address: string;
  port: number;
  /** a=rtcp port (RFC 3605), the RTP port with rtcp-mux, else RTP port + 1. */
  rtcpPort?: number;
  /** a=rtcp address when it names one other than the c= address. */
  rtcpAddress?: string;
}

/**
 * SDES-SRTP agreed for the stream (RFC 4568): the suite, the crypto tag of the accepted line,
 * our key (we send with it) and the peer's (we receive with it). Printing it (JSON, inspect)
 * shows no key.
 */
export interface NegotiatedSrtp extends SrtpKeys {
  tag: number;
}

/**
 * The trunk's SRTP policy for one negotiation (docs/sip-trunks.md `media_encryption`):
 * `none` plain RTP only; `allow` SRTP when offered, else plain; `require` SRTP only.
 * `sdesAllowed`: the offer came over TLS, so its keys were not readable on the way (RFC 4568
 * 8.3): SDES keys are neither taken nor given otherwise.
 */
export interface SrtpPolicy {
  mode: 'none' | 'allow' | 'require';
  sdesAllowed: boolean;
}

/** What the media path needs after an offer/answer exchange. */
export interface NegotiatedMedia {
  /** Index of the negotiated m-line (the others were rejected with port 0). */
  mediaIndex: number;
  codec: NegotiatedCodec;
  /** Shorthand for dtmf.payloadType: telephone-event at the codec's rate, when agreed. */
  dtmfPayloadType?: number;
  dtmf?: NegotiatedDtmf;
  /** 13 when CN/8000 was agreed (RFC 3389); the inbound path turns CN into silence. */
  comfortNoisePayloadType?: number;
  remote: NegotiatedRemote;
  /** RTCP on the RTP port (RFC 5761): both SDPs carry a=rtcp-mux. */
  rtcpMux: boolean;
  /** OUR direction: sendrecv, or what hold leaves (recvonly when the peer holds us). */
  direction: SdpDirection;
  /** The peer's direction as it takes effect (c=0.0.0.0 counted as not receiving). */
  remoteDirection: SdpDirection;
  /** The peer put the call on hold: it does not want our media (sendonly, inactive, 0.0.0.0). */
  hold: boolean;
  /** Packetization we send and asked for, in ms (20). */
  ptime: number;
  /** The peer's a=ptime / a=maxptime (what it prefers to receive), if given. */
  remotePtime?: number;
  remoteMaxptime?: number;
  /** Against `previous`: the codec or its payload type changed (rebuild the media path). */
  codecChanged: boolean;
  /** Against `previous`: the remote address or ports changed (call setRemote). */
  remoteChanged: boolean;
  /** Against `previous`: hold started or ended. */
  holdChanged: boolean;
  /** SDES-SRTP keys when the stream is RTP/SAVP; absent for plain RTP. */
  srtp?: NegotiatedSrtp;
  /** Against `previous`: SRTP started, ended, or a key or the suite changed (new contexts). */
  srtpChanged: boolean;
}

export interface NegotiatedAnswer extends NegotiatedMedia {
  /** The answer to send (CRLF line ends, RFC 4566 section 5). */
  answerSdp: string;
  sessionId: string;
  sessionVersion: number;
}

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/** Our side of the SDP: the c=/o= address, the RTP port, the o= id and version. */
export interface LocalSdpOptions {
  /** IP literal put in o= and c= (the address peers reach: public address behind NAT). */
  localAddress: string;
  /** Our RTP port (even, from PortAllocator); RTCP is the next one unless rtcp-mux. */
  localPort: number;
  /** o= sess-id (RFC 4566 section 5.2): digits, fixed for the dialog. See newSdpSessionId(). */
  sessionId: string | number;
  /** o= sess-version: incremented on every change of our SDP in the dialog (RFC 3264 section 8). */
  sessionVersion: number;
  /** a=ptime we send and ask for. Default 20 (media/ frames are 20 ms). */
  ptime?: number;
}

export interface NegotiateOptions extends LocalSdpOptions {
  /** Codecs we accept, and their order when codecOrder is 'local'. Default PCMU, PCMA, opus. */
  preferences?: readonly CodecName[];
  /** Whose order picks among common codecs: the offer's (default, RFC 3264 section 6.1) or ours. */
  codecOrder?: 'offer' | 'local';
  /** Accept telephone-event (RFC 4733) when offered at the codec's rate. Default true. */
  dtmf?: boolean;
  /** Prefer a codec whose clock rate has a telephone-event in the offer. Default true. */
  preferCodecWithDtmf?: boolean;
  /** Accept CN/8000 at PT 13 (RFC 3389) with G.711. Default false: peers then send silence. */
  comfortNoise?: boolean;
  /** Accept a=rtcp-mux when offered (RFC 5761). Default true. */
  rtcpMux?: boolean;
  /** Our own wish: 'sendrecv' (default); 'sendonly'/'inactive' while WE hold the call. */
  direction?: SdpDirection;
  /** The session being modified, for a re-offer: keeps its codec if still offered. */
  previous?: NegotiatedMedia;
  /** SRTP policy; default `{ mode: 'none' }`: RTP/SAVP lines are refused as today. */
  srtp?: SrtpPolicy;
}

export interface CreateOfferOptions extends LocalSdpOptions {
  /** Codecs to offer, in preference order. Default SUPPORTED_CODECS' order: PCMU, PCMA, opus. */
  codecs?: readonly CodecName[];
  /** Offer telephone-event at each offered clock rate (RFC 4733). Default true. */
  dtmf?: boolean;
  /** Offer CN/8000 (PT 13) with G.711. Default false. */
  comfortNoise?: boolean;
  /** Offer a=rtcp-mux (RFC 5761); RTCP stays on port + 1 unless the answer accepts. Default false. */
  rtcpMux?: boolean;
  /** 'sendrecv' (default), 'sendonly' to hold (RFC 3264 section 8.4), 'inactive'. */
  direction?: SdpDirection;
  /** Dynamic payload types to use; in a re-offer, pass `previous` instead to keep the agreed ones. */
  payloadTypes?: { opus?: number; telephoneEvent8000?: number; telephoneEvent48000?: number };
  /** The session being modified: its payload type numbers are reused (RFC 3264 section 8.3.2). */
  previous?: NegotiatedMedia;
  /**
   * Offer RTP/SAVP with SDES keys (RFC 4568): both suites with fresh keys, or, in a re-offer of
   * an SRTP session (`previous.srtp`), its suite and key again so the contexts continue.
   * Send such an offer only over TLS. Default false.
   */
  srtp?: boolean;
}

/** What we offered, kept by the UAC for parseAnswer. */
export interface SdpOffer {
  sdp: string;
  sessionId: string;
  sessionVersion: number;
  direction: SdpDirection;
  codecs: { name: CodecName; payloadType: number; clockRate: number; channels: number }[];
  telephoneEvents: { payloadType: number; clockRate: number }[];
  comfortNoisePayloadType?: number;
  rtcpMux: boolean;
  protocol: 'RTP/AVP' | 'RTP/SAVP';
  /** Our a=crypto lines (RTP/SAVP only). Secret: never logged. */
  crypto?: SdpCrypto[];
  ptime: number;
}

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                      */
/* ------------------------------------------------------------------------------------------ */

export const DEFAULT_CODEC_PREFERENCES: readonly CodecName[] = Object.freeze(SUPPORTED_CODECS.map((c) => c.name));
export const DEFAULT_PTIME = 20;
/** Usual dynamic numbers (Asterisk, FreeSWITCH, browsers use these). */
export const DEFAULT_TELEPHONE_EVENT_PT_8000 = 101;
export const DEFAULT_TELEPHONE_EVENT_PT_48000 = 110;
/** The DTMF events media/dtmf.ts speaks: 0-9, *, #, A-D (RFC 4733 section 3.2). */
const OUR_EVENTS_MAX = 15;

/** A random o= session id (RFC 4566 section 5.2 only asks for uniqueness): 12 digits or so. */
export function newSdpSessionId(): string {
  return String(randomInt(1, 2 ** 47));
}

/** The codec of ours an offered format is, if any: name, clock rate and channels must fit. */
function ourCodec(f: SdpRtpFormat, allowed: readonly CodecName[]): CodecInfo | undefined {
  if (f.encoding === undefined || f.clockRate === undefined) return undefined;
  const info = codecInfo(f.encoding);
  if (!info || !allowed.includes(info.name) || f.clockRate !== info.clockRate) return undefined;
  // RFC 7587 section 7: opus is always "/2" (absent tolerated); G.711 is mono.
  if (f.channels !== undefined && f.channels !== info.channels) return undefined;
  return info;
}

/** Splits an fmtp string ("a=1; b=2; flag") into lower-cased keys; values kept as written. */
export function parseFmtpParams(fmtp: string | undefined): Record<string, string> {
  const entries: [string, string][] = [];
  for (const part of (fmtp ?? '').split(';')) {
    const eq = part.indexOf('=');
    const key = (eq === -1 ? part : part.slice(0, eq)).trim().toLowerCase();
    if (key === '') continue;
    entries.push([key, eq === -1 ? '' : part.slice(eq + 1).trim()]);
  }
  // Object.fromEntries defines own properties: a "__proto__" key cannot touch the prototype.
  return Object.fromEntries(entries);
}

/**
 * The events of an RFC 4733 `events` list ("0-15,66,70-72") that we also handle (0-15), as a
 * list in the same syntax, or undefined when none.
 */
function commonEvents(offered: string): string | undefined {
  const ours = new Array<boolean>(OUR_EVENTS_MAX + 1).fill(false);
  for (const token of offered.split(',')) {
    const m = /^\s*(\d{1,3})(?:\s*-\s*(\d{1,3}))?\s*$/.exec(token);
    if (!m) continue;
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    for (let e = lo; e <= Math.min(hi, OUR_EVENTS_MAX); e++) ours[e] = true;
  }
  const ranges: string[] = [];
  for (let e = 0; e <= OUR_EVENTS_MAX; e++) {
    if (!ours[e]) continue;
    let end = e;
    while (end + 1 <= OUR_EVENTS_MAX && ours[end + 1]) end++;
    ranges.push(end === e ? `${e}` : `${e}-${end}`);
    e = end;
  }
  return ranges.length > 0 ? ranges.join(',') : undefined;
}

/** @throws TypeError / RangeError for a caller's mistake in our own parameters. */
function checkLocal(o: LocalSdpOptions): { ipVer: 4 | 6; sessionId: string; ptime: number } {
  const family = net.isIP(String(o.localAddress));
  if (family === 0) throw new TypeError(`localAddress must be an IP address, got ${String(o.localAddress)}`);
  if (!Number.isInteger(o.localPort) || o.localPort < 1 || o.localPort > 65535) throw new RangeError(`localPort must be 1-65535, got ${o.localPort}`);
  const sessionId = String(o.sessionId);
  if (!/^\d{1,20}$/.test(sessionId)) throw new TypeError(`sessionId must be a numeric string (RFC 4566 section 5.2), got ${sessionId}`);
  if (!Number.isSafeInteger(o.sessionVersion) || o.sessionVersion < 0) throw new RangeError(`sessionVersion must be a non-negative integer, got ${o.sessionVersion}`);
  const ptime = o.ptime ?? DEFAULT_PTIME;
  if (!Number.isInteger(ptime) || ptime < 10 || ptime > 120) throw new RangeError(`ptime must be 10-120 ms, got ${ptime}`);
  return { ipVer: family === 4 ? 4 : 6, sessionId, ptime };
}

function checkDirection(d: SdpDirection | undefined): SdpDirection {
  const dir = d ?? 'sendrecv';
  if (!(dir in SENDS)) throw new TypeError(`direction must be sendrecv, sendonly, recvonly or inactive, got ${String(d)}`);
  return dir;
}

function checkCodecs(list: readonly CodecName[] | undefined, what: string): readonly CodecName[] {
  const codecs = list ?? DEFAULT_CODEC_PREFERENCES;
  for (const c of codecs) if (!codecInfo(c)) throw new RangeError(`${what}: unsupported codec ${String(c)}`);
  return codecs;
}

/** Our SDP around the media descriptions (RFC 4566 section 5 order; sdp-transform writes it). */
function writeSdp(local: { ipVer: 4 | 6; sessionId: string }, o: LocalSdpOptions, timing: { start: string; stop: string } | undefined, media: MediaDescription[]): string {
  const description: SessionDescription = {
    version: 0,
    origin: { username: '-', sessionId: local.sessionId, sessionVersion: o.sessionVersion, netType: 'IN', ipVer: local.ipVer, address: o.localAddress },
    name: '-',
    connection: { version: local.ipVer, ip: o.localAddress },
    timing: { start: 0, stop: 0 },
    media,
  };
  const text = transformWrite(description);
  // RFC 3264 section 6: the answer's t= equals the offer's. Written here as text, since the
  // writer would format 64-bit NTP times through Number.
  return timing ? text.replace(/^t=.*$/m, `t=${timing.start} ${timing.stop}`) : text;
}

type RtpMap = MediaAttributes['rtp'][number];
type Fmtp = MediaAttributes['fmtp'][number];

function rtpmapOf(name: string, payloadType: number, clockRate: number, channels?: number): RtpMap {
  const map: RtpMap = { payload: payloadType, codec: name, rate: clockRate };
  if (channels !== undefined && channels !== 1) map.encoding = channels;
  return map;
}

function sameRemote(a: NegotiatedRemote, b: NegotiatedRemote): boolean {
  return a.address === b.address && a.port === b.port && a.rtcpPort === b.rtcpPort && a.rtcpAddress === b.rtcpAddress;
}

function remoteOf(m: SdpMedia, rtcpMux: boolean): NegotiatedRemote {
  const remote: NegotiatedRemote = { address: m.connection?.address ?? '', port: m.port };
  const rtcpPort = rtcpMux ? m.port : (m.rtcpPort ?? m.port + 1);
  if (rtcpPort <= 65535) remote.rtcpPort = rtcpPort;
  if (!rtcpMux && m.rtcpAddress !== undefined && m.rtcpAddress !== remote.address) remote.rtcpAddress = m.rtcpAddress;
  return remote;
}

function changes(
  previous: NegotiatedMedia | undefined,
  now: Pick<NegotiatedMedia, 'codec' | 'remote' | 'hold'> & { srtp: NegotiatedSrtp | undefined },
): Pick<NegotiatedMedia, 'codecChanged' | 'remoteChanged' | 'holdChanged' | 'srtpChanged'> {
  if (!previous) return { codecChanged: false, remoteChanged: false, holdChanged: false, srtpChanged: false };
  return {
    codecChanged:
      previous.codec.name !== now.codec.name ||
      previous.codec.payloadType !== now.codec.payloadType ||
      previous.codec.receivePayloadType !== now.codec.receivePayloadType,
    remoteChanged: !sameRemote(previous.remote, now.remote),
    holdChanged: previous.hold !== now.hold,
    srtpChanged: !sameSrtpKeys(previous.srtp, now.srtp),
  };
}

function listEncodings(m: SdpMedia): string {
  const names = m.rtp.map((f) => (f.encoding ? `${f.encoding}/${f.clockRate}` : `PT ${f.payloadType}`));
  return names.length > 0 ? names.join(', ') : 'nothing';
}

/** The SdpNegotiationError for an offer where no stream was taken, by the most telling cause. */
function rejection(problems: Map<Problem, SdpMedia>): SdpNegotiationError {
  const codec = problems.get('codec');
  if (codec) {
    return new SdpNegotiationError('SDP_NO_COMMON_CODEC', `no common codec: offered ${listEncodings(codec)}; we accept PCMU/8000, PCMA/8000, opus/48000/2`);
  }
  const crypto = problems.get('crypto');
  if (crypto) {
    return new SdpNegotiationError('SDP_NO_CRYPTO', `${crypto.protocol} with ${crypto.cryptoLines} a=crypto line(s), none usable; we take ${SRTP_SUITES.join(', ')} with one inline key, no MKI, no session parameters`);
  }
  if (problems.has('sdes-insecure')) return new SdpNegotiationError('SDP_SDES_NEEDS_TLS', 'SDES keys (RTP/SAVP with a=crypto) are taken only over TLS (RFC 4568 section 8.3)');
  if (problems.has('srtp-required')) return new SdpNegotiationError('SDP_SRTP_REQUIRED', 'the trunk requires SRTP (media_encryption require); the offer has plain RTP only');
  const transport = problems.get('transport');
  if (transport) return new SdpNegotiationError('SDP_INCOMPATIBLE_TRANSPORT', `audio offered only over ${transport.protocol}; we accept RTP/AVP and RTP/AVPF`);
  if (problems.has('address')) return new SdpNegotiationError('SDP_INCOMPATIBLE_ADDRESS', 'audio offered only on multicast addresses or port ranges; we accept one unicast port');
  return new SdpNegotiationError('SDP_NO_AUDIO', 'the offer has no active audio stream');
}

/* ------------------------------------------------------------------------------------------ */
/* Answering an offer                                                                           */
/* ------------------------------------------------------------------------------------------ */

/** Why an m-line was not taken: its usability, no common codec, or the SRTP policy. */
type Problem = AudioUsability | 'codec' | 'crypto' | 'sdes-insecure' | 'srtp-required';

/**
 * The SRTP policy's verdict on an m-line that is otherwise usable audio: fine, or the problem.
 * SAVP needs sdesAllowed and a usable a=crypto line; plain RTP is refused by `require`.
 */
function srtpProblem(m: SdpMedia, policy: SrtpPolicy): Problem | undefined {
  if (isSavp(m)) {
    if (policy.mode === 'none') return 'transport';
    if (!policy.sdesAllowed) return 'sdes-insecure';
    if (m.crypto.length === 0) return 'crypto';
    return undefined;
  }
  return policy.mode === 'require' ? 'srtp-required' : undefined;
}

/** A fresh master key || salt (RFC 4568 6.1: from a cryptographically strong source). */
function newMasterKey(): Buffer {
  return randomBytes(SRTP_MASTER_LENGTH);
}

/**
 * The SRTP of our answer to an SAVP m-line: the first line of the offer with a suite we take
 * (the offerer's preference, RFC 4568 7.1.1), and our key. A re-offer that keeps the suite and
 * the peer's key keeps our key too (the contexts continue, ROCs included); any change gets a
 * fresh key of ours, since a new context must never restart a key's ROC at 0.
 */
function answerSrtp(m: SdpMedia, previous: NegotiatedSrtp | undefined): NegotiatedSrtp {
  const line = m.crypto[0] as SdpCrypto;
  const keep = previous !== undefined && previous.suite === line.suite && Buffer.compare(previous.receiveKey, line.key) === 0;
  return hideSrtpKeys({ suite: line.suite, tag: line.tag, sendKey: keep ? previous.sendKey : newMasterKey(), receiveKey: line.key });
}

function cryptoAttribute(tag: number, suite: SrtpSuite, key: Uint8Array): { id: number; suite: string; config: string } {
  return { id: tag, suite, config: `inline:${Buffer.from(key).toString('base64')}` };
}

interface CodecChoice {
  format: SdpRtpFormat;
  info: CodecInfo;
}

function pickCodec(m: SdpMedia, o: NegotiateOptions, allowed: readonly CodecName[], dtmf: boolean): CodecChoice | undefined {
  const candidates: CodecChoice[] = [];
  for (const format of m.rtp) {
    const info = ourCodec(format, allowed);
    if (info) candidates.push({ format, info });
  }
  if (o.codecOrder === 'local') candidates.sort((a, b) => allowed.indexOf(a.info.name) - allowed.indexOf(b.info.name));
  const previous = o.previous?.codec;
  if (previous) {
    const same = candidates.find((c) => c.info.name === previous.name);
    if (same) return same;
  }
  if (dtmf && (o.preferCodecWithDtmf ?? true) && m.telephoneEvents.length > 0) {
    const withDtmf = candidates.find((c) => m.telephoneEvents.some((te) => te.clockRate === c.info.clockRate && commonEvents(te.events)));
    if (withDtmf) return withDtmf;
  }
  return candidates[0];
}

/**
 * Answers an offer (RFC 3264 section 6): one audio stream accepted with one codec, every other
 * m-line rejected with port 0, in the offer's order.
 *
 * @param offer the offer's text, or parseOffer()'s result.
 * @throws SdpParseError when the offer text is malformed (answer 400).
 * @throws SdpNegotiationError when nothing in the offer is acceptable (answer 488 with
 *   `warningHeader()`; in a re-INVITE the session continues as it was, RFC 3261 14.2).
 * @throws TypeError / RangeError for invalid options (our own bug, not the peer's).
 */
export function negotiate(offer: string | ParsedSdp, options: NegotiateOptions): NegotiatedAnswer {
  const local = checkLocal(options);
  const wanted = checkDirection(options.direction);
  const allowed = checkCodecs(options.preferences, 'preferences');
  const parsed = typeof offer === 'string' ? parseSdp(offer) : offer;
  const dtmfWanted = options.dtmf ?? true;

  const policy: SrtpPolicy = options.srtp ?? { mode: 'none', sdesAllowed: false };
  let chosen: (CodecChoice & { media: SdpMedia }) | undefined;
  const problems = new Map<Problem, SdpMedia>();
  for (const m of parsed.media) {
    const usability = audioUsability(m, { srtp: policy.mode !== 'none' });
    if (usability !== 'usable') {
      if (!problems.has(usability)) problems.set(usability, m);
      continue;
    }
    const srtpIssue = srtpProblem(m, policy);
    if (srtpIssue !== undefined) {
      if (!problems.has(srtpIssue)) problems.set(srtpIssue, m);
      continue;
    }
    const pick = pickCodec(m, options, allowed, dtmfWanted);
    if (pick) {
      chosen = { ...pick, media: m };
      break;
    }
    if (!problems.has('codec')) problems.set('codec', m);
  }
  if (!chosen) throw rejection(problems);

  const { media: m, format, info } = chosen;
  const te: SdpTelephoneEvent | undefined = dtmfWanted ? m.telephoneEvents.find((t) => t.clockRate === info.clockRate && commonEvents(t.events)) : undefined;
  const events = te ? commonEvents(te.events) : undefined;
  const cn =
    options.comfortNoise && info.clockRate === COMFORT_NOISE_RTPMAP.clockRate
      ? m.rtp.find((f) => f.payloadType === COMFORT_NOISE_RTPMAP.payloadType && f.encoding?.toUpperCase() === 'CN' && f.clockRate === COMFORT_NOISE_RTPMAP.clockRate)
      : undefined;
  const rtcpMux = m.rtcpMux && (options.rtcpMux ?? true);
  const remoteDirection = effectiveDirection(m);
  const direction = answerDirection(remoteDirection, wanted);
  const srtp = isSavp(m) ? answerSrtp(m, options.previous?.srtp) : undefined;

  // The answer's m-lines: ours for the chosen stream, port 0 for every other (RFC 3264 section 6).
  const answerMedia: MediaDescription[] = parsed.media.map((offered) => {
    if (offered !== m) {
      // Rejected: port 0, same media type and transport, formats of the offer (at least one).
      return { type: offered.type, port: 0, protocol: offered.protocol, payloads: offered.formats.join(' ') || '0', rtp: [], fmtp: [] };
    }
    const payloadTypes = [format.payloadType];
    const rtp: RtpMap[] = [rtpmapOf(info.name, format.payloadType, info.clockRate, info.channels)];
    const fmtp: Fmtp[] = [];
    // Our own fmtp: what WE want to receive (RFC 7587 section 7.1 for Opus).
    if (info.fmtp) fmtp.push({ payload: format.payloadType, config: info.fmtp });
    if (te && events) {
      payloadTypes.push(te.payloadType);
      rtp.push(rtpmapOf('telephone-event', te.payloadType, te.clockRate));
      fmtp.push({ payload: te.payloadType, config: events });
    }
    if (cn) {
      payloadTypes.push(cn.payloadType);
      rtp.push(rtpmapOf(COMFORT_NOISE_RTPMAP.name, cn.payloadType, COMFORT_NOISE_RTPMAP.clockRate));
    }
    const answer: MediaDescription = {
      type: offered.type,
      port: options.localPort,
      protocol: offered.protocol,
      payloads: payloadTypes.join(' '),
      rtp,
      fmtp,
      ptime: local.ptime,
      direction,
    };
    if (rtcpMux) answer.rtcpMux = 'rtcp-mux';
    if (srtp) answer.crypto = [cryptoAttribute(srtp.tag, srtp.suite, srtp.sendKey)];
    return answer;
  });

  const codec: NegotiatedCodec = {
    name: info.name,
    payloadType: format.payloadType,
    receivePayloadType: format.payloadType,
    clockRate: info.clockRate,
    channels: info.channels,
    fmtpParams: parseFmtpParams(format.fmtp),
  };
  if (format.fmtp !== undefined) codec.fmtp = format.fmtp;
  const remote = remoteOf(m, rtcpMux);
  const hold = isHold(remoteDirection);
  const result: NegotiatedAnswer = {
    mediaIndex: m.index,
    codec,
    remote,
    rtcpMux,
    direction,
    remoteDirection,
    hold,
    ptime: local.ptime,
    ...changes(options.previous, { codec, remote, hold, srtp }),
    answerSdp: writeSdp(local, options, parsed.timing, answerMedia),
    sessionId: local.sessionId,
    sessionVersion: options.sessionVersion,
  };
  if (te && events) {
    result.dtmf = { payloadType: te.payloadType, receivePayloadType: te.payloadType, clockRate: te.clockRate, events };
    result.dtmfPayloadType = te.payloadType;
  }
  if (srtp) result.srtp = srtp;
  if (cn) result.comfortNoisePayloadType = cn.payloadType;
  if (m.ptime !== undefined) result.remotePtime = m.ptime;
  if (m.maxptime !== undefined) result.remoteMaxptime = m.maxptime;
  return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Offering (UAC), and checking the answer                                                      */
/* ------------------------------------------------------------------------------------------ */

/**
 * Builds an offer with one audio stream (RFC 3264 section 5): the codecs in preference order,
 * telephone-event at each of their clock rates (RFC 4733 section 2.1), a=ptime, the direction.
 * @throws TypeError / RangeError for invalid options.
 */
export function createOffer(options: CreateOfferOptions): SdpOffer {
  const local = checkLocal(options);
  const direction = checkDirection(options.direction);
  const names = checkCodecs(options.codecs, 'codecs');
  if (names.length === 0) throw new RangeError('codecs: offer at least one codec');
  const previous = options.previous;
  // Keep the numbers already agreed in this session (RFC 3264 section 8.3.2).
  const opusPt =
    (previous?.codec.name === 'opus' ? previous.codec.receivePayloadType : undefined) ??
    options.payloadTypes?.opus ??
    (codecInfo('opus') as CodecInfo).defaultPayloadType;
  const tePt = (rate: number): number =>
    (previous?.dtmf?.clockRate === rate ? previous.dtmf.receivePayloadType : undefined) ??
    (rate === 8000 ? options.payloadTypes?.telephoneEvent8000 : options.payloadTypes?.telephoneEvent48000) ??
    (rate === 8000 ? DEFAULT_TELEPHONE_EVENT_PT_8000 : DEFAULT_TELEPHONE_EVENT_PT_48000);

  const codecs: SdpOffer['codecs'] = [];
  const rtp: RtpMap[] = [];
  const fmtp: Fmtp[] = [];
  const used = new Set<number>();
  const claim = (pt: number, what: string): number => {
    if (!Number.isInteger(pt) || pt < 0 || pt > 127) throw new RangeError(`${what}: payload type must be 0-127, got ${pt}`);
    if (used.has(pt)) throw new RangeError(`${what}: payload type ${pt} is used twice`);
    used.add(pt);
    return pt;
  };
  for (const name of new Set(names)) {
    const info = codecInfo(name) as CodecInfo;
    const pt = claim(info.dynamic ? opusPt : info.defaultPayloadType, name);
    codecs.push({ name: info.name, payloadType: pt, clockRate: info.clockRate, channels: info.channels });
    rtp.push(rtpmapOf(info.name, pt, info.clockRate, info.channels));
    if (info.fmtp) fmtp.push({ payload: pt, config: info.fmtp });
  }
  const telephoneEvents: SdpOffer['telephoneEvents'] = [];
  if (options.dtmf ?? true) {
    for (const rate of new Set(codecs.map((c) => c.clockRate))) {
      const pt = claim(tePt(rate), `telephone-event/${rate}`);
      telephoneEvents.push({ payloadType: pt, clockRate: rate });
      rtp.push(rtpmapOf('telephone-event', pt, rate));
      fmtp.push({ payload: pt, config: `0-${OUR_EVENTS_MAX}` });
    }
  }
  let comfortNoisePayloadType: number | undefined;
  if (options.comfortNoise && codecs.some((c) => c.clockRate === COMFORT_NOISE_RTPMAP.clockRate)) {
    comfortNoisePayloadType = claim(COMFORT_NOISE_RTPMAP.payloadType, 'CN');
    rtp.push(rtpmapOf(COMFORT_NOISE_RTPMAP.name, comfortNoisePayloadType, COMFORT_NOISE_RTPMAP.clockRate));
  }
  const rtcpMux = options.rtcpMux ?? false;
  const protocol = options.srtp ? 'RTP/SAVP' : 'RTP/AVP';
  let crypto: SdpCrypto[] | undefined;
  if (options.srtp) {
    const kept = previous?.srtp;
    // A re-offer keeps the agreed line (same key: the answerer may keep its contexts); a first
    // offer lists both suites, each with a key of its own, _80 first (RFC 4568 6.2.1: stronger).
    crypto = kept ? [{ tag: kept.tag, suite: kept.suite, key: kept.sendKey }] : SRTP_SUITES.map((suite, i) => ({ tag: i + 1, suite, key: newMasterKey() }));
  }
  const media: MediaDescription = {
    type: 'audio',
    port: options.localPort,
    protocol,
    payloads: [...codecs.map((c) => c.payloadType), ...telephoneEvents.map((t) => t.payloadType), ...(comfortNoisePayloadType === undefined ? [] : [comfortNoisePayloadType])].join(' '),
    rtp,
    fmtp,
    ptime: local.ptime,
    direction,
  };
  if (rtcpMux) media.rtcpMux = 'rtcp-mux';
  if (crypto) media.crypto = crypto.map((c) => cryptoAttribute(c.tag, c.suite, c.key));
  const offer: SdpOffer = {
    sdp: writeSdp(local, options, undefined, [media]),
    sessionId: local.sessionId,
    sessionVersion: options.sessionVersion,
    direction,
    codecs,
    telephoneEvents,
    rtcpMux,
    protocol,
    ptime: local.ptime,
  };
  if (crypto) Object.defineProperty(offer, 'crypto', { value: crypto, enumerable: false }); // kept out of logs
  if (comfortNoisePayloadType !== undefined) offer.comfortNoisePayloadType = comfortNoisePayloadType;
  return offer;
}

/**
 * Checks an answer against our offer (RFC 3264 sections 6 and 6.1) and returns what was agreed:
 * the first codec of the answer's m-line that we offered; telephone-event at its rate if both
 * listed it. The answer's direction is honoured even where RFC 3264 would forbid it (an answer
 * sendrecv to our sendonly): we never do more than we offered.
 *
 * @param previous the session being modified, when this answers a re-offer of ours.
 * @throws SdpParseError when the answer is malformed (ACK, then BYE with `reasonHeader()`).
 * @throws SdpNegotiationError SDP_ANSWER_MISMATCH (wrong number of m-lines, media type or
 *   transport), SDP_ANSWER_REJECTED (port 0), SDP_INCOMPATIBLE_ADDRESS (multicast), or
 *   SDP_NO_COMMON_CODEC (no codec we offered): ACK, then BYE with `reasonHeader()`.
 */
export function parseAnswer(answer: string | ParsedSdp, offer: SdpOffer, previous?: NegotiatedMedia): NegotiatedMedia {
  const parsed = typeof answer === 'string' ? parseSdp(answer) : answer;
  if (parsed.media.length !== 1) {
    throw new SdpNegotiationError('SDP_ANSWER_MISMATCH', `the answer has ${parsed.media.length} m-lines, the offer had 1 (RFC 3264 section 6)`);
  }
  const m = parsed.media[0] as SdpMedia;
  if (m.type.toLowerCase() !== 'audio') throw new SdpNegotiationError('SDP_ANSWER_MISMATCH', `the answer's m-line is ${m.type}, the offer's was audio`);
  if (m.port === 0) throw new SdpNegotiationError('SDP_ANSWER_REJECTED', 'the answer rejected the audio stream (port 0)');
  if (m.protocol.toUpperCase() !== offer.protocol) throw new SdpNegotiationError('SDP_ANSWER_MISMATCH', `the answer's transport is ${m.protocol}, the offer's was ${offer.protocol}`);
  if (audioUsability(m, { srtp: offer.protocol === 'RTP/SAVP' }) !== 'usable') throw new SdpNegotiationError('SDP_INCOMPATIBLE_ADDRESS', 'the answer gives a multicast address or a port range');
  let srtp: NegotiatedSrtp | undefined;
  if (offer.protocol === 'RTP/SAVP') {
    // RFC 4568 7.1.2: the answer has one a=crypto line, with the tag and suite of one of ours.
    const ours = offer.crypto ?? [];
    const line = m.crypto.find((c) => ours.some((o) => o.tag === c.tag && o.suite === c.suite));
    const mine = line && ours.find((o) => o.tag === line.tag);
    if (!line || !mine) throw new SdpNegotiationError('SDP_NO_CRYPTO', `the answer accepted none of our a=crypto lines (it has ${m.cryptoLines})`);
    srtp = hideSrtpKeys({ suite: line.suite, tag: line.tag, sendKey: mine.key, receiveKey: line.key });
  }

  const offeredNames = offer.codecs.map((c) => c.name);
  let format: SdpRtpFormat | undefined;
  let info: CodecInfo | undefined;
  for (const f of m.rtp) {
    info = ourCodec(f, offeredNames);
    if (info) {
      format = f;
      break;
    }
  }
  if (!format || !info) {
    throw new SdpNegotiationError('SDP_NO_COMMON_CODEC', `the answer picked no codec we offered: it lists ${listEncodings(m)}`);
  }
  const codecInfoNow = info;
  const ours = offer.codecs.find((c) => c.name === codecInfoNow.name) as SdpOffer['codecs'][number];
  const codec: NegotiatedCodec = {
    name: info.name,
    payloadType: format.payloadType,
    receivePayloadType: ours.payloadType,
    clockRate: info.clockRate,
    channels: info.channels,
    fmtpParams: parseFmtpParams(format.fmtp),
  };
  if (format.fmtp !== undefined) codec.fmtp = format.fmtp;

  const ourTe = offer.telephoneEvents.find((t) => t.clockRate === codecInfoNow.clockRate);
  const te = ourTe ? m.telephoneEvents.find((t) => t.clockRate === codecInfoNow.clockRate && commonEvents(t.events)) : undefined;
  const cnAgreed =
    offer.comfortNoisePayloadType !== undefined &&
    info.clockRate === COMFORT_NOISE_RTPMAP.clockRate &&
    m.rtp.some((f) => f.payloadType === COMFORT_NOISE_RTPMAP.payloadType && f.encoding?.toUpperCase() === 'CN' && f.clockRate === COMFORT_NOISE_RTPMAP.clockRate);

  const rtcpMux = offer.rtcpMux && m.rtcpMux;
  const remoteDirection = effectiveDirection(m);
  // What we may do: no more than we offered, and only what the answerer's direction allows.
  const direction = directionFrom(SENDS[offer.direction] && RECEIVES[remoteDirection], RECEIVES[offer.direction] && SENDS[remoteDirection]);
  const remote = remoteOf(m, rtcpMux);
  const hold = isHold(remoteDirection);
  const result: NegotiatedMedia = {
    mediaIndex: 0,
    codec,
    remote,
    rtcpMux,
    direction,
    remoteDirection,
    hold,
    ptime: offer.ptime,
    ...changes(previous, { codec, remote, hold, srtp }),
  };
  if (srtp) result.srtp = srtp;
  if (te && ourTe) {
    result.dtmf = { payloadType: te.payloadType, receivePayloadType: ourTe.payloadType, clockRate: te.clockRate, events: commonEvents(te.events) as string };
    result.dtmfPayloadType = te.payloadType;
  }
  if (cnAgreed) result.comfortNoisePayloadType = COMFORT_NOISE_RTPMAP.payloadType;
  if (m.ptime !== undefined) result.remotePtime = m.ptime;
  if (m.maxptime !== undefined) result.remoteMaxptime = m.maxptime;
  return result;
}
