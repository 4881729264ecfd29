/**
 * The caller's media endpoint for the call bridge's end-to-end tests: SIPp does the
 * signaling (test/interop/scenarios/bridge-*.xml advertise this socket's port with
 * `-key media_port`), and the test process is the phone's RTP side.
 *
 *   const peer = await startRtpPeer();                 // 127.0.0.1:<even port>, RTCP on +1
 *   runSipp({ scenario: 'bridge-acl', keys: { caller, media_port: peer.port }, ... });
 *   await peer.waitFor(() => peer.spurts().length > 0, 5000, 'the first message');
 *   await peer.play(loadWav8k(CALLER_HELLO_WAV));      // caller speech, paced 20 ms PCMU
 *   const spurts = peer.spurts();                      // what callbridge sent, by energy
 *
 * Sending. One continuous PCMU (or PCMA) stream, 20 ms per packet (160 samples), one SSRC,
 * sequence +1 and timestamp +160 per packet, the marker bit on the first packet (RFC 3551 4.1).
 * Until `play()` queues audio the stream carries digital silence, because callbridge needs
 * packets from the SDP address to latch symmetric RTP (RFC 4961) and to keep its media timeout
 * quiet. Where to send: `setRemote()` (the tests give it the c=/m= of callbridge's SDP answer,
 * read from SIPp's log as soon as the 200 OK arrives, like a phone), or else the source of the
 * first RTP packet received (symmetric RTP). Nothing is sent before either.
 * Pacing runs on absolute deadlines (no drift); when the event loop stalls, up to
 * MAX_CATCH_UP overdue packets go out at once and the rest are skipped (timestamps still advance,
 * as after a loss), so a stall never shifts the caller's speech later by more than that.
 *
 * Receiving. Every RTP packet is kept with its arrival time (epoch ms, sub-millisecond, from
 * performance.now()), source, sequence number, timestamp, payload type, marker, SSRC and a copy
 * of its payload. RTCP (on either port, RFC 5761 PT 200-204) is counted, not kept.
 *
 * Analysis (pure functions below, also usable on any packet list): G.711 decoding with
 * alawmulaw (independent of callbridge's own src/media/g711.ts: an oracle must not share the
 * code it checks), per-packet level in dBFS, talk spurts by energy with a hangover, the last
 * loud frame, inter-packet gaps, and a WAV of what was heard (for debugging failures).
 *
 * Levels are RMS dBFS where a full-scale sine reads -3 dBFS: 10 log10(mean(x^2) / 32768^2), the
 * same scale as the agent runtime's energy VAD (src/agent/providers/vad/energy.ts, which removes
 * DC first; G.711 has none to speak of), whose absolute threshold is -45 dBFS.
 */
