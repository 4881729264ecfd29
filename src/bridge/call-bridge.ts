/**
 * The call bridge (issue 6): one phone call <-> one voice session. The bridge is a client of the
 * public voice protocol, like any browser: it opens a session for the routed agent, connects to
 * `/v1/connection` (this daemon's own by default), answers the call once `session_started`
 * arrives, and moves audio both ways:
 *
 *   caller RTP -> InboundPath (jitter buffer, decode, 8k->24k) -> 20 ms tick -> input_audio
 *   response_audio -> OutboundPath (queue, 20 ms pacing, 24k->8k, encode) -> RTP to the caller
 *   interruption -> OutboundPath.clear(): nothing stale reaches the caller
 *   session_ended -> BYE (transfer: REFER to transfer_number first)   caller BYE -> socket closed
 *
 * The call record is the session's record (direction inbound, the trunk, from/to): the session
 * server stores its end and transcript; the bridge adds what only it knows (a SIP-side end).
 */
import type { OutboundDial } from '../domain/dial.ts';
import { failedDialEnd } from '../domain/call.ts';
import { notFound, tooMany, unavailable, validation } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import type { BridgeMedia, BridgeMediaConfig, BridgeMediaStats } from '../media/bridge-media.ts';
import { startBridgeMedia } from '../media/media-host.ts';
import { MediaTicker } from '../media/media-ticker.ts';
import { callerHeardGaps } from '../media/outbound-path.ts';
import type { SipCall } from '../sip/call.ts';
import type { InboundRoute } from '../sip/inbound-routing.ts';
import type { DialFailureReason } from '../sip/outbound-call.ts';
import { outboundTrunkFromStore } from '../sip/store-directory.ts';
import type { AdmissionRefusal } from '../sip/uas.ts';
import type { SipUserAgent } from '../sip/user-agent.ts';
import type { Store } from '../store/index.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import { MediaRelay } from './media-relay.ts';
import { openVoiceSocket, type VoiceSocket } from './voice-socket.ts';
import type { SessionOpener } from './session-opener.ts';

export interface CallBridgeOptions {
  store: Store;
  /** Opens each call's voice session (this daemon's own by default; see session-opener.ts). */
  sessions: SessionOpener;
  logger: Logger;
  /** The SIP user agent outbound calls are placed with (undefined: SIP disabled or not started). */
  ua(): SipUserAgent | undefined;
  /** A session not started within this is given up: the call is refused (default 10 s). */
  connectTimeoutMs?: number;
  /** Concurrent call limits (0 = none): over them inbound calls get 503 / 486, dials 429. */
  limits?: { maxCalls: number; maxCallsPerTrunk: number };
  metrics?: BridgeMetrics;
  /**
   * Transfer fallback: places a call to `target` for `call` (through its trunk) and resolves with
   * the answered leg, or undefined when it is not answered. Undefined option: no fallback.
   */
  dialTransfer?: (call: SipCall, target: string) => Promise<SipCall | undefined>;
  /** Encoded silence while the agent is quiet (continuous RTP); default true. */
  sendSilence?: boolean;
  /** Call recording: a recorder per bridged call (undefined: recording off). */
  recorder?: (callId: string) => CallRecorderSink | undefined;
  /** The 20 ms media clock every call's two directions run on (default: one for this bridge). */
  ticker?: MediaTicker;
}

/**
 * Where a call's audio is recorded: both directions at 24 kHz, one 20 ms frame per tick of the
 * caller's clock (silence where a side had nothing), so the two channels stay aligned.
 */
export interface CallRecorderSink {
  /** One tick: the caller's frame (null: nothing played) and the agent frames sent since the last tick. */
  tick(caller: Int16Array | null, agent: Int16Array | null): void;
  /** Finishes the file; returns its path (stored with the call record), or undefined on failure. */
  close(): string | undefined;
}

/** What the bridge reads of a server event (the payloads of DESIGN.md). */
interface ServerMessage {
  type: string;
  data?: { reason?: string; transfer_number?: string; id?: string; digits?: string };
}

/** Retry-After of the 503 over bridge.max_calls: calls last minutes, but capacity frees up call by call. */
const LIMIT_RETRY_AFTER_SECS = 5;

