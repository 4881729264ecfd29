/**
 * A call this node is bridging now, as the bridge reports it to the API (GET /v1/calls/live):
 * the call record's id and its media figures so far. Plain data, so api/ needs nothing of
 * bridge/ to read it (main.ts passes the bridge's provider to the API).
 */
export interface LiveCallMedia {
  /** The call record's id (the voice session's id). */
  callId: string;
  /** RTP packets received from the caller so far. */
  packetsReceived: number;
  /** RTP packets lost (RFC 3550 A.3: expected - received; may be negative on duplicates). */
  packetsLost: number;
  /** Interarrival jitter of the caller's stream (RFC 3550 A.8), ms. */
  jitterMs: number;
  /** Agent frames sent to the caller later than their 20 ms slot (undefined: the media does not count them). */
  lateFrames: number | undefined;
}

/** The bridge's calls on this node, each once its media runs. */
export type LiveCallsProvider = () => LiveCallMedia[];