import dgram from 'node:dgram';
import { readFileSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import alawmulaw from 'alawmulaw';
import { wavHeader } from '../../src/media/wav.ts';
import { readWavPcm16 } from './baresip/baresip.ts';

const { mulaw, alaw } = alawmulaw;

const LOOPBACK = '127.0.0.1';
export const PCMU = 0;
export const PCMA = 8;
export const SAMPLE_RATE = 8000;
export const FRAME_MS = 20;
export const FRAME_SAMPLES = (SAMPLE_RATE * FRAME_MS) / 1000;
/** Overdue packets sent back to back after an event-loop stall; older ones are skipped. */
const MAX_CATCH_UP = 5;
/** The energy VAD's absolute threshold: a frame above it is "loud" (speech) by default. */
export const LOUD_DB = -45;

/** Wall-clock time in epoch milliseconds with sub-millisecond resolution (monotonic within a run). */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

export interface RemoteAddress {
  address: string;
  port: number;
}

/** One RTP packet callbridge sent, as it arrived. */
export interface CapturedPacket {
  /** Arrival, epoch ms. */
  at: number;
  from: RemoteAddress;
  seq: number;
  timestamp: number;
  payloadType: number;
  marker: boolean;
  ssrc: number;
  /** A copy of the payload (CSRCs, extension and padding removed). */
  payload: Buffer;
}

/** One packet the peer sent. */
export interface SentPacket {
  at: number;
  seq: number;
  timestamp: number;
  marker: boolean;
  /** Level of its audio, dBFS (-Infinity for digital silence). */
  levelDb: number;
  /** Part of a play() call (else idle silence). */
  played: boolean;
}

export interface PlayResult {
  /** Send time of the first packet of the audio. */
  startedAt: number;
  /** Send time of the first packet above LOUD_DB (undefined when none was). */
  firstLoudAt: number | undefined;
  /** Send time of the last packet above LOUD_DB. */
  lastLoudAt: number | undefined;
  /** Send time of the last packet of the audio. */
  endedAt: number;
  packets: number;
}

// ---------------------------------------------------------------------------------------------
// Parsing and decoding

/**
 * Parses an RTP packet (RFC 3550 5.1) by hand: version 2, CSRC list, header extension and
 * padding skipped. Returns undefined for RTCP (PT 200-204 in the second byte, RFC 5761 4) and for
 * anything that is not RTP.
 *
 *    0                   1                   2                   3
 *   |V=2|P|X|  CC   |M|     PT      |       sequence number         |
 *   |                           timestamp                           |
 *   |                             SSRC                              |
 */
export function parseRtp(buf: Buffer): Omit<CapturedPacket, 'at' | 'from'> | undefined {
  if (buf.length < 12 || buf[0]! >> 6 !== 2) return undefined;
  const second = buf[1]!;
  if (second >= 200 && second <= 204) return undefined; // RTCP SR/RR/SDES/BYE/APP
  const cc = buf[0]! & 0x0f;
  let off = 12 + 4 * cc;
  if (buf[0]! & 0x10) {
    if (buf.length < off + 4) return undefined;
    off += 4 + 4 * buf.readUInt16BE(off + 2);
  }
  let end = buf.length;
  if (buf[0]! & 0x20) end -= buf[buf.length - 1]!;
  if (off > end) return undefined;
  return {
    seq: buf.readUInt16BE(2),
    timestamp: buf.readUInt32BE(4),
    payloadType: second & 0x7f,
    marker: (second & 0x80) !== 0,
    ssrc: buf.readUInt32BE(8),
    payload: Buffer.from(buf.subarray(off, end)),
  };
}

/** G.711 payload to PCM16; undefined for payload types that are not G.711 (DTMF, CN, ...). */
export function decodePayload(payloadType: number, payload: Uint8Array): Int16Array | undefined {
  if (payloadType === PCMU) return mulaw.decode(payload);
  if (payloadType === PCMA) return alaw.decode(payload);
  return undefined;
}

/** PCM16 to G.711 bytes of a payload type (0 or 8). */
export function encodePayload(payloadType: number, pcm: Int16Array): Uint8Array {
  if (payloadType === PCMU) return mulaw.encode(pcm);
  if (payloadType === PCMA) return alaw.encode(pcm);
  throw new RangeError(`not a G.711 payload type: ${payloadType}`);
}

/** RMS level in dBFS (-Infinity for digital silence or no samples). */
export function levelDbfs(pcm: Int16Array): number {
  if (pcm.length === 0) return -Infinity;
  let sum = 0;
  for (const x of pcm) sum += x * x;
  return sum === 0 ? -Infinity : 10 * Math.log10(sum / pcm.length / (32768 * 32768));
}

/** A mono 8 kHz PCM16 WAV's samples. @throws Error for another rate, channel count or format. */
export function loadWav8k(path: string): Int16Array {
  const wav = readWavPcm16(readFileSync(path));
  if (wav.rate !== SAMPLE_RATE || wav.channels !== 1) throw new Error(`${path}: need mono ${SAMPLE_RATE} Hz, got ${wav.channels} ch ${wav.rate} Hz`);
  return wav.samples;
}

/** A canonical PCM16 mono WAV. */
export function pcm16Wav(pcm: Int16Array, rate = SAMPLE_RATE): Buffer {
  const data = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  return Buffer.concat([wavHeader(rate, 1, data.length), data]);
}

// ---------------------------------------------------------------------------------------------
// Analysis

/** One received packet's audio summary. */
export interface Frame {
  at: number;
  seq: number;
  payloadType: number;
  /** Decoded samples (empty for non-G.711 packets). */
  pcm: Int16Array;
  /** dBFS; -Infinity for silence and for non-audio packets. */
  levelDb: number;
}

/** Decodes captured packets in arrival order. Non-G.711 packets (DTMF, CN) get no samples. */
export function frames(packets: readonly CapturedPacket[]): Frame[] {
  return packets.map((p) => {
    const pcm = decodePayload(p.payloadType, p.payload) ?? new Int16Array(0);
    return { at: p.at, seq: p.seq, payloadType: p.payloadType, pcm, levelDb: levelDbfs(pcm) };
  });
}

/** The audio heard, concatenated in arrival order (gaps in the stream are not filled). */
export function decodeCapture(packets: readonly CapturedPacket[]): Int16Array {
  const parts = frames(packets).map((f) => f.pcm);
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export interface SpurtOptions {
  /** A frame is loud above this level, dBFS. Default LOUD_DB (-45). */
  thresholdDb?: number;
  /**
   * A spurt ends when no loud frame arrived for this long, ms. Default 500: longer than the
   * pauses eSpeak leaves between words and sentences of one utterance (<= ~350 ms), shorter than
   * the gap between two turns in these tests (the caller's speech plus the VAD's stop_secs).
   */
  hangoverMs?: number;
  /** Only frames arriving at or after this time. */
  after?: number;
  /** Only frames arriving before this time. */
  before?: number;
}

/** A talk spurt: a run of loud frames no more than hangoverMs apart. */
export interface Spurt {
  /** Arrival of the first loud frame. */
  start: number;
  /** Arrival of the last loud frame. */
  lastLoudAt: number;
  /** lastLoudAt + one frame: when the caller stopped hearing it. */
  end: number;
  /** end - start (arrival clock). */
  durationMs: number;
  /** Audio length from the first to the last loud frame, inclusive, counted in samples (ms). */
  mediaMs: number;
  /** RMS over all frames from the first to the last loud one (pauses included), dBFS. */
  rmsDb: number;
  /** Loud frames in it. */
  loudFrames: number;
  /** Index range into the frame list (arrival order), inclusive. */
  firstIndex: number;
  lastIndex: number;
}

/** Segments received audio into talk spurts by energy (see SpurtOptions for the defaults). */
export function talkSpurts(input: readonly CapturedPacket[] | readonly Frame[], opts: SpurtOptions = {}): Spurt[] {
  const fs: Frame[] = input.length > 0 && 'levelDb' in input[0]! ? (input as Frame[]) : frames(input as CapturedPacket[]);
  const threshold = opts.thresholdDb ?? LOUD_DB;
  const hangover = opts.hangoverMs ?? 500;
  const out: Spurt[] = [];
  let first = -1;
  let last = -1;
  const close = () => {
    if (first < 0) return;
    let sum = 0;
    let n = 0;
    let loud = 0;
    for (let i = first; i <= last; i++) {
      const f = fs[i]!;
      for (const x of f.pcm) sum += x * x;
      n += f.pcm.length;
      if (f.levelDb > threshold) loud++;
    }
    const start = fs[first]!.at;
    const lastLoudAt = fs[last]!.at;
    const frameMs = ((fs[last]!.pcm.length || FRAME_SAMPLES) * 1000) / SAMPLE_RATE;
    out.push({
      start,
      lastLoudAt,
      end: lastLoudAt + frameMs,
      durationMs: lastLoudAt + frameMs - start,
      mediaMs: (n * 1000) / SAMPLE_RATE,
      rmsDb: n && sum ? 10 * Math.log10(sum / n / (32768 * 32768)) : -Infinity,
      loudFrames: loud,
      firstIndex: first,
      lastIndex: last,
    });
    first = -1;
    last = -1;
  };
  for (let i = 0; i < fs.length; i++) {
    const f = fs[i]!;
    if (opts.after !== undefined && f.at < opts.after) continue;
    if (opts.before !== undefined && f.at >= opts.before) break;
    if (!(f.levelDb > threshold)) continue;
    if (first >= 0 && f.at - fs[last]!.at > hangover) close();
    if (first < 0) first = i;
    last = i;
  }
  close();
  return out;
}

/** Arrival time of the last frame above the threshold (optionally within a time window). */
export function lastLoudAt(input: readonly CapturedPacket[] | readonly Frame[], opts: Omit<SpurtOptions, 'hangoverMs'> = {}): number | undefined {
  const fs: Frame[] = input.length > 0 && 'levelDb' in input[0]! ? (input as Frame[]) : frames(input as CapturedPacket[]);
  const threshold = opts.thresholdDb ?? LOUD_DB;
  let t: number | undefined;
  for (const f of fs) {
    if (opts.after !== undefined && f.at < opts.after) continue;
    if (opts.before !== undefined && f.at >= opts.before) break;
    if (f.levelDb > threshold) t = f.at;
  }
  return t;
}

export interface GapStats {
  /** Arrival gaps between consecutive packets, ms. */
  gaps: number[];
  maxMs: number;
  p50Ms: number;
  p99Ms: number;
  /** Gaps longer than `longerThanMs` (default 3 packet times = 60 ms). */
  long: Array<{ at: number; gapMs: number }>;
}

/** Inter-packet arrival gaps (optionally only between `after` and `before`). */
export function interPacketGaps(packets: readonly CapturedPacket[], opts: { after?: number; before?: number; longerThanMs?: number } = {}): GapStats {
  const ps = packets.filter((p) => (opts.after === undefined || p.at >= opts.after) && (opts.before === undefined || p.at < opts.before));
  const gaps: number[] = [];
  const long: Array<{ at: number; gapMs: number }> = [];
  const limit = opts.longerThanMs ?? 3 * FRAME_MS;
  for (let i = 1; i < ps.length; i++) {
    const g = ps[i]!.at - ps[i - 1]!.at;
    gaps.push(g);
    if (g > limit) long.push({ at: ps[i]!.at, gapMs: g });
  }
  const sorted = [...gaps].sort((a, b) => a - b);
  const q = (p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]! : 0);
  return { gaps, maxMs: sorted.at(-1) ?? 0, p50Ms: q(0.5), p99Ms: q(0.99), long };
}

/** A one-line-per-spurt description, for assertion messages. */
export function describeSpurts(spurts: readonly Spurt[], origin = 0): string {
  if (spurts.length === 0) return '  (no talk spurt: nothing above the threshold)';
  return spurts
    .map((s, i) => `  #${i}: +${(s.start - origin).toFixed(0)} ms .. +${(s.end - origin).toFixed(0)} ms, ${s.durationMs.toFixed(0)} ms (media ${s.mediaMs.toFixed(0)} ms), ${s.rmsDb.toFixed(1)} dBFS, ${s.loudFrames} loud frames`)
    .join('\n');
}

// ---------------------------------------------------------------------------------------------
// The peer

export interface RtpPeerOptions {
  /** Payload type we send: 0 PCMU (default) or 8 PCMA. Must be one the SDP answer accepted. */
  payloadType?: number;
  /** Where to send before any packet arrives (otherwise: the first packet's source). */
  remote?: RemoteAddress;
  /**
   * Learn where to send from the first RTP packet received when no remote is known yet
   * (symmetric RTP). Default true. A known remote is never changed by arriving packets: the
   * tests check that callbridge sends from the address of its SDP answer (see `foreign()`).
   */
  latch?: boolean;
  /** Fixed SSRC; random by default. */
  ssrc?: number;
}

export interface RtpPeer {
  /** The RTP port (even), on 127.0.0.1: what the SDP offer advertises. */
  readonly port: number;
  /** RTCP port (port + 1), bound so callbridge's reports land somewhere. */
  readonly rtcpPort: number;
  readonly host: string;
  /** Every RTP packet received, in arrival order. */
  readonly captured: readonly CapturedPacket[];
  /** Every packet sent, in order. */
  readonly sent: readonly SentPacket[];
  readonly rtcpReceived: number;
  /** Where we send now (undefined until learnt). */
  readonly remote: RemoteAddress | undefined;
  /** When the first RTP packet arrived (epoch ms). */
  readonly firstPacketAt: number | undefined;
  setRemote(remote: RemoteAddress): void;
  /**
   * Queues 8 kHz PCM16 audio (padded with silence to whole 20 ms packets); resolves once its
   * last packet is sent. Waits for a remote address first (rejects after `timeoutMs`, default
   * 10 s, without one).
   */
  play(pcm: Int16Array, opts?: { timeoutMs?: number }): Promise<PlayResult>;
  /** Drops queued audio (back to silence at the next packet). */
  stopPlaying(): void;
  /** Captured packets whose source is not the current remote (symmetric RTP violated). */
  foreign(): CapturedPacket[];
  /** Frames of the capture so far (decoded, with levels). */
  frames(): Frame[];
  /** Talk spurts of the capture so far. */
  spurts(opts?: SpurtOptions): Spurt[];
  /** Stops sending (receiving goes on): a caller whose phone went dead. */
  mute(muted: boolean): void;
  /** Polls `cond` every 10 ms until true; rejects after timeoutMs naming `what`. */
  waitFor(cond: () => boolean, timeoutMs: number, what: string): Promise<void>;
  /** Writes what was heard (arrival order) as an 8 kHz WAV, for a look at a failure. */
  saveWav(path: string): void;
  close(): Promise<void>;
}

function bind(sock: dgram.Socket, port: number): Promise<boolean> {
  return new Promise((done) => {
    const onError = () => done(false);
    sock.once('error', onError);
    sock.bind(port, LOOPBACK, () => {
      sock.off('error', onError);
      done(true);
    });
  });
}

/** Binds RTP on an even port of 127.0.0.1 and RTCP on the next one. */
async function bindPair(): Promise<{ rtp: dgram.Socket; rtcp: dgram.Socket }> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const probe = dgram.createSocket('udp4');
    if (!(await bind(probe, 0))) continue;
    const base = probe.address().port & ~1;
    await new Promise<void>((r) => probe.close(() => r()));
    if (base < 1024 || base > 65534) continue;
    const rtp = dgram.createSocket('udp4');
    if (!(await bind(rtp, base))) {
      rtp.close();
      continue;
    }
    const rtcp = dgram.createSocket('udp4');
    if (!(await bind(rtcp, base + 1))) {
      rtcp.close();
      await new Promise<void>((r) => rtp.close(() => r()));
      continue;
    }
    return { rtp, rtcp };
  }
  throw new Error('no free even/odd UDP port pair on 127.0.0.1');
}