export class CallBridge {
  readonly #o: CallBridgeOptions;
  readonly #calls = new Set<BridgedCall>();

  constructor(options: CallBridgeOptions) {
    this.#o = { dialTransfer: (call, target) => this.#dialTransfer(call, target), ticker: new MediaTicker(), ...options };
  }

  /** The transfer fallback's new leg: to `target` through the call's trunk, caller ID kept. */
  async #dialTransfer(call: SipCall, target: string): Promise<SipCall | undefined> {
    const ua = this.#o.ua();
    const trunkId = call.trunk?.id ?? call.route?.trunkId;
    const orgId = call.trunk?.orgId ?? call.route?.orgId;
    if (ua === undefined || trunkId === undefined || orgId === undefined) return undefined;
    const trunk = outboundTrunkFromStore(this.#o.store, orgId, trunkId);
    if (trunk === undefined || trunk.outbound_host === '') {
      this.#o.logger.warn({ callId: call.id, trunkId }, 'transfer fallback impossible: the call\'s trunk has no outbound_host');
      return undefined;
    }
    const result = await ua.dial({ trunk, to: target, callerId: call.from });
    if (!result.ok) {
      this.#o.logger.info({ callId: call.id, target, reason: result.reason, status: result.status }, 'transfer fallback: the target did not answer');
      return undefined;
    }
    return result.call;
  }

  /** Calls being bridged now. */
  get active(): number {
    return this.#calls.size;
  }

  /**
   * Admission of a routed inbound INVITE before it rings (SipUserAgent.onInboundCall's `admit`):
   * over bridge.max_calls 503 with Retry-After (RFC 3261 21.5.4: the whole service is busy, try
   * later), over bridge.max_calls_per_trunk 486 Busy Here (21.4.24: this trunk is); the UAS sends
   * either before any 18x, so the caller hears no ringing that ends in a refusal.
   */
  admit(route: Pick<InboundRoute, 'trunkId'>): AdmissionRefusal | undefined {
    const over = this.#overLimit(route.trunkId);
    if (over === undefined) return undefined;
    this.#o.metrics?.failure(`limit_${over}`);
    const l = this.#o.limits!;
    return over === 'global'
      ? { status: 503, reason: 'Too many calls', retryAfter: LIMIT_RETRY_AFTER_SECS, why: `the concurrent call limit bridge.max_calls (${l.maxCalls}) is reached` }
      : { status: 486, reason: 'Trunk busy', why: `the concurrent call limit of trunk ${route.trunkId} (bridge.max_calls_per_trunk ${l.maxCallsPerTrunk}) is reached` };
  }

  /** Takes a routed inbound call (SipUserAgent.onInboundCall): rings until the session is up. */
  handleInbound(call: SipCall): void {
    // admit() refused calls over the limits before they rang; this catches the few admitted
    // meanwhile (between admission and delivery the UAS allocates RTP ports, which may await).
    const over = this.#overLimit(call.route?.trunkId);
    if (over !== undefined) {
      this.#o.logger.warn({ callId: call.id, from: call.from, to: call.to, trunkId: call.route?.trunkId, limit: over }, `INVITE refused: ${over} concurrent call limit reached`);
      this.#o.metrics?.failure(`limit_${over}`);
      // RFC 3261 21.5.4 / 21.4.24: 503 with Retry-After for the whole service, 486 for one trunk.
      if (over === 'global') call.reject(503, 'Too many calls', [['Retry-After', String(LIMIT_RETRY_AFTER_SECS)]]);
      else call.reject(486, 'Trunk busy');
      return;
    }
    this.#track(new BridgedCall(call, this.#o, (b) => this.#calls.delete(b)), (b) => void b.start());
  }

