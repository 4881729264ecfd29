/**
 * The audio of a bridged call's voice-session socket, as bytes, wherever that socket runs (the
 * main thread, or the call's media worker: voice-socket.ts and worker-voice-link.ts use the same
 * code). At 200 calls a media thread carries 10 000 `input_audio` and as many `response_audio`
 * messages a second; built and read as strings they were most of its garbage, and the scavenges
 * that garbage caused made frames late (docs/media-workers.md). So:
 *
 *   input_audio:    written as bytes into one buffer per call (inputAudioSender)
 *   response_audio: samples read from the frame's bytes, no string, no JSON.parse (serverFrameReader);
 *                   any other shape, and every other message, takes the JSON path
 */
import WebSocket from 'ws';
import { base64BytesToPcm16, base64Length, base64ToPcm16, pcm16ToBase64Bytes } from '../media/pcm.ts';

/** Largest message accepted from the voice server (a long response_audio chunk). */
const MAX_PAYLOAD = 8 * 1024 * 1024;

/**
 * A client socket to a voice session. No permessage-deflate: base64 audio barely compresses, and
 * inputAudioSender's buffer reuse needs ws to frame each message synchronously.
 */
export function connectVoiceClient(url: string, headers: Record<string, string> = {}): WebSocket {
  return new WebSocket(url, { maxPayload: MAX_PAYLOAD, perMessageDeflate: false, headers });
}

/** Sends one caller frame as `input_audio` on a socket from connectVoiceClient. */
export function inputAudioSender(ws: WebSocket): (frame: Int16Array) => void {
  let message: Buffer | undefined;
  return (frame) => {
    message = inputAudioMessage(frame, message);
    ws.send(message, { binary: false });
  };
}

const INPUT_PREFIX = Buffer.from('{"type":"input_audio","data":{"audio":"');
const INPUT_SUFFIX = Buffer.from('"}}');

/**
 * The `input_audio` message of one caller frame, as bytes, written into `reuse` when it has the
 * right length (every frame of a call has): base64 needs no JSON escaping, and built off the JS
 * heap it leaves no 1.3 kB string per frame for the GC (src/media/pcm.ts).
 * Reusing one buffer per call is safe because a client WebSocket masks every frame, and ws builds
 * the masked copy inside send() (no compression is negotiated: perMessageDeflate is off), so the
 * buffer is free again when send() returns; test/bridge/voice-frames.test.ts checks it over a
 * real socket. A new pooled Buffer per frame instead cost a second off-heap allocation per frame,
 * and V8's external-memory accounting then ran more major GCs (bench/bridge).
 */
export function inputAudioMessage(frame: Int16Array, reuse?: Buffer): Buffer {
  const length = INPUT_PREFIX.length + base64Length(frame.byteLength) + INPUT_SUFFIX.length;
  const msg = reuse !== undefined && reuse.length === length ? reuse : Buffer.allocUnsafeSlow(length);
  INPUT_PREFIX.copy(msg, 0);
  const end = pcm16ToBase64Bytes(frame, msg, INPUT_PREFIX.length);
  INPUT_SUFFIX.copy(msg, end);
  return msg;
}

/** A session message other than response_audio, as the bridge reads it. */
export type ServerMessage = { type?: unknown; data?: Record<string, unknown> } & Record<string, unknown>;

export interface ServerFrameHandlers {
  /** The samples of a non-empty response_audio (a view of a scratch buffer: used before the next frame). */
  audio(pcm: Int16Array): void;
  message(msg: ServerMessage): void;
  warn(message: string): void;
}

/** A socket's 'message' listener: response_audio samples to `audio`, other JSON to `message`. */
export function serverFrameReader(h: ServerFrameHandlers): (raw: WebSocket.RawData, isBinary: boolean) => void {
  const scratch = { buffer: Buffer.alloc(0) };
  return (raw, isBinary) => {
    if (isBinary) return;
    // The common case first, straight from the frame's bytes.
    const fast = Buffer.isBuffer(raw) ? responseAudioPcm(raw, scratch) : undefined;
    if (fast !== undefined) {
      if (fast.length > 0) h.audio(fast);
      return;
    }
    let msg: unknown;
    try {
      msg = JSON.parse(raw.toString());
    } catch {
      h.warn('voice server sent a frame that is not JSON: ignored');
      return;
    }
    if (msg === null || typeof msg !== 'object') return;
    const m = msg as ServerMessage;
    if (m.type !== 'response_audio') {
      h.message(m);
      return;
    }
    const audio = m.data?.audio;
    if (typeof audio !== 'string' || audio === '') return;
    let pcm: Int16Array;
    try {
      pcm = base64ToPcm16(audio, scratch);
    } catch {
      h.warn('response_audio that is not PCM16 base64: dropped');
      return;
    }
    h.audio(pcm);
  };
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
