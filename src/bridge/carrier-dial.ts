/**
 * Outbound calls through the carrier's own call API (POST /v1/agents/{id}/dial without a SIP
 * trunk, from an agent whose number is an imported carrier number; docs/telco.md):
 *
 *   1. the call record first: a voice session, direction outbound, source twilio;
 *   2. a one-time stream grant in the store (the session's connect token sealed in it), valid
 *      while the call may ring, its token in the connect-stream TwiML;
 *   3. POST Calls.json (To, From = the agent's number, Twiml, StatusCallback with our call id,
 *      the four StatusCallbackEvents, Timeout); the CallSid goes on the record and binds the grant;
 *   4. the carrier's status callbacks move the call on: ringing and answered are progress, busy,
 *      no-answer, failed, canceled end the record as a dial that never connected; once answered,
 *      the carrier opens the stream with the token and the bridge takes it like an inbound stream.
 *
 * Behind a shared load balancer the callbacks and the stream may reach any node: the node that
 * placed the dial keeps it pending (its watchdog, bridge.max_calls), and a node without it reads
 * the dial from the store (statusElsewhere, carrier-dial-callbacks.ts): ends it on a final status,
 * remembers `answered`. The placing node re-reads the store every `storeCheckMs` and before it
 * gives a dial up, so a dial another node ended, or whose stream started elsewhere, is forgotten
 * here without a carrier request or a record write. Every end of a ringing dial is conditional (CallEnd.unconnected_only):
 * never over a record another node ended or a call that streams.
 *
 * A call that neither streams nor ends within the ring timeout + WATCHDOG_SLACK_MS is ended at the
 * carrier and in the record (`carrier_timeout`): a lost callback never leaves a call hanging.
 */
import type { Logger } from '../log.ts';
import type { Store } from '../store/index.ts';
import type { CarrierDialRequest } from '../domain/dial.ts';
import { DomainError, notFound, unavailable } from '../domain/errors.ts';

export type { CarrierDialRequest };
import type { CarrierClient } from '../telco/carrier-client.ts';
import type { CarrierCallStatus } from '../telco/twilio-call-status.ts';
import type { StreamTokens } from '../telco/twilio-stream-tokens.ts';
import { connectStreamTwiml } from '../telco/twilio-twiml.ts';
import { TWILIO_STATUS_PATH, TWILIO_STREAM_PATH } from '../telco/twilio-voice-url.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import type { CallRecordWriter } from './call-record-writer.ts';
import { dialStatusElsewhere, endUnconnectedDial } from './carrier-dial-callbacks.ts';
import { callVariables, withCallVariables } from './call-variables.ts';
import type { SessionOpener } from './session-opener.ts';

export interface CarrierDialOptions {
  store: Store;
  sessions: SessionOpener;
  records: CallRecordWriter;
  client: CarrierClient;
  tokens: StreamTokens;
  /** http.public_url: where the carrier reaches our stream and status callback ('' = cannot dial). */
  publicUrl: string;
  /** Timeout of Calls.json: how long the callee's phone may ring. */
  ringTimeoutSecs: number;
  log: Logger;
  metrics?: BridgeMetrics | undefined;
  /** Watchdog slack beyond the ring timeout (tests shorten it). */
  watchdogSlackMs?: number;
  /**
   * How often the dials pending here are compared with the store, ms (0: never). Nodes sharing
   * the store: another node may have taken a dial's stream or ended it.
   */
  storeCheckMs?: number;
}

/** A dial placed here whose stream has started (on this node). */
export interface AnsweredCarrierDial {
  callId: string;
  log: Logger;
}

interface PendingDial extends AnsweredCarrierDial {
  orgId: string;
  numberId: string;
  accountSid: string;
  callSid: string | undefined;
  answered: boolean;
  watchdog: NodeJS.Timeout;
}

const WATCHDOG_SLACK_MS = 30_000;
/** How often the dials pending on a node sharing its store are compared with the store. */
export const DIAL_STORE_CHECK_MS = 2000;

export class CarrierDials {
  readonly #o: CarrierDialOptions;
  readonly #pending = new Map<string, PendingDial>();
  /** Give-ups under way (their store reads and writes, the carrier request): shutdown waits for them. */
  readonly #inFlight = new Set<Promise<void>>();
  #storeCheck: NodeJS.Timeout | undefined;

  constructor(options: CarrierDialOptions) {
    this.#o = options;
  }

  /** Calls placed and not yet streaming or ended (they count against bridge.max_calls). */
  get pending(): number {
    return this.#pending.size;
  }