  #track(bridged: BridgedCall, begin: (b: BridgedCall) => void): void {
    this.#calls.add(bridged);
    begin(bridged);
  }

  /** Which limit a new call on `trunkId` would exceed, if any. */
  #overLimit(trunkId: string | undefined): 'global' | 'trunk' | undefined {
    const l = this.#o.limits;
    if (l === undefined) return undefined;
    if (l.maxCalls > 0 && this.#calls.size >= l.maxCalls) return 'global';
    if (l.maxCallsPerTrunk > 0 && trunkId !== undefined) {
      let n = 0;
      for (const c of this.#calls) if (c.trunkId === trunkId) n++;
      if (n >= l.maxCallsPerTrunk) return 'trunk';
    }
    return undefined;
  }

  /**
   * Places an outbound call through a SIP trunk for an agent (POST /v1/agents/{id}/dial). The
   * session record (direction outbound, the call record) exists when this returns; the call
   * rings in the background, and is bridged when answered, or its record ends with busy,
   * no_answer or failed.
   * @throws DomainError (404, 400, 503) when the call cannot be placed at all.
   */
  async dial(req: OutboundDial): Promise<{ callId: string }> {
    const ua = this.#o.ua();
    if (ua === undefined || !ua.listening) throw unavailable('outbound calling needs the SIP user agent (sip.enabled is false, or it is draining)');
    const trunk = outboundTrunkFromStore(this.#o.store, req.orgId, req.sipTrunkId);
    if (trunk === undefined) throw notFound('sip trunk');
    if (trunk.outbound_host === '') throw validation(`SIP trunk "${trunk.name}" has no outbound_host to call through`);
    const over = this.#overLimit(trunk.id);
    if (over !== undefined) {
      this.#o.metrics?.failure(`limit_${over}`);
      throw tooMany(over === 'global' ? 'too many calls in progress: try again later' : `too many calls in progress on SIP trunk "${trunk.name}": try again later`);
    }
    const agent = this.#o.store.agents.get(req.orgId, req.agentId);
    if (agent === undefined || agent.status !== 'active') throw notFound('active agent');
    const { sessionId, connectUrl } = await this.#o.sessions.open({
      orgId: req.orgId,
      agentId: agent.id,
      versionId: agent.active_version_id,
      callerId: req.callerId,
      callTo: req.number,
      direction: 'outbound',
      sipTrunkId: trunk.id,
      firstMessage: req.firstMessage ?? null,
      prompt: req.prompt ?? null,
      variables: req.variables,
    });
    const log = this.#o.logger.child({ component: 'bridge', sessionId });
    log.info({ trunk: trunk.name, to: req.number }, 'placing outbound call');
    void ua.dial({ trunk, to: req.number, callerId: req.callerId }).then(
      (result) => {
        if (!result.ok) {
          this.#o.metrics?.failure(`dial_${result.reason}`);
          this.#recordFailedDial(sessionId, result.reason, result.status);
          log.info({ reason: result.reason, status: result.status }, 'outbound call not answered');
          return;
        }
        this.#track(new BridgedCall(result.call, this.#o, (b) => this.#calls.delete(b)), (b) => b.attach(sessionId, connectUrl));
      },
      (err: unknown) => {
        log.error({ err }, 'outbound call failed');
        this.#recordFailedDial(sessionId, 'unreachable');
      },
    );
    return { callId: sessionId };
  }

  /** The record of a dial that never connected (docs/calls.md: busy, no_answer, auth_failed, failed). */
  #recordFailedDial(sessionId: string, reason: DialFailureReason, status?: number): void {
    this.#o.store.calls.end(sessionId, { ended_at: new Date().toISOString(), ...failedDialEnd(reason, status) });
  }
}


class BridgedCall {
  readonly #call: SipCall;
  readonly #o: CallBridgeOptions;
  readonly #log: Logger;
  readonly #onDone: (b: BridgedCall) => void;
  #ws: VoiceSocket | undefined;
  /** The call's media both ways (here or in a media worker), once the session started. */
  #media: BridgeMedia | undefined;
  #sessionId: string | undefined;
  #done = false;
  /** Media ran (the call was answered and connected): counted in the active-calls gauge. */
  #bridged = false;
  #tickMsTotal = 0;
  #recorder: CallRecorderSink | undefined;
  #digitChain: Promise<void> = Promise.resolve();
  #transferring = false;
  #relay: MediaRelay | undefined;
  readonly #counts = { framesIn: 0, audioOut: 0, interruptions: 0 };

