/**
 * The SIP entry points of the bridge: a routed inbound SIP call, and an outbound dial through a
 * SIP trunk (POST /v1/agents/{id}/dial with a trunk). Each becomes a bridged call in the registry
 * (bridged-calls.ts) over a SipCallLeg (sip-call-leg.ts), with its voice link beside the call's
 * media (voice-link.ts) and the SIP transfer fallback (sip-transfer-fallback.ts).
 *
 * Apart from the carrier's entry points (carrier-streams.ts) because what it reads is SIP's: the
 * INVITE's route and headers, the trunk dialled through, the user agent's dial outcome.
 */
import type { OutboundDial } from '../domain/dial.ts';
import { notFound, tooMany, unavailable, validation } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import type { MediaTicker } from '../media/media-ticker.ts';
import type { SipCall, SipUserAgent } from '../sip/ua/index.ts';
import type { Store } from '../store/index.ts';
import type { BridgeCore } from './bridge-core.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import { LIMIT_RETRY_AFTER_SECS, type BridgedCalls } from './bridged-calls.ts';
import type { CallRecordWriter } from './call-record-writer.ts';
import type { HeldSlot, SlotResult } from './call-slots.ts';
import { callVariables, withCallVariables } from './call-variables.ts';
import { inboundSession } from './inbound-session.ts';
import type { SessionOpener } from './session-opener.ts';
import { SipCallLeg } from './sip-call-leg.ts';
import { canCallThrough, outboundTrunkFromStore } from './sip-store-directory.ts';
import { sipTransferFallback, type DialTransfer } from './sip-transfer-fallback.ts';
import { openVoiceLink } from './voice-link.ts';

export interface SipCallsOptions {
  store: Store;
  sessions: SessionOpener;
  logger: Logger;
  /** The SIP user agent outbound calls are placed with (undefined: SIP disabled or not started). */
  ua(): SipUserAgent | undefined;
  calls: BridgedCalls;
  records: CallRecordWriter;
  ticker: MediaTicker;
  dialTransfer: DialTransfer;
  metrics?: BridgeMetrics | undefined;
}

type OutboundTrunk = NonNullable<Awaited<ReturnType<typeof outboundTrunkFromStore>>>;

export class SipCalls {
  readonly #o: SipCallsOptions;

  constructor(options: SipCallsOptions) {
    this.#o = options;
  }

