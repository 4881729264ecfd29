/**
 * A bridged call's voice-session WebSocket, run in the media worker that carries the call's RTP
 * (rtp.media_threads > 0), so that audio never crosses threads: the caller's 20 ms frames leave
 * as `input_audio` from the worker's media tick, `response_audio` goes from the socket straight
 * into the worker's playout queue, and `interruption` clears it there. Everything else the
 * session says (session_started, dtmf, session_ended, transcripts...) goes to the main thread,
 * where the bridge core handles it as it does a socket of its own.
 *
 *   worker half: install(host), loaded into each media worker as an extension
 *   main half:   RemoteVoiceSocket, what voice-socket.ts talks to instead of a WebSocket
 *
 * Why: with the socket on the main thread, every frame crossed threads twice and waited for the
 * main event loop (tens of ms at 200 calls); docs/media-workers.md has the figures.
 */
import { EventEmitter } from 'node:events';
import WebSocket from 'ws';
import type { MediaWorkerExtensionHost } from '../media/media-worker-protocol.ts';
import type { RemoteRtpSession } from '../media/media-worker-pool.ts';
import { connectVoiceClient, inputAudioSender, serverFrameReader, type ServerMessage } from './voice-frames.ts';

/** Messages between the halves: main -> worker `vl.open` / `vl.send` / `vl.close`, worker -> main `vl`. */
type WorkerEvent =
  | { ev: 'open' }
  | { ev: 'unexpected-response'; status: number }
  | { ev: 'error'; message: string }
  | { ev: 'close'; code: number; reason: string }
  | { ev: 'message'; msg: ServerMessage }
  | { ev: 'counts'; audioOut: number; framesIn: number }
  | { ev: 'warn'; message: string };

interface Link {
  ws: WebSocket;
  audioOut: number;
  framesIn: number;
}

/** The worker half: a media worker extension (MediaWorkerExtensionHost). */
/** This module, for MediaWorkerPoolOptions.extensions (whatever it was compiled to: .ts or .js). */
export const WORKER_VOICE_LINK_MODULE = new URL(import.meta.url);

/** The headers posted with vl.open, as strings only (the message crossed a thread). */
function upgradeHeaders(value: unknown): Record<string, string> {
  if (typeof value !== 'object' || value === null) return {};
  return Object.fromEntries(Object.entries(value).filter((e): e is [string, string] => typeof e[1] === 'string'));
}

export function install(host: MediaWorkerExtensionHost): void {
  const links = new Map<number, Link>();
  const emit = (id: number, e: WorkerEvent): void => host.post({ t: 'vl', id, ...e });

  host.handle('vl.open', (m) => {
    const id = m.id;
    const ws = connectVoiceClient(String(m.url), upgradeHeaders(m.headers));
    const link: Link = { ws, audioOut: 0, framesIn: 0 };
    links.set(id, link);
    const recording = m.recording === true;
    ws.on('open', () => emit(id, { ev: 'open' }));
    ws.on('unexpected-response', (_req, res) => emit(id, { ev: 'unexpected-response', status: res.statusCode ?? 0 }));
    ws.on('error', (err) => emit(id, { ev: 'error', message: err.message }));
    ws.on('close', (code, reason) => {
      host.takeFrames(id, undefined);
      links.delete(id);
      // The session may close first (the agent hung up): then no vl.close finds the link, so the
      // final counts go with the close (the per-call log line reads them).
      emit(id, { ev: 'counts', audioOut: link.audioOut, framesIn: link.framesIn });
      emit(id, { ev: 'close', code, reason: reason.toString() });
    });
    ws.on(
      'message',
      serverFrameReader({
        audio: (pcm) => {
          const bridge = host.bridge(id);
          if (bridge === undefined) return;
          bridge.push(pcm);
          link.audioOut++;
        },
        message: (msg) => {
          // Barge-in is cut here, at once; the main thread hears of it too (it counts it).
          if (msg.type === 'interruption') host.bridge(id)?.clear();
          emit(id, { ev: 'message', msg });
        },
        warn: (message) => emit(id, { ev: 'warn', message }),
      }),
    );
    // Caller audio to the session from the media tick itself; the main thread gets the frames
    // only for a recording.
    const sendInputAudio = inputAudioSender(ws);
    host.takeFrames(id, (frame) => {
      if (frame && ws.readyState === WebSocket.OPEN) {
        sendInputAudio(frame);
        link.framesIn++;
      }
      return recording;
    });
    host.onClose(id, () => {
      // The call's media is closing: its counts are final. Sent now, before the worker's answer
      // to the close, since the main thread stops listening for this call once that arrives.
      emit(id, { ev: 'counts', audioOut: link.audioOut, framesIn: link.framesIn });
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000, 'call ended');
    });
  });
  host.handle('vl.send', (m) => {
    const ws = links.get(m.id)?.ws;
    if (ws?.readyState === WebSocket.OPEN) ws.send(String(m.data));
  });
  host.handle('vl.close', (m) => {
    const link = links.get(m.id);
    if (link === undefined) return;
    // The counts go back at once (the per-call log line), before the close handshake ends.
    emit(m.id, { ev: 'counts', audioOut: link.audioOut, framesIn: link.framesIn });
    const ws = link.ws;
    if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(Number(m.code), String(m.reason));
  });
}

