/**
 * One call leg <-> one voice session: the bridge's core, whatever carries the call. It composes
 * a CallLeg (call-leg.ts), a VoiceLink to the session (voice-link.ts), a TransferHandler and a
 * CallRecordWriter, and holds the rules that join them:
 *
 *   session_started -> answer the leg, start its media: caller frames -> input_audio,
 *                      response_audio -> the leg's playout
 *   interruption    -> clear the leg's queued agent audio: nothing stale reaches the caller
 *   dtmf both ways  -> caller keys to the session, agent keys to the caller (one after another)
 *   session_ended   -> hang up (transfer: the leg's transfer first, then the fallback relay)
 *   leg ended       -> close the link; link closed or failed -> hang up
 *   no session_started within the connect timeout -> refuse the call
 *
 * Everything ends once, in #finish: the call record, the recording, the metrics and the
 * `bridged call ended` line. It knows no SIP (the sip-call-leg.ts adapter does), so a carrier
 * media stream can be bridged by the same code.
 */
import type { Logger } from '../log.ts';
import type { LiveCallMedia } from '../domain/live-call.ts';
import type { BridgeMedia, BridgeMediaStats } from '../media/bridge-media.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import type { CallLeg, RefusalCause } from './call-leg.ts';
import { reportCallQuality } from './call-quality.ts';
import { CallSpan } from './call-span.ts';
import { AgentDigits } from './agent-digits.ts';
import type { CallRecordWriter } from './call-record-writer.ts';
import type { InboundSession } from './inbound-session.ts';
import { TransferHandler, type TransferFallback } from './transfer-handler.ts';
import type { VoiceLink, VoiceLinkEvents } from './voice-link.ts';
import type { TurnAudioReports } from '../session/turn-audio.ts';

/**
 * Where a call's audio is recorded: both directions at 24 kHz, one 20 ms frame per tick of the
 * caller's clock (silence where a side had nothing), so the two channels stay aligned.
 */
export interface CallRecorderSink {
  /** One tick: the caller's frame (null: nothing played) and the agent frames sent since the last tick. */
  tick(caller: Int16Array | null, agent: Int16Array | null): void;
  /**
   * Finishes the file; returns its path (stored with the call record), or undefined on failure.
   * The file must be complete when this returns: storing it writes recording.ready at once, and
   * a receiver may fetch the recording as soon as it gets that event.
   */
  close(): string | undefined;
}

export interface BridgeCoreOptions {
  leg: CallLeg;
  /** The call's logger (component bridge, callId). */
  log: Logger;
  /**
   * Opens the link to the session beside the leg's media (in a media worker when it runs there);
   * `headers` go on the WebSocket upgrade (the call's trace context).
   */
  openLink(url: string, recording: boolean, events: VoiceLinkEvents, headers: Record<string, string>): VoiceLink;
  records: CallRecordWriter;
  /** A recorder for the call's session (undefined: recording off). */
  recorder?: ((sessionId: string) => CallRecorderSink | undefined) | undefined;
  metrics?: BridgeMetrics | undefined;
  /** A transfer the leg's own transfer could not do: undefined, the call just ends. */
  transferFallback?: TransferFallback | undefined;
  /** A session not started within this is given up: the call is refused (default 10 s). */
  connectTimeoutMs?: number | undefined;
  /** Encoded silence while the agent is quiet (continuous media); default true. */
  sendSilence?: boolean | undefined;
  /** Where the first RTP packet of each agent turn is reported (its audio_out_first; docs/latency.md). */
  turnAudio?: TurnAudioReports | undefined;
  /** Called once when the call is finished (the registry forgets it). */
  onDone(core: BridgeCore): void;
}

export class BridgeCore {
  readonly #o: BridgeCoreOptions;
  readonly #leg: CallLeg;
  readonly #log: Logger;
  #link: VoiceLink | undefined;
  /** The leg's media both ways, once the session started. */
  #media: BridgeMedia | undefined;
  #sessionId: string | undefined;
  #done = false;
  /** Why the call ended (set once, by #finish): a socket error after it is the socket we closed. */
  #endedWhy: string | undefined;
  /** Media ran (the call was answered and connected): counted in the active-calls gauge. */
  #bridged = false;
  #sendMsTotal = 0;
  #recorder: CallRecorderSink | undefined;
  /** The keys the agent presses, played in order (agent-digits.ts). */
  readonly #digits: AgentDigits;
  /** Set once a transfer began: the session's close is then expected, not the end of the call. */
  #transfer: TransferHandler | undefined;
  readonly #counts = { framesIn: 0, audioOut: 0, interruptions: 0 };
  /** The call's root trace span (call-span.ts). */
  readonly #span: CallSpan;

