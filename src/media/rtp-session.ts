/**
 * One RTP session of one call: an RTP socket (even port) and its RTCP socket (port + 1), as
 * handed out by PortAllocator, for one audio stream in each direction.
 *
 *   peer --RTP--> rtp socket --parse (rtp.js)--> latch? SSRC? RFC 3550 A.1/A.8 --> 'rtp' | 'dtmf'
 *   send(payload) --12-byte header into a reused buffer--> rtp socket --> latched source | SDP
 *   every ~5 s: SR or RR + SDES(CNAME) --> rtcp socket;  incoming SR/RR --> 'report' (loss, RTT)
 *   close(): RR/SR + SDES + BYE, sockets closed, ports back to the allocator, 'close'
 *
 * Symmetric RTP (RFC 4961; "comedia"): we send to the address and port the peer's RTP actually
 * comes from, which is the only address that works through the peer's NAT. Until the first
 * packet arrives we use the SDP address (constructor or setRemote()). Once latched, packets from
 * another source are dropped (counted) unless the latched source has been silent for
 * relatchAfterMs: a media path that moved (NAT rebinding, a new media server after a transfer)
 * then takes over, while a stray or spoofed stream cannot steal a live call.
 *
 * Received packets are parsed with rtp.js (0.36 us per packet, measured; docs/media-rtp.md).
 * Sending writes the fixed header with a DataView into a preallocated buffer (0.035 us) rather
 * than building an rtp.js packet (1.8 us and ~1 kB of garbage per packet): at 50 packets/s per
 * call and hundreds of calls per core, the send side is the one that matters.
 *
 * Garbage on the wire never throws: it is counted in stats().dropped. Listener exceptions are
 * caught and reported as an 'error' event (when someone listens) and to the logger. Nothing is
 * logged per packet.
 */
import { randomBytes, randomInt } from 'node:crypto';
import type { RemoteInfo } from 'node:dgram';
import { EventEmitter } from 'node:events';
import {
  ByePacket,
  CompoundPacket,
  ReceiverReportPacket,
  ReceptionReport,
  RtpPacket,
  SdesChunk,
  SdesPacket,
  SenderReportPacket,
  type RtcpPacket,
  type SdesItemType,
} from 'rtp.js/packets';
import { DtmfReceiver, dtmfDurationUnits, planDtmfPackets, type DtmfDigit } from './dtmf.ts';
import { ListenerError, MediaClosedError, SocketError, type MediaError } from './errors.ts';
import type { RtpPortPair } from './port-allocator.ts';
import { systemClock, systemTimers, type Clock, type ReceivedRtp, type Timers } from './types.ts';

export type { Timers };

/** Structurally a pino logger (child per call); only warn is used. */
export interface MediaLogger {
  warn(obj: object, msg?: string): void;
}

export interface RemoteAddress {
  address: string;
  port: number;
}

/** Where to send, as the SDP says (c= address, m= port, optional a=rtcp port, RFC 3605). */
export interface SdpRemote {
  address: string;
  port: number;
  /** Default port + 1. */
  rtcpPort?: number;
}

export interface RtpSessionOptions {
  /** Bound sockets from PortAllocator.allocate(); the session owns and closes them. */
  ports: RtpPortPair;
  /** RTP clock rate of the negotiated codec (8000 for G.711, 48000 for Opus). */
  clockRate: number;
  /** The peer's SDP address; may also be given (or changed by a re-INVITE) with setRemote(). */
  remote?: SdpRemote;
  /** Symmetric RTP / latching (RFC 4961). Default true. */
  symmetric?: boolean;
  /** A latched source silent this long may be replaced by a new one. Default 500 ms. */
  relatchAfterMs?: number;
  /** Payload type of telephone-event/<clockRate> from the SDP; DTMF is decoded only when set. */
  dtmfPayloadType?: number;
  /** Interval of DTMF updates and end repeats we send. Default 50 ms (RFC 4733 2.5.1.2). */
  dtmfUpdateIntervalMs?: number;
  /** A received DTMF event with no packet for this long is over. Default 500 ms. */
  dtmfEndTimeoutMs?: number;
  /** 'timeout' when no RTP arrives for this long; 0 disables (e.g. on hold). Default 30000. */
  mediaTimeoutMs?: number;
  /** Mean RTCP report interval (RFC 3550 6.2: 5 s), randomised x0.5-1.5; 0: none. */
  rtcpIntervalMs?: number;
  /** Send RTCP on the RTP port (RFC 5761, when a=rtcp-mux was agreed). Default false. */
  rtcpMux?: boolean;
  /** A pause in send() longer than this starts a talk spurt (marker, timestamp jump). Default 200 ms. */
  talkspurtGapMs?: number;
  /** RTCP SDES CNAME (RFC 7022: random per session by default). */
  cname?: string;
  /** Fixed SSRC / first sequence number / first timestamp; random by default (RFC 3550 5.1). */
  ssrc?: number;
  initialSequence?: number;
  initialTimestamp?: number;
  clock?: Clock;
  timers?: Timers;
  /** Randomness of the RTCP interval (tests pin it). Default Math.random. */
  random?: () => number;
  logger?: MediaLogger;
}

export interface SendOptions {
  payloadType: number;
  /** Samples this payload covers, in clock-rate units (160 for 20 ms of G.711). */
  timestampIncrement: number;
  /** Force the marker bit on or off; by default it is set on the first packet of a talk spurt. */
  marker?: boolean;
}

/** What the peer's last RTCP report said about the stream we send. */
export interface RemoteReport {
  /** 0..1, over the peer's last report interval. */
  fractionLost: number;
  /** Cumulative packets lost (RFC 3550 6.4.1). */
  packetsLost: number;
  /** Interarrival jitter the peer measured, in ms. */
  jitterMs: number;
  /** Extended highest sequence number the peer received. */
  extendedHighestSeq: number;
  /** Round trip computed from this report's LSR/DLSR (RFC 3550 6.4.1), when it had one. */
  rttMs: number | undefined;
  /** Arrival time on the session's clock. */
  atMs: number;
}

