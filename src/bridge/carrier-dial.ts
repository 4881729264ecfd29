/**
 * Outbound calls through the carrier's own call API (POST /v1/agents/{id}/dial without a SIP
 * trunk, from an agent whose number is an imported carrier number; docs/telco.md):
 *
 *   1. the call record first: a voice session, direction outbound, source twilio;
 *   2. a one-time stream token, valid while the call may ring, in the connect-stream TwiML;
 *   3. POST Calls.json (To, From = the agent's number, Twiml, StatusCallback with our call id,
 *      the four StatusCallbackEvents, Timeout); the CallSid goes on the record and binds the token;
 *   4. the carrier's status callbacks move the call on: ringing and answered are progress, busy,
 *      no-answer, failed, canceled end the record as a dial that never connected; once answered,
 *      the carrier opens the stream with the token and the bridge takes it like an inbound stream.
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
}

/** An answered outbound call whose stream has started: what the bridge needs to connect it. */
export interface AnsweredCarrierDial {
  callId: string;
  connectUrl: string;
  orgId: string;
  numberId: string;
  log: Logger;
}

interface PendingDial extends AnsweredCarrierDial {
  accountSid: string;
  token: string;
  callSid: string | undefined;
  answered: boolean;
  watchdog: NodeJS.Timeout;
}

const WATCHDOG_SLACK_MS = 30_000;

export class CarrierDials {
  readonly #o: CarrierDialOptions;
  readonly #pending = new Map<string, PendingDial>();

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
    const { sessionId: callId, connectUrl } = await o.sessions.open({
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
      variables: withCallVariables(callVariables({ callerNumber: from, calledNumber: req.number }), req.variables),
    });
    const log = o.log.child({ component: 'bridge', callId, orgId: req.orgId });
    const base = o.publicUrl.replace(/\/+$/, '');
    const ttlMs = o.ringTimeoutSecs * 1000 + (o.watchdogSlackMs ?? WATCHDOG_SLACK_MS);
    const token = o.tokens.issue({ orgId: req.orgId, agentId: agent.id, numberId: number.id, callSid: '', accountSid: creds.account_sid, from, to: req.number, outbound: { callId } }, ttlMs);
    const pending: PendingDial = {
      callId,
      connectUrl,
      orgId: req.orgId,
      numberId: number.id,
      log,
      accountSid: creds.account_sid,
      token,
      callSid: undefined,
      answered: false,
      watchdog: setTimeout(() => this.#watchdog(callId), ttlMs),
    };
    pending.watchdog.unref();
    // Registered before the request: a callback may overtake the request's answer.
    this.#pending.set(callId, pending);
    log.info({ from, to: req.number, accountSid: creds.account_sid }, 'placing outbound call through the carrier call API');
    try {
      const twiml = connectStreamTwiml(base.replace(/^http/, 'ws') + TWILIO_STREAM_PATH, { token, callId, from, to: req.number });
      const statusCallback = `${base}${TWILIO_STATUS_PATH}?call=${encodeURIComponent(callId)}`;
      const placed = await o.client.createCall(creds.account_sid, creds.auth_token, { to: req.number, from, twiml, statusCallback, timeoutSecs: o.ringTimeoutSecs });
      if (this.#pending.get(callId) === pending) this.#bind(pending, placed.sid);
      await o.store.calls.setCarrierCallId(callId, placed.sid);
      log.info({ callSid: placed.sid, status: placed.status }, 'carrier accepted the outbound call');
      return { callId };
    } catch (err) {
      this.#forget(pending);
      const refused = err instanceof DomainError && err.kind === 'validation';
      o.metrics?.failure(refused ? 'dial_carrier_refused' : 'dial_carrier_failed');
      o.records.failedDial(callId, err instanceof DomainError ? `${refused ? 'carrier_refused' : 'carrier_failed'}: ${err.message}` : 'carrier_failed');
      log.warn({ err: err instanceof Error ? err.message : String(err) }, 'outbound call not placed: the carrier call API failed');
      throw err;
    }
  }

  /** The stream of an outbound call started: its pending dial, taken (undefined: unknown or over). */
  streamStarted(callId: string, callSid: string): AnsweredCarrierDial | undefined {
    const p = this.#pending.get(callId);
    if (p === undefined || p.callSid !== callSid) return undefined;
    clearTimeout(p.watchdog);
    this.#pending.delete(callId);
    return p;
  }

  /** A verified status callback; false when it is not about a pending dial. */
  status(u: CarrierCallStatus): boolean {
    const p = u.callId !== undefined ? this.#pending.get(u.callId) : [...this.#pending.values()].find((x) => x.callSid === u.callSid);
    if (p === undefined || p.accountSid !== u.accountSid) return false;
    if (p.callSid === undefined) this.#bind(p, u.callSid);
    else if (p.callSid !== u.callSid) return false;
    const pr = u.progress;
    if (pr.kind === 'progress') {
      p.log.info({ callSid: u.callSid, status: pr.status }, 'outbound carrier call progress');
    } else if (pr.kind === 'answered') {
      p.answered = true;
      p.log.info({ callSid: u.callSid }, 'outbound carrier call answered: waiting for its media stream');
    } else {
      this.#forget(p);
      // Completed without a stream: answered, but the TwiML never reached us (or the callee hung up at once).
      const reason = pr.dial === 'completed' ? 'no_media_stream' : pr.dial;
      this.#o.metrics?.failure(`dial_${reason}`);
      this.#o.records.failedDial(p.callId, reason, u.sipResponseCode);
      p.log.info({ callSid: u.callSid, status: pr.status, sipResponseCode: u.sipResponseCode }, 'outbound carrier call not connected');
    }
    return true;
  }

  /** Ends every dial still ringing (the daemon stops). */
  close(): void {
    for (const p of [...this.#pending.values()]) this.#giveUp(p, 'cancelled');
  }

  #bind(p: PendingDial, callSid: string): void {
    p.callSid = callSid;
    p.log = p.log.child({ callSid });
    this.#o.tokens.bindCall(p.token, callSid);
  }

  #forget(p: PendingDial): void {
    clearTimeout(p.watchdog);
    this.#o.tokens.revoke(p.token);
    this.#pending.delete(p.callId);
  }

  #watchdog(callId: string): void {
    const p = this.#pending.get(callId);
    if (p === undefined) return;
    p.log.warn({ answered: p.answered }, 'outbound carrier call neither streamed nor ended in time: ending it');
    this.#giveUp(p, 'carrier_timeout');
  }

  /** Ends a pending call at the carrier (cancel while ringing, complete once answered) and in the record. */
  #giveUp(p: PendingDial, reason: string): void {
    this.#forget(p);
    this.#o.records.failedDial(p.callId, reason);
    const callSid = p.callSid;
    if (callSid === undefined) return;
    const end = async (): Promise<void> => {
      const creds = await this.#o.store.telcoNumbers.credentials(p.orgId, p.numberId);
      if (creds === undefined) return;
      await this.#o.client.updateCall(creds.account_sid, creds.auth_token, callSid, { Status: p.answered ? 'completed' : 'canceled' });
    };
    end().catch((err: unknown) => {
      p.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'ending the carrier call failed');
    });
  }
}
