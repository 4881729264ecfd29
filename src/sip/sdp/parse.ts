/**
 * Reading a session description (RFC 4566) into what offer/answer (RFC 3264) needs.
 *
 * Two passes over the same lines:
 *
 *   1. a strict scanner of the structure that decides "is this SDP at all?": v= first, one o=,
 *      every m= and c= line by the RFC 4566 grammar, an address for every active stream. A body
 *      that fails it is an SdpParseError (the UAS answers 400). sdp-transform alone cannot decide
 *      this: it skips every line its grammar does not match, so `m=audio x` or a body of random
 *      text parses "fine" into an empty description.
 *   2. sdp-transform for the attributes (rtpmap, fmtp, ptime, maxptime, direction, rtcp,
 *      rtcp-mux), read defensively: its values are coerced to numbers only when they look like
 *      numbers, so every one is checked before use. An attribute we cannot read is ignored, as
 *      RFC 4566 section 5.13 asks of attributes a parser does not understand.
 *
 * Both passes split lines on CRLF, CR or LF (RFC 4566 section 5 asks for CRLF; section 5 also
 * asks parsers to accept a bare LF) and both start a new media description at each `m=` line, so
 * the scanner's media index i is sdp-transform's `media[i]`.
 *
 * What is deliberately lenient (real peers send it): blank lines; a missing `s=` or `t=`; lines
 * of a type letter we do not know (RFC 4566 says to ignore the whole description; we ignore the
 * line, as most stacks do); `sess-id` and `sess-version` of any token (they are compared as
 * strings, never as numbers, so 64-bit NTP values survive); rtpmap for a static payload type
 * overriding the RFC 3551 table (baresip has been seen mapping telephone-event to PT 10).
 */
import net from 'node:net';
import { parse as transformParse, type MediaDescription, type SessionDescription } from 'sdp-transform';
import { isSrtpSuite, SRTP_MASTER_LENGTH, type SrtpSuite } from '../../media/srtp.ts';
import { SdpParseError } from './errors.ts';

/** Stream direction attribute (RFC 4566 section 6, RFC 3264 section 5.1), from the writer's side. */
export type SdpDirection = 'sendrecv' | 'sendonly' | 'recvonly' | 'inactive';

export const SDP_DIRECTIONS: readonly SdpDirection[] = ['sendrecv', 'sendonly', 'recvonly', 'inactive'];

export type SdpAddressType = 'IP4' | 'IP6';

/** A c= line (RFC 4566 section 5.7). */
export interface SdpConnection {
  addressType: SdpAddressType;
  /** The address without any /ttl or /count suffix: an IP literal or a domain name. */
  address: string;
  /** A multicast group (IPv4 224/4, IPv6 ff00::/8) or a /ttl suffix: we only do unicast. */
  multicast: boolean;
}

/** The o= line (RFC 4566 section 5.2). Ids are kept as written: they may exceed 2^53. */
export interface SdpOriginLine {
  username: string;
  sessionId: string;
  sessionVersion: string;
  addressType: SdpAddressType;
  address: string;
}

/** One payload type of an RTP m-line with what rtpmap/fmtp (or RFC 3551 table 4) say of it. */
export interface SdpRtpFormat {
  payloadType: number;
  /** Encoding name as written ("PCMU", "opus", "telephone-event"); undefined when unknown. */
  encoding?: string;
  clockRate?: number;
  /** Channel count from rtpmap (the optional third part), when given. */
  channels?: number;
  /** The fmtp parameter string for this payload type, as written. */
  fmtp?: string;
  /** True when there was no rtpmap and the RFC 3551 static table supplied encoding and rate. */
  fromStaticTable: boolean;
}

/** A telephone-event payload (RFC 4733 section 7.1.1). */
export interface SdpTelephoneEvent {
  payloadType: number;
  clockRate: number;
  /** The events list from fmtp ("0-15", "0-16"); "0-15" when absent (RFC 4733 section 2.4.1). */
  events: string;
}

/**
 * An a=crypto line we can use (RFC 4568 section 9.1): a suite of ours, one `inline:` key of 30
 * bytes (master key || salt), no MKI, no session parameters. Other lines are skipped.
 */
export interface SdpCrypto {
  tag: number;
  suite: SrtpSuite;
  /** Master key || master salt. Secret: never logged. */
  key: Uint8Array;
}

