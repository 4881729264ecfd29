/**
 * bench/media: CPU cost of one call's media path, both directions, per 20 ms frame.
 *
 *   phone socket --RTP PCMU--> RtpSession -> InboundPath (jitter buffer, decode, resample
 *   8k->24k) -> base64 -> `input_audio` message bytes                     (caller -> agent)
 *   `response_audio` message bytes -> base64 -> OutboundPath (queue, resample
 *   24k->8k, encode) -> RtpSession.send --RTP--> phone socket             (agent -> caller)
 * (the message bytes are built and read by src/bridge/voice-frames.ts, as a bridged call does)
 *
 * The floor is the same closed loop with no processing: a socket receives the phone's packet and
 * sends a packet of the same size back. Both loops run in this process, so the phone side's own
 * socket work is in both and cancels in the difference. Figures:
 *   - media_path_us_per_frame: CPU per frame of the whole loop (process.cpuUsage / frames)
 *   - media_processing_us_per_frame: the same minus the floor: what the media path adds
 *   - calls_per_core: 20,000 us of frame time per core / processing cost per frame
 *   - media_latency_p99: time inside our handlers from a packet's arrival to its input_audio message, plus
 *     from a response_audio message to its RTP send (excludes the jitter buffer's depth, which is buffering
 *     by design, and the resampler's algorithmic delay, printed separately)
 * Rounds of floor and path alternate so a busy neighbour affects both alike; medians are kept.
 */
import dgram from 'node:dgram';
import { PortAllocator } from '../src/media/port-allocator.ts';
import { RtpSession } from '../src/media/rtp-session.ts';
import { createCodec } from '../src/media/codecs.ts';
import { createResampler, initResamplers } from '../src/media/resampler.ts';
import { InboundPath } from '../src/media/inbound-path.ts';
import { OutboundPath } from '../src/media/outbound-path.ts';
import { inputAudioMessage, responseAudioPcm } from '../src/bridge/voice-frames.ts';
import { pcm16ToBase64 } from '../src/media/pcm.ts';
import type { Clock, ReceivedRtp } from '../src/media/types.ts';
import { printFigures, type Figure } from './lib/result.ts';
import { RtpPacketWriter } from '../src/media/rtp-packet-writer.ts';
import { SrtpSession } from '../src/media/srtp.ts';
import { randomBytes } from 'node:crypto';

