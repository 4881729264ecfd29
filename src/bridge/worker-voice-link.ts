/**
 * A bridged call's voice-session WebSocket, run in the media worker that carries the call's RTP
 * (rtp.media_threads > 0), so that audio never crosses threads: the caller's 20 ms frames leave
 * as `input_audio` from the worker's media tick, `response_audio` goes from the socket straight
 * into the worker's playout queue, and `interruption` clears it there. Everything else the
 * session says (session_started, dtmf, session_ended, transcripts...) goes to the main thread,
 * where BridgedCall handles it as it does a socket of its own.
 *
 *   worker half: install(host), loaded into each media worker as an extension
 *   main half:   RemoteVoiceSocket, what BridgedCall talks to instead of a WebSocket
 *
 * Why: with the socket on the main thread, every frame crossed threads twice and waited for the
 * main event loop (tens of ms at 200 calls); docs/media-workers.md has the figures.
 */
import { EventEmitter } from 'node:events';
import WebSocket from 'ws';
import type { MediaWorkerExtensionHost } from '../media/media-worker-protocol.ts';
import type { RemoteRtpSession } from '../media/media-worker-pool.ts';
import { base64BytesToPcm16, base64Length, base64ToPcm16, pcm16ToBase64Bytes } from '../media/pcm.ts';

/** Messages between the halves: main -> worker `vl.open` / `vl.send` / `vl.close`, worker -> main `vl`. */
type WorkerEvent =
  | { ev: 'open' }
  | { ev: 'unexpected-response'; status: number }
  | { ev: 'error'; message: string }
  | { ev: 'close'; code: number; reason: string }
  | { ev: 'message'; msg: Record<string, unknown> }
  | { ev: 'counts'; audioOut: number; framesIn: number }
  | { ev: 'warn'; message: string };

interface Link {
  ws: WebSocket;
  audioOut: number;
  framesIn: number;
  /** The call's input_audio message buffer, rewritten every frame (inputAudioMessage). */
  message?: Buffer;
}