export interface RemoteVoiceSocketEvents {
  open: [];
  'unexpected-response': [status: number];
  error: [err: Error];
  close: [code: number, reason: string];
  message: [msg: ServerMessage];
  warn: [message: string];
}

/** The main half: the voice-session socket of a call whose media runs in a worker. */
export class RemoteVoiceSocket extends EventEmitter<RemoteVoiceSocketEvents> {
  #state: 'connecting' | 'open' | 'closing' | 'closed' = 'connecting';
  /** What the worker's fast path handled (`response_audio` messages, `input_audio` frames sent). */
  audioOut = 0;
  framesIn = 0;
  #countsFinal = false;
  #countsWaiters: Array<() => void> = [];

  constructor(
    private readonly rtp: RemoteRtpSession,
    url: string,
    recording: boolean,
    /** The upgrade request's extra headers (the call's traceparent). */
    headers: Record<string, string> = {},
  ) {
    super();
    rtp.onWorkerMessage('vl', (m) => this.#receive(m as unknown as WorkerEvent));
    rtp.postToWorker({ t: 'vl.open', url, recording, headers });
  }

  get open(): boolean {
    return this.#state === 'open';
  }

  get connectingOrOpen(): boolean {
    return this.#state === 'connecting' || this.#state === 'open';
  }

  send(text: string): void {
    if (this.#state === 'open') this.rtp.postToWorker({ t: 'vl.send', data: text });
  }

  /**
   * Resolves once the worker has sent its final counts (at close), or after `timeoutMs` (a worker
   * that died sends none): the counts are read after the media's final figures, which arrive
   * first on the same port.
   */
  finalCounts(timeoutMs = 1000): Promise<void> {
    if (this.#countsFinal) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      timer.unref();
      this.#countsWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  close(code: number, reason: string): void {
    if (this.#state === 'closing' || this.#state === 'closed') return;
    this.#state = 'closing';
    this.rtp.postToWorker({ t: 'vl.close', code, reason });
  }

  #receive(e: WorkerEvent): void {
    switch (e.ev) {
      case 'open':
        if (this.#state === 'connecting') this.#state = 'open';
        this.emit('open');
        return;
      case 'unexpected-response':
        this.emit('unexpected-response', e.status);
        return;
      case 'error':
        this.emit('error', new Error(e.message));
        return;
      case 'close':
        this.#state = 'closed';
        this.emit('close', e.code, e.reason);
        return;
      case 'message':
        this.emit('message', e.msg);
        return;
      case 'counts':
        this.audioOut = e.audioOut;
        this.framesIn = e.framesIn;
        this.#countsFinal = true;
        for (const wake of this.#countsWaiters.splice(0)) wake();
        return;
      case 'warn':
        this.emit('warn', e.message);
        return;
    }
  }
}