export interface RtpSessionStats {
  ssrc: number;
  remoteSsrc: number | undefined;
  packetsSent: number;
  /** Payload octets, as in the RTCP SR octet count. */
  bytesSent: number;
  packetsReceived: number;
  /** Payload octets. */
  bytesReceived: number;
  /** Cumulative loss of the current remote source (RFC 3550 A.3: expected - received). */
  packetsLost: number;
  /** Loss in our last RTCP report interval, 0..1. */
  fractionLost: number;
  /** Extended highest sequence number received (cycles + max_seq, RFC 3550 A.1). */
  extendedHighestSeq: number | undefined;
  /** Interarrival jitter of the incoming stream (RFC 3550 A.8), in ms. */
  jitterMs: number;
  /** Last round trip from the peer's RTCP (undefined until a report echoes one of our SRs). */
  rttMs: number | undefined;
  /** The peer's last report about our stream. */
  remote: RemoteReport | undefined;
  rtcpSent: number;
  rtcpReceived: number;
  dtmfReceived: number;
  dtmfSent: number;
  /** Datagrams dropped, by reason. None of them ever throws. */
  dropped: {
    /** Shorter than the 12-byte RTP header. */
    tooShort: number;
    /** Version field not 2. */
    badVersion: number;
    /** rtp.js refused it (CSRC/extension/padding beyond the end). */
    malformed: number;
    /** From another address than the latched one, while that one is active. */
    wrongSource: number;
    /** A sequence jump RFC 3550 A.1 does not accept (yet). */
    badSequence: number;
    /** RTCP that is not a valid compound packet. */
    rtcpMalformed: number;
    /** send() with no remote address known. */
    noRemote: number;
    /** send() while a DTMF event was being sent (audio is muted then). */
    mutedByDtmf: number;
    /** Socket errors (send failures). */
    socketErrors: number;
  };
}

export type RtpSessionEvents = {
  /** One received audio packet (not telephone-event). The payload is a view: copy to keep. */
  rtp: [packet: ReceivedRtp];
  /** One DTMF key press, reported once, at its end. */
  dtmf: [digit: DtmfDigit];
  /** No RTP for mediaTimeoutMs. Once per outage: RTP arriving again re-arms it. */
  timeout: [];
  /** We now send RTP to this address (the first packet latched it, or the source moved). */
  latch: [remote: RemoteAddress];
  /** A new SSRC appeared (the peer restarted its stream): reset jitter buffers and decoders. */
  ssrc: [change: { previous: number | undefined; current: number }];
  /** The peer's RTCP report about the stream we send. */
  report: [report: RemoteReport];
  /** The peer sent RTCP BYE for its stream. */
  bye: [reason: string | undefined];
  /** A listener threw, or a socket failed. Never fatal. */
  error: [error: MediaError];
  close: [];
};

const RTP_HEADER = 12;
const SEQ_MOD = 0x10000;
const TWO_32 = 0x100000000;
/** Seconds from 1900 (NTP epoch) to 1970 (Unix epoch). */
const NTP_UNIX_OFFSET_S = 2208988800;
const RTCP_SR = 200;
const RTCP_RR = 201;
const RTCP_BYE = 203;
const SDES_CNAME = 1 as SdesItemType;

/**
 * Per-source reception state, RFC 3550 appendix A.1 (sequence validity, extended sequence
 * number), A.3 (loss) and A.8 (jitter), written as close to the RFC's C as TypeScript allows.
 */
class SourceState {
  static readonly MAX_DROPOUT = 3000;
  static readonly MAX_MISORDER = 100;
  static readonly MIN_SEQUENTIAL = 2;

  maxSeq = 0;
  cycles = 0;
  baseSeq = 0;
  badSeq = 0;
  probation: number;
  received = 0;
  expectedPrior = 0;
  receivedPrior = 0;
  /** Relative transit time of the previous packet, in timestamp units (A.8). */
  transit = 0;
  hasTransit = false;
  /** Interarrival jitter estimate, in timestamp units (A.8). */
  jitter = 0;

  constructor(
    readonly ssrc: number,
    seq: number,
  ) {
    // A.1: a new source is on probation until MIN_SEQUENTIAL packets arrive in sequence.
    this.initSeq(seq);
    this.maxSeq = (seq - 1) & 0xffff;
    this.probation = SourceState.MIN_SEQUENTIAL;
  }

  initSeq(seq: number): void {
    this.baseSeq = seq;
    this.maxSeq = seq;
    this.badSeq = SEQ_MOD + 1; // so seq === badSeq is false
    this.cycles = 0;
    this.received = 0;
    this.receivedPrior = 0;
    this.expectedPrior = 0;
  }

  /** A.1 update_seq: 1 valid, 0 on probation (still delivered), -1 rejected. */
  update(seq: number): 1 | 0 | -1 {
    const udelta = (seq - this.maxSeq) & 0xffff;
    if (this.probation > 0) {
      if (seq === ((this.maxSeq + 1) & 0xffff)) {
        this.probation--;
        this.maxSeq = seq;
        if (this.probation === 0) {
          this.initSeq(seq);
          this.received++;
          return 1;
        }
      } else {
        this.probation = SourceState.MIN_SEQUENTIAL - 1;
        this.maxSeq = seq;
      }
      return 0;
    }
    if (udelta < SourceState.MAX_DROPOUT) {
      // In order, with a permissible gap; a smaller number means the 16-bit counter wrapped.
      if (seq < this.maxSeq) this.cycles += SEQ_MOD;
      this.maxSeq = seq;
    } else if (udelta <= SEQ_MOD - SourceState.MAX_MISORDER) {
      // A very large jump: accept it only when the next packet follows it (the sender restarted
      // without changing SSRC); otherwise it is garbage.
      if (seq === this.badSeq) {
        this.initSeq(seq);
      } else {
        this.badSeq = (seq + 1) & 0xffff;
        return -1;
      }
    }
    // else: a duplicate or a reordered packet; counted as received, as A.1 does.
    this.received++;
    return 1;
  }