  constructor(call: SipCall, options: CallBridgeOptions, onDone: (b: BridgedCall) => void) {
    this.#call = call;
    this.#o = options;
    this.#onDone = onDone;
    this.#log = options.logger.child({ component: 'bridge', callId: call.id });
  }

  /** The trunk the call came in or goes out on (per-trunk limits). */
  get trunkId(): string | undefined {
    return this.#call.trunk?.id ?? this.#call.route?.trunkId;
  }

  async start(): Promise<void> {
    const call = this.#call;
    const route = call.route;
    call.on('hangup', (info) => this.#finish(`caller side ended: ${info.reason}`));
    if (route === undefined) {
      this.#refuse(500, 'inbound call without a route');
      return;
    }
    const agent = this.#o.store.agents.get(route.orgId, route.agentId);
    if (agent === undefined || agent.status !== 'active') {
      this.#refuse(480, `agent ${route.agentId} is gone or inactive`);
      return;
    }
    let connectUrl: string;
    try {
      const opened = await this.#o.sessions.open({
        orgId: route.orgId,
        agentId: agent.id,
        versionId: agent.active_version_id,
        callerId: call.from,
        callTo: call.to,
        direction: 'inbound',
        sipTrunkId: route.trunkId,
      });
      connectUrl = opened.connectUrl;
      this.#sessionId = opened.sessionId;
    } catch (err) {
      this.#log.error({ err }, 'could not open a voice session for the call');
      this.#refuse(503, 'voice session unavailable');
      return;
    }
    if (this.#done) return;
    this.#connect(connectUrl);
  }

  /** An answered outbound call: connect its (already stored) session and bridge on start. */
  attach(sessionId: string, connectUrl: string): void {
    this.#sessionId = sessionId;
    this.#call.on('hangup', (info) => this.#finish(`callee side ended: ${info.reason}`));
    this.#connect(connectUrl);
  }

  #connect(url: string): void {
    const timer = setTimeout(() => {
      if (this.#media === undefined) {
        this.#log.warn({ sessionId: this.#sessionId }, 'voice session did not start in time: ending the call');
        this.#refuse(503, 'voice session timeout');
      }
    }, this.#o.connectTimeoutMs ?? 10_000);
    timer.unref();
    this.#ws = openVoiceSocket(this.#call.rtp, url, this.#recorderWanted(), {
      onUnexpectedResponse: (status) => {
        clearTimeout(timer);
        this.#log.error({ status, sessionId: this.#sessionId }, 'the voice server refused the session');
        this.#refuse(503, 'voice session refused');
      },
      onError: (err) => {
        clearTimeout(timer);
        this.#log.error({ err, sessionId: this.#sessionId }, 'voice session socket failed');
        this.#finish('voice socket error');
      },
      onClose: (code, reason) => {
        clearTimeout(timer);
        // A transfer outlives the session: the transfer flow ends the call when it is done.
        if (this.#transferring) return;
        this.#finish(`voice session closed (${code}${reason.length ? ` ${reason}` : ''})`);
      },
      onWarn: (message) => this.#log.warn(message),
      onAudio: (pcm) => {
        if (this.#media === undefined) return;
        this.#media.push(pcm);
        this.#counts.audioOut++;
      },
      onMessage: (msg) => {
        if (msg.type === 'session_started') {
          clearTimeout(timer);
          this.#answer();
        } else {
          this.#onEvent(msg as unknown as ServerMessage);
        }
      },
    });
  }

