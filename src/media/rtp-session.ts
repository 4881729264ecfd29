/**
 * One RTP session of one call: an RTP socket (even port) and its RTCP socket (port + 1), as
 * handed out by PortAllocator, for one audio stream in each direction.
 *
 *   peer --RTP--> rtp socket --parse (rtp.js)--> latch? SSRC? RFC 3550 A.1/A.8 --> 'rtp' | 'dtmf'
 *   send(payload) --12-byte header into a reused buffer--> rtp socket --> latched source | SDP
 *   every ~5 s: SR or RR + SDES(CNAME) --> rtcp socket;  incoming SR/RR --> 'report' (loss, RTT)
 *   close(): RR/SR + SDES + BYE, sockets closed, ports back to the allocator, 'close'
 *
 * This file is the socket wiring, the public API and the event lifecycle; the parts it
 * composes live next to it (docs/media-rtp.md has the file map):
 *   rtp-symmetric-latch.ts  where we send, which sources we accept (RFC 4961)
 *   rtp-receive-stats.ts    per-source sequence, loss and jitter (RFC 3550 A.1, A.3, A.8)
 *   rtp-media-clock.ts      the timestamp of the stream we send, talk-spurt gaps
 *   rtp-packet-writer.ts    the 12-byte header written into a reused buffer
 *   rtcp-reporter.ts        SR/RR state, the peer's reports, the round trip
 *   rtcp.ts                 RTCP packets on the wire, NTP time, the report interval
 *   dtmf.ts                 RFC 4733 payloads, the send schedule, the receiver
 *
 * Received packets are parsed with rtp.js (0.36 us per packet, measured; docs/media-rtp.md):
 * typed parsing of CSRCs, extensions and padding is worth its small cost on receive. Sending
 * avoids rtp.js for a DataView write (rtp-packet-writer.ts), where the cost matters.
 *
 * Garbage on the wire never throws: it is counted in stats().dropped. Listener exceptions are
 * caught and reported as an 'error' event (when someone listens) and to the logger. Nothing is
 * logged per packet.
 */
import { randomBytes, randomInt } from 'node:crypto';
import type { RemoteInfo } from 'node:dgram';
import { EventEmitter } from 'node:events';
import { RtpPacket, type RtcpPacket } from 'rtp.js/packets';
import { DtmfReceiver, dtmfDurationUnits, planDtmfPackets, type DtmfDigit } from './dtmf.ts';
import { ListenerError, MediaClosedError, SocketError, type MediaError } from './errors.ts';
import type { RtpPortPair } from './port-allocator.ts';
import { isMuxedRtcp, nextReportDelayMs, parseCompound } from './rtcp.ts';
import { RtcpReporter, type RemoteReport } from './rtcp-reporter.ts';
import { RtpMediaClock } from './rtp-media-clock.ts';
import { RTP_HEADER_BYTES, RtpPacketWriter } from './rtp-packet-writer.ts';
import { RtpReceiveStats } from './rtp-receive-stats.ts';
import { SymmetricLatch, type RemoteAddress, type SdpRemote } from './rtp-symmetric-latch.ts';
import { SRTP_REPLAYED, SrtpSession, type SrtpKeys } from './srtp.ts';
import { systemClock, systemTimers, type Clock, type ReceivedRtp, type Timers } from './types.ts';

// Part of this module's API since before the split; importers keep importing them from here.
export type { RemoteAddress, RemoteReport, SdpRemote, Timers };

/** Structurally a pino logger (child per call); only warn is used. */
export interface MediaLogger {
  warn(obj: object, msg?: string): void;
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
  /**
   * SDES-SRTP keys (RTP/SAVP was agreed): every RTP and RTCP packet is protected on the way out
   * and must authenticate on the way in (srtp.ts). Absent: plain RTP.
   */
  srtp?: SrtpKeys;
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
    /**
     * SRTP packets whose authentication tag failed (or too short for one): never decoded.
     * Optional in the type only for call legs without RTP (media streams); RtpSession sets them.
     */
    srtpAuthFailed?: number;
    /**
     * SRTCP packets that failed authentication. Apart from attacks: plain RTCP from a peer that
     * tears its SRTP down before its last RTCP BYE (baresip 1.0 does).
     */
    srtcpAuthFailed?: number;
    /** SRTP/SRTCP packets already received or older than the replay window. */
    srtpReplayed?: number;
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

const SEQ_MOD = 0x10000;

export class RtpSession extends EventEmitter<RtpSessionEvents> {
  readonly ssrc: number;
  readonly cname: string;
  readonly clockRate: number;