  get extendedMax(): number {
    return this.cycles + this.maxSeq;
  }

  /** A.3: expected - received; negative with duplicates. */
  get lost(): number {
    return this.extendedMax - this.baseSeq + 1 - this.received;
  }

  /**
   * A.8: J += (|D(i-1,i)| - J) / 16, with D the difference of relative transit times. The
   * arrival is converted to timestamp units; the transit difference is taken modulo 2^32 so the
   * 32-bit RTP timestamp may wrap.
   */
  updateJitter(arrivalUnits: number, timestamp: number): void {
    const transit = arrivalUnits - timestamp;
    if (this.hasTransit) {
      let d = transit - this.transit;
      d -= TWO_32 * Math.round(d / TWO_32);
      if (d < 0) d = -d;
      this.jitter += (d - this.jitter) / 16;
    }
    this.transit = transit;
    this.hasTransit = true;
  }

  /** A.3 interval figures for a reception report block; advances the "prior" counters. */
  intervalReport(): { fraction: number; cumulative: number } {
    const expected = this.extendedMax - this.baseSeq + 1;
    const expectedInterval = expected - this.expectedPrior;
    this.expectedPrior = expected;
    const receivedInterval = this.received - this.receivedPrior;
    this.receivedPrior = this.received;
    const lostInterval = expectedInterval - receivedInterval;
    const fraction = expectedInterval === 0 || lostInterval <= 0 ? 0 : Math.floor((lostInterval * 256) / expectedInterval);
    return { fraction: Math.min(fraction, 255), cumulative: expected - this.received };
  }
}

/** Middle 32 bits of a 64-bit NTP timestamp (the LSR field, RFC 3550 6.4.1). */
function ntpMiddle(seconds: number, fraction: number): number {
  return (((seconds & 0xffff) << 16) | (fraction >>> 16)) >>> 0;
}

/**
 * Cumulative packets lost of a reception report, read from its bytes: rtp.js 0.15.5's
 * getTotalLost() masks 12 bits instead of 24 (so 5000 reads back as 904) and decodes negative
 * values as sign-magnitude. The field is a 24-bit two's complement integer.
 */
function readCumulativeLost(report: ReceptionReport): number {
  const view = report.getView();
  return ((view.getUint32(4) & 0xffffff) << 8) >> 8;
}

function validPort(port: number): boolean {
  return Number.isInteger(port) && port > 0 && port < 65536;
}

export class RtpSession extends EventEmitter<RtpSessionEvents> {
  readonly ssrc: number;
  readonly cname: string;
  readonly clockRate: number;

  readonly #ports: RtpPortPair;
  readonly #clock: Clock;
  readonly #timers: Timers;
  readonly #random: () => number;
  readonly #logger: MediaLogger | undefined;
  readonly #symmetric: boolean;
  readonly #relatchAfterMs: number;
  readonly #rtcpIntervalMs: number;
  readonly #rtcpMux: boolean;
  readonly #talkspurtGapMs: number;
  readonly #dtmfPayloadType: number | undefined;
  readonly #dtmfUpdateIntervalMs: number;
  /** NTP time (ms since 1900) minus clock time: maps the monotonic clock to SR wallclock. */
  readonly #ntpOffsetMs: number;
  #mediaTimeoutMs: number;
  #closed = false;

  // Where to send.
  #sdpRtp: RemoteAddress | undefined;
  #sdpRtcp: RemoteAddress | undefined;
  #latchedRtp: RemoteAddress | undefined;
  #latchedRtcp: RemoteAddress | undefined;
  #lastFromLatchedMs = -Infinity;

  // Sending: the media clock. nextTs is the timestamp of the next sample we send; nextTsAtMs the
  // clock time at which that sample is due, so a pause in send() shows as nextTsAtMs in the past.
  #seq: number;
  #nextTs: number;
  #nextTsAtMs = Number.NaN;
  #lastIncrement = 0;
  #lastSentTs = 0;
  #lastSendMs = Number.NaN;
  #markNext = true;
  #catchUpNext = false;
  #sendBuf: Buffer;
  #sendView: DataView;
  #packetsSent = 0;
  #octetsSent = 0;
  #sentAtLastReport = 0;
  #sentAtReportBefore = 0;

  // Sending DTMF: one event at a time; audio is muted while one is on the wire.
  #dtmfQueue: Promise<void> = Promise.resolve();
  #dtmfSending: { timer: unknown; reject: (err: Error) => void } | undefined;
  #dtmfMuted = false;
  #dtmfSent = 0;

