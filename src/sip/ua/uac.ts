/**
 * The outbound UAC (RFC 3261 8.1, 13.2, 22.2-22.3): one INVITE through a trunk to its outbound
 * host, digest credentials for a 401/407, CANCEL on ring timeout or abort, the ACK and dialog of
 * the 2xx, ACK + BYE for the extra 2xx of a fork. It sits on the dialog and transaction layers
 * and knows nothing of calls, media or the store.
 *
 *   const outcome = await sendInvite({ layer, dialogs, destination, requestUri, from, to, contact, sdp,
 *                                      credentials, ringTimeoutMs, signal, onProvisional, logger });
 *   if (outcome.ok) outcome.dialog / outcome.sdp (the answer) / outcome.response (the 2xx)
 *   else outcome.reason ('busy' | 'no_answer' | ...), outcome.status, outcome.reasonPhrase
 *
 *          INVITE (CSeq 1) ------------------------------>
 *          <------------------------------ 401/407 + challenge       (the transaction ACKs it)
 *          INVITE (CSeq 2, same Call-ID and From tag, new branch, credentials) ->
 *          <--------------------------------------- 180 / 183 + SDP  (onProvisional)
 *          PRACK (when the 18x is reliable, RFC 3262; prack-uac.ts) -->
 *          <------------------------------------------------- 200 + SDP
 *          ACK (the dialog's: remote target, route set) --------->
 *
 * With `failover` (RFC 3263 4.3), a target that stays silent for failover.timeoutMs, cannot be
 * reached or answers 503 is left for the next one: a new transaction of the same call.
 *
 * Network outcomes never throw: sendInvite resolves with an InviteOutcome. It rejects only for
 * the caller's own mistakes (a Request-URI that would not go out as given, bad party or timer
 * options), with TypeError / RangeError. docs/sip-uac.md has the outcome table and the choices.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { DigestClient, authorizationHeaderName, challengeHeaderName } from '../digest/index.ts';
import type { Dialog, DialogManager } from '../dialog/index.ts';
import { SipTransportError } from '../message/index.ts';
import { createRequest, generateCallId, generateTag, NameAddr, parseUri, type HeaderValue, type SipRequest, type SipResponse } from '../message/index.ts';
import { ClientTransaction, type TransactionLayer } from '../transaction/index.ts';
import { systemTransactionTimers, type TransactionTimers } from '../transaction/index.ts';
import { placeholderVia } from '../transport/index.ts';
import { PrackSender } from './prack-uac.ts';
import type { Endpoint, TransportProtocol } from '../transport/index.ts';

// --- public types -------------------------------------------------------------------------------

/** Structurally a pino logger. */
export interface UacLogger {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** A party of the call: From (with optional display name) or To. */
export interface InviteParty {
  /** The user part, unescaped (e.g. "+15551234567"); escaped as RFC 3261 25.1 requires. */
  user: string;
  /** host[:port], e.g. "203.0.113.5", "sip.example.com", "[2001:db8::1]:5080". */
  host: string;
  displayName?: string;
}

export interface InviteCredentials {
  username: string;
  /** Never logged; only the digest response computed from it goes on the wire. */
  password: string;
}

export interface SendInviteOptions {
  layer: TransactionLayer;
  dialogs: DialogManager;
  /** Where the INVITE (and its CANCEL) goes: an IP literal, port and protocol (see resolveDestination). */
  destination: Endpoint;
  /**
   * The Request-URI, sent exactly as given and used verbatim as the digest `uri` (port,
   * `;transport=` and every other parameter included), e.g. "sip:+15551234567@203.0.113.5:5060;transport=tcp".
   * It must be in the form our serializer writes (parseUri(x).toString() === x), or sendInvite
   * rejects with TypeError: otherwise the wire would differ from the digest uri.
   */
  requestUri: string;
  from: InviteParty;
  to: InviteParty;
  /** Our Contact, e.g. "<sip:callbridge@192.0.2.10:5060>" (the remote target the peer uses). */
  contact: string;
  /** The SDP offer (application/sdp). */
  sdp: string;
  /** Digest credentials for a 401/407; without them a challenge ends the attempt ('auth_failed'). */
  credentials?: InviteCredentials;
  /**
   * A DigestClient to use instead of fresh ones (e.g. one per trunk, so nonce counts carry over);
   * it answers both 401 and 407. Takes precedence over `credentials`.
   */
  digest?: DigestClient;
  /** CANCEL when no final response arrived this long after the INVITE went out. Default 60 s. */
  ringTimeoutMs?: number;
  /** Abort: CANCEL before the answer (outcome 'cancelled' at once), BYE when a 2xx raced in. */
  signal?: AbortSignal;
  /** Extra header fields, appended in order (e.g. Session-Expires, P-Asserted-Identity). */
  headers?: [string, HeaderValue][];
  /** Allow header value; default DEFAULT_ALLOW. Skipped when `headers` carries Allow. */
  allow?: string;
  /** Supported option tags; default DEFAULT_SUPPORTED. Skipped when `headers` carries Supported. */
  supported?: readonly string[];
  /** The Call-ID; default a fresh generateCallId(). */
  callId?: string;
  /**
   * 1xx other than 100 (which is hop-by-hop, RFC 3261 8.1.3.2): status, reason phrase and the
   * SDP body when there is one (early media, typically a 183). A listener that throws is logged.
   */
  onProvisional?: (status: number, reason: string, sdp: string | undefined, response: SipResponse) => void;
  /** Most authenticated retries (stale nonces, a proxy then the UAS challenging). Default 3. */
  maxAuthRetries?: number;
  /** Timer functions for the ring timeout; default Node's (unref'd). */
  clock?: TransactionTimers;
  /**
   * More targets to try after `destination` (RFC 3263 4.3), in order: see InviteFailover.
   * Without it the INVITE goes to `destination` only, as before.
   */
  failover?: InviteFailover;
  logger?: UacLogger;
}

/** One more place to send the INVITE (an SRV target, another address of the host). */
export interface InviteTarget {
  destination: Endpoint;
  /** Our Contact for requests to this target (its transport may differ); default the call's `contact`. */
  contact?: string;
}

/**
 * Failover (RFC 3263 4.3): the INVITE goes to the next target, as a new transaction of the same
 * call (same Call-ID and From tag, CSeq + 1, new branch), when the current one
 *  - sends no response at all within `timeoutMs` (not even 100 Trying; the transaction is closed),
 *  - cannot be reached (connection refused, no listener for its protocol; local 503 / Timer B 408),
 *  - answers 503 Service Unavailable.
 * Any other final response ends the call attempt as usual. The last target runs its transaction
 * to the end (Timer B), as without failover.
 */
export interface InviteFailover {
  /** The targets after `destination`, in the order to try them. */
  targets: readonly InviteTarget[];
  /** Silence after which the next target is tried. Default DEFAULT_FAILOVER_TIMEOUT_MS. */
  timeoutMs?: number;
  /** A target failed (failed over from) or answered: for the dead-target memory (dns/target-status.ts). */
  onTarget?: (destination: Endpoint, result: 'failed' | 'answered') => void;
}

/** Why an outbound INVITE failed; stable strings for call records and metrics. */
export type InviteFailureReason =
  /** 486 Busy Here, 600 Busy Everywhere. */
  | 'busy'
  /** 408 / 480 from the far end, or our ring timeout expired (CANCEL -> 487). */
  | 'no_answer'
  /** A 401/407 we could not answer, credentials refused (challenged again, or 403 to credentials). */
  | 'auth_failed'
  /** 404, 484, 604. */
  | 'not_found'
  /** Any other 3xx-6xx (redirects are not followed), or a 2xx we could not make a dialog from. */
  | 'rejected'
  /** No response at all (Timer B: 64*T1 without a final response): local 408. */
  | 'timeout'
  /** The transport could not send (connection refused, no route, no listener): local 503. */
  | 'unreachable'
  /** The caller aborted. */
  | 'cancelled';

interface OutcomeBase {
  callId: string;
  /** Where the last INVITE went (after failover, the target that gave this outcome). */
  destination: Endpoint;
  /** Targets tried (1 without failover). */
  targetsTried: number;
  /** INVITEs sent (1, or more after challenges). */
  attempts: number;
  /** The last INVITE sent (with credentials, when challenged). */
  request: SipRequest | undefined;
}

export interface InviteSuccess extends OutcomeBase {
  ok: true;
  dialog: Dialog;
  /** The 2xx that created the dialog. */
  response: SipResponse;
  /** The SDP answer (the 2xx body), undefined when the 2xx had none. */
  sdp: string | undefined;
}

export interface InviteFailure extends OutcomeBase {
  ok: false;
  reason: InviteFailureReason;
  /** The final status received, or the local one (408 timeout, 503 unreachable, 487 cancelled). */
  status: number;
  reasonPhrase: string;
  /** Why, for logs: safe to print (no credentials). */
  detail: string;
  /** The final response received; undefined when the outcome is local. */
  response: SipResponse | undefined;
}

export type InviteOutcome = InviteSuccess | InviteFailure;

/** What the daemon's user agent implements (the dialog layer dispatches these). */
export const DEFAULT_ALLOW = 'INVITE, ACK, CANCEL, BYE, OPTIONS, INFO, UPDATE, REFER, NOTIFY, PRACK';
/** RFC 4028 session timers are kept by the call layer (call.ts). */
export const DEFAULT_SUPPORTED: readonly string[] = Object.freeze(['timer', '100rel']);
export const DEFAULT_RING_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_AUTH_RETRIES = 3;
/**
 * Silence from a target before the next one is tried: 4 s. An RFC 3261 UAS answers 100 Trying
 * within 200 ms (17.2.1) and UDP retransmits the INVITE at 0.5, 1.5 and 3.5 s (T1 = 500 ms), so a
 * live target has had four chances to answer; Timer B's 32 s is far too long for a waiting caller.
 */
export const DEFAULT_FAILOVER_TIMEOUT_MS = 4000;

// --- the status table ----------------------------------------------------------------------------

export interface FailureContext {
  /** The status was made up by our transaction layer (Timer B 408, transport 503, CANCEL 487). */
  local?: boolean;
  /** Our ring timeout had fired (and the CANCEL went out, or waits for a 1xx). */
  ringTimedOut?: boolean;
  /** The request that got this status carried our credentials. */
  credentialsSent?: boolean;
}

/**
 * The stable reason for a final non-2xx status (see the table in docs/sip-uac.md). A 403 to a
 * request that carried our credentials is 'auth_failed': that is how servers, ours included
 * (DigestServer 'forbidden'), refuse wrong credentials after a challenge.
 */
export function inviteFailureReason(status: number, ctx: FailureContext = {}): InviteFailureReason {
  if (ctx.local === true) {
    if (status === 408) return 'timeout';
    if (status === 487) return ctx.ringTimedOut === true ? 'no_answer' : 'cancelled';
    return 'unreachable';
  }
  switch (status) {
    case 486:
    case 600:
      return 'busy';
    case 408:
    case 480:
      return 'no_answer';
    case 487:
      return ctx.ringTimedOut === true ? 'no_answer' : 'rejected';
    case 401:
    case 407:
      return 'auth_failed';
    case 403:
      return ctx.credentialsSent === true ? 'auth_failed' : 'rejected';
    case 404:
    case 484:
    case 604:
      return 'not_found';
    default:
      return 'rejected';
  }
}

// --- destination ------------------------------------------------------------------------------------

export interface ResolveOptions {
  /** Injectable for tests; default node:dns/promises lookup. */
  lookup?: (host: string) => Promise<{ address: string }>;
}

/**
 * The endpoint for a trunk's outbound host: an IP literal is taken as is (brackets of an IPv6
 * literal stripped), a name is resolved with dns.lookup (A/AAAA, the system resolver). No RFC
 * 3263 NAPTR/SRV: the port is the one given, else 5060 (5061 for TLS).
 * @throws SipTransportError SIP_TRANSPORT_RESOLVE when the name does not resolve.
 */
export async function resolveDestination(host: string, port: number | undefined, protocol: TransportProtocol, options: ResolveOptions = {}): Promise<Endpoint> {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  const resolvedPort = port ?? (protocol === 'tls' ? 5061 : 5060);
  if (isIP(bare) !== 0) return { protocol, address: bare, port: resolvedPort };
  const lookup = options.lookup ?? ((h: string) => dnsLookup(h));
  try {
    const { address } = await lookup(bare);
    return { protocol, address, port: resolvedPort };
  } catch (err) {
    throw new SipTransportError('SIP_TRANSPORT_RESOLVE', `cannot resolve ${bare}: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
      endpoint: { protocol, address: bare, port: resolvedPort },
    });
  }
}

// --- sendInvite ---------------------------------------------------------------------------------------

/**
 * Sends one outbound INVITE and follows it to its outcome (see the file comment). Resolves with
 * the outcome for every network result; rejects only with TypeError / RangeError for bad options.
 */
export async function sendInvite(options: SendInviteOptions): Promise<InviteOutcome> {
  return new OutboundInvite(options).run();
}

function partyAddr(p: InviteParty, what: string): NameAddr {
  let uri;
  try {
    uri = parseUri(`sip:${p.host}`);
  } catch (err) {
    throw new TypeError(`${what}.host "${p.host}" is not a host[:port]`, { cause: err });
  }
  if (uri.kind !== 'sip' || uri.user !== undefined || uri.params.size > 0 || uri.headers.length > 0) {
    throw new TypeError(`${what}.host "${p.host}" is not a host[:port]`);
  }
  uri.user = p.user;
  return new NameAddr(uri, p.displayName);
}

function sdpOf(res: SipResponse): string | undefined {
  if (res.body.length === 0) return undefined;
  const ct = res.contentType;
  if (ct !== undefined && ct.mime !== 'application/sdp') return undefined;
  return res.body.toString('utf8');
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function describeEndpoint(e: Endpoint): string {
  return `${e.protocol}:${e.address.includes(':') ? `[${e.address}]` : e.address}:${e.port}`;
}

/** One sendInvite() call. */
class OutboundInvite {
  readonly #o: SendInviteOptions;
  readonly #callId: string;
  readonly #from: NameAddr;
  readonly #to: NameAddr;
  readonly #ringTimeoutMs: number;
  readonly #maxAuthRetries: number;
  readonly #clock: TransactionTimers;
  /** Where the INVITE goes: `destination`, then the failover targets. */
  readonly #targets: InviteTarget[];
  #target = 0;
  readonly #failoverMs: number;
  /** Clients for WWW-Authenticate (401) and Proxy-Authenticate (407): one per header, so each keeps its own nonces. */
  readonly #www: DigestClient | undefined;
  readonly #proxy: DigestClient | undefined;
  /** header \n realm \n nonce answered already: never answered twice (no loop). */
  readonly #answered = new Set<string>();
  /** Realms answered per credentials header in this call, to send them again on later attempts. */
  readonly #realms = new Map<string, Set<string>>();
  #cseq = 1;
  #attempts = 0;
  #authRetries = 0;
  #tx: ClientTransaction | undefined;
  #request: SipRequest | undefined;
  #dialog: Dialog | undefined;
  /** PRACKs for reliable 18x (RFC 3262). */
  readonly #prack: PrackSender;
  /** Why the first 2xx could not become a dialog (it was ACKed and BYEd raw). */
  #acceptError: string | undefined;
  /** Dialogs of extra 2xx (forks, or 2xx after an abort), by To tag: re-ACKed on retransmission. */
  readonly #extra = new Map<string, Dialog>();
  #aborted = false;
  #ringTimedOut = false;
  #ringTimer: unknown;
  /** The failover timer of the current transaction (#silence). */
  #silenceTimer: { tx: ClientTransaction; timer: unknown } | undefined;
  #wake: () => void = () => {};

  constructor(o: SendInviteOptions) {
    this.#o = o;
    let parsed;
    try {
      parsed = parseUri(o.requestUri);
    } catch (err) {
      throw new TypeError(`requestUri "${o.requestUri}" is not a URI`, { cause: err });
    }
    // RFC 2617 3.2.2.5 / RFC 3261 22.4: the digest uri repeats the Request-URI; a strict server
    // compares the two as strings, so what goes on the wire must be exactly this text.
    if (parsed.toString() !== o.requestUri) {
      throw new TypeError(`requestUri "${o.requestUri}" would be sent as "${parsed.toString()}": pass it in that form so the digest uri equals the Request-URI`);
    }
    this.#from = partyAddr(o.from, 'from');
    this.#to = partyAddr(o.to, 'to');
    this.#callId = o.callId ?? generateCallId();
    this.#ringTimeoutMs = o.ringTimeoutMs ?? DEFAULT_RING_TIMEOUT_MS;
    if (!(this.#ringTimeoutMs > 0) || !Number.isFinite(this.#ringTimeoutMs)) throw new RangeError(`ringTimeoutMs must be a positive number, got ${this.#ringTimeoutMs}`);
    this.#maxAuthRetries = o.maxAuthRetries ?? DEFAULT_MAX_AUTH_RETRIES;
    if (!Number.isInteger(this.#maxAuthRetries) || this.#maxAuthRetries < 0) throw new RangeError(`maxAuthRetries must be a non-negative integer`);
    this.#clock = o.clock ?? systemTransactionTimers;
    this.#targets = [{ destination: o.destination }, ...(o.failover?.targets ?? [])];
    this.#failoverMs = o.failover?.timeoutMs ?? DEFAULT_FAILOVER_TIMEOUT_MS;
    if (!(this.#failoverMs > 0) || !Number.isFinite(this.#failoverMs)) throw new RangeError(`failover.timeoutMs must be a positive number, got ${this.#failoverMs}`);
    if (o.digest !== undefined) {
      this.#www = o.digest;
      this.#proxy = o.digest;
    } else if (o.credentials !== undefined) {
      this.#www = new DigestClient({ username: o.credentials.username, password: o.credentials.password });
      this.#proxy = new DigestClient({ username: o.credentials.username, password: o.credentials.password });
    }
    // From tag (8.1.1.3): one for every attempt of this call, so the retried INVITE stays the same call.
    this.#from.tag = generateTag();
    this.#prack = new PrackSender({ dialogs: o.dialogs, callId: this.#callId, logger: o.logger, credentials: (method, uri) => this.#credentialsFor(method, uri) });
  }

  /** The current target's destination. */
  get #destination(): Endpoint {
    return this.#targets[this.#target]!.destination;
  }

  /** The destination as text, for logs. */
  get #dest(): string {
    return describeEndpoint(this.#destination);
  }

  /**
   * After a failure that fails over (see InviteFailover): the current target is reported failed
   * and, when there is a next one, it becomes current (true).
   */
  #failOver(why: string): boolean {
    const failed = this.#destination;
    this.#tellTarget(failed, 'failed');
    if (this.#target + 1 >= this.#targets.length) return false;
    this.#target++;
    this.#o.logger?.warn({ callId: this.#callId, failed: describeEndpoint(failed), next: this.#dest, attempt: this.#attempts }, `outbound INVITE: ${why}: trying the next target (RFC 3263 4.3)`);
    return true;
  }

  #tellTarget(destination: Endpoint, result: 'failed' | 'answered'): void {
    try {
      this.#o.failover?.onTarget?.(destination, result);
    } catch (err) {
      this.#o.logger?.warn({ err, callId: this.#callId }, 'failover onTarget threw');
    }
  }

  /**
   * Resolves 'silent' when `tx` got no response at all within the failover timeout; only while a
   * next target exists. Cleared by the first response (#onResponse) or the next attempt.
   */
  #silence(tx: ClientTransaction): Promise<'silent'> {
    if (this.#target + 1 >= this.#targets.length) return new Promise(() => {});
    return new Promise((resolve) => {
      const timer = this.#clock.setTimeout(() => {
        if (this.#silenceTimer?.tx === tx) this.#silenceTimer = undefined;
        resolve('silent');
      }, this.#failoverMs);
      this.#silenceTimer = { tx, timer };
    });
  }

  #stopSilence(): void {
    if (this.#silenceTimer === undefined) return;
    this.#clock.clearTimeout(this.#silenceTimer.timer);
    this.#silenceTimer = undefined;
  }

  /**
   * Credentials for an in-dialog request of this call (a PRACK): those the INVITE was asked for,
   * computed for `method` and `uri` from the nonces answered (RFC 3261 22.3, preemptive).
   */
  #credentialsFor(method: string, uri: string): [string, string][] {
    const out: [string, string][] = [];
    for (const header of ['Authorization', 'Proxy-Authorization'] as const) {
      const realms = this.#realms.get(header);
      const client = header === 'Authorization' ? this.#www : this.#proxy;
      if (realms === undefined || client === undefined) continue;
      for (const a of client.preemptive({ method, uri })) {
        if (realms.has(a.realm)) out.push([header, a.value]);
      }
    }
    return out;
  }

  async run(): Promise<InviteOutcome> {
    const signal = this.#o.signal;
    if (signal?.aborted === true) return this.#fail('cancelled', 487, 'Request Terminated', 'aborted before the INVITE was sent', undefined);
    const woken = new Promise<'aborted'>((resolve) => {
      this.#wake = () => resolve('aborted');
    });
    const onAbort = (): void => this.#onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      let credentials: [string, string][] = [];
      for (;;) {
        const req = this.#build(credentials);
        const tx = this.#send(req);
        if (!(tx instanceof ClientTransaction)) {
          // No listener for the protocol, or the layer closed: nothing went out.
          if (this.#failOver(`cannot send: ${tx}`)) {
            credentials = this.#nextAttempt();
            continue;
          }
          return this.#fail('unreachable', 503, 'Service Unavailable', tx, undefined);
        }
        const final = await Promise.race([tx.finalResponse, woken, this.#silence(tx)]);
        this.#stopRing();
        this.#stopSilence();
        if (final === 'aborted' || this.#aborted) return this.#cancelled();
        if (final === 'silent') {
          // Nothing at all from this target: stop retransmitting to it; a late answer is stray.
          tx.close();
          this.#failOver(`no response within ${this.#failoverMs} ms`);
          credentials = this.#nextAttempt();
          continue;
        }
        if (final.status >= 200 && final.status < 300) return this.#answered2xx(final);
        const error = tx.error;
        if (error !== undefined) {
          // After our ring timeout the CANCEL's own timeout (local 487) is the caller's choice, not a dead target.
          if (!this.#ringTimedOut && this.#failOver(final.status === 408 ? 'no final response (Timer B)' : `unreachable: ${withCause(error)}`)) {
            credentials = this.#nextAttempt();
            continue;
          }
          const reason = inviteFailureReason(final.status, { local: true, ringTimedOut: this.#ringTimedOut });
          return this.#fail(reason, final.status, final.reason, error.message, undefined);
        }
        if (final.status === 503 && !this.#ringTimedOut && this.#failOver('503 Service Unavailable')) {
          credentials = this.#nextAttempt();
          continue;
        }
        if (final.status === 401 || final.status === 407) {
          const next = this.#authorize(req, final);
          if (typeof next === 'string') return this.#fail('auth_failed', final.status, final.reason, next, final);
          this.#o.logger?.debug({ callId: this.#callId, destination: this.#dest, status: final.status, attempt: this.#attempts }, 'INVITE challenged: retrying with credentials');
          credentials = next;
          // 22.2 / 8.1.3.5: the retry is a new request of the same call: CSeq + 1, same Call-ID and From tag.
          this.#cseq++;
          continue;
        }
        const credentialsSent = req.has('Authorization') || req.has('Proxy-Authorization');
        const reason = inviteFailureReason(final.status, { ringTimedOut: this.#ringTimedOut, credentialsSent });
        const warning = final.get('Warning');
        const detail = `${final.status} ${final.reason}${this.#ringTimedOut ? ' after our ring timeout' : ''}${warning === undefined ? '' : ` (Warning: ${warning})`}`;
        return this.#fail(reason, final.status, final.reason, detail, final);
      }
    } finally {
      this.#stopRing();
      this.#stopSilence();
      this.#prack.settle();
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * The next INVITE after a failover: a new transaction of the same call (CSeq + 1, new branch,
   * RFC 3263 4.3), without credentials (another server has its own nonces; it challenges anew).
   */
  #nextAttempt(): [string, string][] {
    this.#cseq++;
    return [];
  }

  #build(credentials: [string, string][]): SipRequest {
    const o = this.#o;
    const extra = o.headers ?? [];
    const names = new Set(extra.map(([n]) => n.toLowerCase()));
    const headers: [string, HeaderValue][] = [];
    if (!names.has('allow')) headers.push(['Allow', o.allow ?? DEFAULT_ALLOW]);
    const supported = o.supported ?? DEFAULT_SUPPORTED;
    if (!names.has('supported') && !names.has('k') && supported.length > 0) headers.push(['Supported', supported.join(', ')]);
    headers.push(...credentials, ...extra);
    const req = createRequest({
      method: 'INVITE',
      uri: o.requestUri,
      from: this.#from.clone(),
      // A fresh To without tag on every attempt: the tag of a 401/407 belongs to that response only.
      to: this.#to.clone(),
      callId: this.#callId,
      cseq: this.#cseq,
      contact: this.#targets[this.#target]!.contact ?? o.contact,
      headers,
      body: o.sdp,
      contentType: 'application/sdp',
    });
    // A fresh branch per attempt (8.1.1.7); the transport fills sent-by from the socket used.
    req.prepend('Via', placeholderVia());
    return req;
  }

  /** The INVITE's transaction, or why it could not be sent. */
  #send(req: SipRequest): ClientTransaction | string {
    this.#attempts++;
    this.#request = req;
    let tx: ClientTransaction;
    try {
      tx = this.#o.layer.sendRequest(req, this.#destination);
    } catch (err) {
      return errMessage(err);
    }
    this.#tx = tx;
    tx.on('provisional', (res) => this.#onProvisional(req, res));
    tx.on('response', (res) => this.#onResponse(req, tx, res));
    this.#ringTimer = this.#clock.setTimeout(() => this.#onRingTimeout(tx), this.#ringTimeoutMs);
    return tx;
  }

  #onProvisional(req: SipRequest, res: SipResponse): void {
    if (res.status === 100) return;
    // RFC 3262 4: a reliable 18x is PRACKed; a repeated or out-of-order one is not processed further.
    if (this.#prack.receive(req, res) === 'ignored') return;
    const cb = this.#o.onProvisional;
    if (cb === undefined) return;
    try {
      cb(res.status, res.reason, sdpOf(res), res);
    } catch (err) {
      this.#o.logger?.warn({ err, callId: this.#callId }, 'onProvisional threw');
    }
  }

  /** Every response the INVITE transaction passes up; 2xx are taken here, synchronously. */
  #onResponse(req: SipRequest, tx: ClientTransaction, res: SipResponse): void {
    if (this.#silenceTimer?.tx === tx) {
      // Any response, 100 Trying included: the target is alive, no failover on silence.
      this.#stopSilence();
      this.#tellTarget(tx.destination, 'answered');
    }
    if (res.status < 200 || res.status >= 300) return;
    const dialog = this.#dialog;
    if (dialog !== undefined) {
      // The same dialog: a retransmission, re-ACKed by dialog.watch(). Another To tag: a fork.
      if ((res.to.tag ?? '') !== dialog.remoteTag) this.#hangUpExtra(req, res, 'a forked 2xx after the call was answered');
      return;
    }
    if (this.#aborted || this.#acceptError !== undefined) {
      this.#hangUpExtra(req, res, this.#aborted ? 'a 2xx after the abort' : 'another 2xx');
      return;
    }
    let d: Dialog | undefined;
    try {
      d = this.#o.dialogs.fromResponse(req, res);
      d.ack(res);
      d.watch(tx);
      this.#dialog = d;
    } catch (err) {
      // No Contact, or a remote target / route we cannot send to (a host name: no RFC 3263 here).
      d?.close();
      this.#acceptError = errMessage(err);
      this.#rawAckAndBye(req, res);
    }
  }

  /**
   * RFC 3261 13.2.2.4: every 2xx from another fork (or after we gave up) is ACKed and, since
   * we keep one dialog, ended with BYE. Retransmissions of such a 2xx get the same ACK again.
   */
  #hangUpExtra(req: SipRequest, res: SipResponse, why: string): void {
    const tag = res.to.tag;
    const known = tag === undefined ? undefined : this.#extra.get(tag);
    if (known !== undefined) {
      try {
        known.ack(res);
      } catch (err) {
        this.#o.logger?.debug({ err, callId: this.#callId }, 'extra 2xx not re-ACKed');
      }
      return;
    }
    let d: Dialog | undefined;
    try {
      d = this.#o.dialogs.fromResponse(req, res);
      if (tag !== undefined) this.#extra.set(tag, d);
      d.ack(res);
      d.bye();
      this.#o.logger?.info({ callId: this.#callId, destination: this.#dest }, `${why}: ACKed and hung up`);
    } catch (err) {
      d?.close();
      this.#o.logger?.info({ callId: this.#callId, destination: this.#dest, err: errMessage(err) }, `${why}: ACKed and hung up without a dialog`);
      this.#rawAckAndBye(req, res);
    }
  }

  /**
   * ACK and BYE for a 2xx no dialog could be made from, sent to the INVITE's destination
   * (best effort: the remote target is unknown or unusable).
   */
  #rawAckAndBye(req: SipRequest, res: SipResponse): void {
    const layer = this.#o.layer;
    const dest = this.#destination;
    try {
      const common = { uri: req.uri.clone(), from: req.from.clone(), to: res.to.clone(), callId: req.callId, routes: req.routes.map((r) => r.clone()) };
      const ack = createRequest({ ...common, method: 'ACK', cseq: req.cseq.seq });
      ack.prepend('Via', placeholderVia());
      layer.sendAck(ack, dest).catch((err: unknown) => this.#o.logger?.debug({ err, callId: this.#callId }, 'ACK not sent'));
      const bye = createRequest({ ...common, method: 'BYE', cseq: req.cseq.seq + 1 });
      bye.prepend('Via', placeholderVia());
      layer.sendRequest(bye, dest);
    } catch (err) {
      this.#o.logger?.debug({ err, callId: this.#callId }, 'ACK/BYE for an unusable 2xx not sent');
    }
  }

  #onRingTimeout(tx: ClientTransaction): void {
    this.#ringTimer = undefined;
    if (tx !== this.#tx || tx.final !== undefined || tx.terminated) return;
    this.#ringTimedOut = true;
    // 9.1: sent now after a 1xx, else as soon as one arrives (the transaction holds it back).
    tx.cancel();
  }

  #stopRing(): void {
    if (this.#ringTimer === undefined) return;
    this.#clock.clearTimeout(this.#ringTimer);
    this.#ringTimer = undefined;
  }

  #onAbort(): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#tx?.cancel();
    this.#wake();
  }

  #cancelled(): InviteOutcome {
    // A 2xx may have been taken in the same turn as the abort: hang that call up (RFC 3261 15).
    const d = this.#dialog;
    if (d !== undefined) {
      this.#dialog = undefined;
      // Kept with the extra dialogs: a retransmission of that 2xx is re-ACKed, not hung up twice.
      this.#extra.set(d.remoteTag, d);
      try {
        d.bye();
      } catch (err) {
        this.#o.logger?.debug({ err, callId: this.#callId }, 'BYE after abort not sent');
        d.close();
      }
    }
    const sent = this.#tx?.cancelTransaction !== undefined;
    return this.#fail('cancelled', 487, 'Request Terminated', sent ? 'aborted: CANCEL sent' : 'aborted: CANCEL sent once a provisional response arrives (RFC 3261 9.1)', undefined);
  }

  #answered2xx(res: SipResponse): InviteOutcome {
    const d = this.#dialog;
    if (d === undefined) {
      return this.#fail('rejected', res.status, res.reason, `2xx unusable, ACKed and hung up: ${this.#acceptError ?? 'no dialog'}`, res);
    }
    this.#o.logger?.debug({ callId: this.#callId, destination: this.#dest, attempts: this.#attempts }, 'outbound INVITE answered');
    this.#tellTarget(this.#destination, 'answered');
    return { ok: true, dialog: d, response: res, sdp: sdpOf(res), callId: this.#callId, attempts: this.#attempts, request: this.#request, destination: this.#destination, targetsTried: this.#target + 1 };
  }

  /**
   * Credentials for the retry after a 401/407 (RFC 3261 22.2, 22.3), or why there are none.
   * The challenged header gets fresh credentials; credentials of the other kind sent before (a
   * proxy and the UAS both challenging) are sent again with their next nonce-count.
   */
  #authorize(req: SipRequest, res: SipResponse): [string, string][] | string {
    const status = res.status as 401 | 407;
    const client = status === 407 ? this.#proxy : this.#www;
    if (client === undefined) return `challenged with ${status} but the trunk has no outbound credentials`;
    if (this.#authRetries >= this.#maxAuthRetries) return `still challenged after ${this.#authRetries} authenticated attempts`;
    const header = authorizationHeaderName(status);
    const other = status === 407 ? 'Authorization' : 'Proxy-Authorization';
    const uri = this.#o.requestUri;
    const r = client.respond({ challenges: res.getAll(challengeHeaderName(status)), method: 'INVITE', uri, body: this.#o.sdp, previous: req.getAll(header) });
    if (!r.ok) return r.reason === 'rejected' ? `credentials refused${r.realm === undefined ? '' : ` for realm "${r.realm}"`}: ${r.detail}` : `cannot answer the challenge: ${r.detail}`;
    for (const a of r.authorizations) {
      const key = `${header}\n${a.realm}\n${a.nonce}`;
      if (this.#answered.has(key)) return `challenged again with the nonce already answered for realm "${a.realm}"`;
      this.#answered.add(key);
    }
    this.#authRetries++;
    const realms = this.#realms.get(header) ?? new Set<string>();
    this.#realms.set(header, realms);
    for (const a of r.authorizations) realms.add(a.realm);
    const out: [string, string][] = r.authorizations.map((a) => [header, a.value]);
    const otherRealms = this.#realms.get(other);
    if (otherRealms !== undefined) {
      const otherClient = other === 'Authorization' ? this.#www : this.#proxy;
      for (const a of otherClient?.preemptive({ method: 'INVITE', uri, body: this.#o.sdp }) ?? []) {
        if (otherRealms.has(a.realm)) out.push([other, a.value]);
      }
    }
    return out;
  }

  #fail(reason: InviteFailureReason, status: number, reasonPhrase: string, detail: string, response: SipResponse | undefined): InviteFailure {
    const quiet = reason === 'busy' || reason === 'no_answer' || reason === 'not_found' || reason === 'cancelled';
    const fields = { callId: this.#callId, destination: this.#dest, outcome: reason, status, attempts: this.#attempts };
    const msg = `outbound INVITE failed (${reason}): ${detail}`;
    if (quiet) this.#o.logger?.info(fields, msg);
    else this.#o.logger?.warn(fields, msg);
    // A 503 is the far end saying it is out of service: it stays marked failed (#failOver).
    if (response !== undefined && status !== 503) this.#tellTarget(this.#destination, 'answered');
    return { ok: false, reason, status, reasonPhrase, detail, response, callId: this.#callId, attempts: this.#attempts, request: this.#request, destination: this.#destination, targetsTried: this.#target + 1 };
  }
}

/**
 * An error's message with its cause's (the transport's "cannot connect TLS ...: certificate does
 * not identify SIP domain ..." under the transaction's "could not send"), for failover log lines.
 */
function withCause(err: Error): string {
  return err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message;
}