  readonly #ports: RtpPortPair;
  readonly #clock: Clock;
  readonly #timers: Timers;
  readonly #random: () => number;
  readonly #logger: MediaLogger | undefined;
  readonly #rtcpIntervalMs: number;
  readonly #rtcpMux: boolean;
  readonly #dtmfPayloadType: number | undefined;
  readonly #dtmfUpdateIntervalMs: number;
  #mediaTimeoutMs: number;
  #closed = false;

  /** Where to send, and which sources we accept. */
  readonly #latch: SymmetricLatch;

  // Sending.
  readonly #mediaClock: RtpMediaClock;
  readonly #writer: RtpPacketWriter;
  #seq: number;
  /** The next audio packet starts a talk spurt: marker bit (RFC 3551 4.1). */
  #markNext = true;
  /** ... and its timestamp jumps over the pause even if send() was not late (startTalkspurt). */
  #catchUpNext = false;
  #packetsSent = 0;
  #octetsSent = 0;

  // Sending DTMF: one event at a time; audio is muted while one is on the wire.
  #dtmfQueue: Promise<void> = Promise.resolve();
  #dtmfSending: { timer: unknown; reject: (err: Error) => void } | undefined;
  #dtmfMuted = false;
  #dtmfSent = 0;

  // Receiving.
  #source: RtpReceiveStats | undefined;
  #packetsReceived = 0;
  #octetsReceived = 0;
  #lastRtpMs: number;
  #timedOut = false;
  #mediaTimer: unknown;
  readonly #dtmfReceiver: DtmfReceiver;
  #dtmfTimer: unknown;
  readonly #dropped: Required<RtpSessionStats['dropped']> = {
    tooShort: 0,
    badVersion: 0,
    malformed: 0,
    wrongSource: 0,
    badSequence: 0,
    rtcpMalformed: 0,
    noRemote: 0,
    mutedByDtmf: 0,
    socketErrors: 0,
    srtpAuthFailed: 0,
    srtcpAuthFailed: 0,
    srtpReplayed: 0,
  };
  /** SRTP contexts of the current keys; undefined for plain RTP. */
  #srtp: SrtpSession | undefined;