  // Receiving.
  #source: SourceState | undefined;
  #packetsReceived = 0;
  #octetsReceived = 0;
  #lastRtpMs: number;
  #timedOut = false;
  #mediaTimer: unknown;
  readonly #dtmfReceiver: DtmfReceiver;
  #dtmfTimer: unknown;
  readonly #dropped: RtpSessionStats['dropped'] = {
    tooShort: 0,
    badVersion: 0,
    malformed: 0,
    wrongSource: 0,
    badSequence: 0,
    rtcpMalformed: 0,
    noRemote: 0,
    mutedByDtmf: 0,
    socketErrors: 0,
  };

  // RTCP.
  #rtcpTimer: unknown;
  #rtcpSent = 0;
  #rtcpReceived = 0;
  #fractionLost = 0;
  #lastSr: { ssrc: number; ntpMiddle: number; arrivalMs: number } | undefined;
  #remoteReport: RemoteReport | undefined;
  #rttMs: number | undefined;

  /**
   * Takes ownership of the ports (closing the session closes them) and starts the media timeout
   * and RTCP timers.
   * @throws RangeError on a bad clock rate, remote or DTMF payload type.
   * @throws MediaClosedError (MEDIA_CLOSED) when the ports were already closed.
   */
  constructor(options: RtpSessionOptions) {
    super();
    const { ports, clockRate } = options;
    if (ports.closed) throw new MediaClosedError('RTP port pair');
    if (!Number.isInteger(clockRate) || clockRate <= 0) throw new RangeError(`clock rate ${clockRate} is invalid`);
    this.#ports = ports;
    this.clockRate = clockRate;
    this.#clock = options.clock ?? systemClock;
    this.#timers = options.timers ?? systemTimers;
    this.#random = options.random ?? Math.random;
    this.#logger = options.logger;
    this.#symmetric = options.symmetric ?? true;
    this.#relatchAfterMs = options.relatchAfterMs ?? 500;
    this.#rtcpIntervalMs = options.rtcpIntervalMs ?? 5000;
    this.#rtcpMux = options.rtcpMux ?? false;
    this.#talkspurtGapMs = options.talkspurtGapMs ?? 200;
    this.#mediaTimeoutMs = options.mediaTimeoutMs ?? 30_000;
    this.#dtmfPayloadType = options.dtmfPayloadType;
    this.#dtmfUpdateIntervalMs = options.dtmfUpdateIntervalMs ?? 50;
    if (this.#dtmfPayloadType !== undefined && !(this.#dtmfPayloadType >= 0 && this.#dtmfPayloadType < 128)) {
      throw new RangeError(`DTMF payload type ${this.#dtmfPayloadType} out of 0-127`);
    }

    this.ssrc = (options.ssrc ?? randomBytes(4).readUInt32BE(0)) >>> 0;
    this.#seq = (options.initialSequence ?? randomInt(0, SEQ_MOD)) & 0xffff;
    this.#nextTs = (options.initialTimestamp ?? randomBytes(4).readUInt32BE(0)) >>> 0;
    this.cname = options.cname ?? randomBytes(12).toString('base64url');
    this.#sendBuf = Buffer.alloc(1500);
    this.#sendView = new DataView(this.#sendBuf.buffer, this.#sendBuf.byteOffset, this.#sendBuf.byteLength);

    const now = this.#clock.now();
    this.#ntpOffsetMs = Date.now() + NTP_UNIX_OFFSET_S * 1000 - now;
    this.#lastRtpMs = now;
    this.#dtmfReceiver = new DtmfReceiver({
      clockRate,
      endTimeoutMs: options.dtmfEndTimeoutMs ?? 500,
      onDigit: (digit) => this.#fire('dtmf', digit),
    });
    if (options.remote) this.setRemote(options.remote);

    ports.rtp.on('message', this.#onRtpDatagram);
    ports.rtcp.on('message', this.#onRtcpDatagram);
    ports.rtp.on('error', this.#onSocketError);
    ports.rtcp.on('error', this.#onSocketError);
    this.#armMediaTimer(this.#mediaTimeoutMs);
    this.#scheduleRtcp(true);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Local address and ports, for our SDP. */
  get local(): { address: string; rtpPort: number; rtcpPort: number } {
    return { address: this.#ports.address, rtpPort: this.#ports.rtpPort, rtcpPort: this.#ports.rtcpPort };
  }

  /** Where RTP goes now: the latched source, else the SDP address; undefined when unknown. */
  get remote(): (RemoteAddress & { latched: boolean }) | undefined {
    const dest = this.#latchedRtp ?? this.#sdpRtp;
    return dest && { address: dest.address, port: dest.port, latched: dest === this.#latchedRtp };
  }

  /**
   * Sets the peer's SDP address (answer, or a re-INVITE). A changed address forgets the latch,
   * so the next packet from the peer latches again.
   * @throws RangeError on a bad port or an empty address.
   */
  setRemote(remote: SdpRemote): void {
    const rtcpPort = remote.rtcpPort ?? remote.port + 1;
    if (!validPort(remote.port) || !validPort(rtcpPort) || remote.address.length === 0) {
      throw new RangeError(`remote ${remote.address}:${remote.port} (rtcp ${rtcpPort}) is invalid`);
    }
    const old = this.#sdpRtp;
    this.#sdpRtp = { address: remote.address, port: remote.port };
    this.#sdpRtcp = { address: remote.address, port: rtcpPort };
    if (!old || old.address !== remote.address || old.port !== remote.port) {
      this.#latchedRtp = undefined;
      this.#latchedRtcp = undefined;
      this.#lastFromLatchedMs = -Infinity;
    }
  }

  /** Changes the media timeout (0 disables it, e.g. while the peer holds the call). */
  setMediaTimeout(ms: number): void {
    this.#mediaTimeoutMs = ms;
    this.#timedOut = false;
    this.#lastRtpMs = this.#clock.now();
    this.#armMediaTimer(ms);
  }

  /**
   * Marks the next packet as the first of a talk spurt (RFC 3551 section 4.1: marker bit) and
   * moves the timestamp on by the time that passed since the last packet, so the receiver's
   * playout sees the pause. send() does this by itself after a pause of talkspurtGapMs.
   */
  startTalkspurt(): void {
    this.#markNext = true;
    this.#catchUpNext = true;
  }

  /**
   * Sends one RTP packet. The timestamp is the media clock: it advances by timestampIncrement
   * per packet (wrapping at 2^32) and jumps over pauses. Returns false (and counts why) when
   * the session is closed, no remote address is known, or a DTMF event mutes audio.
   * @throws RangeError on a payload type outside 0-127 or a negative increment.
   */
  send(payload: Uint8Array, options: SendOptions): boolean {
    const { payloadType, timestampIncrement } = options;
    if (!(payloadType >= 0 && payloadType < 128) || !(timestampIncrement >= 0)) {
      throw new RangeError(`payload type ${payloadType} / timestamp increment ${timestampIncrement} invalid`);
    }
    if (this.#closed) return false;
    const now = this.#clock.now();
    const pause = this.#catchUp(now, this.#catchUpNext);
    this.#catchUpNext = false;
    const timestamp = this.#nextTs;
    this.#advanceMediaClock(now, timestampIncrement);
    if (this.#dtmfMuted) {
      // RFC 4733 2.5.1.1 lets audio continue during an event, but two signals of one key would
      // reach the peer; gateways mute. The media clock runs on, so audio resumes in time.
      this.#dropped.mutedByDtmf++;
      return false;
    }
    const marker = options.marker ?? (this.#markNext || pause);
    this.#markNext = false;
    if (!this.#sendPacket(payload, payloadType, timestamp, marker)) return false;
    this.#lastSentTs = timestamp;
    this.#lastSendMs = now;
    return true;
  }

  /**
   * Sends one DTMF key press as RFC 4733 telephone-events (see dtmf.ts for the packet schedule):
   * all packets carry the media clock's timestamp at the start, audio is muted until the first
   * end packet, and afterwards resumes with the timestamp advanced by the event's duration.
   * Calls queue: each digit starts after the previous one's last end packet.
   * Resolves when the last end packet is sent; rejects with MediaClosedError (MEDIA_CLOSED)
   * when the session closes first, with RangeError on a bad digit or duration.
   */
  sendDtmf(digit: string, durationMs = 100, payloadType = this.#dtmfPayloadType ?? 101): Promise<void> {
    let plan: ReturnType<typeof planDtmfPackets>;
    try {
      if (this.#closed) throw new MediaClosedError('RTP session');
      if (!(payloadType >= 0 && payloadType < 128)) throw new RangeError(`DTMF payload type ${payloadType} out of 0-127`);
      plan = planDtmfPackets(digit, durationMs, this.clockRate, { updateIntervalMs: this.#dtmfUpdateIntervalMs });
    } catch (err) {
      return Promise.reject(err as Error);
    }
    const run = this.#dtmfQueue.then(() => this.#runDtmf(plan, durationMs, payloadType));
    this.#dtmfQueue = run.catch(() => undefined);
    return run;
  }

  /** Counters and the RFC 3550 reception figures. Cheap; no side effects on RTCP state. */
  stats(): RtpSessionStats {
    const src = this.#source;
    const valid = src !== undefined && src.probation === 0;
    return {
      ssrc: this.ssrc,
      remoteSsrc: src?.ssrc,
      packetsSent: this.#packetsSent,
      bytesSent: this.#octetsSent,
      packetsReceived: this.#packetsReceived,
      bytesReceived: this.#octetsReceived,
      packetsLost: valid ? src.lost : 0,
      fractionLost: this.#fractionLost,
      extendedHighestSeq: valid ? src.extendedMax : undefined,
      jitterMs: src ? (src.jitter * 1000) / this.clockRate : 0,
      rttMs: this.#rttMs,
      remote: this.#remoteReport && { ...this.#remoteReport },
      rtcpSent: this.#rtcpSent,
      rtcpReceived: this.#rtcpReceived,
      dtmfReceived: this.#dtmfReceiver.digits,
      dtmfSent: this.#dtmfSent,
      dropped: { ...this.#dropped },
    };
  }

  /**
   * Sends RTCP BYE (with a last report), closes both sockets (the ports go back to the
   * allocator), cancels timers and pending DTMF, and emits 'close'. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#clearTimer(this.#mediaTimer);
    this.#clearTimer(this.#rtcpTimer);
    this.#clearTimer(this.#dtmfTimer);
    this.#mediaTimer = this.#rtcpTimer = this.#dtmfTimer = undefined;
    const sending = this.#dtmfSending;
    this.#dtmfSending = undefined;
    if (sending) {
      this.#clearTimer(sending.timer);
      sending.reject(new MediaClosedError('RTP session'));
    }
    // RFC 3550 6.6: BYE when leaving. The socket lookup is synchronous for IP literals
    // (port-allocator.ts), so the datagram is with the kernel before the socket closes.
    this.#sendReport(true);
    const { rtp, rtcp } = this.#ports;
    rtp.off('message', this.#onRtpDatagram);
    rtcp.off('message', this.#onRtcpDatagram);
    this.#ports.close();
    rtp.off('error', this.#onSocketError);
    rtcp.off('error', this.#onSocketError);
    // Keep a no-op error listener: a late ICMP error on a closing socket must not crash us.
    rtp.on('error', noop);
    rtcp.on('error', noop);
    this.#fire('close');
  }

  // ---- receiving -----------------------------------------------------------------------

  readonly #onRtpDatagram = (msg: Buffer, rinfo: RemoteInfo): void => {
    if (this.#closed) return;
    // RFC 5761 section 4: with rtcp-mux, RTCP shares the port; its second octet (marker + PT)
    // falls in 192-223, which no RTP payload type we use (0-127 minus 64-95) can produce.
    if (msg.length >= 2 && msg[1]! >= 192 && msg[1]! <= 223 && msg[0]! >> 6 === 2) {
      this.#handleRtcp(msg, rinfo, true);
      return;
    }
    if (msg.length < RTP_HEADER) {
      this.#dropped.tooShort++;
      return;
    }
    if (msg[0]! >> 6 !== 2) {
      this.#dropped.badVersion++;
      return;
    }
    let packet: RtpPacket;
    try {
      packet = new RtpPacket(new DataView(msg.buffer, msg.byteOffset, msg.length));
    } catch {
      this.#dropped.malformed++;
      return;
    }
    const now = this.#clock.now();
    if (this.#symmetric && !this.#acceptSource(rinfo, now)) {
      this.#dropped.wrongSource++;
      return;
    }
    const ssrc = packet.getSsrc();
    const seq = packet.getSequenceNumber();
    let src = this.#source;
    if (src === undefined || src.ssrc !== ssrc) {
      // A new SSRC is a new source (RFC 3550 8.2 / A.1): fresh sequence and jitter state.
      const previous = src?.ssrc;
      src = this.#source = new SourceState(ssrc, seq);
      this.#dtmfReceiver.reset();
      this.#fire('ssrc', { previous, current: ssrc });
    }
    if (this.#closed) return; // a 'latch' or 'ssrc' listener closed the session
    if (src.update(seq) < 0) {
      this.#dropped.badSequence++;
      return;
    }
    const view = packet.getPayload();
    const payload = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    const timestamp = packet.getTimestamp();
    const payloadType = packet.getPayloadType();
    this.#packetsReceived++;
    this.#octetsReceived += payload.byteLength;
    this.#lastRtpMs = now;
    if (this.#timedOut) {
      this.#timedOut = false;
      this.#armMediaTimer(this.#mediaTimeoutMs);
    }
    if (payloadType === this.#dtmfPayloadType) {
      // Not in the jitter estimate: every packet of an event repeats the start timestamp.
      this.#dtmfReceiver.push(payload, timestamp, now);
      this.#armDtmfTimer(now);
      return;
    }
    src.updateJitter((now * this.clockRate) / 1000, timestamp);
    this.#fire('rtp', {
      payloadType,
      sequenceNumber: seq,
      timestamp,
      ssrc,
      marker: packet.getMarker(),
      payload,
      arrivalMs: now,
    });
  };

  /** Latching: true when this datagram's source is (or now becomes) the one we talk to. */
  #acceptSource(rinfo: RemoteInfo, now: number): boolean {
    const latched = this.#latchedRtp;
    if (latched === undefined || rinfo.port !== latched.port || rinfo.address !== latched.address) {
      if (latched !== undefined && now - this.#lastFromLatchedMs < this.#relatchAfterMs) return false;
      const next = { address: rinfo.address, port: rinfo.port };
      this.#latchedRtp = next;
      this.#fire('latch', { ...next });
    }
    this.#lastFromLatchedMs = now;
    return true;
  }

  readonly #onRtcpDatagram = (msg: Buffer, rinfo: RemoteInfo): void => {
    if (this.#closed) return;
    this.#handleRtcp(msg, rinfo, false);
  };

  #handleRtcp(msg: Buffer, rinfo: RemoteInfo, muxed: boolean): void {
    let packets: RtcpPacket[];
    try {
      packets = new CompoundPacket(new DataView(msg.buffer, msg.byteOffset, msg.length)).getPackets();
    } catch {
      this.#dropped.rtcpMalformed++;
      return;
    }
    const now = this.#clock.now();
    this.#rtcpReceived++;
    if (!muxed && this.#symmetric) {
      // RTCP latches like RTP, to wherever the peer's RTCP comes from (it only carries reports).
      const l = this.#latchedRtcp;
      if (!l || l.port !== rinfo.port || l.address !== rinfo.address) {
        this.#latchedRtcp = { address: rinfo.address, port: rinfo.port };
      }
    }
    for (const packet of packets) {
      try {
        switch (packet.getPacketType() as number) {
          case RTCP_SR: {
            const sr = packet as SenderReportPacket;
            this.#lastSr = {
              ssrc: sr.getSsrc(),
              ntpMiddle: ntpMiddle(sr.getNtpSeconds(), sr.getNtpFraction()),
              arrivalMs: now,
            };
            this.#handleReports(sr.getReports(), now);
            break;
          }
          case RTCP_RR:
            this.#handleReports((packet as ReceiverReportPacket).getReports(), now);
            break;
          case RTCP_BYE: {
            const bye = packet as ByePacket;
            const src = this.#source;
            if (src && bye.getSsrcs().includes(src.ssrc)) this.#fire('bye', bye.getReason());
            break;
          }
          default:
            break; // SDES, APP, feedback: nothing we act on
        }
      } catch {
        this.#dropped.rtcpMalformed++;
      }
    }
  }

  /** Report blocks about our SSRC: the peer's view of our stream, and the round trip. */
  #handleReports(reports: ReceptionReport[], now: number): void {
    for (const block of reports) {
      if (block.getSsrc() !== this.ssrc) continue;
      const lsr = block.getLastSRTimestamp();
      let rttMs: number | undefined;
      if (lsr !== 0) {
        // RFC 3550 6.4.1: RTT = A - LSR - DLSR, all in 1/65536 s, modulo 2^32.
        const a = this.#ntpMiddleAt(now);
        const rtt = (a - lsr - block.getDelaySinceLastSR()) >>> 0;
        if (rtt < 0x80000000) rttMs = (rtt * 1000) / 65536;
      }
      if (rttMs !== undefined) this.#rttMs = rttMs;
      const report: RemoteReport = {
        fractionLost: block.getFractionLost() / 256,
        packetsLost: readCumulativeLost(block),
        jitterMs: (block.getJitter() * 1000) / this.clockRate,
        extendedHighestSeq: block.getHighestSeqNumber(),
        rttMs,
        atMs: now,
      };
      this.#remoteReport = report;
      this.#fire('report', { ...report });
    }
  }

  readonly #onSocketError = (err: Error): void => {
    this.#dropped.socketErrors++;
    this.#report(new SocketError(err));
  };

  // ---- sending -------------------------------------------------------------------------

  /**
   * If send() paused longer than the talk-spurt gap (or a talk spurt was asked for), moves the
   * timestamp on by the whole frames that passed, so the timestamp keeps tracking the sampling
   * instant (RFC 3550 5.1). Returns whether a pause was detected.
   */
  #catchUp(now: number, force: boolean): boolean {
    if (Number.isNaN(this.#nextTsAtMs)) return false; // first packet: the marker is set anyway
    const behindMs = now - this.#nextTsAtMs;
    if (!force && behindMs <= this.#talkspurtGapMs) return false;
    if (behindMs > 0) {
      const frame = this.#lastIncrement > 0 ? this.#lastIncrement : 1;
      const units = Math.floor((behindMs * this.clockRate) / 1000 / frame) * frame;
      this.#nextTs = (this.#nextTs + units) >>> 0;
      this.#nextTsAtMs += (units * 1000) / this.clockRate;
    }
    return true;
  }

  #advanceMediaClock(now: number, increment: number): void {
    this.#nextTs = (this.#nextTs + increment) >>> 0;
    const due = Number.isNaN(this.#nextTsAtMs) ? now : Math.max(this.#nextTsAtMs, now);
    this.#nextTsAtMs = due + (increment * 1000) / this.clockRate;
    if (increment > 0) this.#lastIncrement = increment;
  }

  /** Writes the header and payload into the send buffer and sends; advances the sequence. */
  #sendPacket(payload: Uint8Array, payloadType: number, timestamp: number, marker: boolean): boolean {
    const dest = this.#latchedRtp ?? this.#sdpRtp;
    if (dest === undefined) {
      this.#dropped.noRemote++;
      return false;
    }
    const length = RTP_HEADER + payload.byteLength;
    if (length > this.#sendBuf.length) this.#newSendBuffer(length);
    const buf = this.#sendBuf;
    const view = this.#sendView;
    //  0                   1                   2                   3
    //  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    // |V=2|P|X|  CC   |M|     PT      |       sequence number         |
    // |                           timestamp                           |
    // |           synchronization source (SSRC) identifier            |
    buf[0] = 0x80;
    buf[1] = (marker ? 0x80 : 0) | payloadType;
    view.setUint16(2, this.#seq);
    view.setUint32(4, timestamp);
    view.setUint32(8, this.ssrc);
    buf.set(payload, RTP_HEADER);
    const socket = this.#ports.rtp;
    try {
      socket.send(buf, 0, length, dest.port, dest.address);
    } catch (err) {
      this.#dropped.socketErrors++;
      this.#report(new SocketError(err));
      return false;
    }
    // The send normally completed synchronously. If the kernel queue was full, libuv keeps a
    // reference to buf until the datagram leaves: hand it over and write the next one elsewhere.
    if (socket.getSendQueueCount() > 0) this.#newSendBuffer(this.#sendBuf.length);
    this.#seq = (this.#seq + 1) & 0xffff;
    this.#packetsSent++;
    this.#octetsSent += payload.byteLength;
    return true;
  }

  #newSendBuffer(size: number): void {
    this.#sendBuf = Buffer.alloc(Math.max(size, 1500));
    this.#sendView = new DataView(this.#sendBuf.buffer, this.#sendBuf.byteOffset, this.#sendBuf.byteLength);
  }

  #runDtmf(plan: ReturnType<typeof planDtmfPackets>, durationMs: number, payloadType: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.#closed) {
        reject(new MediaClosedError('RTP session'));
        return;
      }
      const startMs = this.#clock.now();
      this.#catchUp(startMs, false);
      const timestamp = this.#nextTs;
      const units = dtmfDurationUnits(durationMs, this.clockRate);
      const sending: { timer: unknown; reject: (err: Error) => void } = { timer: undefined, reject };
      this.#dtmfSending = sending;
      this.#dtmfMuted = true;
      let index = 0;
      const step = (): void => {
        if (this.#closed || this.#dtmfSending !== sending) return;
        const packet = plan[index]!;
        this.#sendPacket(packet.payload, payloadType, timestamp, packet.marker);
        if (packet.end && this.#dtmfMuted) this.#endDtmfMute(timestamp, units, startMs + durationMs);
        index++;
        if (index >= plan.length) {
          this.#dtmfSending = undefined;
          this.#dtmfSent++;
          resolve();
          return;
        }
        const delay = startMs + plan[index]!.atMs - this.#clock.now();
        sending.timer = this.#timers.setTimeout(step, Math.max(0, delay));
      };
      step();
    });
  }

  /** At the first end packet: audio may flow again, from the event's end on (RFC 4733 2.5.1.4). */
  #endDtmfMute(eventTs: number, units: number, endMs: number): void {
    this.#dtmfMuted = false;
    const end = (eventTs + units) >>> 0;
    // Serial-number comparison: only move forward (audio that ran on while muted may be ahead).
    if (((end - this.#nextTs) | 0) > 0) this.#nextTs = end;
    if (Number.isNaN(this.#nextTsAtMs) || this.#nextTsAtMs < endMs) this.#nextTsAtMs = endMs;
    if (this.#lastIncrement === 0) this.#lastIncrement = Math.round((this.clockRate * 20) / 1000);
    this.#markNext = true;
  }

  // ---- RTCP ----------------------------------------------------------------------------

  #ntpMsAt(now: number): number {
    return this.#ntpOffsetMs + now;
  }

  #ntpMiddleAt(now: number): number {
    const ms = this.#ntpMsAt(now);
    const seconds = Math.floor(ms / 1000);
    const fraction = Math.floor(((ms - seconds * 1000) / 1000) * TWO_32);
    return ntpMiddle(seconds >>> 0, fraction >>> 0);
  }

  #scheduleRtcp(first: boolean): void {
    if (this.#rtcpIntervalMs <= 0 || this.#closed) return;
    // RFC 3550 6.2 / 6.3.1, simplified for two parties: the interval is randomised over
    // [0.5, 1.5] x the mean so sessions do not synchronise; the first report comes after half.
    const mean = first ? this.#rtcpIntervalMs / 2 : this.#rtcpIntervalMs;
    const delay = mean * (0.5 + this.#random());
    this.#rtcpTimer = this.#timers.setTimeout(() => {
      this.#rtcpTimer = undefined;
      if (this.#closed) return;
      this.#sendReport(false);
      this.#scheduleRtcp(false);
    }, delay);
  }

  /**
   * One compound packet (RFC 3550 6.1): SR when we sent RTP since the report before last
   * (6.4), else RR; one report block for the peer's source; SDES CNAME; BYE when leaving.
   */
  #sendReport(bye: boolean): void {
    const dest = this.#rtcpMux ? (this.#latchedRtp ?? this.#sdpRtp) : this.#rtcpDestination();
    if (dest === undefined) return;
    try {
      const now = this.#clock.now();
      const blocks: ReceptionReport[] = [];
      const src = this.#source;
      if (src !== undefined && src.probation === 0) {
        const { fraction, cumulative } = src.intervalReport();
        this.#fractionLost = fraction / 256;
        const block = new ReceptionReport();
        block.setSsrc(src.ssrc);
        block.setFractionLost(fraction);
        // Negative totals (duplicates) are sent as 0: rtp.js encodes negatives non-standardly.
        block.setTotalLost(Math.min(Math.max(cumulative, 0), 0x7fffff));
        block.setHighestSeqNumber(src.extendedMax >>> 0);
        block.setJitter(Math.round(src.jitter) >>> 0);
        const lastSr = this.#lastSr;
        if (lastSr !== undefined && lastSr.ssrc === src.ssrc) {
          block.setLastSRTimestamp(lastSr.ntpMiddle);
          block.setDelaySinceLastSR(Math.round(((now - lastSr.arrivalMs) * 65536) / 1000) >>> 0);
        }
        blocks.push(block);
      }
      const compound = new CompoundPacket();
      const weSent = this.#packetsSent > this.#sentAtReportBefore;
      this.#sentAtReportBefore = this.#sentAtLastReport;
      this.#sentAtLastReport = this.#packetsSent;
      if (weSent) {
        const sr = new SenderReportPacket();
        sr.setSsrc(this.ssrc);
        const ms = this.#ntpMsAt(now);
        const seconds = Math.floor(ms / 1000);
        sr.setNtpSeconds(seconds >>> 0);
        sr.setNtpFraction(Math.floor(((ms - seconds * 1000) / 1000) * TWO_32) >>> 0);
        sr.setRtpTimestamp(this.#rtpTimestampAt(now));
        sr.setPacketCount(this.#packetsSent >>> 0);
        sr.setOctetCount(this.#octetsSent >>> 0);
        for (const block of blocks) sr.addReport(block);
        compound.addPacket(sr);
      } else {
        const rr = new ReceiverReportPacket();
        rr.setSsrc(this.ssrc);
        for (const block of blocks) rr.addReport(block);
        compound.addPacket(rr);
      }
      const sdes = new SdesPacket();
      const chunk = new SdesChunk();
      chunk.setSsrc(this.ssrc);
      chunk.addItem(SDES_CNAME, this.cname);
      sdes.addChunk(chunk);
      compound.addPacket(sdes);
      if (bye) {
        const byePacket = new ByePacket();
        byePacket.addSsrc(this.ssrc);
        compound.addPacket(byePacket);
      }
      const view = compound.getView();
      const socket = this.#rtcpMux ? this.#ports.rtp : this.#ports.rtcp;
      socket.send(Buffer.from(view.buffer, view.byteOffset, view.byteLength), dest.port, dest.address);
      this.#rtcpSent++;
    } catch (err) {
      this.#dropped.socketErrors++;
      this.#report(new SocketError(err));
    }
  }

  /** The peer's RTCP source once it sent any, else the SDP's RTCP port, else latched RTP + 1. */
  #rtcpDestination(): RemoteAddress | undefined {
    if (this.#latchedRtcp) return this.#latchedRtcp;
    if (this.#sdpRtcp) return this.#sdpRtcp;
    const rtp = this.#latchedRtp;
    return rtp && validPort(rtp.port + 1) ? { address: rtp.address, port: rtp.port + 1 } : undefined;
  }

  /** The RTP timestamp that corresponds to now (for the SR), extrapolated from the last packet. */
  #rtpTimestampAt(now: number): number {
    if (Number.isNaN(this.#lastSendMs)) return this.#nextTs;
    return (this.#lastSentTs + Math.round(((now - this.#lastSendMs) * this.clockRate) / 1000)) >>> 0;
  }

  // ---- timers and events ---------------------------------------------------------------

  #armMediaTimer(delay: number): void {
    this.#clearTimer(this.#mediaTimer);
    this.#mediaTimer = undefined;
    if (this.#closed || this.#mediaTimeoutMs <= 0) return;
    this.#mediaTimer = this.#timers.setTimeout(this.#checkMedia, Math.max(1, delay));
  }

  /**
   * Fires at lastRtp + timeout at the earliest. Packets do not touch the timer (that would cost
   * a timer reset per packet); instead the check re-arms itself for the time remaining.
   */
  readonly #checkMedia = (): void => {
    this.#mediaTimer = undefined;
    if (this.#closed || this.#mediaTimeoutMs <= 0) return;
    const idle = this.#clock.now() - this.#lastRtpMs;
    if (idle >= this.#mediaTimeoutMs) {
      this.#timedOut = true;
      this.#fire('timeout');
    } else {
      this.#armMediaTimer(this.#mediaTimeoutMs - idle);
    }
  };

  #armDtmfTimer(now: number): void {
    const deadline = this.#dtmfReceiver.deadline;
    this.#clearTimer(this.#dtmfTimer);
    this.#dtmfTimer = undefined;
    if (deadline === undefined || this.#closed) return;
    this.#dtmfTimer = this.#timers.setTimeout(
      () => {
        this.#dtmfTimer = undefined;
        if (this.#closed) return;
        const t = this.#clock.now();
        this.#dtmfReceiver.poll(t);
        this.#armDtmfTimer(t);
      },
      Math.max(1, deadline - now),
    );
  }

  #clearTimer(handle: unknown): void {
    if (handle !== undefined) this.#timers.clearTimeout(handle);
  }

  /** Emits without letting a listener's exception into the socket handler (or timer). */
  #fire<K extends keyof RtpSessionEvents>(event: K, ...args: RtpSessionEvents[K]): void {
    try {
      (this.emit as (e: K, ...a: RtpSessionEvents[K]) => boolean)(event, ...args);
    } catch (err) {
      this.#report(new ListenerError(String(event), err));
    }
  }

  #report(error: MediaError): void {
    this.#logger?.warn({ err: error, code: error.code, ssrc: this.ssrc }, error.message);
    if (this.listenerCount('error') === 0) return;
    try {
      this.emit('error', error);
    } catch (err) {
      this.#logger?.warn({ err }, "an 'error' listener of an RTP session threw");
    }
  }
}

function noop(): void {}