const FRAMES = Number(process.env.BENCH_MEDIA_FRAMES ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Packets in flight in the closed loop: enough to keep both sockets busy, few enough to never overflow. */
const WINDOW = 8;
const FRAME_US_PER_CORE = 20_000;

interface RoundResult {
  cpuUsPerFrame: number;
  latencies: Float64Array;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
function percentile(xs: Float64Array, p: number): number {
  const s = Float64Array.from(xs).sort();
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** A prebuilt RTP packet stream from the phone: 12-byte header + 160 bytes of PCMU speech-ish tone. */
function phonePackets(count: number): Buffer[] {
  const codec = createCodec('PCMU');
  const pcm = new Int16Array(160);
  const payload = new Uint8Array(160);
  const out: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    for (let n = 0; n < 160; n++) pcm[n] = Math.round(6000 * Math.sin((2 * Math.PI * 440 * (i * 160 + n)) / 8000));
    codec.encode(pcm, payload);
    const b = Buffer.alloc(172);
    b[0] = 0x80;
    b[1] = i === 0 ? 0x80 : 0x00;
    b.writeUInt16BE(i & 0xffff, 2);
    b.writeUInt32BE((i * 160) >>> 0, 4);
    b.writeUInt32BE(0x1234abcd, 8);
    b.set(payload, 12);
    out.push(b);
  }
  return out;
}

/** A `response_audio` message as the voice session sends it: 20 ms of 24 kHz PCM16. */
function responseAudioMessage(): Buffer {
  const pcm = new Int16Array(480);
  for (let n = 0; n < 480; n++) pcm[n] = Math.round(5000 * Math.sin((2 * Math.PI * 300 * n) / 24000));
  return Buffer.from(JSON.stringify({ type: 'response_audio', data: { turn_id: 't1', audio: pcm16ToBase64(pcm), is_final: false } }));
}

let seq = 0;

/** Drives `frames` packets through a closed loop: the phone sends the next one when one comes back. */
function closedLoop(phone: dgram.Socket, target: { address: string; port: number }, packets: Buffer[], frames: number): Promise<void> {
  return new Promise((resolve) => {
    let sent = 0;
    let back = 0;
    const sendNext = () => {
      // Payloads repeat; sequence number and timestamp keep counting, as a real phone's do (a
      // sequence jumping back would be discarded by RFC 3550 probation and stall the loop).
      const p = packets[sent % packets.length]!;
      p.writeUInt16BE(seq & 0xffff, 2);
      p.writeUInt32BE((seq * 160) >>> 0, 4);
      seq++;
      sent++;
      phone.send(p, target.port, target.address);
    };
    phone.removeAllListeners('message');
    phone.on('message', () => {
      back++;
      if (back === frames) return resolve();
      if (sent < frames) sendNext();
    });
    for (let i = 0; i < Math.min(WINDOW, frames); i++) sendNext();
  });
}

async function floorRound(phone: dgram.Socket, packets: Buffer[]): Promise<RoundResult> {
  const sock = dgram.createSocket('udp4');
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', r));
  const reply = Buffer.alloc(172);
  const latencies = new Float64Array(FRAMES);
  let i = 0;
  sock.on('message', (_msg, rinfo) => {
    const t0 = performance.now();
    sock.send(reply, rinfo.port, rinfo.address);
    latencies[i++ % FRAMES] = performance.now() - t0;
  });
  const target = { address: '127.0.0.1', port: sock.address().port };
  await closedLoop(phone, target, packets, 1000); // warm-up
  i = 0;
  const cpu0 = process.cpuUsage();
  await closedLoop(phone, target, packets, FRAMES);
  const cpu = process.cpuUsage(cpu0);
  sock.close();
  return { cpuUsPerFrame: (cpu.user + cpu.system) / FRAMES, latencies };
}

async function pathRound(phone: dgram.Socket, packets: Buffer[], allocator: PortAllocator): Promise<RoundResult & { jsonBytes: number }> {
  // A virtual clock: each arriving packet is "20 ms later", so the jitter buffer plays one frame
  // per packet exactly as it would in real time, without the bench waiting 20 ms per frame.
  let virtualMs = 0;
  const clock: Clock = { now: () => virtualMs };
  const session = new RtpSession({ ports: await allocator.allocate(), clockRate: 8000, clock, rtcpIntervalMs: 0, mediaTimeoutMs: 0, symmetric: true });
  const inbound = new InboundPath({ codec: createCodec('PCMU'), jitter: { initialDepthMs: 40 } });
  const outCodec = createCodec('PCMU');
  const outbound = new OutboundPath({
    codec: outCodec,
    send: (payload, marker, inc) => session.send(payload, { payloadType: 0, timestampIncrement: inc, marker }),
  });
  const response = responseAudioMessage();
  const pcmHolder = { buffer: Buffer.alloc(0) };
  const latencies = new Float64Array(FRAMES);
  let i = 0;
  let message: Buffer | undefined;
  session.on('rtp', (p: ReceivedRtp) => {
    const t0 = performance.now();
    virtualMs += 20;
    inbound.push(p);
    const frame = inbound.tick(virtualMs);
    // The caller's direction ends in the `input_audio` message (one buffer per call, rewritten).
    if (frame) message = inputAudioMessage(frame, message);
    // The agent's direction: one response_audio message in, one RTP packet out.
    outbound.push(responseAudioPcm(response, pcmHolder)!);
    const out = outbound.pullFrame();
    if (out) outbound.encodeAndSend(out, false);
    latencies[i++ % FRAMES] = performance.now() - t0;
  });
  const target = { address: '127.0.0.1', port: session.local.rtpPort };
  await closedLoop(phone, target, packets, 1000); // warm-up: jitter buffer primed, JIT warm
  i = 0;
  const cpu0 = process.cpuUsage();
  await closedLoop(phone, target, packets, FRAMES);
  const cpu = process.cpuUsage(cpu0);
  const st = inbound.stats();
  if (st.decoded < FRAMES * 0.95) throw new Error(`inbound path decoded only ${st.decoded} of ${FRAMES} frames: ${JSON.stringify(st)}`);
  session.close();
  inbound.close();
  outbound.close();
  return { cpuUsPerFrame: (cpu.user + cpu.system) / FRAMES, latencies, jsonBytes: message?.length ?? 0 };
}

const SRTP_PACKETS = Number(process.env.BENCH_SRTP_PACKETS ?? 200_000);

/**
 * SRTP's own cost per packet, without sockets: a 160-byte PCMU packet written (RtpPacketWriter,
 * as RtpSession sends), protected by one SrtpSession and unprotected by the peer's, against the
 * same loop writing and copying the plain packet (what plain RTP does in the same place).
 * CPU time per packet; medians of ROUNDS.
 */
function srtpRound(withSrtp: boolean): number {
  const ka = randomBytes(30);
  const kb = randomBytes(30);
  const sender = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: ka, receiveKey: kb });
  const receiver = new SrtpSession({ suite: 'AES_CM_128_HMAC_SHA1_80', sendKey: kb, receiveKey: ka });
  const writer = new RtpPacketWriter(0x1234_5678);
  const payload = new Uint8Array(160).fill(0x55);
  const wire = Buffer.alloc(1500);
  let check = 0;
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < SRTP_PACKETS; i++) {
    let n = writer.write(i & 0xffff, i * 160, 0, false, payload);
    if (withSrtp) n = sender.protectRtp(writer.buffer, n);
    writer.buffer.copy(wire, 0, 0, n); // the datagram as the receiver gets it
    if (withSrtp) n = receiver.unprotectRtp(wire, n);
    check += wire[12 + (i % 160)]! + n;
  }
  const cpu = process.cpuUsage(cpu0);
  if (check === 0) process.stdout.write('');
  return (cpu.user + cpu.system) / SRTP_PACKETS;
}

