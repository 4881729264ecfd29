/**
 * The bridge core's link to a call's voice session: the socket (voice-socket.ts, on this thread
 * or in the call's media worker) plus the protocol read and written on it. The core sees typed
 * events (the session started, the agent was interrupted, pressed keys, ended the session) and
 * never a JSON message, so it can be driven by a fake link in tests.
 */
import type { CallRtp } from '../media/media-host.ts';
import type { ServerMessage } from './voice-frames.ts';
import { openVoiceSocket } from './voice-socket.ts';

export interface VoiceLinkEvents {
  /** `session_started`: the agent is there, the call can be answered. */
  started(): void;
  /** The server answered the upgrade with an HTTP status instead (a token it does not take). */
  refused(status: number): void;
  failed(err: Error): void;
  closed(code: number, reason: string): void;
  /** `response_audio` samples, read on this thread (a link whose audio runs in a worker plays its own). */
  audio(pcm: Int16Array): void;
  /** `interruption`: the caller barged in; agent audio not yet played is stale. */
  interruption(): void;
  /** `dtmf`: keys the agent presses (IVRs), as sent. */
  dtmf(digits: string): void;
  /** `session_ended`, with the number to transfer to when the reason is `transfer`. */
  ended(reason: string, transferNumber: string | undefined): void;
  warn(message: string): void;
}

export interface VoiceLink {
  readonly open: boolean;
  /**
   * True when the link itself moves the audio beside the call's media (a media worker's socket):
   * it sends input_audio, plays response_audio and clears the playout on interruption there.
   */
  readonly audioInWorker: boolean;
  /** One caller frame as input_audio (a no-op when audioInWorker: the worker sends its own). */
  sendInputAudio(frame: Int16Array): void;
  /** A key the caller pressed, as the `dtmf` extension message. */
  sendDtmf(digit: string): void;
  /**
   * The counts of a link that moved the audio itself (input_audio frames sent, response_audio
   * messages played), once final; undefined when the core counted them (audio on this thread).
   */
  finalCounts(): Promise<{ framesIn: number; audioOut: number } | undefined>;
  /** Closes if open or connecting (idempotent). */
  close(code: number, reason: string): void;
}

/**
 * Opens the link beside the call's media: in its worker when `rtp` is a media worker's; on this
 * thread without RTP (a carrier media stream). `headers` go on the upgrade request (traceparent).
 */
export function openVoiceLink(rtp: CallRtp | undefined, url: string, recording: boolean, events: VoiceLinkEvents, headers: Record<string, string> = {}): VoiceLink {
  const socket = openVoiceSocket(rtp, url, recording, headers, {
    onUnexpectedResponse: (status) => events.refused(status),
    onError: (err) => events.failed(err),
    onClose: (code, reason) => events.closed(code, reason),
    onWarn: (message) => events.warn(message),
    onAudio: (pcm) => events.audio(pcm),
    onMessage: (msg) => dispatchServerMessage(msg, events),
  });
  return {
    get open() {
      return socket.open;
    },
    audioInWorker: socket.audioInWorker,
    sendInputAudio: (frame) => socket.sendInputAudio(frame),
    sendDtmf: (digit) => {
      if (socket.open) socket.send(JSON.stringify({ type: 'dtmf', data: { digit } }));
    },
    finalCounts: async () => {
      if (!socket.audioInWorker) return undefined;
      await socket.finalCounts();
      return { framesIn: socket.framesIn, audioOut: socket.audioOut };
    },
    close: (code, reason) => socket.close(code, reason),
  };
}

/** The session messages the bridge acts on; transcripts, text and tool calls are for other clients. */
export function dispatchServerMessage(msg: ServerMessage, events: VoiceLinkEvents): void {
  const data = msg.data ?? {};
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
  switch (msg.type) {
    case 'session_started':
      events.started();
      return;
    case 'interruption':
      events.interruption();
      return;
    case 'dtmf':
      events.dtmf(text(data.digits) ?? '');
      return;
    case 'session_ended':
      events.ended(text(data.reason) ?? 'unknown', text(data.transfer_number));
      return;
    default:
      return;
  }
}