  /** Whether this call will be recorded (decided before the session starts: a worker must know). */
  #recorderWanted(): boolean {
    return this.#sessionId !== undefined && this.#o.recorder !== undefined;
  }

  /** The session is up: answer the call (inbound) and start media both ways. */
  #answer(): void {
    const call = this.#call;
    const answered = call.state === 'answered' || (call.state === 'ringing' && call.answer());
    if (this.#done || !answered) {
      this.#finish('call gone before the session started');
      return;
    }
    const neg = call.media.codec;
    this.#recorder = this.#sessionId !== undefined ? this.#o.recorder?.(this.#sessionId) : undefined;
    const config: BridgeMediaConfig = {
      codec: neg.name,
      payloadType: neg.payloadType,
      receivePayloadType: neg.receivePayloadType,
      ...(call.media.comfortNoisePayloadType !== undefined ? { comfortNoisePayloadType: call.media.comfortNoisePayloadType } : {}),
      sendSilence: this.#o.sendSilence ?? true,
      keepAgentFrames: this.#recorder !== undefined,
    };
    // Caller audio arrives at the jitter buffer's playout pace, one frame per 20 ms tick.
    this.#media = startBridgeMedia(
      call.rtp,
      config,
      {
        onInputFrame: (frame, agent) => this.#sendInputFrame(frame, agent),
        onError: (err, direction) => this.#log.warn({ err }, `${direction} media tick failed`),
      },
      this.#o.ticker!,
    );
    // Keys the caller presses (RFC 4733 or SIP INFO) go to the agent as the `dtmf` extension.
    call.on('dtmf', (digit) => {
      if (this.#ws?.open) this.#ws.send(JSON.stringify({ type: 'dtmf', data: { digit } }));
    });
    this.#o.metrics?.callStarted(call.direction);
    this.#bridged = true;
    if (!this.#o.sessions.recordsCalls && this.#sessionId !== undefined) this.#o.store.calls.markAnswered(this.#sessionId, new Date().toISOString());
    this.#log.info({ sessionId: this.#sessionId, codec: neg.name, from: call.from, to: call.to }, 'call answered and bridged to its voice session');
  }

  #sendInputFrame(frame: Int16Array | null, agent: Int16Array | null): void {
    const t0 = performance.now();
    this.#recorder?.tick(frame, agent);
    const ws = this.#ws;
    // With media in a worker, the worker sends input_audio itself (frames come here only to be recorded).
    if (!frame || ws === undefined || !ws.open || ws.audioInWorker) return;
    ws.sendInputAudio(frame);
    this.#counts.framesIn++;
    this.#tickMsTotal += performance.now() - t0;
  }

  #onEvent(msg: ServerMessage): void {
    switch (msg.type) {
      case 'interruption':
        this.#counts.interruptions++;
        // A worker's socket cleared the playout queue where the message arrived; clearing again
        // from here could drop agent audio that came in after the interruption.
        if (!this.#ws?.audioInWorker) this.#media?.clear();
        return;
      case 'dtmf':
        void this.#playDigits(msg.data?.digits ?? '');
        return;
      case 'session_ended':
        void this.#onSessionEnded(msg.data?.reason ?? 'unknown', msg.data?.transfer_number);
        return;
      default:
        return; // transcripts, text, tool calls: for other clients
    }
  }

  /** The agent presses keys (IVRs): RFC 4733 events, one after another. */
  async #playDigits(digits: string): Promise<void> {
    const play = (this.#digitChain = this.#digitChain.then(async () => {
      for (const d of digits) {
        if (this.#done || !/^[0-9A-D*#]$/.test(d)) return;
        await this.#call.sendDtmf(d);
      }
    }));
    await play.catch((err: unknown) => this.#log.warn({ err }, 'sending DTMF failed'));
  }

  async #onSessionEnded(reason: string, transferNumber: string | undefined): Promise<void> {
    const call = this.#call;
    if (reason !== 'transfer' || transferNumber === undefined || call.state !== 'answered') {
      call.hangup('local');
      return;
    }
    this.#transferring = true;
    // The agent is done (its transfer_message was played before session_ended): stop its media.
    this.#stopMedia();
    const outcome = await call.transfer(transferNumber).catch((err: unknown) => {
      this.#log.warn({ err }, 'REFER transfer failed');
      return undefined;
    });
    this.#log.info({ transferNumber, outcome }, 'call transfer by REFER done');
    if (call.closed) return; // transferred: the call's hangup event finishes the bridge
    // The caller's side refused the REFER or could not reach the target: connect the target
    // ourselves, on a new outbound leg, and relay the audio (issue 6).
    const leg = await this.#o.dialTransfer?.(call, transferNumber).catch((err: unknown) => {
      this.#log.warn({ err }, 'transfer fallback: the new leg failed');
      return undefined;
    });
    if (leg === undefined || call.closed) {
      leg?.hangup('local');
      if (!call.closed) call.hangup('local');
      return;
    }
    this.#log.info({ transferNumber, legCallId: leg.id }, 'transfer fallback: target reached on a new leg, relaying audio');
    this.#relay = new MediaRelay(call, leg);
  }

  /** Stops the bridge's own media (the agent's audio out, the caller's audio to the session). */
  #stopMedia(): Promise<BridgeMediaStats> | undefined {
    return this.#media?.stop();
  }

  #refuse(status: number, why: string): void {
    if (this.#call.state === 'ringing') this.#call.reject(status, why);
    this.#finish(why);
  }

  /** Ends both legs once: BYE (or refusal) to the caller, the socket closed, media stopped. */
  #finish(why: string): void {
    if (this.#done) return;
    this.#done = true;
    const media = this.#stopMedia();
    this.#relay?.close();
    if (!this.#o.sessions.recordsCalls && this.#sessionId !== undefined) {
      // Upstream mode: nobody else ends this daemon's record of the phone call.
      this.#o.store.calls.end(this.#sessionId, { ended_at: new Date().toISOString(), termination_reason: why, ...(this.#bridged ? {} : { end_status: 'failed' }) });
    }
    const recording = this.#recorder?.close();
    if (recording !== undefined && this.#sessionId !== undefined) this.#o.store.calls.setRecording(this.#sessionId, recording);
    this.#ws?.close(1000, 'call ended');
    const call = this.#call;
    if (call.state === 'answered') call.hangup('local');
    else if (call.state === 'ringing') call.reject(480, 'voice session ended');
    this.#onDone(this);
    if (!this.#bridged) {
      this.#o.metrics?.failure('not_bridged');
      return;
    }
    this.#o.metrics?.callEnded(call.direction);
    // The media's final figures come from the thread that ran it (a worker answers a moment
    // later), and a worker's socket counts arrive at its close.
    const counted = this.#ws?.finalCounts() ?? Promise.resolve();
    void Promise.all([media ?? Promise.resolve(undefined), counted]).then(([m]) => this.#logQuality(why, m ?? undefined));
  }

  /** One line per call with its quality figures: what an operator greps for at 3 a.m. */
  #logQuality(why: string, media: BridgeMediaStats | undefined): void {
    const call = this.#call;
    const rtp = media?.rtp ?? call.rtp.stats();
    const inbound = media?.inbound;
    const lossRatio = rtp.packetsReceived + rtp.packetsLost > 0 ? Math.max(0, rtp.packetsLost) / (rtp.packetsReceived + Math.max(0, rtp.packetsLost)) : 0;
    // A worker's socket counted what it handled itself.
    if (this.#ws?.audioInWorker) {
      this.#counts.framesIn = this.#ws.framesIn;
      this.#counts.audioOut = this.#ws.audioOut;
    }
    // The media's own tick (wherever it ran) plus this thread's input_audio send (none in a worker).
    const inboundTickMs = (media?.inboundTickMs ?? 0) + (this.#counts.framesIn > 0 ? this.#tickMsTotal / this.#counts.framesIn : 0);
    const out = media?.outbound;
    const frames = out ? { sent: out.framesSent + out.silenceSent, late: out.framesLate, skipped: out.lateTicksSkipped } : undefined;
    this.#o.metrics?.quality({ jitterBufferDepthMs: inbound?.depthMs ?? 0, lossRatio, inboundTickMs, ...(frames ? { frames } : {}) });
    // A warning when the caller heard gaps of the bridge's making: what an operator should see first.
    this.#log[out && callerHeardGaps(out) ? 'warn' : 'info'](
      {
        sessionId: this.#sessionId,
        why,
        direction: call.direction,
        ...this.#counts,
        packetsReceived: rtp.packetsReceived,
        packetsLost: rtp.packetsLost,
        lossRatio: Number(lossRatio.toFixed(4)),
        jitterMs: rtp.jitterMs,
        jitterBufferDepthMs: inbound?.depthMs,
        concealedFrames: inbound?.concealedFrames,
        inboundTickMs: Number(inboundTickMs.toFixed(4)),
        outbound: media?.outbound,
      },
      'bridged call ended',
    );
  }
}
