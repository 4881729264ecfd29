/**
 * A media worker thread (started by media-worker-pool.ts): it owns the RTP sockets of the calls
 * placed on it (its own slice of the port range), their RtpSession, and, once bridged, their
 * LocalBridgeMedia (jitter buffer, decode, resampling, paced encode and send) on its own
 * MediaTicker. Its event loop carries nothing but media, so the 20 ms RTP sends keep their slot
 * while the main thread is busy with SIP, WebSocket and JSON work (docs/media-workers.md).
 *
 * Talks to the pool in batches (media-worker-protocol.ts): whatever one event-loop turn produced
 * (caller frames of a media phase, DTMF, replies) leaves in one postMessage.
 */
import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { LocalBridgeMedia } from './bridge-media.ts';
import { MediaTicker } from './media-ticker.ts';
import type { FromWorker, MediaWorkerData, MediaWorkerExtension, MediaWorkerExtensionHost, ToWorker } from './media-worker-protocol.ts';
import { PortAllocator, type RtpPortPair } from './port-allocator.ts';
import { initResamplers } from './resampler.ts';
import { RtpSession } from './rtp-session.ts';
import { kernelThreadId, setRoundRobin } from './thread-scheduling.ts';

const data = workerData as MediaWorkerData;
// Preloads (the benchmark's instrumentation) patch media prototypes before any session exists.
for (const mod of data.preload) await import(mod);
await initResamplers();
const port = parentPort!;

let niceness: number | null = null;
let warning: string | undefined;
if (data.niceness !== null) {
  try {
    // On Linux a thread has its own nice value: pid 0 is this thread only (setpriority(2)).
    os.setPriority(0, data.niceness);
    niceness = data.niceness;
  } catch (err) {
    warning = `could not set the media thread's priority to ${data.niceness} (${(err as Error).message}); running at the default`;
  }
}
// This thread's id (Linux): what the priority tools and /proc know it by.
const tid = kernelThreadId();
let realtime = 0;
if (data.realtime > 0) {
  try {
    if (tid === null) throw new Error('no /proc/thread-self');
    setRoundRobin(tid, data.realtime);
    realtime = data.realtime;
  } catch (err) {
    const why = `could not make the media thread real-time (SCHED_RR ${data.realtime}: ${(err as Error).message.split('\n')[0]}); running under the normal policy`;
    warning = warning ? `${warning}; ${why}` : why;
  }
}

const allocator = new PortAllocator({ min: data.portMin, max: data.portMax, address: data.address });
const ticker = new MediaTicker();

interface Entry {
  ports: RtpPortPair;
  rtp?: RtpSession;
  bridge?: LocalBridgeMedia;
  /** An extension's taker of the caller frames (MediaWorkerExtensionHost.takeFrames). */
  frameSink?: (frame: Int16Array | null, agent: Int16Array | null, nowMs: number) => boolean;
  /** Extensions' clean-ups, run when the session closes here. */
  closers?: (() => void)[];
}
const entries = new Map<number, Entry>();

let outbox: FromWorker[] = [];
let flushScheduled = false;
function scheduleFlush(): void {
  if (!flushScheduled) {
    flushScheduled = true;
    setImmediate(flush);
  }
}
function post(msg: FromWorker): void {
  outbox.push(msg);
  scheduleFlush();
}

/**
 * Caller frames of this turn, as views: a frame stays valid until its call's next tick (20 ms
 * away), and the flush at the end of this turn packs them into one buffer, transferred (one
 * allocation per turn instead of one per frame, no copy on the receiving side).
 */
