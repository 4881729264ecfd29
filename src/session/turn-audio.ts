/**
 * When an agent turn's audio actually left for the caller of a phone call. A phone call's voice
 * session is a client of this daemon's own /v1/connection (the bridge), and what the caller waits
 * for is the first RTP packet (or carrier media frame) of a turn, sent by the bridge's media path
 * after the response_audio went over the socket, maybe in a media worker thread. The bridge
 * reports that moment here, keyed by the call's id; the session's runtime registered for it when
 * it started (src/agent/runtime/turn-timeline.ts) and makes it the turn's audio_out_first.
 *
 * In-process only: with bridge.upstream_url the sessions run elsewhere and nothing is registered,
 * so reports are dropped. One listener per call.
 */
export type AudioOutListener = (atEpochMs: number) => void;

export class TurnAudioReports {
  readonly #listeners = new Map<string, AudioOutListener>();

  /** The runtime of call `callId` hears of its audio going out; the returned function unregisters. */
  register(callId: string, listener: AudioOutListener): () => void {
    this.#listeners.set(callId, listener);
    return () => {
      if (this.#listeners.get(callId) === listener) this.#listeners.delete(callId);
    };
  }

  /** The bridge sent call `callId`'s first packet of agent audio after a silence, at `atEpochMs`. */
  audioOut(callId: string, atEpochMs: number): void {
    this.#listeners.get(callId)?.(atEpochMs);
  }

  /** Calls with a listener (tests: the registry does not grow with ended calls). */
  get size(): number {
    return this.#listeners.size;
  }
}