  // RTCP.
  readonly #rtcp: RtcpReporter;
  #rtcpTimer: unknown;
  #rtcpSent = 0;
  #rtcpReceived = 0;

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
    this.#latch = new SymmetricLatch({
      symmetric: options.symmetric ?? true,
      relatchAfterMs: options.relatchAfterMs ?? 500,
      onLatch: (remote) => this.#fire('latch', remote),
    });
    this.#rtcpIntervalMs = options.rtcpIntervalMs ?? 5000;
    this.#rtcpMux = options.rtcpMux ?? false;
    this.#mediaTimeoutMs = options.mediaTimeoutMs ?? 30_000;
    this.#dtmfPayloadType = options.dtmfPayloadType;
    this.#dtmfUpdateIntervalMs = options.dtmfUpdateIntervalMs ?? 50;
    if (this.#dtmfPayloadType !== undefined && !(this.#dtmfPayloadType >= 0 && this.#dtmfPayloadType < 128)) {
      throw new RangeError(`DTMF payload type ${this.#dtmfPayloadType} out of 0-127`);
    }

    this.ssrc = (options.ssrc ?? randomBytes(4).readUInt32BE(0)) >>> 0;
    this.#seq = (options.initialSequence ?? randomInt(0, SEQ_MOD)) & 0xffff;
    const initialTimestamp = options.initialTimestamp ?? randomBytes(4).readUInt32BE(0);
    this.#mediaClock = new RtpMediaClock(clockRate, initialTimestamp, options.talkspurtGapMs ?? 200);
    this.cname = options.cname ?? randomBytes(12).toString('base64url');
    this.#writer = new RtpPacketWriter(this.ssrc);

    const now = this.#clock.now();
    this.#rtcp = new RtcpReporter({
      ssrc: this.ssrc,
      cname: this.cname,
      clockRate,
      nowMs: now,
      onReport: (report) => this.#fire('report', report),
      onBye: (reason) => this.#fire('bye', reason),
    });
    this.#lastRtpMs = now;
    this.#dtmfReceiver = new DtmfReceiver({
      clockRate,
      endTimeoutMs: options.dtmfEndTimeoutMs ?? 500,
      onDigit: (digit) => this.#fire('dtmf', digit),
    });
    if (options.remote) this.setRemote(options.remote);
    if (options.srtp) this.#srtp = new SrtpSession(options.srtp);

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
    return this.#latch.remote;
  }

  /**
   * Sets the peer's SDP address (answer, or a re-INVITE). A changed address forgets the latch,
   * so the next packet from the peer latches again.
   * @throws RangeError on a bad port or an empty address.
   */
  setRemote(remote: SdpRemote): void {
    this.#latch.setSdp(remote);
  }

  /**
   * New SDES keys (a re-INVITE changed them, RFC 4568 7.1.4): new SRTP contexts for both
   * directions, ROCs and replay windows from scratch. undefined: plain RTP from now on.
   * @throws RangeError when a key is not 30 bytes.
   */
  setSrtp(keys: SrtpKeys | undefined): void {
    const next = keys ? new SrtpSession(keys) : undefined;
    // A key that stays goes on with its ROC and replay state (srtp.ts continueFrom).
    if (next && this.#srtp) next.continueFrom(this.#srtp);
    this.#srtp = next;
  }

  /** Whether packets are SRTP-protected now. */
  get secure(): boolean {
    return this.#srtp !== undefined;
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
    const pause = this.#mediaClock.catchUp(now, this.#catchUpNext);
    this.#catchUpNext = false;
    const timestamp = this.#mediaClock.next;
    this.#mediaClock.advance(now, timestampIncrement);
    if (this.#dtmfMuted) {
      // RFC 4733 2.5.1.1 lets audio continue during an event, but two signals of one key would
      // reach the peer; gateways mute. The media clock runs on, so audio resumes in time.
      this.#dropped.mutedByDtmf++;
      return false;
    }
    const marker = options.marker ?? (this.#markNext || pause);
    this.#markNext = false;
    if (!this.#sendPacket(payload, payloadType, timestamp, marker)) return false;
    this.#mediaClock.sent(timestamp, now);
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
    const valid = src !== undefined && src.validated;
    return {
      ssrc: this.ssrc,
      remoteSsrc: src?.ssrc,
      packetsSent: this.#packetsSent,
      bytesSent: this.#octetsSent,
      packetsReceived: this.#packetsReceived,
      bytesReceived: this.#octetsReceived,
      packetsLost: valid ? src.lost : 0,
      fractionLost: this.#rtcp.fractionLost,
      extendedHighestSeq: valid ? src.extendedMax : undefined,
      jitterMs: src ? (src.jitter * 1000) / this.clockRate : 0,
      rttMs: this.#rtcp.rttMs,
      remote: this.#rtcp.remoteReport,
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
    if (isMuxedRtcp(msg)) {
      // RFC 5761: RTCP multiplexed on the RTP port.
      this.#handleRtcp(msg, rinfo, true);
      return;
    }
    if (msg.length < RTP_HEADER_BYTES) {
      this.#dropped.tooShort++;
      return;
    }
    if (msg[0]! >> 6 !== 2) {
      this.#dropped.badVersion++;
      return;
    }
    let length = msg.length;
    if (this.#srtp !== undefined) {
      // Authenticated (and replay-checked) before anything else looks at it: a forged packet
      // neither latches nor reaches the decoder (RFC 3711 3.3).
      length = this.#srtp.unprotectRtp(msg, length);
      if (length < 0) {
        this.#countSrtpDrop(length);
        return;
      }
    }
    let packet: RtpPacket;
    try {
      packet = new RtpPacket(new DataView(msg.buffer, msg.byteOffset, length));
    } catch {
      this.#dropped.malformed++;
      return;
    }
    const now = this.#clock.now();
    if (!this.#latch.acceptRtp(rinfo, now)) {
      this.#dropped.wrongSource++;
      return;
    }
    const ssrc = packet.getSsrc();
    const seq = packet.getSequenceNumber();
    let src = this.#source;
    if (src === undefined || src.ssrc !== ssrc) {
      // A new SSRC is a new source (RFC 3550 8.2 / A.1): fresh sequence and jitter state.
      const previous = src?.ssrc;
      src = this.#source = new RtpReceiveStats(ssrc, seq);
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

  readonly #onRtcpDatagram = (msg: Buffer, rinfo: RemoteInfo): void => {
    if (this.#closed) return;
    this.#handleRtcp(msg, rinfo, false);
  };

  #handleRtcp(msg: Buffer, rinfo: RemoteInfo, muxed: boolean): void {
    if (this.#srtp !== undefined) {
      const length = this.#srtp.unprotectRtcp(msg, msg.length);
      if (length < 0) {
        this.#countSrtpDrop(length, true);
        return;
      }
      msg = msg.subarray(0, length);
    }
    let packets: RtcpPacket[];
    try {
      packets = parseCompound(msg);
    } catch {
      this.#dropped.rtcpMalformed++;
      return;
    }
    const now = this.#clock.now();
    this.#rtcpReceived++;
    // RTCP arriving on the RTP port does not latch: with rtcp-mux our reports follow RTP's latch.
    if (!muxed) this.#latch.acceptRtcp(rinfo);
    for (const packet of packets) {
      try {
        this.#rtcp.receive(packet, now, this.#source?.ssrc);
      } catch {
        this.#dropped.rtcpMalformed++;
      }
    }
  }

  #countSrtpDrop(code: number, rtcp = false): void {
    if (code === SRTP_REPLAYED) this.#dropped.srtpReplayed++;
    else if (rtcp) this.#dropped.srtcpAuthFailed++;
    else this.#dropped.srtpAuthFailed++; // SRTP_AUTH_FAILED, or too short to carry a tag
  }

  readonly #onSocketError = (err: Error): void => {
    this.#dropped.socketErrors++;
    this.#report(new SocketError(err));
  };

  // ---- sending -------------------------------------------------------------------------

  /** Writes the header and payload into the send buffer and sends; advances the sequence. */
  #sendPacket(payload: Uint8Array, payloadType: number, timestamp: number, marker: boolean): boolean {
    const dest = this.#latch.rtpDestination;
    if (dest === undefined) {
      this.#dropped.noRemote++;
      return false;
    }
    let length = this.#writer.write(this.#seq, timestamp, payloadType, marker, payload);
    // In place: the writer keeps room for the tag behind the packet.
    if (this.#srtp !== undefined) length = this.#srtp.protectRtp(this.#writer.buffer, length);
    const socket = this.#ports.rtp;
    try {
      socket.send(this.#writer.buffer, 0, length, dest.port, dest.address);
    } catch (err) {
      this.#dropped.socketErrors++;
      this.#report(new SocketError(err));
      return false;
    }
    // The send normally completed synchronously. If the kernel queue was full, libuv keeps a
    // reference to the buffer until the datagram leaves: hand it over, write the next elsewhere.
    if (socket.getSendQueueCount() > 0) this.#writer.detach();
    this.#seq = (this.#seq + 1) & 0xffff;
    this.#packetsSent++;
    this.#octetsSent += payload.byteLength;
    return true;
  }

  #runDtmf(plan: ReturnType<typeof planDtmfPackets>, durationMs: number, payloadType: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.#closed) {
        reject(new MediaClosedError('RTP session'));
        return;
      }
      const startMs = this.#clock.now();
      this.#mediaClock.catchUp(startMs, false);
      const timestamp = this.#mediaClock.next;
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
    this.#mediaClock.resumeAfterEvent(eventTs, units, endMs);
    this.#markNext = true;
  }

  // ---- RTCP ----------------------------------------------------------------------------

  #scheduleRtcp(first: boolean): void {
    if (this.#rtcpIntervalMs <= 0 || this.#closed) return;
    const delay = nextReportDelayMs(this.#rtcpIntervalMs, first, this.#random);
    this.#rtcpTimer = this.#timers.setTimeout(() => {
      this.#rtcpTimer = undefined;
      if (this.#closed) return;
      this.#sendReport(false);
      this.#scheduleRtcp(false);
    }, delay);
  }

  /** One compound report (RFC 3550 6.1; see RtcpReporter.buildReport), with BYE when leaving. */
  #sendReport(bye: boolean): void {
    const dest = this.#rtcpMux ? this.#latch.rtpDestination : this.#latch.rtcpDestination;
    if (dest === undefined) return;
    try {
      const now = this.#clock.now();
      const sent = { packets: this.#packetsSent, octets: this.#octetsSent, rtpTimestamp: this.#mediaClock.timestampAt(now) };
      const report = this.#rtcp.buildReport(now, this.#source, sent, bye);
      const packet = this.#srtp !== undefined ? this.#srtp.protectRtcp(report) : report;
      const socket = this.#rtcpMux ? this.#ports.rtp : this.#ports.rtcp;
      socket.send(packet, dest.port, dest.address);
      this.#rtcpSent++;
    } catch (err) {
      this.#dropped.socketErrors++;
      this.#report(new SocketError(err));
    }
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