interface PendingFrame {
  id: number;
  nowMs: number;
  frame: Int16Array | null;
  agent: Int16Array | null;
}
let frames: PendingFrame[] = [];
function postFrame(f: PendingFrame): void {
  frames.push(f);
  scheduleFlush();
}
function packFrames(): { msg: FromWorker; transfer: ArrayBuffer[] } | undefined {
  const n = frames.length;
  if (n === 0) return undefined;
  const ids = new Int32Array(n);
  const nowMs = new Float64Array(n);
  const lengths = new Int32Array(2 * n);
  let total = 0;
  for (const f of frames) total += (f.frame?.length ?? 0) + (f.agent?.length ?? 0);
  const pcm = new Int16Array(total);
  let at = 0;
  for (let i = 0; i < n; i++) {
    const f = frames[i]!;
    ids[i] = f.id;
    nowMs[i] = f.nowMs;
    if (f.frame) {
      pcm.set(f.frame, at);
      at += f.frame.length;
      lengths[2 * i] = f.frame.length;
    }
    if (f.agent) {
      pcm.set(f.agent, at);
      at += f.agent.length;
      lengths[2 * i + 1] = f.agent.length;
    }
  }
  frames = [];
  return { msg: { t: 'frames', ids, nowMs, lengths, pcm }, transfer: [ids.buffer, nowMs.buffer, lengths.buffer, pcm.buffer] };
}

function flush(): void {
  flushScheduled = false;
  const packed = packFrames();
  const batch = outbox;
  outbox = [];
  if (packed) batch.push(packed.msg);
  if (batch.length > 0) port.postMessage(batch, packed?.transfer ?? []);
}

const reply = (req: number, value?: unknown): void => post({ t: 'reply', req, ok: true, value });
const fail = (req: number, err: unknown): void => {
  const e = err as { message?: string; code?: string };
  post({ t: 'reply', req, ok: false, error: e?.message ?? String(err), ...(e?.code ? { code: e.code } : {}) });
};

// A snapshot of every session's counters about once a second (the main thread's stats() reads
// these), a tenth of the sessions every 100 ms: one burst for all of them would hold the media
// clock up at 100 calls.
let statsRound = 0;
const statsTimer = setInterval(() => {
  const slot = statsRound++ % 10;
  for (const [id, e] of entries) if (id % 10 === slot && e.rtp && !e.rtp.closed) post({ t: 'stats', id, stats: e.rtp.stats(), ...(e.bridge ? { lateFrames: e.bridge.lateFrames() } : {}) });
}, 100);
statsTimer.unref();

function openSession(id: number, e: Entry, msg: Extract<ToWorker, { t: 'session' }>): void {
  const o = msg.options;
  const rtp = new RtpSession({
    ports: e.ports,
    clockRate: o.clockRate,
    ...(o.remote ? { remote: o.remote } : {}),
    ...(o.dtmfPayloadType !== undefined ? { dtmfPayloadType: o.dtmfPayloadType } : {}),
    ...(o.rtcpMux !== undefined ? { rtcpMux: o.rtcpMux } : {}),
    ...(o.mediaTimeoutMs !== undefined ? { mediaTimeoutMs: o.mediaTimeoutMs } : {}),
    ...(o.srtp ? { srtp: o.srtp } : {}),
  });
  e.rtp = rtp;
  rtp.on('dtmf', (digit) => post({ t: 'dtmf', id, digit }));
  rtp.on('timeout', () => post({ t: 'timeout', id }));
  rtp.on('latch', (remote) => post({ t: 'latch', id, remote }));
  rtp.on('bye', (reason) => post({ t: 'bye', id, reason }));
  rtp.on('error', (err) => post({ t: 'error', id, message: err.message }));
}

/** Every received packet to the main thread from now on (the transfer relay): a listener only then. */
function forwardRtp(id: number, rtp: RtpSession): void {
  rtp.on('rtp', (p) => {
    post({ t: 'rtp', id, payloadType: p.payloadType, payload: p.payload.slice(), sequenceNumber: p.sequenceNumber, timestamp: p.timestamp, ssrc: p.ssrc, marker: p.marker });
  });
}

