/**
 * The carrier's media stream WebSocket (Twilio Media Streams, bidirectional, opened by the
 * <Connect><Stream> the voice webhook answered with). Messages are JSON text frames:
 *
 *   from the carrier  connected { protocol, version }
 *                     start { streamSid, start: { accountSid, callSid, streamSid, tracks,
 *                             mediaFormat { encoding audio/x-mulaw, sampleRate 8000, channels 1 },
 *                             customParameters } }
 *                     media { media: { track, chunk, timestamp, payload (base64 mu-law) } }
 *                     dtmf { dtmf: { track, digit } }   mark { mark: { name } }
 *                     stop { stop: { accountSid, callSid } }
 *   to the carrier    media { streamSid, media: { payload } }   mark { streamSid, mark: { name } }
 *                     clear { streamSid }
 *
 * `start` must carry the one-time token the webhook issued (customParameters.token) for the same
 * CallSid; otherwise the socket is closed (STREAM_CLOSE) and nothing reaches an agent. What the
 * stream is bridged to is the caller's business (onStart returns the sink of its events).
 */
import type { WebSocket, RawData } from 'ws';
import type { Logger } from '../log.ts';
import { clipForLog } from '../log-fields.ts';
import type { StreamGrant, StreamTokens } from './twilio-stream-tokens.ts';

/** Close codes of the stream socket (RFC 6455 7.4; 4xxx: ours). */
export const STREAM_CLOSE = {
  normal: 1000,
  /** A message that is not the protocol's JSON. */
  invalid: 1007,
  /** The stream does not follow the protocol (media before start, no start in time). */
  policy: 1008,
  /** The token could not be checked (the store failed). */
  internalError: 1011,
  /** No valid one-time token in `start` (missing, unknown, used, expired, another call's). */
  unauthorized: 4401,
  /** A media format other than 8 kHz mono mu-law. */
  unsupportedFormat: 4415,
  /** Nothing from the carrier for the media timeout after start (it sends media every 20 ms). */
  mediaTimeout: 4408,
  /** A stream of this CallSid started already (its token is spent by that one): one call, one stream. */
  duplicateStream: 4409,
} as const;

/** How long the carrier gets from the socket's opening to its `start` message. */
export const START_TIMEOUT_MS = 10_000;

/** What the stream's messages go to once it has started (src/bridge/media-stream-call-leg.ts). */
export interface StreamSink {
  callerAudio(payload: Uint8Array, chunk: number, timestampMs: number): void;
  callerDtmf(digit: string): void;
  markEchoed(name: string): void;
  streamEnded(reason: string): void;
}

/** The sending half of a started stream, as the bridge's media uses it. */
export interface StreamTransport {
  sendMedia(payload: Uint8Array): void;
  sendMark(name: string): void;
  sendClear(): void;
  close(code: number, reason: string): void;
}

export interface StartedStream {
  streamSid: string;
  grant: StreamGrant;
  transport: StreamTransport;
}

export interface StreamSocketOptions {
  tokens: StreamTokens;
  log: Logger;
  /** The stream is authenticated: bridge it. */
  onStart(stream: StartedStream): StreamSink;
  startTimeoutMs?: number;
  /**
   * A started stream with no message from the carrier for this long is closed (rtp.media_timeout_secs,
   * as for RTP); 0 = never. The carrier sends media every 20 ms for the whole call, so silence
   * from it means it is gone without closing its socket.
   */
  mediaTimeoutMs?: number;
}

type Msg = Record<string, unknown>;
const isRecord = (v: unknown): v is Msg => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
/** The carrier sends numbers as strings ("chunk": "1"); accept either. */
const num = (v: unknown): number | undefined => {
  const n = typeof v === 'string' && v !== '' ? Number(v) : typeof v === 'number' ? v : NaN;
  return Number.isFinite(n) ? n : undefined;
};

/** RFC 6455 5.5: a close reason fits in 123 bytes. */
function closeReason(text: string): string {
  let s = text;
  while (Buffer.byteLength(s) > 123) s = s.slice(0, -1);
  return s;
}