  constructor(options: BridgeCoreOptions) {
    this.#o = options;
    this.#leg = options.leg;
    this.#log = options.log;
    this.#span = new CallSpan(options.leg);
    this.#digits = new AgentDigits(options.leg, options.log, () => this.#done);
  }

  /** The call's media figures so far (GET /v1/calls/live), while its media runs. */
  live(): LiveCallMedia | undefined {
    if (this.#media === undefined || this.#sessionId === undefined || this.#done) return undefined;
    return { callId: this.#sessionId, ...this.#leg.quality(), lateFrames: this.#media.lateFrames() };
  }

  /** The trunk the call came in or goes out on (per-trunk limits). */
  get trunkId(): string | undefined {
    return this.#leg.trunkId;
  }

  /**
   * Inbound: the leg rings until its session has started, or is refused. `session` may still be
   * on its way (read from the store): the hangup handler is in place before it is awaited.
   */
  async start(pending: InboundSession | Promise<InboundSession>): Promise<void> {
    this.#leg.onHangup((end) => this.#finish(`caller side ended: ${end.reason}`));
    let session: InboundSession;
    if (pending instanceof Promise) {
      try {
        session = await pending;
      } catch (err) {
        this.#log.error({ err }, 'could not read what the call routes to');
        this.#refuse('internal_error', 'routing lookup failed');
        return;
      }
      if (this.#done) return;
    } else {
      session = pending;
    }
    if ('refuse' in session) {
      this.#refuse(session.refuse, session.why);
      return;
    }
    let connectUrl: string;
    let sessionId: string;
    try {
      const opened = await session.open();
      connectUrl = opened.connectUrl;
      sessionId = this.#sessionId = opened.sessionId;
      this.#span.sessionOpened(sessionId);
    } catch (err) {
      this.#log.error({ err }, 'could not open a voice session for the call');
      this.#refuse('service_unavailable', 'voice session unavailable');
      return;
    }
    if (this.#done) {
      // The caller hung up while the session was being created: #finish ran before its record
      // existed, so the record is told here (it ends now rather than at the token's expiry).
      this.#o.records.ended(sessionId, this.#endedWhy ?? 'call ended before its voice session started', false, this.#leg.sipDetails?.());
      return;
    }
    this.#connect(connectUrl);
  }

  /** Outbound, answered: connects its (already stored) session and bridges once it starts. */
  attach(sessionId: string, connectUrl: string): void {
    this.#sessionId = sessionId;
    this.#span.sessionOpened(sessionId);
    this.#leg.onHangup((end) => this.#finish(`callee side ended: ${end.reason}`));
    this.#connect(connectUrl);
  }

  #connect(url: string): void {
    const timer = setTimeout(() => {
      if (this.#media === undefined) {
        this.#log.warn({ sessionId: this.#sessionId }, 'voice session did not start in time: ending the call');
        this.#refuse('service_unavailable', 'voice session timeout');
      }
    }, this.#o.connectTimeoutMs ?? 10_000);
    timer.unref();
    // Whether the call is recorded is decided now: a link in a media worker must know.
    const recording = this.#sessionId !== undefined && this.#o.recorder !== undefined;
    this.#link = this.#o.openLink(url, recording, {
      started: () => {
        clearTimeout(timer);
        this.#answer();
      },
      refused: (status) => {
        clearTimeout(timer);
        this.#log.error({ status, sessionId: this.#sessionId }, 'the voice server refused the session');
        this.#refuse('service_unavailable', 'voice session refused');
      },
      failed: (err) => {
        clearTimeout(timer);
        if (this.#endedWhy !== undefined) {
          // The call ended first (a CANCEL racing the answer, the connect timeout) and #finish
          // closed the socket while it was still connecting: `ws` reports that close as an error.
          // A normal race, not a failure of the voice server.
          this.#log.info({ sessionId: this.#sessionId, why: this.#endedWhy, detail: err.message }, 'voice session connection abandoned: the call ended while its session was being opened');
          return;
        }
        this.#log.error({ err, sessionId: this.#sessionId }, 'voice session socket failed');
        this.#finish('voice socket error');
      },
      closed: (code, reason) => {
        clearTimeout(timer);
        // A transfer outlives the session: the transfer flow ends the call when it is done.
        if (this.#transfer !== undefined) return;
        this.#finish(`voice session closed (${code}${reason.length ? ` ${reason}` : ''})`);
      },
      audio: (pcm) => {
        if (this.#media === undefined) return;
        this.#media.push(pcm);
        this.#counts.audioOut++;
      },
      interruption: () => {
        this.#counts.interruptions++;
        // A link in a worker cleared the playout queue where the message arrived; clearing again
        // from here could drop agent audio that came in after the interruption.
        if (!this.#link?.audioInWorker) this.#media?.clear();
      },
      dtmf: (digits) => void this.#digits.play(digits),
      ended: (reason, transferNumber) => void this.#onSessionEnded(reason, transferNumber),
      warn: (message) => this.#log.warn(message),
    }, this.#span.propagationHeaders());
  }

  /** The session is up: answer the call (inbound) and start media both ways. */
  #answer(): void {
    const leg = this.#leg;
    const answered = leg.state === 'answered' || (leg.state === 'ringing' && leg.answer());
    if (this.#done || !answered) {
      this.#finish('call gone before the session started');
      return;
    }
    const sessionId = this.#sessionId;
    this.#recorder = sessionId !== undefined ? this.#o.recorder?.(sessionId) : undefined;
    // Caller audio arrives at the jitter buffer's playout pace, one frame per 20 ms tick.
    this.#media = leg.startMedia(
      { sendSilence: this.#o.sendSilence ?? true, keepAgentFrames: this.#recorder !== undefined },
      {
        onInputFrame: (frame, agent) => this.#sendInputFrame(frame, agent),
        onError: (err, direction) => this.#log.warn({ err }, `${direction} media tick failed`),
        onAgentAudioStart: (at) => sessionId !== undefined && this.#o.turnAudio?.audioOut(sessionId, at),
      },
    );
    // Keys the caller presses go to the agent as the `dtmf` extension.
    leg.onDtmf((digit) => this.#link?.sendDtmf(digit));
    this.#o.metrics?.callStarted(leg.direction);
    this.#bridged = true;
    if (sessionId !== undefined) this.#o.records.answered(sessionId, leg.sipDetails?.());
    this.#log.info({ sessionId, codec: leg.codec, from: leg.from, to: leg.to }, 'call answered and bridged to its voice session');
  }

  #sendInputFrame(frame: Int16Array | null, agent: Int16Array | null): void {
    const t0 = performance.now();
    this.#recorder?.tick(frame, agent);
    const link = this.#link;
    // With media in a worker, the worker sends input_audio itself (frames come here only to be recorded).
    if (!frame || link === undefined || !link.open || link.audioInWorker) return;
    link.sendInputAudio(frame);
    this.#counts.framesIn++;
    this.#sendMsTotal += performance.now() - t0;
  }

  async #onSessionEnded(reason: string, transferNumber: string | undefined): Promise<void> {
    const leg = this.#leg;
    if (reason !== 'transfer' || transferNumber === undefined || leg.state !== 'answered') {
      leg.hangup();
      return;
    }
    this.#transfer = new TransferHandler(leg, this.#o.transferFallback, this.#log);
    // The agent is done (its transfer_message was played before session_ended): stop its media.
    void this.#media?.stop();
    await this.#transfer.run(transferNumber);
  }

  #refuse(cause: RefusalCause, why: string): void {
    if (this.#leg.state === 'ringing') this.#leg.refuse(cause, why);
    this.#finish(why);
  }

  /** Ends both sides once: the leg hung up (or refused), the link closed, media stopped. */
  #finish(why: string): void {
    if (this.#done) return;
    this.#done = true;
    this.#endedWhy = why;
    const media = this.#media?.stop();
    this.#transfer?.close();
    const leg = this.#leg;
    if (leg.state === 'answered') leg.hangup();
    else if (leg.state === 'ringing') leg.refuse('agent_unavailable', 'voice session ended'); // before the end: it carries this response
    const sessionId = this.#sessionId;
    if (sessionId !== undefined) this.#o.records.ended(sessionId, why, this.#bridged, leg.sipDetails?.());
    const recording = this.#recorder?.close();
    if (recording !== undefined && sessionId !== undefined) this.#o.records.recording(sessionId, recording);
    this.#link?.close(1000, 'call ended');
    this.#span.end(why, this.#bridged);
    this.#o.onDone(this);
    if (!this.#bridged) {
      this.#o.metrics?.failure('not_bridged');
      return;
    }
    this.#o.metrics?.callEnded(leg.direction);
    // The media's final figures come from the thread that ran it (a worker answers a moment
    // later), and a worker link's counts arrive at its close.
    const counted = this.#link?.finalCounts() ?? Promise.resolve(undefined);
    void Promise.all([media ?? Promise.resolve(undefined), counted]).then(([m, c]) => this.#reportQuality(why, m, c));
  }

  #reportQuality(why: string, media: BridgeMediaStats | undefined, linkCounts: { framesIn: number; audioOut: number } | undefined): void {
    // A link that moved the audio itself counted what it handled.
    if (linkCounts !== undefined) Object.assign(this.#counts, linkCounts);
    reportCallQuality(this.#log, this.#o.metrics, {
      sessionId: this.#sessionId,
      why,
      direction: this.#leg.direction,
      counts: this.#counts,
      sendMsTotal: this.#sendMsTotal,
      media,
      rtp: media?.rtp ?? this.#leg.quality(),
    });
  }
}
