/**
 * RTCP on the wire (RFC 3550 section 6): building our compound packets, parsing the peer's,
 * NTP time arithmetic for the LSR/DLSR round trip, and the randomised report interval.
 * Stateless: RtcpReporter (rtcp-reporter.ts) keeps what one session remembers between reports.
 *
 * Packets are built and parsed with rtp.js. RTCP is a packet every few seconds, so the cost of
 * rtp.js objects (docs/media-rtp.md) does not matter here, unlike on the RTP send path.
 */
import {
  ByePacket,
  CompoundPacket,
  ReceiverReportPacket,
  ReceptionReport,
  SdesChunk,
  SdesPacket,
  SenderReportPacket,
  type RtcpPacket,
  type SdesItemType,
} from 'rtp.js/packets';

export const RTCP_SR = 200;
export const RTCP_RR = 201;
export const RTCP_BYE = 203;
const SDES_CNAME = 1 as SdesItemType;

const TWO_32 = 0x100000000;
/** Seconds from 1900 (NTP epoch) to 1970 (Unix epoch). */
const NTP_UNIX_OFFSET_S = 2208988800;

// ---- NTP time and the round trip ----------------------------------------------------------

/**
 * NTP time (ms since 1900) minus clock time, for a clock that reads clockNowMs right now: adding
 * it to a reading of that clock gives the wallclock an SR carries.
 */
export function ntpOffsetMs(clockNowMs: number): number {
  return Date.now() + NTP_UNIX_OFFSET_S * 1000 - clockNowMs;
}

/** A 64-bit NTP timestamp (RFC 3550 4) of ntpMs, as its 32-bit seconds and fraction. */
export function ntpTimestamp(ntpMs: number): { seconds: number; fraction: number } {
  const seconds = Math.floor(ntpMs / 1000);
  const fraction = Math.floor(((ntpMs - seconds * 1000) / 1000) * TWO_32);
  return { seconds: seconds >>> 0, fraction: fraction >>> 0 };
}

/** Middle 32 bits of a 64-bit NTP timestamp (the LSR field, RFC 3550 6.4.1). */
export function ntpMiddle(seconds: number, fraction: number): number {
  return (((seconds & 0xffff) << 16) | (fraction >>> 16)) >>> 0;
}

/** DLSR: ms since the peer's last SR arrived, in 1/65536 s (RFC 3550 6.4.1). */
export function delaySinceLastSr(elapsedMs: number): number {
  return Math.round((elapsedMs * 65536) / 1000) >>> 0;
}

/**
 * RFC 3550 6.4.1: RTT = A - LSR - DLSR, all in 1/65536 s, modulo 2^32, where A is the middle 32
 * bits of the NTP time at which the report arrived. Undefined when the report echoes no SR of
 * ours (LSR 0) or the result is negative (clock trouble: more than half the 32-bit range).
 */
export function roundTripMs(arrivalNtpMiddle: number, lsr: number, dlsr: number): number | undefined {
  if (lsr === 0) return undefined;
  const rtt = (arrivalNtpMiddle - lsr - dlsr) >>> 0;
  return rtt < 0x80000000 ? (rtt * 1000) / 65536 : undefined;
}

// ---- the report interval ------------------------------------------------------------------

/**
 * The delay until the next report. RFC 3550 6.2 / 6.3.1, simplified for two parties: the mean
 * interval is randomised over [0.5, 1.5] x so sessions do not synchronise; the first report
 * comes after half of it. random() returns [0, 1), like Math.random.
 */
export function nextReportDelayMs(meanIntervalMs: number, first: boolean, random: () => number): number {
  const mean = first ? meanIntervalMs / 2 : meanIntervalMs;
  return mean * (0.5 + random());
}

// ---- receiving ----------------------------------------------------------------------------

/**
 * RFC 5761 section 4: with rtcp-mux, RTCP shares the RTP port; its second octet (marker + PT)
 * falls in 192-223, which no RTP payload type we use (0-127 minus 64-95) can produce.
 */
export function isMuxedRtcp(datagram: Uint8Array): boolean {
  return datagram.length >= 2 && datagram[1]! >= 192 && datagram[1]! <= 223 && datagram[0]! >> 6 === 2;
}

