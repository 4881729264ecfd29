/**
 * A carrier's media stream as a bridge call leg (the carrier's programmable-voice path, beside
 * SIP): the bridge core drives it exactly as it drives a SipCallLeg. The stream's socket
 * (src/telco/twilio-stream-socket.ts) feeds it the caller's side (audio, keys, marks, the end);
 * the leg answers to the core's CallLeg surface:
 *
 *   answer        the carrier answered the call already (its webhook got <Connect><Stream>): the
 *                 leg only notes that the session is up
 *   refuse/hangup close the stream's socket; with nothing after <Connect> the carrier hangs up,
 *                 and the call API is told so too (Status=completed): a carrier whose socket went
 *                 quiet must not keep the phone call up. Not when the carrier ended the call itself
 *                 (`stop`, its socket closed, a `completed` status callback)
 *   media         MediaStreamMedia (jitter buffer, 8k <-> 24k, 20 ms pacing, marks, clear)
 *   DTMF          caller keys arrive as `dtmf` messages; keys towards the caller are played
 *                 in-band as dual tones (a stream has no message to send them)
 *   transfer      the live call is redirected through the call API to <Dial> of the number;
 *                 the stream then ends (the carrier stops it), and so does this leg
 */
import type { Logger } from '../log.ts';
import type { BridgeMedia, BridgeMediaCallbacks } from '../media/bridge-media.ts';
import type { MediaTicker } from '../media/media-ticker.ts';
import type { CallLeg, LegEnd, LegMediaOptions, LegQuality, LegRoute, RefusalCause } from './call-leg.ts';
import { MediaStreamMedia, type MarkFigures, type MediaStreamTransport } from './media-stream-media.ts';
import type { CarrierCallControl } from './carrier-call-control.ts';

/** Close codes of the stream's socket when the bridge refuses the call (RFC 6455 7.4). */
const REFUSAL_CLOSE: Record<RefusalCause, number> = {
  // 1013 Try Again Later: nothing to bridge to now.
  service_unavailable: 1013,
  // Application range: the agent is not there for this call.
  agent_unavailable: 4404,
  internal_error: 1011,
  // 1013 Try Again Later too: the organization is at its concurrent call limit.
  busy: 1013,
};

export interface MediaStreamLegOptions {
  /** The stream's id (the carrier's StreamSid), for logs. */
  id: string;
  from: string;
  to: string;
  route: LegRoute;
  transport: MediaStreamTransport;
  ticker: MediaTicker;
  log: Logger;
  /** Default inbound; outbound: a call callbridge placed through the call API. */
  direction?: 'inbound' | 'outbound';
  /** Hang-up and redirect through the carrier's call API (undefined: only the socket). */
  control?: CarrierCallControl | undefined;
}

/** How the carrier itself reports a call's end: the stream's `stop`, its socket closed, a status callback. */
const CARRIER_ENDS = new Set(['stop', 'socket closed', 'carrier status']);

export class MediaStreamCallLeg implements CallLeg {
  readonly id: string;
  readonly direction: 'inbound' | 'outbound';
  readonly from: string;
  readonly to: string;
  readonly route: LegRoute;
  readonly trunkId = undefined;
  readonly codec = 'PCMU';
  readonly #o: MediaStreamLegOptions;
  #state: 'ringing' | 'answered' | 'ended' = 'ringing';
  #media: MediaStreamMedia | undefined;
  #end: LegEnd | undefined;
  readonly #hangupListeners: Array<(end: LegEnd) => void> = [];
  readonly #dtmfListeners: Array<(digit: string) => void> = [];
  /** The call was redirected to a <Dial>: it must not be hung up at the carrier. */
  #transferred = false;
  /** Caller messages before the media started (the session was not up yet): not bridged. */
  #audioBeforeMedia = 0;

  constructor(options: MediaStreamLegOptions) {
    this.#o = options;
    this.id = options.id;
    this.direction = options.direction ?? 'inbound';
    this.from = options.from;
    this.to = options.to;
    this.route = options.route;
  }

  get state(): 'ringing' | 'answered' | 'ended' {
    return this.#state;
  }
  get closed(): boolean {
    return this.#state === 'ended';
  }

  traceAttributes(): Record<string, string | number> {
    return { 'callbridge.call.transport': 'carrier_media_stream', 'carrier.stream_sid': this.id };
  }

  // --- the stream's side (src/telco/twilio-stream-socket.ts) -------------------------------