/** One m= section (RFC 4566 section 5.14) with its effective attributes. */
export interface SdpMedia {
  /** Position among the m-lines, from 0; the answer keeps every position (RFC 3264 section 6). */
  index: number;
  /** Media type as written: "audio", "video", "image", "application". */
  type: string;
  /** 0 when the offerer disabled the stream (RFC 3264 section 5.1 / 8.2). */
  port: number;
  /** The /<number of ports> of the m-line; 1 when absent. */
  portCount: number;
  /** Transport protocol as written: "RTP/AVP", "RTP/SAVP", "udptl", ... */
  protocol: string;
  /** The fmt list as written. For RTP protocols each one is a payload type 0-127. */
  formats: string[];
  /** Media-level c=, else the session-level one (RFC 4566 section 5.7). */
  connection?: SdpConnection;
  /** Media-level direction attribute, else session-level, else sendrecv (RFC 3264 section 5.1). */
  direction: SdpDirection;
  /** The RTP payload types in m-line order (empty for other protocols). */
  rtp: SdpRtpFormat[];
  /** a=ptime in ms (media level, or session level as some peers write it). */
  ptime?: number;
  /** a=maxptime in ms. */
  maxptime?: number;
  /** Explicit RTCP port of a=rtcp (RFC 3605); RTP port + 1 otherwise. */
  rtcpPort?: number;
  /** Address of a=rtcp when it names one. */
  rtcpAddress?: string;
  /** a=rtcp-mux present (RFC 5761). */
  rtcpMux: boolean;
  /** Every telephone-event payload type, in m-line order. */
  telephoneEvents: SdpTelephoneEvent[];
  /** c= is 0.0.0.0 (RFC 2543 hold, RFC 3264 section 8.4) or the IPv6 unspecified address. */
  legacyHold: boolean;
  /** The a=crypto lines we can use, in SDP order (RFC 4568: the offerer's preference). */
  crypto: SdpCrypto[];
  /** How many a=crypto lines there were, usable or not (for the 488's text). */
  cryptoLines: number;
}

/** A parsed session description. */
export interface ParsedSdp {
  origin: SdpOriginLine;
  /** s= text; "-" is customary, "" when the line is missing. */
  sessionName: string;
  /** The first t= line's start and stop as written ("0", "0"); an answer copies them (RFC 3264 section 6). */
  timing: { start: string; stop: string };
  /** Session-level c=, if any. */
  connection?: SdpConnection;
  /** Every m-line in order. */
  media: SdpMedia[];
  /**
   * The first audio stream we could use: type audio, port not 0, RTP/AVP or RTP/AVPF, one port,
   * unicast. Undefined when there is none. The brief summary of the offer for the UAS.
   */
  audio?: SdpMedia;
}

/** Why an m-line is or is not an audio stream we can take. */
export type AudioUsability = 'usable' | 'not-audio' | 'disabled' | 'transport' | 'address';

/** Transports we answer: plain RTP (RFC 3551) and RTP with feedback (RFC 4585; we send none). */
const RTP_PROTOCOLS = new Set(['RTP/AVP', 'RTP/AVPF']);
/** SDES-SRTP (RFC 3711 7.1); SAVPF is taken as SAVP, as AVPF is as AVP (we send no feedback). */
const SRTP_PROTOCOLS = new Set(['RTP/SAVP', 'RTP/SAVPF']);

/** The m-line is SRTP with SDES keys (RTP/SAVP or RTP/SAVPF). */
export function isSavp(m: Pick<SdpMedia, 'protocol'>): boolean {
  return SRTP_PROTOCOLS.has(m.protocol.toUpperCase());
}

/**
 * Whether an m-line is an audio stream we can take, and if not, why (for the 488 Warning).
 * RTP/SAVP(F) counts as a usable transport only with `srtp` (the trunk's policy decides).
 */
export function audioUsability(m: SdpMedia, options: { srtp?: boolean } = {}): AudioUsability {
  if (m.type.toLowerCase() !== 'audio') return 'not-audio';
  if (m.port === 0) return 'disabled';
  if (!RTP_PROTOCOLS.has(m.protocol.toUpperCase()) && !(options.srtp === true && isSavp(m))) return 'transport';
  if (m.portCount !== 1 || !m.connection || m.connection.multicast) return 'address';
  return 'usable';
}

/** Largest body accepted. SIP bodies are capped by the message layer too; SDP of a call is < 4 KiB. */
export const SDP_MAX_LENGTH = 64 * 1024;

