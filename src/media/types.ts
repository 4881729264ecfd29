/**
 * The contracts between the pieces of the media engine. `media/` imports nothing else of ours,
 * so `sip/` and `bridge/` build on these types.
 *
 * Audio inside the engine is signed 16-bit PCM, mono, in Int16Array. The voice protocol speaks
 * 24 kHz; telephony codecs decode to their own rate (8 kHz for G.711, 48 kHz for Opus) and a
 * Resampler converts. Every hot-path method writes into caller-owned or reused buffers: nothing
 * allocates per packet.
 */

/** One RTP audio codec: its payload type, clock and frame size, and the conversion both ways. */
export interface Codec {
  /** SDP encoding name as in rtpmap: "PCMU", "PCMA", "opus". */
  readonly name: string;
  /** RTP payload type (static 0 and 8 for G.711; dynamic for Opus, chosen by SDP). */
  readonly payloadType: number;
  /** RTP timestamp clock rate (8000 for G.711, 48000 for Opus). */
  readonly clockRate: number;
  /** Sample rate of decoded PCM and of PCM given to encode. */
  readonly sampleRate: number;
  /** Milliseconds per frame (20). */
  readonly frameMs: number;
  /** PCM samples per frame at sampleRate (160 for G.711, 960 for Opus at 20 ms). */
  readonly samplesPerFrame: number;
  /**
   * Decodes one RTP payload into out (which must hold samplesPerFrame, or more for long G.711
   * payloads); returns the number of samples written.
   * @throws RangeError when out is too small.
   */
  decode(payload: Uint8Array, out: Int16Array): number;
  /**
   * Encodes exactly one frame of PCM (samplesPerFrame samples) into out; returns bytes written.
   * @throws RangeError on a wrong frame length or too small an output.
   */
  encode(pcm: Int16Array, out: Uint8Array): number;
  /**
   * Concealment of one lost frame into out (Opus: the decoder's own PLC; G.711: none, returns 0
   * so the caller uses generic concealment).
   */
  conceal?(out: Int16Array): number;
  close(): void;
}

/** A streaming sample-rate converter: state carries across calls, so frame borders are seamless. */
export interface Resampler {
  readonly inRate: number;
  readonly outRate: number;
  /**
   * Converts one chunk. Returns a view of an internal buffer, valid until the next call
   * (copy it if you keep it). Any chunk length is accepted.
   */
  process(input: Int16Array): Int16Array;
  /** Forgets history (e.g. after a long gap), so old audio does not bleed into new. */
  reset(): void;
  /** Algorithmic delay in output samples (for latency accounting). */
  readonly delaySamples: number;
  close(): void;
}

/** One received RTP packet, as the session hands it on. payload is valid until the handler returns. */
export interface ReceivedRtp {
  payloadType: number;
  sequenceNumber: number;
  timestamp: number;
  ssrc: number;
  marker: boolean;
  payload: Uint8Array;
  /** Arrival time in ms on the session's clock. */
  arrivalMs: number;
}

/** What the jitter buffer gives the decoder for each 20 ms playout tick. */
export type PlayoutFrame =
  | { kind: 'frame'; payload: Uint8Array; payloadType: number; timestamp: number }
  | { kind: 'lost' } // a frame that should be here is missing: conceal it
  | { kind: 'empty' }; // nothing to play (not started, or the talker paused): play nothing

/** A monotonic millisecond clock; injectable so tests control time. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => performance.now() };

/** Timer functions, injectable so tests drive them on virtual time (with a matching Clock). */
export interface Timers {
  setTimeout(callback: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
}

/**
 * Unref'd: a call's sockets keep the process alive while it lasts; its timers need not.
 * A delay of 0 (or less) runs the callback on the next turn of the event loop, right after it has
 * polled I/O (setImmediate): Node would make it a 1 ms timer, and a media clock catching up one
 * tick per turn at full load could then never catch up.
 */
export const systemTimers: Timers = {
  // The immediate stays ref'd: it holds the process for one turn at most, and on Node 20 an unref'd
  // immediate that arms an unref'd timer leaves that timer never firing (tried).
  setTimeout: (callback, delayMs) => (delayMs > 0 ? setTimeout(callback, delayMs).unref() : setImmediate(callback)),
  clearTimeout: (handle) => {
    if (handle instanceof Object && 'hasRef' in handle && !('refresh' in handle)) clearImmediate(handle as NodeJS.Immediate);
    else clearTimeout(handle as NodeJS.Timeout);
  },
};
