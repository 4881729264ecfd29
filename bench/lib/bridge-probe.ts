/**
 * The instrumentation of bench/bridge's daemon (bench/bridge-server.ts has the rules of every
 * figure), installable on any thread that runs media: the main thread (media on the main event
 * loop, or the main thread's share with media workers) and each media worker (loaded there with
 * DaemonOptions.mediaWorkerPreload, see bridge-probe-worker.ts). It wraps, from outside, the
 * methods every frame goes through (src/ is unchanged) and keeps histograms that take() hands out
 * raw and starts over, so the main thread can merge every thread's figures into one window.
 */
import dgram from 'node:dgram';
import { monitorEventLoopDelay, performance, PerformanceObserver } from 'node:perf_hooks';
import WebSocket from 'ws';
import { InboundPath } from '../../src/media/inbound-path.ts';
import { RemoteBridgeMedia } from '../../src/media/media-worker-pool.ts';
import { OutboundPath } from '../../src/media/outbound-path.ts';
import { RtpSession, type SendOptions } from '../../src/media/rtp-session.ts';

/** The BroadcastChannel between the daemon's main thread and its media workers' probes. */
export const PROBE_CHANNEL = 'callbridge-bench-bridge-probe';

const TOP_US = 50_000;

/** Durations in 1 us buckets up to 50 ms (the last bucket takes everything above). */
export class Histogram {
  #b = new Uint32Array(TOP_US + 1);
  #n = 0;
  #max = 0;
  add(ms: number): void {
    const us = Math.round(ms * 1000);
    this.#b[us > TOP_US ? TOP_US : us < 0 ? 0 : us]!++;
    this.#n++;
    if (ms > this.#max) this.#max = ms;
  }
  /** The counts so far as sparse [bucket, count] pairs (mergeable, small to post), and start over. */
  take(): RawHistogram {
    const buckets: [number, number][] = [];
    for (let i = 0; i < this.#b.length; i++) if (this.#b[i]! > 0) buckets.push([i, this.#b[i]!]);
    const raw = { n: this.#n, max: this.#max, buckets };
    this.#b.fill(0);
    this.#n = 0;
    this.#max = 0;
    return raw;
  }
}

export interface RawHistogram {
  n: number;
  max: number;
  buckets: [number, number][];
}

export function mergeHistograms(list: RawHistogram[]): RawHistogram {
  const counts = new Map<number, number>();
  let n = 0;
  let max = 0;
  for (const h of list) {
    n += h.n;
    if (h.max > max) max = h.max;
    for (const [i, c] of h.buckets) counts.set(i, (counts.get(i) ?? 0) + c);
  }
  return { n, max, buckets: [...counts.entries()].sort((a, b) => a[0] - b[0]) };
}

/** p50 / p99 / p99.9 / max in ms of a raw histogram (NaN when empty). */
export function quantiles(h: RawHistogram): { n: number; p50: number; p99: number; p999: number; max: number } {
  const q = (p: number): number => {
    if (h.n === 0) return Number.NaN;
    const rank = Math.ceil(p * h.n);
    let seen = 0;
    for (const [i, c] of h.buckets) {
      seen += c;
      if (seen >= rank) return i / 1000;
    }
    return h.max;
  };
  return { n: h.n, p50: q(0.5), p99: q(0.99), p999: q(0.999), max: Number(h.max.toFixed(4)) };
}

/**
 * Of the late frames' [due, sent] spans (flat pairs, in send order), those that overlap one of
 * the pauses (flat [start, end] pairs: GC pauses, CPU stalls): how many, and how many frames they
 * made the caller miss (the send-side verdict's skip: one per 20 ms of lateness beyond 15 ms).
 */
export function lateOverlapping(late: number[], pauses: number[]): { frames: number; skipped: number } {
  let frames = 0;
  let skipped = 0;
  for (let i = 0; i < late.length; i += 2) {
    for (let j = 0; j < pauses.length; j += 2) {
      if (pauses[j]! < late[i + 1]! && pauses[j + 1]! > late[i]!) {
        frames++;
        skipped += Math.floor((late[i + 1]! - late[i]! + ON_TIME_MS) / FRAME_MS);
        break;
      }
    }
  }
  return { frames, skipped };
}

/** One thread's figures for one window. */
export interface ProbeSnapshot {
  rtpIn: RawHistogram;
  tickIn: RawHistogram;
  /** Media workers: from a caller frame's media tick (worker) to its arrival on the main thread. */
  handoffIn: RawHistogram;
  msgOut: RawHistogram;
  sendOut: RawHistogram;
  sendLate: RawHistogram;
  send: { frames: number; onTime: number; skipped: number; calls: number };
  underruns: number;
  loop: { p50: number; p99: number; max: number };
  /** lateFrames: frames sent over 5 ms late on this thread; duringGc: those whose lateness overlaps a GC pause of this thread. */
  gc: { count: number; totalMs: number; maxMs: number; maxKind: string; lateFrames: number; duringGc: number };
  /** Late frames' [due, sent] and GC pauses' [start, end] on the shared clock (epoch ms, flat pairs, capped): to match one thread's against another's. */
  lateAbs: number[];
  gcAbs: number[];
}

/** perf_hooks' GC kinds (NODE_PERFORMANCE_GC_*). */
const GC_KINDS: Record<number, string> = { 1: 'minor', 2: 'major', 4: 'incremental', 8: 'weakcb' };

const FRAME_MS = 20;
const ON_TIME_MS = 5;
const UNDERRUN_MS = 300;
const LOOP_RESOLUTION_MS = 5;

/**
 * Installs the wrappers on this thread. rtpMin: the RTP range's first port (sockets in
 * rtpMin..rtpMin+3999, even, are RTP). workerOrigins: the media workers' performance.timeOrigin by
 * thread index (main thread only, for handoffIn).
 */
export function installBridgeProbe(rtpMin: number, workerOrigins?: Map<number, number>): { take(): ProbeSnapshot } {
  const h = { rtpIn: new Histogram(), tickIn: new Histogram(), handoffIn: new Histogram(), msgOut: new Histogram(), sendOut: new Histogram(), sendLate: new Histogram() };

  // in, RTP receive: dgram 'message' dispatch on RTP sockets (bound in the RTP range).
  const rtpSockets = new WeakMap<dgram.Socket, boolean>();
  const socketEmit = dgram.Socket.prototype.emit as (this: dgram.Socket, event: string | symbol, ...args: unknown[]) => boolean;
  dgram.Socket.prototype.emit = function (this: dgram.Socket, event: string | symbol, ...args: unknown[]): boolean {
    if (event !== 'message') return socketEmit.call(this, event, ...args);
    let rtp = rtpSockets.get(this);
    if (rtp === undefined) {
      let port = -1;
      try {
        port = this.address().port;
      } catch {
        // not bound
      }
      rtp = port >= rtpMin && port < rtpMin + 4000 && port % 2 === 0;
      rtpSockets.set(this, rtp);
    }
    if (!rtp) return socketEmit.call(this, event, ...args);
    const t0 = performance.now();
    const r = socketEmit.call(this, event, ...args);
    h.rtpIn.add(performance.now() - t0);
    return r;
  } as typeof dgram.Socket.prototype.emit;

  // in, tick: InboundPath.tick (media on this thread) or a worker's frame arriving here (its
  // tick and the crossing are handoffIn) starts it; the input_audio send ends it.
  let tickStart = -1;
  const inboundTick = InboundPath.prototype.tick;
  InboundPath.prototype.tick = function (this: InboundPath, nowMs: number) {
    tickStart = performance.now();
    return inboundTick.call(this, nowMs);
  };
  const wsSend = WebSocket.prototype.send;
  // The bridge sends input_audio as bytes on either thread (src/bridge/voice-frames.ts inputAudioMessage).
  const inputHead = Buffer.from('{"type":"input_audio"');
  const isInputAudio = (data: unknown) => Buffer.isBuffer(data) && data.compare(inputHead, 0, inputHead.length, 0, inputHead.length) === 0;
  WebSocket.prototype.send = function (this: WebSocket, data: unknown, ...rest: unknown[]) {
    const r = (wsSend as (...a: unknown[]) => void).call(this, data, ...rest);
    if (tickStart >= 0 && isInputAudio(data)) {
      h.tickIn.add(performance.now() - tickStart);
      tickStart = -1;
    }
    return r;
  } as typeof wsSend;
  const remoteFrame = RemoteBridgeMedia.prototype.frame;
  RemoteBridgeMedia.prototype.frame = function (this: RemoteBridgeMedia, frame: Int16Array | null, agent: Int16Array | null, nowMs: number) {
    tickStart = performance.now();
    const origin = workerOrigins?.get(this.mediaThread);
    if (origin !== undefined) h.handoffIn.add(performance.timeOrigin + tickStart - (origin + nowMs));
    remoteFrame.call(this, frame, agent, nowMs);
  };

  // out, message: the bridge's client socket handling a response_audio message.
  const wsEmit = WebSocket.prototype.emit;
  WebSocket.prototype.emit = function (this: WebSocket & { _isServer?: boolean }, event: string | symbol, ...args: unknown[]): boolean {
    if (event !== 'message' || this._isServer) return wsEmit.call(this, event, ...args);
    const raw = args[0] as Buffer | Buffer[] | ArrayBuffer;
    // `{"type":"response_audio"` within the first bytes (the server builds it that way).
    const head = Buffer.isBuffer(raw) ? raw.toString('latin1', 0, 32) : '';
    const t0 = performance.now();
    const r = wsEmit.call(this, event, ...args);
    if (head.includes('response_audio')) h.msgOut.add(performance.now() - t0);
    return r;
  } as typeof wsEmit;

  // out, encode+send; and agent-audio underruns (a talk spurt restarting soon after the last agent frame).
  let underruns = 0;
  const lastAgentFrame = new WeakMap<OutboundPath, number>();
  const encodeAndSend = OutboundPath.prototype.encodeAndSend;
  OutboundPath.prototype.encodeAndSend = function (this: OutboundPath, frame: Int16Array, marker: boolean) {
    const t0 = performance.now();
    encodeAndSend.call(this, frame, marker);
    h.sendOut.add(performance.now() - t0);
    if (marker) {
      const last = lastAgentFrame.get(this);
      if (last !== undefined && t0 - last < UNDERRUN_MS) underruns++;
    }
    lastAgentFrame.set(this, t0);
  };
  const outboundClear = OutboundPath.prototype.clear;
  OutboundPath.prototype.clear = function (this: OutboundPath) {
    lastAgentFrame.delete(this);
    return outboundClear.call(this);
  };

  // Send-side timing of every audio frame, per RtpSession (one per call): see bridge-server.ts.
  interface SendSchedule {
    units: number;
    lastPos: number;
    shift: number;
    ref: number;
    window: number;
  }
  const schedules = new WeakMap<RtpSession, SendSchedule>();
  /** [due, sent] of each late frame and [start, end] of each GC pause in the window, flat. */
  const lateSpans: number[] = [];
  const gcSpans: number[] = [];
  const send = { frames: 0, onTime: 0, skipped: 0, calls: 0, window: 0 };
  const rtpSend = RtpSession.prototype.send;
  RtpSession.prototype.send = function (this: RtpSession, payload: Uint8Array, options: SendOptions): boolean {
    const t = performance.now();
    const ok = rtpSend.call(this, payload, options);
    const inc = options.timestampIncrement;
    if (!(inc > 0)) return ok; // not an audio frame
    let s = schedules.get(this);
    if (s === undefined) {
      s = { units: 0, lastPos: -1, shift: 0, ref: Infinity, window: -1 };
      schedules.set(this, s);
    }
    const pos = s.units / inc;
    s.units += inc;
    if (s.lastPos >= 0 && pos - s.lastPos > 1) send.skipped += Math.round(pos - s.lastPos - 1);
    s.lastPos = pos;
    if (s.window !== send.window) {
      s.window = send.window;
      s.ref = Infinity;
      s.shift = 0;
      send.calls++;
    }
    if (!ok) {
      send.skipped++;
      return ok;
    }
    let anchor = t - FRAME_MS * (pos + s.shift);
    if (anchor < s.ref) s.ref = anchor;
    const late = anchor - s.ref;
    h.sendLate.add(late);
    send.frames++;
    if (late <= ON_TIME_MS) send.onTime++;
    else if (lateSpans.length < 200_000) lateSpans.push(t - late, t);
    const k = Math.floor((late + ON_TIME_MS) / FRAME_MS);
    if (k >= 1) {
      send.skipped += k;
      s.shift += k;
      anchor -= FRAME_MS * k;
      if (anchor < s.ref) s.ref = anchor;
    }
    return ok;
  };

  // Garbage-collector pauses of this thread (count, total, longest) per window.
  const gc = { count: 0, totalMs: 0, maxMs: 0, maxKind: '' };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gc.count++;
      gc.totalMs += e.duration;
      if (e.duration > gc.maxMs) {
        gc.maxMs = e.duration;
        gc.maxKind = GC_KINDS[(e as { detail?: unknown } as { detail?: { kind?: number } }).detail?.kind ?? 0] ?? 'other';
      }
      if (gcSpans.length < 200_000) gcSpans.push(e.startTime, e.startTime + e.duration);
    }
  }).observe({ entryTypes: ['gc'] });