/** RFC 3551 table 4: static audio payload types (the ones an m-line may use without rtpmap). */
const STATIC_PAYLOAD_TYPES: ReadonlyMap<number, { encoding: string; clockRate: number; channels?: number }> = new Map([
  [0, { encoding: 'PCMU', clockRate: 8000 }],
  [3, { encoding: 'GSM', clockRate: 8000 }],
  [4, { encoding: 'G723', clockRate: 8000 }],
  [5, { encoding: 'DVI4', clockRate: 8000 }],
  [6, { encoding: 'DVI4', clockRate: 16000 }],
  [7, { encoding: 'LPC', clockRate: 8000 }],
  [8, { encoding: 'PCMA', clockRate: 8000 }],
  // G722's RTP clock is 8000 although it samples at 16 kHz (RFC 3551 section 4.5.2).
  [9, { encoding: 'G722', clockRate: 8000 }],
  [10, { encoding: 'L16', clockRate: 44100, channels: 2 }],
  [11, { encoding: 'L16', clockRate: 44100 }],
  [12, { encoding: 'QCELP', clockRate: 8000 }],
  [13, { encoding: 'CN', clockRate: 8000 }],
  [14, { encoding: 'MPA', clockRate: 90000 }],
  [15, { encoding: 'G728', clockRate: 8000 }],
  [16, { encoding: 'DVI4', clockRate: 11025 }],
  [17, { encoding: 'DVI4', clockRate: 22050 }],
  [18, { encoding: 'G729', clockRate: 8000 }],
]);

/** What the line scan reads of an m= section before its attributes are resolved. */
type ScannedMedia = Pick<SdpMedia, 'type' | 'port' | 'portCount' | 'protocol' | 'formats' | 'connection'>;

interface Scanned {
  origin?: SdpOriginLine;
  sessionName: string;
  timing?: { start: string; stop: string };
  connection?: SdpConnection;
  media: ScannedMedia[];
}

function fail(detail: string): never {
  throw new SdpParseError(detail);
}

/** Shows a few characters of bad input in an error, printable only. */
function excerpt(text: string): string {
  const s = text.length > 40 ? `${text.slice(0, 40)}...` : text;
  return JSON.stringify(s.replace(/[^\x20-\x7e]/g, '?'));
}

/** A domain name (RFC 4566 allows FQDNs in c= and o=; the bridge resolves them). */
const FQDN = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/** RFC 4566 section 5.7: `c=<nettype> <addrtype> <connection-address>`. */
function parseConnection(value: string, level: string): SdpConnection {
  const parts = value.trim().split(/ +/);
  if (parts.length !== 3) fail(`${level} c= line needs "IN IP4|IP6 <address>", got ${excerpt(value)}`);
  const [netType, addrType, full] = parts as [string, string, string];
  if (netType !== 'IN') fail(`${level} c= network type must be IN, got ${excerpt(netType)}`);
  if (addrType !== 'IP4' && addrType !== 'IP6') fail(`${level} c= address type must be IP4 or IP6, got ${excerpt(addrType)}`);
  const slash = full.indexOf('/');
  const address = slash === -1 ? full : full.slice(0, slash);
  const suffix = slash === -1 ? '' : full.slice(slash + 1);
  if (suffix !== '' && !/^\d{1,5}(?:\/\d{1,5})?$/.test(suffix)) fail(`${level} c= address suffix is invalid: ${excerpt(full)}`);
  const family = net.isIP(address);
  let multicast = suffix !== '';
  if (family === 4) {
    if (addrType !== 'IP4') fail(`${level} c= says IP6 but the address is IPv4: ${excerpt(address)}`);
    const first = Number(address.split('.')[0]);
    multicast ||= first >= 224 && first <= 239;
  } else if (family === 6) {
    if (addrType !== 'IP6') fail(`${level} c= says IP4 but the address is IPv6: ${excerpt(address)}`);
    multicast ||= /^ff/i.test(address);
  } else if (!FQDN.test(address) || /^[\d.]+$/.test(address)) {
    // All-numeric "names" are broken IPv4 literals (RFC 1123 section 2.1), e.g. 999.1.1.1.
    fail(`${level} c= address is neither an IP address nor a domain name: ${excerpt(address)}`);
  }
  return { addressType: addrType, address, multicast };
}

