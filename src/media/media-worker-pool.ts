/**
 * Media on worker threads (config `rtp.media_threads` > 0): N media workers (media-worker.ts),
 * each with its own slice of the RTP port range, its own sockets and its own media clock. The SIP
 * layer allocates ports and makes RTP sessions here instead of on the main thread; what it gets
 * back (RemotePortPair, RemoteRtpSession) has the surface it uses of RtpPortPair and RtpSession,
 * and the bridge starts a call's media inside the worker (RemoteBridgeMedia): caller frames come
 * back once per 20 ms tick, agent audio goes there. Per-packet work never crosses threads; only
 * 20 ms frames, agent audio chunks and control messages do, batched per event-loop turn.
 *
 * Why (docs/media-workers.md): one event loop carrying SIP, WebSocket, JSON and every call's RTP
 * cannot send 200 calls' frames each within 5 ms of their slot on a busy machine; a loop that
 * carries only media can.
 */
import { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { BridgeMedia, BridgeMediaCallbacks, BridgeMediaConfig, BridgeMediaStats } from './bridge-media.ts';
import { MediaClosedError } from './errors.ts';
import type { AllocatedPorts, FromWorker, MediaWorkerData, ToWorker, WorkerSessionOptions } from './media-worker-protocol.ts';
import type { RtpSessionEvents, RtpSessionStats, SdpRemote, SendOptions } from './rtp-session.ts';
import type { RemoteAddress } from './rtp-symmetric-latch.ts';
import type { SrtpKeys } from './srtp.ts';

export interface MediaWorkerPoolOptions {
  /** Number of worker threads (>= 1). */
  workers: number;
  portMin: number;
  portMax: number;
  /** Address the RTP sockets bind to. */
  address: string;
  /** Scheduling priority (nice, -20..19) for the media threads; null leaves the default. */
  niceness?: number | null;
  /** SCHED_RR priority (1-99) for the media threads; 0 or absent: the normal policy. */
  realtime?: number;
  /**
   * V8's young generation cap per media thread, MB (Worker resourceLimits.maxYoungGenerationSizeMb);
   * 0 or absent: V8's default (48 MB, of which new_space grows to 32 MB under allocation bursts
   * and stays committed). docs/media-workers.md "Memory".
   */
  youngGenerationMb?: number;
  /** Modules each worker imports before anything else (the benchmarks' instrumentation). */
  preload?: readonly URL[];
  /**
   * Modules that carry more of a call than its media in each worker (the bridge's voice link);
   * each exports install(host) (MediaWorkerExtension). URLs, because a worker can only be handed
   * a module by its location; a typo is a start-up error naming the module.
   */
  extensions?: readonly URL[];
  logger: { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void; error(obj: object, msg?: string): void };
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
}

/** An error the worker reported, with its code (e.g. MEDIA_PORTS_EXHAUSTED) kept. */
/** Only the fields the worker needs: a copy of the keys, whatever else the caller's object holds. */
function plainKeys(k: SrtpKeys): SrtpKeys {
  return { suite: k.suite, sendKey: Uint8Array.from(k.sendKey), receiveKey: Uint8Array.from(k.receiveKey) };
}

class WorkerMediaError extends Error {
  readonly code: string | undefined;
  constructor(message: string, code?: string) {
    super(message);
    this.name = 'WorkerMediaError';
    this.code = code;
  }
}

function zeroStats(): RtpSessionStats {
  return {
    ssrc: 0,
    remoteSsrc: undefined,
    packetsSent: 0,
    bytesSent: 0,
    packetsReceived: 0,
    bytesReceived: 0,
    packetsLost: 0,
    fractionLost: 0,
    extendedHighestSeq: undefined,
    jitterMs: 0,
    rttMs: undefined,
    remote: undefined,
    rtcpSent: 0,
    rtcpReceived: 0,
    dtmfReceived: 0,
    dtmfSent: 0,
    dropped: { tooShort: 0, badVersion: 0, malformed: 0, wrongSource: 0, badSequence: 0, rtcpMalformed: 0, noRemote: 0, mutedByDtmf: 0, socketErrors: 0, srtpAuthFailed: 0, srtcpAuthFailed: 0, srtpReplayed: 0 },
  };
}

/**
 * Starts media-worker.js (the build) or media-worker.ts (the sources, under tsx or vitest: the
 * worker registers tsx's loader itself first, since loader hooks are per thread).
 */
function newMediaWorker(data: MediaWorkerData, name: string): Worker {
  const resourceLimits = data.youngGenerationMb > 0 ? { resourceLimits: { maxYoungGenerationSizeMb: data.youngGenerationMb } } : {};
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./media-worker.js', import.meta.url), { workerData: data, name, ...resourceLimits });
  const entry = new URL('./media-worker.ts', import.meta.url).href;
  // tsx's ESM build of its API (require.resolve finds the CommonJS one, which cannot register here).
  const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;
  const code = `import(${JSON.stringify(tsx)}).then((m) => { (m.register ?? m.default.register)(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(code, { eval: true, workerData: data, name, ...resourceLimits });
}

/** One worker thread and what the main thread tracks of it. */
class MediaWorkerHandle {
  readonly index: number;
  readonly data: MediaWorkerData;
  worker!: Worker;
  ready!: Promise<void>;
  readonly sessions = new Map<number, RemoteRtpSession>();
  readonly pending = new Map<number, Pending>();
  #outbox: ToWorker[] = [];
  /** Buffers that move to the worker with the batch (copies made for it: no second copy). */
  #transfer: ArrayBuffer[] = [];
  #flushScheduled = false;
  #nextReq = 1;
  #stopping = false;
  /** The current worker reached 'ready' (a crash after that is restarted; one before is not). */
  #started = false;

  constructor(
    index: number,
    data: MediaWorkerData,
    private readonly logger: MediaWorkerPoolOptions['logger'],
  ) {
    this.index = index;
    this.data = data;
    this.#spawn();
  }

  /** Port pairs this worker holds for calls (allocated, with or without a session yet): its load. */
  held = 0;
  /** The worker thread's kernel id (tid, as /proc and chrt know it; null off Linux) once started, and the SCHED_RR priority it runs at (0: normal policy). */
  tid: number | null = null;
  realtime = 0;

  #spawn(): void {
    const worker = newMediaWorker(this.data, `media-${this.index}`);
    this.worker = worker;
    this.ready = new Promise<void>((resolve, reject) => {
      const onExit = (code: number): void => reject(new Error(`media worker ${this.index} exited during start-up (code ${code})`));
      worker.once('exit', onExit);
      worker.once('error', reject);
      const onReady = (batch: FromWorker[]): void => {
        const ready = batch.find((m) => m.t === 'ready');
        if (ready === undefined || ready.t !== 'ready') return;
        worker.off('message', onReady);
        worker.off('exit', onExit);
        worker.off('error', reject);
        if (ready.warning) this.logger.warn({ worker: this.index }, ready.warning);
        this.tid = ready.tid;
        this.realtime = ready.realtime;
        this.#started = true;
        resolve();
      };
      worker.on('message', onReady);
    });
    worker.on('message', (batch: FromWorker[]) => this.#receive(batch));
    worker.on('error', (err) => this.logger.error({ err, worker: this.index }, 'media worker failed'));
    worker.on('exit', (code) => this.#exited(code));
  }

  /** The worker died: every call on it lost its media. Tell them (as a media timeout) and start a new one. */
  #exited(code: number): void {
    for (const p of this.pending.values()) p.reject(new MediaClosedError('media worker'));
    this.pending.clear();
    const lost = [...this.sessions.values()];
    this.sessions.clear();
    for (const s of lost) s.lost(!this.#stopping);
    if (this.#stopping) return;
    if (!this.#started) {
      // It never came up (start-up failed): ready() rejects; restarting would fail the same way.
      this.logger.error({ worker: this.index, code }, 'media worker exited during start-up');
      return;
    }
    this.logger.error({ worker: this.index, code, calls: lost.length }, 'media worker exited: its calls lost their media; starting a new one');
    this.#started = false;
    this.#spawn();
    this.ready.catch((err: unknown) => this.logger.error({ err, worker: this.index }, 'media worker could not be restarted'));
  }

  post(msg: ToWorker, transfer?: ArrayBuffer): void {
    this.#outbox.push(msg);
    if (transfer) this.#transfer.push(transfer);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(() => this.#flush());
    }
  }

  #flush(): void {
    this.#flushScheduled = false;
    const batch = this.#outbox;
    const transfer = this.#transfer;
    this.#outbox = [];
    this.#transfer = [];
    if (batch.length > 0 && !this.#stopping) this.worker.postMessage(batch, transfer);
  }

  request<T>(make: (req: number) => ToWorker): Promise<T> {
    const req = this.#nextReq++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(req, { resolve: resolve as (v: unknown) => void, reject });
      this.post(make(req));
    });
  }

  #receive(batch: FromWorker[]): void {
    for (const m of batch) {
      if (m.t === 'ready') continue;
      if (m.t === 'reply') {
        const p = this.pending.get(m.req);
        if (p === undefined) continue;
        this.pending.delete(m.req);
        if (m.ok) p.resolve(m.value);
        else p.reject(new WorkerMediaError(m.error, m.code));
        continue;
      }
      if (m.t === 'frames') {
        this.#frames(m);
        continue;
      }
      this.sessions.get(m.id)?.receive(m);
    }
  }

  /** Hands each call its frames of a packed batch (views into the one transferred buffer). */
  #frames(m: Extract<FromWorker, { t: 'frames' }>): void {
    let at = 0;
    for (let i = 0; i < m.ids.length; i++) {
      const fl = m.lengths[2 * i]!;
      const al = m.lengths[2 * i + 1]!;
      const frame = fl > 0 ? m.pcm.subarray(at, at + fl) : null;
      at += fl;
      const agent = al > 0 ? m.pcm.subarray(at, at + al) : null;
      at += al;
      this.sessions.get(m.ids[i]!)?.bridgeMedia?.frame(frame, agent, m.nowMs[i]!);
    }
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    await this.worker.terminate();
  }
}

/** Ports bound inside a media worker: what the SIP layer reads of a pair, and close(). */
export class RemotePortPair {
  readonly address: string;
  readonly family: 'IPv4' | 'IPv6';
  readonly rtpPort: number;
  readonly rtcpPort: number;
  #closed = false;
  /** Set when a session took the ports over (it closes them). */
  #owned = false;

  constructor(
    readonly worker: MediaWorkerHandle,
    readonly id: number,
    ports: AllocatedPorts,
  ) {
    this.address = ports.address;
    this.family = ports.family;
    this.rtpPort = ports.rtpPort;
    this.rtcpPort = ports.rtcpPort;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The session now owns the sockets. */
  takeOver(): void {
    this.#owned = true;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#owned) return;
    this.worker.held--;
    this.worker.post({ t: 'release', id: this.id });
  }
}

/**
 * A media worker's RtpSession, as the main thread sees it: control calls go to the worker,
 * DTMF / timeout / latch events come back, stats() is the worker's last snapshot (at most a
 * second old; final when closed). Packets reach 'rtp' listeners only when one is added (the
 * transfer relay); bridged calls use RemoteBridgeMedia instead.
 */
export class RemoteRtpSession extends EventEmitter<RtpSessionEvents> {
  readonly clockRate: number;
  readonly #ports: RemotePortPair;
  #closed = false;
  #stats = zeroStats();
  /** The bridge media's late agent frames in the worker's last snapshot. */
  #lateFrames: number | undefined;
  #remote: (RemoteAddress & { latched: boolean }) | undefined;
  #bridge: RemoteBridgeMedia | undefined;
  #forwarding = false;
  readonly #workerListeners = new Map<string, (msg: { t: string; id: number } & Record<string, unknown>) => void>();
  /**
   * Settles when the worker has opened the session: packets that reach the ports before then
   * find no session and are dropped (as with a local RtpSession created after its ports).
   * Rejects with the worker's error if it could not open it ('error' is emitted then too).
   */
  readonly opened: Promise<void>;
  /** The worker's answer to close: the final figures (and the bridge's, if it was still running). */
  #closing: Promise<{ stats?: RtpSessionStats; bridge?: BridgeMediaStats }> | undefined;

  constructor(ports: RemotePortPair, options: WorkerSessionOptions) {
    super();
    // As RtpSession: ports already given back cannot carry a session.
    if (ports.closed) throw new MediaClosedError('RTP port pair');
    this.clockRate = options.clockRate;
    this.#ports = ports;
    ports.takeOver();
    ports.worker.sessions.set(ports.id, this);
    const sent = options.srtp ? { ...options, srtp: plainKeys(options.srtp) } : options;
    this.opened = ports.worker.request<void>((req) => ({ t: 'session', req, id: ports.id, options: sent }));
    // The worker could not open it: not fatal, whoever listens for 'error' hears of it. (A worker
    // that exits rejects it with MediaClosedError; the session reports that as 'timeout'/'close'.)
    this.opened.catch((err: unknown) => {
      if (err instanceof WorkerMediaError && this.listenerCount('error') > 0) this.emit('error', err as never);
    });
    // Packets cross threads only for whoever asks for them (the transfer relay).
    (this as EventEmitter).on('newListener', (event: string | symbol) => {
      if (event === 'rtp' && !this.#forwarding) {
        this.#forwarding = true;
        this.#ports.worker.post({ t: 'forwardRtp', id: this.#ports.id });
      }
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Index of the media thread carrying this call (for logs and diagnostics). */
  get mediaThread(): number {
    return this.#ports.worker.index;
  }

  get local(): { address: string; rtpPort: number; rtcpPort: number } {
    return { address: this.#ports.address, rtpPort: this.#ports.rtpPort, rtcpPort: this.#ports.rtcpPort };
  }

  get remote(): (RemoteAddress & { latched: boolean }) | undefined {
    return this.#remote;
  }

  setRemote(remote: SdpRemote): void {
    if (!this.#closed) this.#ports.worker.post({ t: 'setRemote', id: this.#ports.id, remote });
  }

  setMediaTimeout(ms: number): void {
    if (!this.#closed) this.#ports.worker.post({ t: 'setMediaTimeout', id: this.#ports.id, ms });
  }

  /** New SRTP keys for the session in the worker (RtpSession.setSrtp). */
  setSrtp(keys: SrtpKeys | undefined): void {
    if (!this.#closed) this.#ports.worker.post({ t: 'setSrtp', id: this.#ports.id, srtp: keys === undefined ? null : plainKeys(keys) });
  }

  sendDtmf(digit: string, durationMs?: number, payloadType?: number): Promise<void> {
    if (this.#closed) return Promise.reject(new MediaClosedError('RTP session'));
    return this.#ports.worker.request<void>((req) => ({
      t: 'dtmf',
      req,
      id: this.#ports.id,
      digit,
      ...(durationMs !== undefined ? { durationMs } : {}),
      ...(payloadType !== undefined ? { payloadType } : {}),
    }));
  }

  /** Sends one payload from the worker (the payload is copied). */
  send(payload: Uint8Array, options: SendOptions): boolean {
    if (this.#closed) return false;
    this.#ports.worker.post({ t: 'send', id: this.#ports.id, payload: payload.slice(), ...options });
    return true;
  }

  stats(): RtpSessionStats {
    return this.#stats;
  }

  /** Late agent frames of the call's bridge media, as of the worker's last snapshot. */
  get lateFrames(): number | undefined {
    return this.#lateFrames;
  }

  /** Starts the call's bridge media in the worker (media-host.ts startBridgeMedia). */
  bridge(config: BridgeMediaConfig, callbacks: BridgeMediaCallbacks): RemoteBridgeMedia {
    if (this.#bridge !== undefined) throw new Error('this call is already bridged');
    this.#bridge = new RemoteBridgeMedia(this, this.#ports.worker, this.#ports.id, callbacks);
    this.#ports.worker.post({ t: 'bridge', id: this.#ports.id, config });
    return this.#bridge;
  }

  /** The final figures, once closed (undefined while open). */
  get closing(): Promise<{ stats?: RtpSessionStats; bridge?: BridgeMediaStats }> | undefined {
    return this.#closing;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const w = this.#ports.worker;
    this.#closing = w
      .request<{ stats?: RtpSessionStats; bridge?: BridgeMediaStats }>((req) => ({ t: 'close', req, id: this.#ports.id }))
      .then((v) => {
        if (v.stats) this.#stats = v.stats;
        return v;
      })
      .catch(() => ({}))
      .finally(() => {
        w.sessions.delete(this.#ports.id);
        w.held--;
      });
    this.emit('close');
  }

  /** The worker is gone: the media with it. crashed: tell the call as a media timeout (it hangs up). */
  lost(crashed: boolean): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing = Promise.resolve({});
    this.#ports.worker.held--;
    if (crashed) this.emit('timeout');
    this.emit('close');
  }

  /** Messages of an extension's type from this call's worker go to fn (one listener per type). */
  onWorkerMessage(type: string, fn: (msg: { t: string; id: number } & Record<string, unknown>) => void): void {
    this.#workerListeners.set(type, fn);
  }

  /** A message of an extension's type to this call's worker (id is this session's). */
  postToWorker(msg: { t: string } & Record<string, unknown>): void {
    this.#ports.worker.post({ ...msg, id: this.#ports.id } as unknown as ToWorker);
  }

  /** The bridge media started on this session, if any. */
  get bridgeMedia(): RemoteBridgeMedia | undefined {
    return this.#bridge;
  }

  receive(m: Exclude<FromWorker, { t: 'ready' } | { t: 'reply' } | { t: 'frames' }>): void {
    switch (m.t) {
      case 'rtp':
        this.emit('rtp', { payloadType: m.payloadType, sequenceNumber: m.sequenceNumber, timestamp: m.timestamp, ssrc: m.ssrc, marker: m.marker, payload: m.payload, arrivalMs: performance.now() });
        return;
      case 'dtmf':
        this.emit('dtmf', m.digit);
        return;
      case 'timeout':
        this.emit('timeout');
        return;
      case 'latch':
        this.#remote = { ...m.remote, latched: true };
        this.emit('latch', m.remote);
        return;
      case 'bye':
        this.emit('bye', m.reason);
        return;
      case 'stats':
        if (!this.#closed) {
          this.#stats = m.stats;
          this.#lateFrames = m.lateFrames;
        }
        return;
      case 'audioStart':
        this.#bridge?.audioStart(m.at);
        return;
      default: {
        const ext = m as unknown as { t: string; id: number } & Record<string, unknown>;
        this.#workerListeners.get(ext.t)?.(ext);
        return;
      }
      case 'error':
      case 'mediaError':
        // Not fatal (as RtpSession's 'error'): logged by whoever listens.
        if (m.t === 'mediaError') this.#bridge?.error(new Error(m.message), m.direction);
        else if (this.listenerCount('error') > 0) this.emit('error', Object.assign(new Error(m.message), { code: 'MEDIA_WORKER' }) as never);
        return;
    }
  }
}

/** A bridge's media running in a worker: the main thread's BridgeMedia handle on it. */
export class RemoteBridgeMedia implements BridgeMedia {
  #stopped: Promise<BridgeMediaStats> | undefined;

  constructor(
    private readonly session: RemoteRtpSession,
    private readonly worker: MediaWorkerHandle,
    private readonly id: number,
    private readonly callbacks: BridgeMediaCallbacks,
  ) {}

  push(audio: Int16Array): void {
    // Copied: the bridge decodes into a reused buffer.
    if (this.#stopped !== undefined || this.session.closed) return;
    const copy = audio.slice();
    this.worker.post({ t: 'push', id: this.id, audio: copy }, copy.buffer);
  }

  clear(): void {
    if (this.#stopped === undefined && !this.session.closed) this.worker.post({ t: 'clear', id: this.id });
  }

  /** Index of the media thread running this media. */
  get mediaThread(): number {
    return this.session.mediaThread;
  }

  lateFrames(): number | undefined {
    return this.session.lateFrames;
  }

  frame(frame: Int16Array | null, agent: Int16Array | null, nowMs: number): void {
    if (this.#stopped === undefined) this.callbacks.onInputFrame(frame, agent, nowMs);
  }

  error(err: Error, direction: 'inbound' | 'outbound'): void {
    this.callbacks.onError(err, direction);
  }

  audioStart(atEpochMs: number): void {
    if (this.#stopped === undefined) this.callbacks.onAgentAudioStart?.(atEpochMs);
  }

  stop(): Promise<BridgeMediaStats> {
    if (this.#stopped !== undefined) return this.#stopped;
    const closing = this.session.closing;
    const empty = (): BridgeMediaStats => ({
      rtp: this.session.stats(),
      inbound: { decoded: 0, concealedFrames: 0, comfortNoiseFrames: 0 } as BridgeMediaStats['inbound'],
      outbound: { framesSent: 0, silenceSent: 0, framesLate: 0, maxLateMs: 0, queuedMs: 0, droppedMs: 0, lateTicksSkipped: 0 },
      inboundTickMs: 0,
    });
    this.#stopped = (closing ?? this.worker.request<BridgeMediaStats>((req) => ({ t: 'stopBridge', req, id: this.id })).then((b) => ({ bridge: b })))
      .then((v) => v.bridge ?? empty())
      .catch(() => empty());
    return this.#stopped;
  }
}

export class MediaWorkerPool {
  /** The whole port range, over all workers. */
  readonly min: number;
  readonly max: number;
  readonly #workers: MediaWorkerHandle[] = [];
  #nextId = 1;

  constructor(options: MediaWorkerPoolOptions) {
    this.min = options.portMin;
    this.max = options.portMax;
    const firstEven = options.portMin % 2 === 0 ? options.portMin : options.portMin + 1;
    const pairs = Math.floor((options.portMax - firstEven + 1) / 2);
    const n = Math.max(1, Math.min(options.workers, pairs));
    const perWorker = Math.floor(pairs / n);
    for (let i = 0; i < n; i++) {
      const min = firstEven + i * perWorker * 2;
      const max = i === n - 1 ? options.portMax : min + perWorker * 2 - 1;
      this.#workers.push(
        new MediaWorkerHandle(i, { index: i, portMin: min, portMax: max, address: options.address, niceness: options.niceness ?? null, realtime: options.realtime ?? 0, youngGenerationMb: options.youngGenerationMb ?? 0, preload: (options.preload ?? []).map((u) => u.href), extensions: (options.extensions ?? []).map((u) => u.href) }, options.logger),
      );
    }
  }

  get size(): number {
    return this.#workers.length;
  }

  /** Port pairs held for calls, over all workers (the callbridge_rtp_ports_in_use gauge). */
  get inUse(): number {
    return this.#workers.reduce((n, w) => n + w.held, 0);
  }

  /** Each worker's kernel thread id (not worker_threads' threadId) and SCHED_RR priority (0: normal policy), once ready(): for the start-up log and tests. */
  get threads(): { tid: number | null; realtime: number }[] {
    return this.#workers.map((w) => ({ tid: w.tid, realtime: w.realtime }));
  }

  /** Resolves when every worker is up (their port ranges and resamplers ready). */
  async ready(): Promise<void> {
    await Promise.all(this.#workers.map((w) => w.ready));
  }

  /** Binds an RTP/RTCP pair on the least-loaded worker. Errors as PortAllocator.allocate(). */
  async allocate(options: { address?: string } = {}): Promise<RemotePortPair> {
    // Least-loaded first; a worker whose slice of the range is full passes to the next.
    const order = [...this.#workers].sort((a, b) => a.held - b.held);
    let last: unknown;
    for (const worker of order) {
      // Counted before the first await: allocations started in the same turn spread out.
      worker.held++;
      const id = this.#nextId++;
      try {
        await worker.ready;
        const ports = await worker.request<AllocatedPorts>((req) => ({ t: 'alloc', req, id, ...(options.address !== undefined ? { address: options.address } : {}) }));
        return new RemotePortPair(worker, id, ports);
      } catch (err) {
        worker.held--;
        last = err;
        if ((err as { code?: string }).code !== 'MEDIA_PORTS_EXHAUSTED') throw err;
      }
    }
    throw last;
  }

  async close(): Promise<void> {
    await Promise.all(this.#workers.map((w) => w.stop()));
  }
}
