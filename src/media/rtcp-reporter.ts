/**
 * What one RTP session remembers about RTCP between reports (RFC 3550 section 6): whether we
 * are a sender (SR) or only a receiver (RR), the peer's last SR (echoed as LSR/DLSR so the peer
 * can measure the round trip), and the peer's last report about our stream (loss, jitter, RTT).
 *
 * RtpSession owns the sockets and the report timer; this class turns state into packets and
 * packets into state. Events go out through the callbacks given to the constructor.
 */
import type { ByePacket, ReceiverReportPacket, ReceptionReport, RtcpPacket, SenderReportPacket } from 'rtp.js/packets';
import {
  RTCP_BYE,
  RTCP_RR,
  RTCP_SR,
  buildCompound,
  delaySinceLastSr,
  ntpMiddle,
  ntpOffsetMs,
  ntpTimestamp,
  readCumulativeLost,
  roundTripMs,
  type ReportBlock,
} from './rtcp.ts';
import type { RtpReceiveStats } from './rtp-receive-stats.ts';

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

export interface RtcpReporterOptions {
  /** Our SSRC and CNAME. */
  ssrc: number;
  cname: string;
  clockRate: number;
  /** The session clock's reading now: the SR's NTP time is that clock mapped onto wallclock. */
  nowMs: number;
  /** A report block about our stream arrived (called with a copy). */
  onReport: (report: RemoteReport) => void;
  /** The peer said BYE for the source we receive. */
  onBye: (reason: string | undefined) => void;
}

/** Our sending figures at the moment of a report. */
export interface SendCounters {
  packets: number;
  /** Payload octets. */
  octets: number;
  /** The RTP timestamp that corresponds to the report's time (the media clock extrapolated). */
  rtpTimestamp: number;
}

export class RtcpReporter {
  readonly #ssrc: number;
  readonly #cname: string;
  readonly #clockRate: number;
  /** NTP time (ms since 1900) minus clock time: maps the monotonic clock to SR wallclock. */
  readonly #ntpOffsetMs: number;
  readonly #onReport: (report: RemoteReport) => void;
  readonly #onBye: (reason: string | undefined) => void;
  #sentAtLastReport = 0;
  #sentAtReportBefore = 0;
  #fractionLost = 0;
  #lastSr: { ssrc: number; ntpMiddle: number; arrivalMs: number } | undefined;
  #remoteReport: RemoteReport | undefined;
  #rttMs: number | undefined;

  constructor(options: RtcpReporterOptions) {
    this.#ssrc = options.ssrc;
    this.#cname = options.cname;
    this.#clockRate = options.clockRate;
    this.#ntpOffsetMs = ntpOffsetMs(options.nowMs);
    this.#onReport = options.onReport;
    this.#onBye = options.onBye;
  }

  /** Loss in our last report interval, 0..1. */
  get fractionLost(): number {
    return this.#fractionLost;
  }

  /** Last round trip from the peer's RTCP (undefined until a report echoes one of our SRs). */
  get rttMs(): number | undefined {
    return this.#rttMs;
  }

  /** The peer's last report about our stream (a copy). */
  get remoteReport(): RemoteReport | undefined {
    return this.#remoteReport && { ...this.#remoteReport };
  }

  /**
   * Our next compound packet: SR when we sent RTP since the report before last (RFC 3550 6.4),
   * else RR; one report block about the peer's source once A.1 validated it; SDES CNAME; BYE
   * when leaving. Advances the interval counters (A.3) and the SR/RR bookkeeping, so call it
   * once per packet sent.
   */
  buildReport(nowMs: number, source: RtpReceiveStats | undefined, sent: SendCounters, bye: boolean): Buffer {
    let block: ReportBlock | undefined;
    if (source !== undefined && source.validated) {
      const { fraction, cumulative } = source.intervalReport();
      this.#fractionLost = fraction / 256;
      const lastSr = this.#lastSr;
      block = {
        ssrc: source.ssrc,
        fractionLost: fraction,
        cumulativeLost: cumulative,
        extendedHighestSeq: source.extendedMax,
        jitter: source.jitter,
        lastSr:
          lastSr !== undefined && lastSr.ssrc === source.ssrc
            ? { ntpMiddle: lastSr.ntpMiddle, delay: delaySinceLastSr(nowMs - lastSr.arrivalMs) }
            : undefined,
      };
    }
    const weSent = sent.packets > this.#sentAtReportBefore;
    this.#sentAtReportBefore = this.#sentAtLastReport;
    this.#sentAtLastReport = sent.packets;
    return buildCompound({
      ssrc: this.#ssrc,
      cname: this.#cname,
      sender: weSent
        ? { ntpMs: this.#ntpOffsetMs + nowMs, rtpTimestamp: sent.rtpTimestamp, packetCount: sent.packets, octetCount: sent.octets }
        : undefined,
      block,
      bye,
    });
  }

  /**
   * Takes in one packet of a received compound datagram: remembers an SR for the next LSR,
   * reports blocks about our SSRC (onReport) and a BYE for remoteSsrc, the source we receive
   * (onBye). Other packet types are ignored.
   * @throws when rtp.js finds the packet malformed (the caller counts it and goes on).
   */
  receive(packet: RtcpPacket, nowMs: number, remoteSsrc: number | undefined): void {
    switch (packet.getPacketType() as number) {
      case RTCP_SR: {
        const sr = packet as SenderReportPacket;
        this.#lastSr = {
          ssrc: sr.getSsrc(),
          ntpMiddle: ntpMiddle(sr.getNtpSeconds(), sr.getNtpFraction()),
          arrivalMs: nowMs,
        };
        this.#receiveBlocks(sr.getReports(), nowMs);
        break;
      }
      case RTCP_RR:
        this.#receiveBlocks((packet as ReceiverReportPacket).getReports(), nowMs);
        break;
      case RTCP_BYE: {
        const bye = packet as ByePacket;
        if (remoteSsrc !== undefined && bye.getSsrcs().includes(remoteSsrc)) this.#onBye(bye.getReason());
        break;
      }
      default:
        break; // SDES, APP, feedback: nothing we act on
    }
  }

  /** Report blocks about our SSRC: the peer's view of our stream, and the round trip. */
  #receiveBlocks(blocks: ReceptionReport[], nowMs: number): void {
    for (const block of blocks) {
      if (block.getSsrc() !== this.#ssrc) continue;
      const arrival = ntpTimestamp(this.#ntpOffsetMs + nowMs);
      const rttMs = roundTripMs(ntpMiddle(arrival.seconds, arrival.fraction), block.getLastSRTimestamp(), block.getDelaySinceLastSR());
      if (rttMs !== undefined) this.#rttMs = rttMs;
      const report: RemoteReport = {
        fractionLost: block.getFractionLost() / 256,
        packetsLost: readCumulativeLost(block),
        jitterMs: (block.getJitter() * 1000) / this.#clockRate,
        extendedHighestSeq: block.getHighestSeqNumber(),
        rttMs,
        atMs: nowMs,
      };
      this.#remoteReport = report;
      this.#onReport({ ...report });
    }
  }
}