  /**
   * Places the call; resolves once the carrier accepted it (the record exists either way).
   * @throws DomainError: 503 without http.public_url or carrier, 404 agent/number gone, 400 the
   *   carrier refused the call's parameters, 502 the carrier failed (the record then ends failed).
   */
  async dial(req: CarrierDialRequest): Promise<{ callId: string }> {
    const o = this.#o;
    if (o.publicUrl === '') throw unavailable('outbound calls through the carrier call API need http.public_url (CALLBRIDGE_PUBLIC_URL): the carrier must reach this daemon for the call\'s media stream and status callbacks');
    const agent = await o.store.agents.get(req.orgId, req.agentId);
    if (agent === undefined || agent.status !== 'active') throw notFound('active agent');
    const number = await o.store.telcoNumbers.get(req.orgId, req.telcoNumberId);
    const creds = number && (await o.store.telcoNumbers.credentials(req.orgId, number.id));
    if (number === undefined || creds === undefined) throw notFound('phone number');
    const from = number.phone_number;
    const { sessionId: callId, token: sessionToken } = await o.sessions.open({
      orgId: req.orgId,
      agentId: agent.id,
      versionId: agent.active_version_id,
      callerId: from,
      callTo: req.number,
      direction: 'outbound',
      sipTrunkId: null,
      source: 'twilio',
      firstMessage: req.firstMessage ?? null,
      prompt: req.prompt ?? null,
      machineDetection: req.machineDetection ?? null,
      variables: withCallVariables(callVariables({ callerNumber: from, calledNumber: req.number }), req.variables),
    });
    const log = o.log.child({ component: 'bridge', callId, orgId: req.orgId });
    const base = o.publicUrl.replace(/\/+$/, '');
    const ttlMs = o.ringTimeoutSecs * 1000 + (o.watchdogSlackMs ?? WATCHDOG_SLACK_MS);
    const pending: PendingDial = {
      callId,
      orgId: req.orgId,
      numberId: number.id,
      log,
      accountSid: creds.account_sid,
      callSid: undefined,
      answered: false,
      watchdog: setTimeout(() => this.#watchdog(callId), ttlMs),
    };
    pending.watchdog.unref();
    // Registered before the request: a callback may overtake the request's answer.
    this.#pending.set(callId, pending);
    this.#watchStore();
    log.info({ from, to: req.number, accountSid: creds.account_sid }, 'placing outbound call through the carrier call API');
    try {
      const token = await o.tokens.issue({ orgId: req.orgId, agentId: agent.id, numberId: number.id, callSid: '', accountSid: creds.account_sid, from, to: req.number, outbound: { callId, sessionToken } }, ttlMs);
      const twiml = connectStreamTwiml(base.replace(/^http/, 'ws') + TWILIO_STREAM_PATH, { token, callId, from, to: req.number });
      const statusCallback = `${base}${TWILIO_STATUS_PATH}?call=${encodeURIComponent(callId)}`;
      const placed = await o.client.createCall(creds.account_sid, creds.auth_token, { to: req.number, from, twiml, statusCallback, timeoutSecs: o.ringTimeoutSecs });
      // A failed bind does not undo the placed call: its first status callback binds it again.
      if (this.#pending.get(callId) === pending && pending.callSid === undefined) {
        await this.#bind(pending, placed.sid).catch((err: unknown) => {
          pending.callSid = undefined;
          log.warn({ err: err instanceof Error ? err.message : String(err) }, 'binding the stream grant to the CallSid failed');
        });
      }
      await o.store.calls.setCarrierCallId(callId, placed.sid);
      log.info({ callSid: placed.sid, status: placed.status }, 'carrier accepted the outbound call');
      return { callId };
    } catch (err) {
      this.#forget(pending);
      await o.tokens.revoke(callId).catch(() => undefined);
      const refused = err instanceof DomainError && err.kind === 'validation';
      o.metrics?.failure(refused ? 'dial_carrier_refused' : 'dial_carrier_failed');
      void o.records.failedDial(callId, err instanceof DomainError ? `${refused ? 'carrier_refused' : 'carrier_failed'}: ${err.message}` : 'carrier_failed');
      log.warn({ err: err instanceof Error ? err.message : String(err) }, 'outbound call not placed: the carrier call API failed');
      throw err;
    }
  }

  /**
   * The stream of a dial placed here started on this node: the dial is no longer pending
   * (undefined: not placed here, or forgotten already). The stream was authorized by its grant.
   */
  streamStarted(callId: string, callSid: string): AnsweredCarrierDial | undefined {
    const p = this.#pending.get(callId);
    if (p === undefined || (p.callSid !== undefined && p.callSid !== callSid)) return undefined;
    this.#forget(p);
    return p;
  }

  /** A verified status callback about a dial pending here; false when it is not about one. */
  async status(u: CarrierCallStatus): Promise<boolean> {
    const p = u.callId !== undefined ? this.#pending.get(u.callId) : [...this.#pending.values()].find((x) => x.callSid === u.callSid);
    if (p === undefined || p.accountSid !== u.accountSid) return false;
    if (p.callSid === undefined) await this.#bind(p, u.callSid);
    else if (p.callSid !== u.callSid) return false;
    const pr = u.progress;
    if (pr.kind === 'progress') {
      p.log.info({ callSid: u.callSid, status: pr.status }, 'outbound carrier call progress');
    } else if (pr.kind === 'answered') {
      p.answered = true;
      p.log.info({ callSid: u.callSid }, 'outbound carrier call answered: waiting for its media stream');
    } else {
      this.#forget(p);
      await endUnconnectedDial(this.#o, p.callId, u, pr, p.log);
    }
    return true;
  }

  /** A verified status callback for a dial not pending here: read from the store (carrier-dial-callbacks.ts). */
  statusElsewhere(u: CarrierCallStatus): Promise<void> {
    return dialStatusElsewhere(this.#o, u);
  }

  /** Ends every dial still ringing (the daemon stops); settled() resolves once that is done. */
  close(): void {
    clearInterval(this.#storeCheck);
    this.#storeCheck = undefined;
    for (const p of [...this.#pending.values()]) this.#track(this.#giveUp(p, 'cancelled'));
  }

  /** Resolves once the give-ups under way are done. */
  async settled(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
  }

  async #bind(p: PendingDial, callSid: string): Promise<void> {
    p.callSid = callSid;
    p.log = p.log.child({ callSid });
    await this.#o.tokens.bindCall(p.callId, callSid);
  }

  /** No longer pending here (nothing in the store changes). */
  #forget(p: PendingDial): void {
    clearTimeout(p.watchdog);
    this.#pending.delete(p.callId);
    if (this.#pending.size === 0) {
      clearInterval(this.#storeCheck);
      this.#storeCheck = undefined;
    }
  }

  #track(p: Promise<void>): void {
    this.#inFlight.add(p);
    void p.then(() => this.#inFlight.delete(p));
  }

  /** While dials are pending on a node sharing its store: drop those another node took (they stop counting here). */
  #watchStore(): void {
    const ms = this.#o.storeCheckMs ?? 0;
    if (ms <= 0 || this.#storeCheck !== undefined) return;
    this.#storeCheck = setInterval(() => void this.#checkStore(), ms);
    this.#storeCheck.unref();
  }

  async #checkStore(): Promise<void> {
    const ids = [...this.#pending.keys()];
    if (ids.length === 0) return;
    let states: Awaited<ReturnType<Store['streamGrants']['dialStates']>>;
    try {
      states = await this.#o.store.streamGrants.dialStates(ids);
    } catch (err) {
      this.#o.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'reading the pending carrier dials from the store failed');
      return;
    }
    for (const [callId, s] of states) {
      const p = this.#pending.get(callId);
      if (p === undefined || !(s.ended || s.streaming)) continue;
      this.#forget(p);
      p.log.info({ ended: s.ended }, s.ended ? 'outbound carrier call ended by another node: no longer pending here' : 'outbound carrier call streams on another node: no longer pending here');
    }
  }

  #watchdog(callId: string): void {
    const p = this.#pending.get(callId);
    if (p === undefined) return;
    this.#track(this.#giveUp(p, 'carrier_timeout'));
  }

  /**
   * Ends a pending call at the carrier (cancel while ringing, complete once answered: here or on
   * any node) and in the record, after reading the store: a dial another node ended, or whose
   * stream started elsewhere, is only forgotten here.
   */
  async #giveUp(p: PendingDial, reason: string): Promise<void> {
    this.#forget(p);
    try {
      const state = (await this.#o.store.streamGrants.dialStates([p.callId])).get(p.callId);
      if (state?.ended === true || state?.streaming === true) {
        p.log.info({ ended: state.ended }, 'outbound carrier call ended or streams on another node: forgotten here');
        return;
      }
      const answered = p.answered || state?.answered === true;
      if (reason === 'carrier_timeout') p.log.warn({ answered }, 'outbound carrier call neither streamed nor ended in time: ending it');
      // The grant first: once it is spent no stream can start, so the record's end below holds.
      await this.#o.tokens.revoke(p.callId);
      if (!(await this.#o.records.failedDial(p.callId, reason))) {
        p.log.info('outbound carrier call ended or started streaming elsewhere meanwhile: forgotten here');
        return;
      }
      const callSid = p.callSid;
      if (callSid === undefined) return;
      const creds = await this.#o.store.telcoNumbers.credentials(p.orgId, p.numberId);
      if (creds === undefined) return;
      await this.#o.client.updateCall(creds.account_sid, creds.auth_token, callSid, { Status: answered ? 'completed' : 'canceled' });
    } catch (err) {
      p.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'ending the carrier call failed');
    }
  }
}