/** RFC 4566 section 5.2: `o=<username> <sess-id> <sess-version> <nettype> <addrtype> <unicast-address>`. */
function parseOrigin(value: string): SdpOriginLine {
  const parts = value.trim().split(/ +/);
  if (parts.length !== 6) fail(`o= line needs 6 fields, got ${excerpt(value)}`);
  const [username, sessionId, sessionVersion, netType, addrType, address] = parts as [string, string, string, string, string, string];
  if (netType !== 'IN') fail(`o= network type must be IN, got ${excerpt(netType)}`);
  if (addrType !== 'IP4' && addrType !== 'IP6') fail(`o= address type must be IP4 or IP6, got ${excerpt(addrType)}`);
  return { username, sessionId, sessionVersion, addressType: addrType, address };
}

/** RFC 4566 section 5.14: `m=<media> <port>[/<number of ports>] <proto> <fmt> ...`. */
function parseMediaLine(value: string, n: number): ScannedMedia {
  const match = /^([A-Za-z0-9_.+-]+) (\d{1,5})(?:\/(\d{1,5}))? ([A-Za-z0-9_./+-]+)((?: +[^ ]+)*) *$/.exec(value);
  if (!match) return fail(`m-line ${n} does not follow "<media> <port> <proto> <fmt>...": ${excerpt(value)}`);
  const port = Number(match[2]);
  if (port > 65535) fail(`m-line ${n} port ${port} is out of range`);
  const portCount = match[3] === undefined ? 1 : Number(match[3]);
  if (portCount < 1) fail(`m-line ${n} has a port count of 0`);
  const protocol = match[4] as string;
  const formats = (match[5] ?? '').trim().split(/ +/).filter((f) => f !== '');
  // At least one format (RFC 4566 5.14); tolerated on a disabled stream, where it is ignored.
  if (formats.length === 0 && port !== 0) fail(`m-line ${n} lists no media formats`);
  if (/(^|\/)RTP\//i.test(protocol)) {
    for (const f of formats) {
      if (!/^\d{1,3}$/.test(f) || Number(f) > 127) fail(`m-line ${n} has an RTP payload type out of 0-127: ${excerpt(f)}`);
    }
  }
  return { type: match[1] as string, port, portCount, protocol, formats };
}

/** Pass 1: the structure. */
function scan(lines: string[]): Scanned {
  const out: Scanned = { sessionName: '', media: [] };
  let sawVersion = false;
  let sessionConnectionSeen = false;
  let current: ScannedMedia | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line.trim() === '') continue;
    if (!/^[a-z]=/.test(line)) fail(`line ${i + 1} is not "<type>=<value>": ${excerpt(line)}`);
    if (line.includes('\0')) fail(`line ${i + 1} contains a NUL character`);
    const type = line[0];
    const value = line.slice(2);
    if (!sawVersion) {
      // RFC 4566 section 5: the description starts with v=0 (5.1: version 0).
      if (type !== 'v' || value.trim() !== '0') fail(`the first line must be v=0, got ${excerpt(line)}`);
      sawVersion = true;
      continue;
    }
    switch (type) {
      case 'v':
        fail(`a second v= line at line ${i + 1} (two descriptions in one body)`);
        break;
      case 'o':
        if (current) fail('o= inside a media description');
        if (out.origin) fail('more than one o= line');
        out.origin = parseOrigin(value);
        break;
      case 's':
        if (current) fail('s= inside a media description');
        out.sessionName = value;
        break;
      case 't':
        // RFC 4566 section 5: t= belongs to the session part; repeated t= lines are further
        // active times (the first one is what an answer copies).
        if (current) fail('t= inside a media description');
        if (!out.timing) {
          const m = /^(\d{1,20}) +(\d{1,20}) *$/.exec(value);
          if (!m) fail(`t= line needs "<start> <stop>", got ${excerpt(value)}`);
          else out.timing = { start: m[1] as string, stop: m[2] as string };
        }
        break;
      case 'c':
        if (current) {
          // Several c= lines in one media description are for layered multicast; the first counts.
          const c = parseConnection(value, `m-line ${out.media.length}`);
          current.connection ??= c;
        } else {
          if (sessionConnectionSeen) fail('more than one session-level c= line');
          sessionConnectionSeen = true;
          out.connection = parseConnection(value, 'session');
        }
        break;
      case 'm':
        current = parseMediaLine(value, out.media.length);
        out.media.push(current);
        break;
      default:
        break; // a=, b=, i=, k=, ... and unknown letters: not structure
    }
  }
  if (!sawVersion) fail('empty body');
  // RFC 3264 section 5 needs o= to version the session; RFC 4566 makes it mandatory.
  if (!out.origin) fail('no o= line');
  out.media.forEach((m, n) => {
    m.connection ??= out.connection;
    // RFC 4566 section 5.7: c= at session level or in every media description.
    if (!m.connection && m.port !== 0) fail(`m-line ${n} has no connection address (c=)`);
  });
  return out;
}