/** The packets of a compound RTCP datagram. @throws when it is not a valid compound packet. */
export function parseCompound(datagram: Buffer): RtcpPacket[] {
  return new CompoundPacket(new DataView(datagram.buffer, datagram.byteOffset, datagram.length)).getPackets();
}

/**
 * Cumulative packets lost of a reception report, read from its bytes: rtp.js 0.15.5's
 * getTotalLost() masks 12 bits instead of 24 (so 5000 reads back as 904) and decodes negative
 * values as sign-magnitude. The field is a 24-bit two's complement integer.
 */
export function readCumulativeLost(report: ReceptionReport): number {
  const view = report.getView();
  return ((view.getUint32(4) & 0xffffff) << 8) >> 8;
}

// ---- sending ------------------------------------------------------------------------------

/** One reception report block about the peer's source (RFC 3550 6.4.1). */
export interface ReportBlock {
  ssrc: number;
  /** Loss in the last interval, in 1/256 (0-255). */
  fractionLost: number;
  /** Cumulative loss; negative (duplicates) is sent as 0. */
  cumulativeLost: number;
  extendedHighestSeq: number;
  /** Interarrival jitter in timestamp units. */
  jitter: number;
  /** The echo of the peer's last SR, when we had one from this source. */
  lastSr?: { ntpMiddle: number; delay: number };
}

/** The sender-info part of an SR (RFC 3550 6.4.1). */
export interface SenderInfo {
  ntpMs: number;
  rtpTimestamp: number;
  packetCount: number;
  octetCount: number;
}

export interface CompoundReport {
  ssrc: number;
  cname: string;
  /** Present: an SR (we sent RTP lately). Absent: an RR. */
  sender: SenderInfo | undefined;
  block: ReportBlock | undefined;
  /** Append a BYE for our SSRC (RFC 3550 6.6: when leaving). */
  bye: boolean;
}

/**
 * One compound packet (RFC 3550 6.1): SR or RR with at most one report block, SDES CNAME, and
 * BYE when leaving. Returns a Buffer over the packet's bytes, ready for dgram.send.
 */
export function buildCompound(report: CompoundReport): Buffer {
  const blocks: ReceptionReport[] = [];
  if (report.block) blocks.push(reportBlock(report.block));
  const compound = new CompoundPacket();
  const { sender } = report;
  if (sender) {
    const sr = new SenderReportPacket();
    sr.setSsrc(report.ssrc);
    const ntp = ntpTimestamp(sender.ntpMs);
    sr.setNtpSeconds(ntp.seconds);
    sr.setNtpFraction(ntp.fraction);
    sr.setRtpTimestamp(sender.rtpTimestamp);
    sr.setPacketCount(sender.packetCount >>> 0);
    sr.setOctetCount(sender.octetCount >>> 0);
    for (const block of blocks) sr.addReport(block);
    compound.addPacket(sr);
  } else {
    const rr = new ReceiverReportPacket();
    rr.setSsrc(report.ssrc);
    for (const block of blocks) rr.addReport(block);
    compound.addPacket(rr);
  }
  const sdes = new SdesPacket();
  const chunk = new SdesChunk();
  chunk.setSsrc(report.ssrc);
  chunk.addItem(SDES_CNAME, report.cname);
  sdes.addChunk(chunk);
  compound.addPacket(sdes);
  if (report.bye) {
    const byePacket = new ByePacket();
    byePacket.addSsrc(report.ssrc);
    compound.addPacket(byePacket);
  }
  const view = compound.getView();
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

function reportBlock(fields: ReportBlock): ReceptionReport {
  const block = new ReceptionReport();
  block.setSsrc(fields.ssrc);
  block.setFractionLost(fields.fractionLost);
  // Negative totals (duplicates) are sent as 0: rtp.js encodes negatives non-standardly.
  block.setTotalLost(Math.min(Math.max(fields.cumulativeLost, 0), 0x7fffff));
  block.setHighestSeqNumber(fields.extendedHighestSeq >>> 0);
  block.setJitter(Math.round(fields.jitter) >>> 0);
  if (fields.lastSr) {
    block.setLastSRTimestamp(fields.lastSr.ntpMiddle);
    block.setDelaySinceLastSR(fields.lastSr.delay);
  }
  return block;
}