export async function startRtpPeer(opts: RtpPeerOptions = {}): Promise<RtpPeer> {
  const { rtp, rtcp } = await bindPair();
  const pt = opts.payloadType ?? PCMU;
  if (pt !== PCMU && pt !== PCMA) throw new RangeError(`payloadType must be 0 or 8, got ${pt}`);
  const latch = opts.latch ?? true;
  const ssrc = opts.ssrc ?? (Math.random() * 0x1_0000_0000) >>> 0;
  let seq = Math.floor(Math.random() * 0x8000);
  let timestamp = (Math.random() * 0x1_0000_0000) >>> 0;
  let remote: RemoteAddress | undefined = opts.remote;
  let firstPacketAt: number | undefined;
  let first = true;
  let muted = false;
  let closed = false;
  let rtcpReceived = 0;
  const captured: CapturedPacket[] = [];
  const sent: SentPacket[] = [];
  const silence = encodePayload(pt, new Int16Array(FRAME_SAMPLES));
  interface Job {
    payloads: Uint8Array[];
    levels: number[];
    next: number;
    result: Partial<PlayResult> & { packets: number };
    done: (r: PlayResult) => void;
  }
  const jobs: Job[] = [];
  const remoteWaiters: Array<() => void> = [];

  rtp.on('message', (msg, rinfo) => {
    const p = parseRtp(msg);
    if (!p) {
      if (msg.length >= 8 && msg[0]! >> 6 === 2) rtcpReceived++;
      return;
    }
    const at = nowMs();
    firstPacketAt ??= at;
    captured.push({ at, from: { address: rinfo.address, port: rinfo.port }, ...p });
    if (latch && remote === undefined) {
      remote = { address: rinfo.address, port: rinfo.port };
      for (const w of remoteWaiters.splice(0)) w();
    }
  });
  rtcp.on('message', () => {
    rtcpReceived++;
  });
  // An ICMP port unreachable (callbridge gone) surfaces as an error on some platforms: ignore.
  rtp.on('error', () => {});
  rtcp.on('error', () => {});

  const sendOne = (at: number, skip: boolean) => {
    let payload = silence;
    let level = -Infinity;
    let played = false;
    const job = jobs[0];
    if (job) {
      payload = job.payloads[job.next]!;
      level = job.levels[job.next]!;
      played = true;
      if (job.next === 0) job.result.startedAt = at;
      if (level > LOUD_DB) {
        job.result.firstLoudAt ??= at;
        job.result.lastLoudAt = at;
      }
      job.next++;
      job.result.packets++;
      if (job.next === job.payloads.length) {
        jobs.shift();
        job.done({ startedAt: job.result.startedAt ?? at, firstLoudAt: job.result.firstLoudAt, lastLoudAt: job.result.lastLoudAt, endedAt: at, packets: job.result.packets });
      }
    }
    if (!skip && !muted && remote) {
      const pkt = Buffer.alloc(12 + payload.length);
      pkt[0] = 0x80;
      pkt[1] = (first ? 0x80 : 0) | pt;
      pkt.writeUInt16BE(seq, 2);
      pkt.writeUInt32BE(timestamp, 4);
      pkt.writeUInt32BE(ssrc, 8);
      pkt.set(payload, 12);
      rtp.send(pkt, remote.port, remote.address);
      sent.push({ at, seq, timestamp, marker: first, levelDb: level, played });
      first = false;
    }
    seq = (seq + 1) & 0xffff;
    timestamp = (timestamp + FRAME_SAMPLES) >>> 0;
  };

  // The clock runs from start; before a remote is known the ticks only advance the stream.
  let nextAt = nowMs();
  let timer: NodeJS.Timeout | undefined;
  const tick = () => {
    if (closed) return;
    const now = nowMs();
    let overdue = Math.floor((now - nextAt) / FRAME_MS) + 1;
    while (overdue > 0) {
      sendOne(now, overdue > MAX_CATCH_UP);
      nextAt += FRAME_MS;
      overdue--;
    }
    timer = setTimeout(tick, Math.max(0, nextAt - nowMs()));
  };
  tick();

  const peer: RtpPeer = {
    port: rtp.address().port,
    rtcpPort: rtcp.address().port,
    host: LOOPBACK,
    captured,
    sent,
    get rtcpReceived() {
      return rtcpReceived;
    },
    get remote() {
      return remote;
    },
    get firstPacketAt() {
      return firstPacketAt;
    },
    setRemote(r) {
      remote = r;
      for (const w of remoteWaiters.splice(0)) w();
    },
    async play(pcm, o = {}) {
      if (!remote) {
        await new Promise<void>((resolve, reject) => {
          const t = setTimeout(() => reject(new Error('RTP peer: no remote address to play to (no RTP received, no setRemote())')), o.timeoutMs ?? 10_000);
          remoteWaiters.push(() => {
            clearTimeout(t);
            resolve();
          });
        });
      }
      const n = Math.ceil(pcm.length / FRAME_SAMPLES);
      const payloads: Uint8Array[] = [];
      const levels: number[] = [];
      for (let i = 0; i < n; i++) {
        const frame = new Int16Array(FRAME_SAMPLES);
        frame.set(pcm.subarray(i * FRAME_SAMPLES, Math.min(pcm.length, (i + 1) * FRAME_SAMPLES)));
        payloads.push(encodePayload(pt, frame));
        levels.push(levelDbfs(frame));
      }
      if (n === 0) return { startedAt: nowMs(), firstLoudAt: undefined, lastLoudAt: undefined, endedAt: nowMs(), packets: 0 };
      return new Promise<PlayResult>((done) => jobs.push({ payloads, levels, next: 0, result: { packets: 0 }, done }));
    },
    stopPlaying() {
      for (const job of jobs.splice(0)) {
        const at = nowMs();
        job.done({ startedAt: job.result.startedAt ?? at, firstLoudAt: job.result.firstLoudAt, lastLoudAt: job.result.lastLoudAt, endedAt: at, packets: job.result.packets });
      }
    },
    foreign: () => captured.filter((p) => remote !== undefined && (p.from.address !== remote.address || p.from.port !== remote.port)),
    frames: () => frames(captured),
    spurts: (o) => talkSpurts(captured, o),
    mute(m) {
      muted = m;
    },
    async waitFor(cond, timeoutMs, what) {
      const deadline = nowMs() + timeoutMs;
      while (!cond()) {
        if (nowMs() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    saveWav(path) {
      writeFileSync(path, pcm16Wav(decodeCapture(captured)));
    },
    async close() {
      if (closed) return;
      closed = true;
      clearTimeout(timer);
      peer.stopPlaying();
      await Promise.all([new Promise<void>((r) => rtp.close(() => r())), new Promise<void>((r) => rtcp.close(() => r()))]);
    },
  };
  return peer;
}

/**
 * 8 kHz PCM as if it had been received: 20 ms G.711 packets of `payloadType`, arriving exactly
 * every 20 ms from `startAt`. For checking the analysis (thresholds, hangover) on known audio.
 */
export function synthCapture(pcm: Int16Array, opts: { payloadType?: number; startAt?: number; from?: RemoteAddress } = {}): CapturedPacket[] {
  const pt = opts.payloadType ?? PCMU;
  const out: CapturedPacket[] = [];
  const n = Math.ceil(pcm.length / FRAME_SAMPLES);
  for (let i = 0; i < n; i++) {
    const frame = new Int16Array(FRAME_SAMPLES);
    frame.set(pcm.subarray(i * FRAME_SAMPLES, Math.min(pcm.length, (i + 1) * FRAME_SAMPLES)));
    out.push({
      at: (opts.startAt ?? 0) + i * FRAME_MS,
      from: opts.from ?? { address: LOOPBACK, port: 0 },
      seq: i & 0xffff,
      timestamp: (i * FRAME_SAMPLES) >>> 0,
      payloadType: pt,
      marker: i === 0,
      ssrc: 1,
      payload: Buffer.from(encodePayload(pt, frame)),
    });
  }
  return out;
}