const isInt = (v: unknown, min: number, max: number): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;

function positiveMs(v: unknown): number | undefined {
  const n = typeof v === 'number' ? v : typeof v === 'string' && v !== '' ? Number(v) : NaN;
  return Number.isFinite(n) && n > 0 && n <= 10_000 ? n : undefined;
}

function directionOf(v: unknown): SdpDirection | undefined {
  return typeof v === 'string' && (SDP_DIRECTIONS as readonly string[]).includes(v) ? (v as SdpDirection) : undefined;
}

/**
 * One a=crypto line (RFC 4568 9.1: `<tag> <suite> <key-params> [<session-params>]`) as
 * sdp-transform splits it, or undefined when we cannot use it: a suite not ours, several
 * key-params, a key that is not 30 bytes of base64, an MKI (we send and expect none), a
 * lifetime that is not `2^n` or a number, any session parameter (KDR, UNENCRYPTED_SRTP, ...).
 */
function cryptoOf(line: { id?: unknown; suite?: unknown; config?: unknown; sessionConfig?: unknown }): SdpCrypto | undefined {
  const tag = Number(line.id);
  if (!Number.isInteger(tag) || tag < 0 || tag > 999_999_999) return undefined;
  const suite = String(line.suite ?? '');
  if (!isSrtpSuite(suite)) return undefined;
  if (line.sessionConfig !== undefined && line.sessionConfig !== null && String(line.sessionConfig) !== '') return undefined;
  const m = /^inline:([A-Za-z0-9+/]+={0,2})(?:\|(2\^\d{1,2}|\d{1,20}))?$/.exec(String(line.config ?? ''));
  if (!m) return undefined;
  const key = Buffer.from(m[1]!, 'base64');
  if (key.length !== SRTP_MASTER_LENGTH || key.toString('base64').replace(/=+$/, '') !== m[1]!.replace(/=+$/, '')) return undefined;
  return { tag, suite, key };
}