  const loop = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  loop.enable();

  return {
    take(): ProbeSnapshot {
      // The histogram holds whole intervals between its timer's firings (~resolution when idle):
      // the delay is what exceeds the resolution.
      const delay = (ns: number): number => Number(Math.max(0, ns / 1e6 - LOOP_RESOLUTION_MS).toFixed(2));
      const snap: ProbeSnapshot = {
        rtpIn: h.rtpIn.take(),
        tickIn: h.tickIn.take(),
        handoffIn: h.handoffIn.take(),
        msgOut: h.msgOut.take(),
        sendOut: h.sendOut.take(),
        sendLate: h.sendLate.take(),
        send: { frames: send.frames, onTime: send.onTime, skipped: send.skipped, calls: send.calls },
        underruns,
        loop: { p50: delay(loop.percentile(50)), p99: delay(loop.percentile(99)), max: delay(loop.max) },
        gc: { count: gc.count, totalMs: Number(gc.totalMs.toFixed(1)), maxMs: Number(gc.maxMs.toFixed(2)), maxKind: gc.maxKind, lateFrames: lateSpans.length / 2, duringGc: lateOverlapping(lateSpans, gcSpans).frames },
        lateAbs: [],
        gcAbs: [],
      };
      const abs = (spans: number[]) => spans.slice(0, 20_000).map((x) => performance.timeOrigin + x);
      snap.lateAbs = abs(lateSpans);
      snap.gcAbs = abs(gcSpans);
      lateSpans.length = 0;
      gcSpans.length = 0;
      loop.reset();
      send.frames = send.onTime = send.skipped = send.calls = 0;
      send.window++;
      underruns = 0;
      gc.count = gc.totalMs = gc.maxMs = 0;
      gc.maxKind = '';
      return snap;
    },
  };
}
