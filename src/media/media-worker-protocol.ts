/**
 * Messages between the main thread (media-worker-pool.ts) and a media worker (media-worker.ts).
 * Each side batches what it has to say during one event-loop turn into one postMessage (an array
 * of these), so a worker carrying 100 calls posts about one message per 2 ms media phase, not
 * one per frame. Order within a batch is the order of the calls that produced it (a push before
 * a clear stays before it).
 */
import type { BridgeMediaConfig, BridgeMediaStats } from './bridge-media.ts';
import type { DtmfDigit } from './dtmf.ts';
import type { RtpSessionStats, SdpRemote } from './rtp-session.ts';
import type { RemoteAddress } from './rtp-symmetric-latch.ts';
import type { SrtpKeys } from './srtp.ts';

/** RtpSession options that cross to the worker (everything but ports, clock, timers, logger). */
export interface WorkerSessionOptions {
  clockRate: number;
  remote?: SdpRemote;
  dtmfPayloadType?: number;
  rtcpMux?: boolean;
  mediaTimeoutMs?: number;
  /** SDES-SRTP keys of the call (plain data after structured clone; never logged). */
  srtp?: SrtpKeys;
}

export type ToWorker =
  | { t: 'alloc'; req: number; id: number; address?: string }
  /** Answered once the session is open in the worker (its packets are received from then on). */
  | { t: 'session'; req: number; id: number; options: WorkerSessionOptions }
  /** Ports allocated but never used for a session (the INVITE failed): give them back. */
  | { t: 'release'; id: number }
  | { t: 'setRemote'; id: number; remote: SdpRemote }
  /** New SRTP keys (a re-INVITE re-keyed): new contexts; null: plain RTP from now on. */
  | { t: 'setSrtp'; id: number; srtp: SrtpKeys | null }
  | { t: 'setMediaTimeout'; id: number; ms: number }
  | { t: 'dtmf'; req: number; id: number; digit: string; durationMs?: number; payloadType?: number }
  | { t: 'send'; id: number; payload: Uint8Array; payloadType: number; timestampIncrement: number; marker?: boolean }
  /** Forward every received packet ('rtp' events) to the main thread (media-relay.ts). */
  | { t: 'forwardRtp'; id: number }
  | { t: 'close'; req: number; id: number }
  | { t: 'bridge'; id: number; config: BridgeMediaConfig }
  | { t: 'push'; id: number; audio: Int16Array }
  | { t: 'clear'; id: number }
  | { t: 'stopBridge'; req: number; id: number };

export type FromWorker =
  | { t: 'ready'; niceness: number | null; realtime: number; tid: number | null; warning?: string }
  | { t: 'reply'; req: number; ok: true; value?: unknown }
  | { t: 'reply'; req: number; ok: false; error: string; code?: string }
  /**
   * The caller frames (and agent frames, for recordings) of every call ticked during one turn,
   * packed into one transferred buffer: entry i is call ids[i], ticked at nowMs[i] (the worker's
   * performance.now()); its caller frame (lengths[2i] samples, 0: none) then its agent frame
   * (lengths[2i+1]) follow each other in pcm.
   */
  | { t: 'frames'; ids: Int32Array; nowMs: Float64Array; lengths: Int32Array; pcm: Int16Array }
  | { t: 'rtp'; id: number; payloadType: number; payload: Uint8Array; sequenceNumber: number; timestamp: number; ssrc: number; marker: boolean }
  | { t: 'dtmf'; id: number; digit: DtmfDigit }
  | { t: 'timeout'; id: number }
  | { t: 'latch'; id: number; remote: RemoteAddress }
  | { t: 'bye'; id: number; reason: string | undefined }
  | { t: 'error'; id: number; message: string }
  | { t: 'stats'; id: number; stats: RtpSessionStats; lateFrames?: number }
  | { t: 'mediaError'; id: number; direction: 'inbound' | 'outbound'; message: string }
  /** The bridge media's first packet of agent audio after a silence went out (epoch ms). */
  | { t: 'audioStart'; id: number; at: number };

/** The value of a 'reply' to 'alloc'. */
export interface AllocatedPorts {
  address: string;
  family: 'IPv4' | 'IPv6';
  rtpPort: number;
  rtcpPort: number;
}

/** The value of a 'reply' to 'close' and 'stopBridge'. */
export type ClosedSession = { stats: RtpSessionStats };
export type StoppedBridge = BridgeMediaStats;

/**
 * A module loaded into each media worker (MediaWorkerData.extensions) that carries more of a
 * call than its media, e.g. the bridge's voice-session socket (src/bridge/worker-voice-link.ts):
 * it gets messages of its own types and may take a bridged call's caller frames.
 */
/** What an extension module exports (MediaWorkerPoolOptions.extensions). */
export interface MediaWorkerExtension {
  install(host: MediaWorkerExtensionHost): void;
}

export interface MediaWorkerExtensionHost {
  /** Main-thread messages of this type (`t`) go to fn. */
  handle(type: string, fn: (msg: { t: string; id: number } & Record<string, unknown>) => void): void;
  /** To the main thread (RemoteRtpSession.onWorkerMessage there). */
  post(msg: { t: string; id: number } & Record<string, unknown>): void;
  /** The bridge media of call id in this worker, once started. */
  bridge(id: number): { push(audio: Int16Array): void; clear(): void } | undefined;
  /**
   * Takes call id's caller frames (views, valid until its next tick): the sink returns true when
   * the main thread should still get them (call recording), false when it consumed them.
   */
  takeFrames(id: number, sink: ((frame: Int16Array | null, agent: Int16Array | null, nowMs: number) => boolean) | undefined): void;
  /** fn runs when call id's session closes in this worker (or the worker stops). */
  onClose(id: number, fn: () => void): void;
}

/** What the pool gives each worker (workerData). */
export interface MediaWorkerData {
  index: number;
  portMin: number;
  portMax: number;
  address: string;
  /** Scheduling priority (nice) for the worker's thread; null: leave it. */
  niceness: number | null;
  /** SCHED_RR priority (1-99) for the worker's thread; 0: leave the normal policy. */
  realtime: number;
  /** Module URLs (href) imported before anything else (bench instrumentation). */
  preload: string[];
  /** Extension module URLs (href), each a MediaWorkerExtension. */
  extensions: string[];
  /** V8's young generation cap for the worker's heap, MB (resourceLimits); 0: V8's default. */
  youngGenerationMb: number;
}