/** Pass 2 for one media description: payload details and attributes, each value checked. */
function mediaDetails(index: number, scanned: ScannedMedia, attrs: MediaDescription | undefined, session: SessionDescription): SdpMedia {
  const isRtp = /(^|\/)RTP\//i.test(scanned.protocol);
  const rtpmaps = Array.isArray(attrs?.rtp) ? attrs.rtp : [];
  const fmtps = Array.isArray(attrs?.fmtp) ? attrs.fmtp : [];
  const rtp: SdpRtpFormat[] = [];
  const seen = new Set<number>();
  if (isRtp) {
    for (const f of scanned.formats) {
      const payloadType = Number(f);
      if (seen.has(payloadType)) continue; // a repeated PT says nothing new
      seen.add(payloadType);
      const format: SdpRtpFormat = { payloadType, fromStaticTable: false };
      // First valid rtpmap for this PT wins (RFC 4566 section 6: one per format).
      const map = rtpmaps.find((r) => r.payload === payloadType && String(r.codec ?? '') !== '' && isInt(r.rate, 1, 10_000_000));
      if (map) {
        format.encoding = String(map.codec);
        format.clockRate = map.rate as number;
        if (map.encoding !== undefined) {
          const ch = Number(map.encoding);
          if (Number.isInteger(ch) && ch >= 1 && ch <= 255) format.channels = ch;
        }
      } else {
        const known = STATIC_PAYLOAD_TYPES.get(payloadType);
        if (known) {
          format.encoding = known.encoding;
          format.clockRate = known.clockRate;
          if (known.channels !== undefined) format.channels = known.channels;
          format.fromStaticTable = true;
        }
      }
      const fmtp = fmtps.find((x) => x.payload === payloadType && x.config !== undefined && x.config !== null);
      if (fmtp) {
        const config = String(fmtp.config).trim();
        if (config !== '') format.fmtp = config;
      }
      rtp.push(format);
    }
  }
  const connection = scanned.connection;
  const media: SdpMedia = {
    index,
    type: scanned.type,
    port: scanned.port,
    portCount: scanned.portCount,
    protocol: scanned.protocol,
    formats: scanned.formats,
    direction: directionOf(attrs?.direction) ?? directionOf(session.direction) ?? 'sendrecv',
    rtp,
    rtcpMux: attrs?.rtcpMux === 'rtcp-mux',
    telephoneEvents: rtp
      .filter((r) => r.encoding?.toLowerCase() === 'telephone-event' && r.clockRate !== undefined)
      .map((r) => ({ payloadType: r.payloadType, clockRate: r.clockRate as number, events: r.fmtp ?? '0-15' })),
    legacyHold: connection !== undefined && (connection.address === '0.0.0.0' || (net.isIPv6(connection.address) && /^[0:]+$/.test(connection.address))),
    crypto: [],
    cryptoLines: 0,
  };
  const cryptoLines = Array.isArray(attrs?.crypto) ? attrs.crypto : [];
  media.cryptoLines = cryptoLines.length;
  const tags = new Set<number>();
  for (const line of cryptoLines) {
    const c = cryptoOf(line);
    // A repeated tag is ambiguous in the answer: the first one counts.
    if (c && !tags.has(c.tag)) {
      tags.add(c.tag);
      media.crypto.push(c);
    }
  }
  if (connection) media.connection = connection;
  // ptime and maxptime are media-level (RFC 4566 section 6); some peers put them at session level.
  const sessionLevel = session as SessionDescription & { ptime?: unknown; maxptime?: unknown };
  const ptime = positiveMs(attrs?.ptime) ?? positiveMs(sessionLevel.ptime);
  if (ptime !== undefined) media.ptime = ptime;
  const maxptime = positiveMs(attrs?.maxptime) ?? positiveMs(sessionLevel.maxptime);
  if (maxptime !== undefined) media.maxptime = maxptime;
  const rtcp = attrs?.rtcp;
  if (rtcp && isInt(rtcp.port, 1, 65535)) {
    media.rtcpPort = rtcp.port;
    if (typeof rtcp.address === 'string' && net.isIP(rtcp.address) !== 0) media.rtcpAddress = rtcp.address;
  }
  return media;
}

/**
 * Parses a session description (an offer or an answer).
 * @throws SdpParseError when the text is not a well-formed session description (answer 400).
 *   Nothing else is ever thrown for any input, including non-strings.
 */
export function parseSdp(text: unknown): ParsedSdp {
  if (typeof text !== 'string') return fail('the body is not text');
  if (text.length > SDP_MAX_LENGTH) fail(`the body is longer than ${SDP_MAX_LENGTH} characters`);
  const lines = text.split(/\r\n|\r|\n/);
  const scanned = scan(lines);
  let transformed: SessionDescription;
  try {
    transformed = transformParse(text);
  } catch (err) {
    // Not known to happen for any string; kept so that a library change cannot crash the UAS.
    throw new SdpParseError('the attribute parser failed', { cause: err });
  }
  const media = scanned.media.map((m, i) => mediaDetails(i, m, transformed.media?.[i], transformed));
  const parsed: ParsedSdp = {
    origin: scanned.origin as SdpOriginLine,
    sessionName: scanned.sessionName,
    timing: scanned.timing ?? { start: '0', stop: '0' },
    media,
  };
  if (scanned.connection) parsed.connection = scanned.connection;
  const audio = media.find((m) => audioUsability(m) === 'usable');
  if (audio) parsed.audio = audio;
  return parsed;
}

/**
 * Parses an SDP offer (from an INVITE, UPDATE, re-INVITE, or a 2xx answering an INVITE without
 * one). Same as parseSdp; the name says which side of the exchange the caller is on.
 * @throws SdpParseError for malformed SDP (answer 400).
 */
export const parseOffer: (text: unknown) => ParsedSdp = parseSdp;

/**
 * True when `next` carries the same o= line as `previous` (same session and version): by RFC
 * 3264 section 8 it is then the same SDP, e.g. a session refresh re-INVITE (RFC 4028), and the
 * answer may be the previous one unchanged.
 */
export function isSameSdpVersion(previous: ParsedSdp, next: ParsedSdp): boolean {
  const a = previous.origin;
  const b = next.origin;
  return a.username === b.username && a.sessionId === b.sessionId && a.sessionVersion === b.sessionVersion && a.address === b.address;
}