/** The worker half: a media worker extension (MediaWorkerExtensionHost). */
export function install(host: MediaWorkerExtensionHost): void {
  const links = new Map<number, Link>();
  const scratch = { buffer: Buffer.alloc(0) };
  const emit = (id: number, e: WorkerEvent): void => host.post({ t: 'vl', id, ...e });

  host.handle('vl.open', (m) => {
    const id = m.id;
    // No permessage-deflate: base64 audio barely compresses, and inputAudioMessage's reuse needs
    // ws to frame each message synchronously.
    const ws = new WebSocket(String(m.url), { maxPayload: Number(m.maxPayload), perMessageDeflate: false });
    const link: Link = { ws, audioOut: 0, framesIn: 0 };
    links.set(id, link);
    const recording = m.recording === true;
    ws.on('open', () => emit(id, { ev: 'open' }));
    ws.on('unexpected-response', (_req, res) => emit(id, { ev: 'unexpected-response', status: res.statusCode ?? 0 }));
    ws.on('error', (err) => emit(id, { ev: 'error', message: err.message }));
    ws.on('close', (code, reason) => {
      host.takeFrames(id, undefined);
      links.delete(id);
      emit(id, { ev: 'close', code, reason: reason.toString() });
    });
    // response_audio, however it was read: into the call's playout queue.
    const playAgentAudio = (pcm: Int16Array): void => {
      const bridge = host.bridge(id);
      if (bridge === undefined) return;
      bridge.push(pcm);
      link.audioOut++;
    };
    ws.on('message', (raw, isBinary) => {
      if (isBinary) return;
      // The common case first, straight from the frame's bytes: no string, no parse.
      const fast = Buffer.isBuffer(raw) ? responseAudioPcm(raw, scratch) : undefined;
      if (fast !== undefined) {
        if (fast.length > 0) playAgentAudio(fast);
        return;
      }
      let msg: { type?: unknown; data?: { audio?: unknown } } & Record<string, unknown>;
      try {
        msg = JSON.parse(raw.toString()) as typeof msg;
      } catch {
        emit(id, { ev: 'warn', message: 'voice server sent a frame that is not JSON: ignored' });
        return;
      }
      if (msg.type === 'response_audio') {
        const audio = msg.data?.audio;
        if (typeof audio !== 'string' || audio === '' || host.bridge(id) === undefined) return;
        try {
          playAgentAudio(base64ToPcm16(audio, scratch));
        } catch {
          emit(id, { ev: 'warn', message: 'response_audio that is not PCM16 base64: dropped' });
        }
        return;
      }
      // Barge-in is cut here, at once; the main thread hears of it too (it counts it).
      if (msg.type === 'interruption') host.bridge(id)?.clear();
      emit(id, { ev: 'message', msg });
    });
    // Caller audio to the session from the media tick itself; the main thread gets the frames
    // only for a recording.
    host.takeFrames(id, (frame) => {
      if (frame && ws.readyState === WebSocket.OPEN) {
        link.message = inputAudioMessage(frame, link.message);
        ws.send(link.message, { binary: false });
        link.framesIn++;
      }
      return recording;
    });
    host.onClose(id, () => {
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

const INPUT_PREFIX = Buffer.from('{"type":"input_audio","data":{"audio":"');
const INPUT_SUFFIX = Buffer.from('"}}');

/**
 * The `input_audio` message of one caller frame, as bytes, written into `reuse` when it has the
 * right length (every frame of a call has): base64 needs no JSON escaping, and built off the JS
 * heap it leaves no 1.3 kB string per frame for the media thread's GC (src/media/pcm.ts).
 * Reusing one buffer per call is safe because a client WebSocket masks every frame, and ws builds
 * the masked copy inside send() (no compression is negotiated: perMessageDeflate is off), so the
 * buffer is free again when send() returns; test/bridge/worker-voice-link.test.ts checks it over
 * a real socket. A new pooled Buffer per frame instead cost a second off-heap allocation per
 * frame, and V8's external-memory accounting then ran more major GCs (bench/bridge).
 */
export function inputAudioMessage(frame: Int16Array, reuse?: Buffer): Buffer {
  const length = INPUT_PREFIX.length + base64Length(frame.byteLength) + INPUT_SUFFIX.length;
  const msg = reuse !== undefined && reuse.length === length ? reuse : Buffer.allocUnsafeSlow(length);
  INPUT_PREFIX.copy(msg, 0);
  const end = pcm16ToBase64Bytes(frame, msg, INPUT_PREFIX.length);
  INPUT_SUFFIX.copy(msg, end);
  return msg;
}

const RESPONSE_AUDIO_PREFIX = Buffer.from('{"type":"response_audio","data":{');
const AUDIO_KEY = Buffer.from('"audio":"');
const QUOTE = 0x22;
const CLOSE_BRACE = 0x7d;

/**
 * The samples of a `response_audio` message read from its bytes, for the shape the voice server
 * sends (src/session/protocol.ts serializeServerEvent: type first, then data with an `audio`
 * string of plain base64); undefined for anything else, which then takes the JSON.parse path. A
 * `"audio":"` outside a string can only be data's key: inside a JSON string its quotes would be
 * escaped.
 */
export function responseAudioPcm(raw: Buffer, scratch: { buffer: Buffer }): Int16Array | undefined {
  if (raw.length < RESPONSE_AUDIO_PREFIX.length + AUDIO_KEY.length || raw[raw.length - 1] !== CLOSE_BRACE) return undefined;
  if (raw.compare(RESPONSE_AUDIO_PREFIX, 0, RESPONSE_AUDIO_PREFIX.length, 0, RESPONSE_AUDIO_PREFIX.length) !== 0) return undefined;
  const key = raw.indexOf(AUDIO_KEY, RESPONSE_AUDIO_PREFIX.length);
  if (key < 0) return undefined;
  const start = key + AUDIO_KEY.length;
  const end = raw.indexOf(QUOTE, start);
  if (end < 0) return undefined;
  return base64BytesToPcm16(raw, start, end, scratch) ?? undefined;
}

export interface RemoteVoiceSocketEvents {
  open: [];
  'unexpected-response': [status: number];
  error: [err: Error];
  close: [code: number, reason: string];
  message: [msg: Record<string, unknown>];
  warn: [message: string];
}

/** The main half: the voice-session socket of a call whose media runs in a worker. */
export class RemoteVoiceSocket extends EventEmitter<RemoteVoiceSocketEvents> {
  #state: 'connecting' | 'open' | 'closing' | 'closed' = 'connecting';
  /** What the worker's fast path handled (`response_audio` messages, `input_audio` frames sent). */
  audioOut = 0;
  framesIn = 0;

  constructor(
    private readonly rtp: RemoteRtpSession,
    url: string,
    options: { maxPayload: number; recording: boolean },
  ) {
    super();
    rtp.onWorkerMessage('vl', (m) => this.#receive(m as unknown as WorkerEvent));
    rtp.postToWorker({ t: 'vl.open', url, maxPayload: options.maxPayload, recording: options.recording });
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
        return;
      case 'warn':
        this.emit('warn', e.message);
        return;
    }
  }
}
