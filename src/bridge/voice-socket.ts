/**
 * The bridge's WebSocket to a call's voice session, where the call's media runs: on this thread
 * (a `ws` client), or inside the call's media worker (worker-voice-link.ts), where caller audio
 * leaves as `input_audio` from the media tick and `response_audio` / `interruption` act on the
 * playout queue without crossing threads. The voice link (voice-link.ts) reads the protocol on
 * top and sees the same events either way.
 */
import WebSocket from 'ws';
import type { CallRtp } from '../media/media-host.ts';
import { RemoteRtpSession } from '../media/media-worker-pool.ts';
import { connectVoiceClient, inputAudioSender, serverFrameReader, type ServerMessage } from './voice-frames.ts';
import { RemoteVoiceSocket } from './worker-voice-link.ts';

export interface VoiceSocketHandlers {
  onUnexpectedResponse(status: number): void;
  onError(err: Error): void;
  onClose(code: number, reason: string): void;
  /** A session message other than response_audio. */
  onMessage(msg: ServerMessage): void;
  /** The samples of a response_audio, read on this thread (a worker plays its own). */
  onAudio(pcm: Int16Array): void;
  onWarn(message: string): void;
}

export interface VoiceSocket {
  readonly open: boolean;
  /** True when the socket's worker sends the caller's input_audio and plays response_audio itself. */
  readonly audioInWorker: boolean;
  /** A worker's counts of what it handled (0 on this thread, where the bridge core counts). */
  readonly framesIn: number;
  readonly audioOut: number;
  /** Resolves when framesIn and audioOut are final (at once on this thread; a worker sends them at close). */
  finalCounts(): Promise<void>;
  send(text: string): void;
  /** Sends a caller frame as input_audio (on this thread; a worker sends its own). */
  sendInputAudio(frame: Int16Array): void;
  /** Closes if open or connecting (idempotent). */
  close(code: number, reason: string): void;
}

/** Opens the socket beside the call's media: in its worker when rtp is a media worker's. */
export function openVoiceSocket(rtp: CallRtp | undefined, url: string, recording: boolean, headers: Record<string, string>, h: VoiceSocketHandlers): VoiceSocket {
  if (rtp instanceof RemoteRtpSession) {
    const remote = new RemoteVoiceSocket(rtp, url, recording, headers);
    remote.on('unexpected-response', h.onUnexpectedResponse);
    remote.on('error', h.onError);
    remote.on('close', h.onClose);
    remote.on('message', h.onMessage);
    remote.on('warn', h.onWarn);
    return {
      get open() {
        return remote.open;
      },
      audioInWorker: true,
      get framesIn() {
        return remote.framesIn;
      },
      get audioOut() {
        return remote.audioOut;
      },
      finalCounts: () => remote.finalCounts(),
      send: (text) => remote.send(text),
      sendInputAudio: () => {},
      close: (code, reason) => remote.close(code, reason),
    };
  }
  const ws = connectVoiceClient(url, headers);
  ws.on('unexpected-response', (_req, res) => h.onUnexpectedResponse(res.statusCode ?? 0));
  ws.on('error', h.onError);
  ws.on('close', (code, reason) => h.onClose(code, reason.toString()));
  ws.on('message', serverFrameReader({ audio: h.onAudio, message: h.onMessage, warn: h.onWarn }));
  return {
    get open() {
      return ws.readyState === WebSocket.OPEN;
    },
    audioInWorker: false,
    framesIn: 0,
    audioOut: 0,
    finalCounts: () => Promise.resolve(),
    send: (text) => ws.send(text),
    sendInputAudio: inputAudioSender(ws),
    close: (code, reason) => {
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(code, reason);
    },
  };
}