  /** Takes a routed inbound call (SipUserAgent.onInboundCall): rings until the session is up. */
  handleInbound(call: SipCall): void {
    const calls = this.#o.calls;
    const route = call.route;
    // The slot admit() took for it (none when no per-trunk/per-organization limit applies).
    const admitted = route === undefined ? undefined : calls.takeAdmitted(route);
    // admit() refused calls over bridge.max_calls before they rang; this catches the few admitted
    // meanwhile (between admission and delivery the UAS allocates RTP ports, which may await).
    if (calls.full()) {
      admitted?.release();
      this.#o.logger.warn({ callId: call.id, from: call.from, to: call.to, trunkId: route?.trunkId, limit: 'global' }, 'INVITE refused: global concurrent call limit reached');
      calls.refusedBy('global');
      // RFC 3261 21.5.4: 503 with Retry-After for the whole service.
      call.reject(503, 'Too many calls', [['Retry-After', String(LIMIT_RETRY_AFTER_SECS)]]);
      return;
    }
    // Counted at once; what it routes to is read from the store meanwhile.
    const core = this.#bridge(call);
    // A call delivered without admission (none asked) takes its slot now.
    const slot: Promise<SlotResult> = admitted !== undefined ? Promise.resolve({ held: admitted }) : route === undefined ? Promise.resolve({ held: { release: () => undefined } }) : calls.slots.acquire(route.orgId, route.trunkId);
    void core.start(calls.holding(core, slot, () => this.#inboundVariables(call).then((variables) => inboundSession(this.#o.store.agents, this.#o.sessions, call, variables))));
  }

  /**
   * Places an outbound call through a SIP trunk for an agent (POST /v1/agents/{id}/dial). The
   * session record (direction outbound, the call record) exists when this returns; the call
   * rings in the background, and is bridged when answered, or its record ends with busy,
   * no_answer or failed.
   * @throws DomainError (404, 400, 503, 429) when the call cannot be placed at all.
   */
  async dial(req: OutboundDial): Promise<{ callId: string }> {
    const ua = this.#o.ua();
    if (ua === undefined || !ua.listening) throw unavailable('outbound calling needs the SIP user agent (sip.enabled is false, or it is draining)');
    const trunk = await outboundTrunkFromStore(this.#o.store, req.orgId, req.sipTrunkId);
    if (trunk === undefined) throw notFound('sip trunk');
    if (!canCallThrough(trunk)) {
      throw validation(`SIP trunk "${trunk.name}" has no outbound_host, and no PBX is registered on it: set outbound_host, or let the PBX REGISTER with the trunk's inbound_sip_username`);
    }
    const calls = this.#o.calls;
    if (calls.full()) {
      calls.refusedBy('global');
      throw tooMany('too many calls in progress: try again later');
    }
    const slot = await calls.slots.acquire(req.orgId, trunk.id);
    if ('refused' in slot) {
      calls.refusedBy(slot.refused);
      throw tooMany(slot.refused === 'trunk' ? `too many calls in progress on SIP trunk "${trunk.name}": try again later` : 'too many calls in progress for this organization: try again later');
    }
    try {
      return await this.#placeDial(req, trunk, slot.held, ua);
    } catch (err) {
      slot.held.release();
      throw err;
    }
  }

  /** A SIP call as a bridged call, counted until it finishes. */
  #bridge(call: SipCall): BridgeCore {
    const log = this.#o.logger.child({ component: 'bridge', callId: call.id });
    return this.#o.calls.bridge(new SipCallLeg(call, this.#o.ticker, log), log, (url, recording, events, headers) => openVoiceLink(call.rtp, url, recording, events, headers), sipTransferFallback(call, this.#o.dialTransfer));
  }

  /**
   * The session variables of a routed inbound call (call-variables.ts). The trunk is read within
   * the route's organization, so no other organization's header_variables can apply.
   */
  async #inboundVariables(call: SipCall): Promise<ReturnType<typeof callVariables>> {
    const route = call.route;
    if (route === undefined) return [];
    const trunk = await this.#o.store.sipTrunks.get(route.orgId, route.trunkId);
    return callVariables({ callerNumber: call.from, calledNumber: route.number, trunk, header: (name) => call.inviteHeader(name) });
  }

  /** dial() once the call fits: the session, then the call through the trunk; the slot goes with the call. */
  async #placeDial(req: OutboundDial, trunk: OutboundTrunk, held: HeldSlot, ua: SipUserAgent): Promise<{ callId: string }> {
    const agent = await this.#o.store.agents.get(req.orgId, req.agentId);
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
      machineDetection: req.machineDetection ?? null,
      // Ours (caller_number, called_number, trunk_id, trunk_name) under the user's, which win.
      variables: withCallVariables(callVariables({ callerNumber: req.callerId, calledNumber: req.number, trunk: { id: trunk.id, name: trunk.name, header_variables: [] } }), req.variables),
    });
    const log = this.#o.logger.child({ component: 'bridge', sessionId });
    log.info({ trunk: trunk.name, to: req.number }, 'placing outbound call');
    void ua.dial({ trunk, to: req.number, callerId: req.callerId }).then(
      (result) => {
        if (!result.ok) {
          held.release();
          this.#o.metrics?.failure(`dial_${result.reason}`);
          // The final response received (its Call-ID exists once an INVITE was sent).
          const sip = result.callId === undefined ? undefined : { call_id: result.callId, final_status: result.status, final_reason: result.reasonPhrase ?? null };
          void this.#o.records.failedDial(sessionId, result.reason, result.status, sip);
          log.info({ reason: result.reason, status: result.status }, 'outbound call not answered');
          return;
        }
        const core = this.#bridge(result.call);
        this.#o.calls.hold(core, held);
        core.attach(sessionId, connectUrl);
      },
      (err: unknown) => {
        held.release();
        log.error({ err }, 'outbound call failed');
        void this.#o.records.failedDial(sessionId, 'unreachable');
      },
    );
    return { callId: sessionId };
  }
}