/** Runs one stream socket until it closes. */
export function serveTwilioStream(ws: WebSocket, o: StreamSocketOptions): void {
  let log = o.log;
  let sink: StreamSink | undefined;
  let streamSid = '';
  let closed = false;
  let lastMessageAt = Date.now();
  let mediaWatch: NodeJS.Timeout | undefined;

  const close = (code: number, reason: string, level: 'info' | 'warn' = 'warn') => {
    if (closed) return;
    closed = true;
    clearTimeout(startTimer);
    clearInterval(mediaWatch);
    // A reason may quote the peer (an unknown event's name): bounded like any peer field.
    log[level]({ code, reason: clipForLog(reason, 256) }, 'media stream socket closed by callbridge');
    ws.close(code, closeReason(reason));
    sink?.streamEnded(`closed by callbridge (${code})`);
  };
  const startTimer = setTimeout(() => close(STREAM_CLOSE.policy, `no start message within ${o.startTimeoutMs ?? START_TIMEOUT_MS} ms`), o.startTimeoutMs ?? START_TIMEOUT_MS);
  startTimer.unref();

  const send = (msg: object) => {
    if (!closed && ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  };
  const transport: StreamTransport = {
    sendMedia: (payload) => send({ event: 'media', streamSid, media: { payload: Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString('base64') } }),
    sendMark: (name) => send({ event: 'mark', streamSid, mark: { name } }),
    sendClear: () => send({ event: 'clear', streamSid }),
    close: (code, reason) => close(code, reason, 'info'),
  };

  // While the store checks the token, the carrier's next messages (media every 20 ms) wait here.
  let checking: Array<{ data: RawData; isBinary: boolean }> | undefined;
  /** The close code of a socket the carrier closed while its token was being checked. */
  let closedWhileChecking: number | undefined;
  /** The carrier closed its socket: the call's stream is over. */
  const carrierClosed = (code: number) => {
    if (closed) return;
    closed = true;
    clearInterval(mediaWatch);
    log.info({ code }, 'media stream socket closed by the carrier');
    sink?.streamEnded('socket closed');
  };

  const onStart = async (msg: Msg) => {
    const start = isRecord(msg.start) ? msg.start : {};
    const sid = str(start.streamSid) ?? str(msg.streamSid);
    const callSid = str(start.callSid);
    if (sid === undefined || callSid === undefined) return close(STREAM_CLOSE.invalid, 'start without streamSid or callSid');
    const params = isRecord(start.customParameters) ? start.customParameters : {};
    // The carrier did start in time; the rest is ours.
    clearTimeout(startTimer);
    checking = [];
    let grant: StreamGrant | undefined;
    try {
      // Spent here whatever follows: a token is good for one start only, in the whole cluster.
      grant = await o.tokens.redeem(params.token, callSid);
    } catch (err) {
      log = log.child({ streamSid: clipForLog(sid), callSid: clipForLog(callSid) });
      log.error({ err: err instanceof Error ? err.message : String(err) }, 'checking the stream token failed');
      return close(STREAM_CLOSE.internalError, 'stream token could not be checked');
    }
    if (grant === undefined || grant.callSid !== callSid) {
      log = log.child({ streamSid: clipForLog(sid), callSid: clipForLog(callSid) });
      // The call's token again, after it started its stream: a second stream of one call.
      let duplicate = false;
      if (grant === undefined) {
        try {
          duplicate = await o.tokens.startedFor(params.token, callSid);
        } catch (err) {
          log.error({ err: err instanceof Error ? err.message : String(err) }, 'checking the stream token failed');
          return close(STREAM_CLOSE.internalError, 'stream token could not be checked');
        }
      }
      if (duplicate) return close(STREAM_CLOSE.duplicateStream, 'a media stream of this call started already');
      return close(STREAM_CLOSE.unauthorized, 'stream token missing, unknown, used or expired');
    }
    const f = isRecord(start.mediaFormat) ? start.mediaFormat : {};
    if (f.encoding !== 'audio/x-mulaw' || num(f.sampleRate) !== 8000 || num(f.channels) !== 1) {
      return close(STREAM_CLOSE.unsupportedFormat, 'media format must be audio/x-mulaw, 8000 Hz, 1 channel');
    }
    streamSid = sid;
    log = log.child({ streamSid, callSid, orgId: grant.orgId });
    log.info({ agentId: grant.agentId, from: grant.from, to: grant.to }, 'media stream started');
    sink = o.onStart({ streamSid, grant, transport });
    const timeoutMs = o.mediaTimeoutMs ?? 0;
    if (timeoutMs > 0 && !closed) {
      mediaWatch = setInterval(() => {
        if (Date.now() - lastMessageAt >= timeoutMs) close(STREAM_CLOSE.mediaTimeout, `no message from the carrier for ${timeoutMs} ms`);
      }, Math.min(1000, timeoutMs));
      mediaWatch.unref();
    }
  };

  /** Checks the start's token, then handles what arrived meanwhile, in order. */
  const started = (msg: Msg) => {
    void onStart(msg)
      .catch((err: unknown) => log.error({ err }, 'media stream start failed'))
      .finally(() => {
        const queued = checking ?? [];
        checking = undefined;
        for (const m of queued) onMessage(m.data, m.isBinary);
        if (closedWhileChecking !== undefined) carrierClosed(closedWhileChecking);
      });
  };

  const onMessage = (data: RawData, isBinary: boolean) => {
    if (closed) return;
    if (checking !== undefined) {
      checking.push({ data, isBinary });
      return;
    }
    lastMessageAt = Date.now();
    if (isBinary) return close(STREAM_CLOSE.invalid, 'binary frames are not part of the stream protocol');
    let msg: unknown;
    try {
      msg = JSON.parse(data.toString());
    } catch {
      return close(STREAM_CLOSE.invalid, 'message is not JSON');
    }
    if (!isRecord(msg)) return close(STREAM_CLOSE.invalid, 'message is not a JSON object');
    const event = msg.event;
    if (event === 'connected') return;
    if (event === 'start') {
      if (sink !== undefined) return close(STREAM_CLOSE.policy, 'a second start message');
      return started(msg);
    }
    if (sink === undefined) return close(STREAM_CLOSE.policy, `${String(event)} before start`);
    switch (event) {
      case 'media': {
        const m = isRecord(msg.media) ? msg.media : {};
        // Only the caller's side: the carrier sends the inbound track on a bidirectional stream.
        if (m.track !== undefined && m.track !== 'inbound' && m.track !== 'inbound_track') return;
        const payload = str(m.payload);
        const chunk = num(m.chunk);
        const ts = num(m.timestamp);
        if (payload === undefined || chunk === undefined || ts === undefined) return close(STREAM_CLOSE.invalid, 'media without payload, chunk or timestamp');
        sink.callerAudio(Buffer.from(payload, 'base64'), chunk, ts);
        return;
      }
      case 'dtmf': {
        const digit = isRecord(msg.dtmf) ? str(msg.dtmf.digit) : undefined;
        if (digit !== undefined && /^[0-9A-D*#]$/.test(digit)) sink.callerDtmf(digit);
        return;
      }
      case 'mark': {
        const name = isRecord(msg.mark) ? str(msg.mark.name) : undefined;
        if (name !== undefined) sink.markEchoed(name);
        return;
      }
      case 'stop':
        closed = true;
        clearInterval(mediaWatch);
        log.info('media stream stopped by the carrier');
        sink.streamEnded('stop');
        ws.close(STREAM_CLOSE.normal, 'stream stopped');
        return;
      default:
        log.debug({ event }, 'unknown media stream message ignored');
    }
  };
  ws.on('message', onMessage);
  ws.on('close', (code: number) => {
    clearTimeout(startTimer);
    clearInterval(mediaWatch);
    if (closed) return;
    // Ended once the token check is done (the stream may have started meanwhile).
    if (checking !== undefined) {
      closedWhileChecking = code;
      return;
    }
    carrierClosed(code);
  });
  ws.on('error', (err: Error) => log.warn({ err }, 'media stream socket error'));
}