  /** A caller `media` message. */
  callerAudio(payload: Uint8Array, chunk: number, timestampMs: number): void {
    if (this.#media !== undefined) this.#media.callerAudio(payload, chunk, timestampMs);
    else this.#audioBeforeMedia++;
  }

  /** A caller `dtmf` message. */
  callerDtmf(digit: string): void {
    if (this.#state !== 'answered') return;
    for (const l of this.#dtmfListeners) l(digit);
  }

  /** A `mark` the carrier echoed. */
  markEchoed(name: string): void {
    this.#media?.markEchoed(name);
  }

  /** The stream is over (`stop`, its socket closed by either side). */
  streamEnded(reason: string): void {
    this.#ended({ reason });
  }

  /** The carrier reports the call over (a final status callback): its stream is closed too. */
  carrierEnded(status: string): void {
    if (this.#state === 'ended') return;
    this.#ended({ reason: 'carrier status' }, status);
    this.#o.transport.close(1000, `call ${status} at the carrier`);
  }

  /** What the caller heard of the agent, from the marks (undefined before media started). */
  get marks(): MarkFigures | undefined {
    return this.#media?.marks;
  }

  // --- CallLeg --------------------------------------------------------------------------------

  answer(): boolean {
    if (this.#state !== 'ringing') return false;
    this.#state = 'answered';
    return true;
  }

  refuse(cause: RefusalCause, why: string): void {
    if (this.#state === 'ended') return;
    this.#o.transport.close(REFUSAL_CLOSE[cause], why);
    this.#ended({ reason: 'rejected' });
  }

  hangup(): void {
    if (this.#state === 'ended') return;
    this.#o.transport.close(1000, 'call ended');
    this.#ended({ reason: 'local' });
  }

  onHangup(listener: (end: LegEnd) => void): void {
    if (this.#end !== undefined) listener(this.#end);
    else this.#hangupListeners.push(listener);
  }

  onDtmf(listener: (digit: string) => void): void {
    this.#dtmfListeners.push(listener);
  }

  /** In-band: the key's two tones (100 ms) and a 60 ms pause, queued after the agent's audio. */
  sendDtmf(digit: string): Promise<void> {
    const tone = dtmfTone(digit);
    if (tone !== undefined) this.#media?.push(tone);
    return Promise.resolve();
  }

  startMedia(options: LegMediaOptions, callbacks: BridgeMediaCallbacks): BridgeMedia {
    // sendSilence is a SIP concern (NAT bindings, carrier RTP timers): a stream sends nothing while
    // the agent is quiet. keepAgentFrames: the call is recorded.
    this.#media ??= new MediaStreamMedia(this.#o.transport, callbacks, this.#o.ticker, { keepAgentFrames: options.keepAgentFrames });
    return this.#media;
  }

  /**
   * Redirects the live call to <Dial> of `target` through the call API. Done: the stream is
   * closed and the leg ended (the carrier runs the new TwiML, the caller hears the target ring).
   * Refused or unreachable: the leg stays up and the caller of this method hangs it up.
   */
  async transfer(target: string): Promise<void> {
    const control = this.#o.control;
    if (control === undefined || this.#state !== 'answered') {
      this.#o.log.warn({ transferNumber: target }, 'transfer of a carrier media stream call impossible: no call API for it');
      return;
    }
    if (!(await control.redirectToDial(target))) return;
    if (this.closed) return; // the carrier ended it meanwhile
    this.#transferred = true;
    this.#ended({ reason: 'transferred' });
    this.#o.transport.close(1000, 'call transferred');
  }

  quality(): LegQuality {
    return { packetsReceived: 0, packetsLost: 0, jitterMs: 0 };
  }

  #ended(end: LegEnd, carrierStatus?: string): void {
    if (this.#state === 'ended') return;
    this.#state = 'ended';
    this.#end = end;
    const marks = this.#media?.marks;
    this.#o.log.info({ streamSid: this.id, reason: end.reason, carrierStatus, ...(marks ?? {}), audioBeforeMedia: this.#audioBeforeMedia }, 'media stream ended');
    // Ended on our side (the agent hung up, a refusal, a media timeout): end the phone call too.
    if (!CARRIER_ENDS.has(end.reason) && !this.#transferred) void this.#o.control?.hangUp();
    for (const l of this.#hangupListeners.splice(0)) l(end);
  }
}

const DTMF_LOW: Record<string, number> = { '1': 697, '2': 697, '3': 697, A: 697, '4': 770, '5': 770, '6': 770, B: 770, '7': 852, '8': 852, '9': 852, C: 852, '*': 941, '0': 941, '#': 941, D: 941 };
const DTMF_HIGH: Record<string, number> = { '1': 1209, '4': 1209, '7': 1209, '*': 1209, '2': 1336, '5': 1336, '8': 1336, '0': 1336, '3': 1477, '6': 1477, '9': 1477, '#': 1477, A: 1633, B: 1633, C: 1633, D: 1633 };

/** One key as 24 kHz PCM: ITU-T Q.23 tone pair for 100 ms, then 60 ms of silence. */
export function dtmfTone(digit: string, sampleRate = 24000): Int16Array | undefined {
  const low = DTMF_LOW[digit];
  const high = DTMF_HIGH[digit];
  if (low === undefined || high === undefined) return undefined;
  const on = Math.round(sampleRate * 0.1);
  const out = new Int16Array(on + Math.round(sampleRate * 0.06));
  // Each tone at about -9 dBFS: together well clear of clipping, loud enough for any detector.
  for (let i = 0; i < on; i++) {
    const t = i / sampleRate;
    out[i] = Math.round(11_000 * (Math.sin(2 * Math.PI * low * t) + Math.sin(2 * Math.PI * high * t)));
  }
  return out;
}