function handle(msg: ToWorker): void {
  if (msg.t === 'alloc') {
    allocator.allocate(msg.address !== undefined ? { address: msg.address } : {}).then(
      (ports) => {
        entries.set(msg.id, { ports });
        reply(msg.req, { address: ports.address, family: ports.family, rtpPort: ports.rtpPort, rtcpPort: ports.rtcpPort });
      },
      (err: unknown) => fail(msg.req, err),
    );
    return;
  }
  const e = entries.get(msg.id);
  if (e === undefined) {
    // The session is gone (closed, or its ports were never allocated): requests still get an answer.
    if ('req' in msg) fail(msg.req, new Error(`media session ${msg.id} is closed`));
    return;
  }
  switch (msg.t) {
    case 'session':
      openSession(msg.id, e, msg);
      reply(msg.req);
      return;
    case 'release':
      e.ports.close();
      entries.delete(msg.id);
      return;
    case 'setSrtp':
      e.rtp?.setSrtp(msg.srtp ?? undefined);
      return;
    case 'setRemote':
      e.rtp?.setRemote(msg.remote);
      return;
    case 'setMediaTimeout':
      e.rtp?.setMediaTimeout(msg.ms);
      return;
    case 'dtmf':
      if (e.rtp === undefined) return fail(msg.req, new Error('no RTP session'));
      e.rtp.sendDtmf(msg.digit, msg.durationMs, msg.payloadType).then(
        () => reply(msg.req),
        (err: unknown) => fail(msg.req, err),
      );
      return;
    case 'send':
      e.rtp?.send(msg.payload, { payloadType: msg.payloadType, timestampIncrement: msg.timestampIncrement, ...(msg.marker !== undefined ? { marker: msg.marker } : {}) });
      return;
    case 'forwardRtp':
      if (e.rtp) forwardRtp(msg.id, e.rtp);
      return;
    case 'bridge': {
      if (e.rtp === undefined || e.bridge !== undefined) return;
      const id = msg.id;
      e.bridge = new LocalBridgeMedia(
        e.rtp,
        msg.config,
        {
          onInputFrame: (frame, agent, nowMs) => {
            if (e.frameSink === undefined || e.frameSink(frame, agent, nowMs)) postFrame({ id, nowMs, frame, agent });
          },
          onError: (err, direction) => post({ t: 'mediaError', id, direction, message: (err as Error)?.message ?? String(err) }),
          onAgentAudioStart: (at) => post({ t: 'audioStart', id, at }),
        },
        ticker,
      );
      return;
    }
    case 'push':
      e.bridge?.push(msg.audio);
      return;
    case 'clear':
      e.bridge?.clear();
      return;
    default: {
      const fn = handlers.get((msg as { t: string }).t);
      if (fn) fn(msg as never);
      return;
    }
    case 'stopBridge':
      if (e.bridge === undefined) return fail(msg.req, new Error('no bridge media'));
      reply(msg.req, e.bridge.stopNow());
      return;
    case 'close': {
      const stats = e.bridge?.stopNow();
      if (e.rtp) e.rtp.close();
      else e.ports.close();
      entries.delete(msg.id);
      for (const fn of e.closers ?? []) fn();
      reply(msg.req, { stats: e.rtp?.stats(), bridge: stats });
      return;
    }
  }
}

// Extensions (workerData.extensions): more of a call than its media, in this thread.
const handlers = new Map<string, (msg: { t: string; id: number } & Record<string, unknown>) => void>();
const host: MediaWorkerExtensionHost = {
  handle: (type, fn) => void handlers.set(type, fn),
  post: (msg) => post(msg as unknown as FromWorker),
  bridge: (id) => entries.get(id)?.bridge,
  takeFrames: (id, sink) => {
    const e = entries.get(id);
    if (e) e.frameSink = sink;
  },
  onClose: (id, fn) => {
    const e = entries.get(id);
    if (e === undefined) fn(); // already closed here
    else (e.closers ??= []).push(fn);
  },
};
for (const ext of data.extensions) {
  const mod = (await import(ext)) as Partial<MediaWorkerExtension>;
  if (typeof mod.install !== 'function') throw new Error(`media worker extension ${ext} exports no install(host) function`);
  mod.install(host);
}

port.on('message', (batch: ToWorker[]) => {
  for (const msg of batch) {
    try {
      handle(msg);
    } catch (err) {
      // One bad request never takes the worker (and every call on it) down.
      if ('req' in msg) fail(msg.req, err);
      else post({ t: 'error', id: 'id' in msg ? msg.id : -1, message: (err as Error)?.message ?? String(err) });
    }
  }
});

post({ t: 'ready', niceness, realtime, tid, ...(warning ? { warning } : {}) });