export async function run(): Promise<void> {
  await initResamplers();
  const packets = phonePackets(500);
  const phone = dgram.createSocket('udp4');
  await new Promise<void>((r) => phone.bind(0, '127.0.0.1', r));
  const base = 40000 + 2 * Math.floor(Math.random() * 5000);
  const allocator = new PortAllocator({ min: base, max: base + 199, address: '127.0.0.1' });
  process.stdout.write(`machine: node ${process.version}, ${FRAMES} frames per round, ${ROUNDS} rounds, window ${WINDOW}\n`);

  const floors: RoundResult[] = [];
  const paths: Array<RoundResult & { jsonBytes: number }> = [];
  try {
    for (let r = 0; r < ROUNDS; r++) {
      floors.push(await floorRound(phone, packets));
      paths.push(await pathRound(phone, packets, allocator));
      process.stdout.write(`round ${r + 1}: floor ${floors[r]!.cpuUsPerFrame.toFixed(2)} us/frame, path ${paths[r]!.cpuUsPerFrame.toFixed(2)} us/frame\n`);
    }
  } finally {
    phone.close();
  }

  const floorUs = median(floors.map((f) => f.cpuUsPerFrame));
  const pathUs = median(paths.map((p) => p.cpuUsPerFrame));
  const processingUs = Math.max(0.001, pathUs - floorUs);
  const lat = (rs: RoundResult[], p: number) => median(rs.map((r) => percentile(r.latencies, p)));
  const r24to8 = createResampler(24000, 8000);
  const r8to24 = createResampler(8000, 24000);
  const resamplerDelayMs = (r24to8.delaySamples / 8) + (r8to24.delaySamples / 24);
  r24to8.close();
  r8to24.close();

  const figures: Figure[] = [
    { name: 'media_path_us_per_frame', value: pathUs, unit: 'us', baseline: floorUs, note: 'whole loop, both directions, PCMU, CPU per 20 ms frame' },
    { name: 'media_processing_us_per_frame', value: processingUs, unit: 'us', baseline: floorUs, note: 'path minus floor: what the media path adds (target < 40)' },
    { name: 'calls_per_core', value: FRAME_US_PER_CORE / processingUs, unit: 'calls', baseline: FRAME_US_PER_CORE / floorUs, note: 'media headroom; baseline: socket I/O alone (target >= 500)' },
    { name: 'calls_per_core_with_io', value: FRAME_US_PER_CORE / pathUs, unit: 'calls', baseline: FRAME_US_PER_CORE / floorUs, note: 'including the UDP I/O of both ends' },
    { name: 'media_latency_p50', value: lat(paths, 50), unit: 'ms', baseline: lat(floors, 50), note: 'handler time per packet, both directions; baseline: bare echo' },
    { name: 'media_latency_p99', value: lat(paths, 99), unit: 'ms', baseline: lat(floors, 99), note: 'target < 1 ms; excludes jitter depth and resampler delay' },
  ];
  const plainUs: number[] = [];
  const srtpUs: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    plainUs.push(srtpRound(false));
    srtpUs.push(srtpRound(true));
  }
  figures.push({
    name: 'srtp_protect_unprotect_us_per_packet',
    value: median(srtpUs),
    unit: 'us',
    baseline: median(plainUs),
    note: 'SRTP protect+unprotect per packet (AES_CM_128_HMAC_SHA1_80, 160-byte PCMU); baseline: plain RTP (write + copy)',
  });
  printFigures('bench/media (PCMU, one call in a closed loop over loopback UDP)', figures);
  process.stdout.write(`resampler algorithmic delay (both directions, not in the latency above): ${resamplerDelayMs.toFixed(2)} ms\n`);
  process.stdout.write(`input_audio frame: ${paths[0]?.jsonBytes ?? 0} bytes of JSON per 20 ms\n`);
  const ok = processingUs < 40 && lat(paths, 99) < 1;
  process.stdout.write(`targets: processing < 40 us/frame: ${processingUs < 40 ? 'met' : 'NOT MET'} (${processingUs.toFixed(1)}); p99 < 1 ms: ${lat(paths, 99) < 1 ? 'met' : 'NOT MET'} (${lat(paths, 99).toFixed(3)} ms)\n`);
  if (!ok) process.stdout.write('note: figures from a loaded machine are not comparable; rerun on a quiet one\n');
}
