/**
 * callbridge registering with a carrier (RFC 3261 10.2): one trunk's binding at its registrar,
 * kept alive until stop().
 *
 *   const reg = new OutboundRegistration({ layer, destination, requestUri, aor, contact, credentials,
 *                                          expiresSecs, retry, onState });
 *   reg.start();   ...   await reg.stop({ unregister: true });
 *
 *          REGISTER (Expires N) ------------------------------->
 *          <------------------------------- 401/407 + challenge
 *          REGISTER (CSeq + 1, same Call-ID, credentials) ---->
 *          <------------------------- 200 (Contact ...;expires=G)
 *          ... refresh at refreshDelaySecs(G) ...
 *          REGISTER (CSeq + 1, same Call-ID; credentials for the nonce we hold) -->
 *
 * - The granted expiry is our Contact's `expires` in the 200, else its Expires header, else what
 *   we asked for (10.2.4). The refresh goes out well before it (refreshDelaySecs).
 * - 423 Interval Too Brief: asked again at once with the 423's Min-Expires (10.2.8).
 * - A challenge is answered with the digest client, which tells a stale nonce from refused
 *   credentials; refused credentials (a new challenge to our credentials, or a 403 to them) are
 *   `auth_failed`. A 403 to a request without credentials, any other final status, Timer F and
 *   transport errors are `failed`. Both are retried after a back-off that doubles per failure up
 *   to a cap, with jitter, so a fleet restarting together does not hammer the carrier in step.
 * - One Call-ID for the life of the object and CSeq counting up (10.2.4: a registrar orders a
 *   UA's REGISTERs by them); a daemon restart is a new Call-ID, which registrars accept as newer.
 * - stop({ unregister: true }) sends Expires 0 for our Contact (10.2.2) and waits for its answer,
 *   a challenge included, at most `unregisterTimeoutMs`; not to a registrar that never answered.
 *
 * - Failover (RFC 3263 4.3), when `targets` is given: each attempt asks it for the registrar's
 *   targets (DNS, cached; on a DNS failure the last list is kept) and keeps the one that
 *   answered last while it is still listed. No response within `failoverTimeoutMs`, a refused
 *   connection or a 503 sends the same REGISTER
 *   (CSeq + 1, new branch, our Contact for that target's transport) to the next target. The
 *   un-REGISTER goes to the target that holds the binding.
 *
 * - Keep-alives (RFC 5626 4.4.1), when `keepAlive` is given and the registrar is reached over
 *   TCP or TLS: while registered, a "\r\n\r\n" ping on the REGISTER's connection every
 *   80-100 % of `intervalMs` (default 90 s, see DEFAULT_KEEPALIVE_INTERVAL_MS), whose "\r\n"
 *   pong must come within `pongTimeoutMs` (10 s). No pong, or no connection left: the flow has
 *   failed, and we REGISTER again at once, which opens a new connection (a NAT or firewall on
 *   the way may have dropped the old one, and the carrier's calls to us come over it).
 *
 * Nothing here reads the store or logs a password: the caller passes the credentials in and
 * receives states (onState) to keep and show.
 */
import { DigestClient, authorizationHeaderName, challengeHeaderName } from '../digest/index.ts';
import { createRequest, generateCallId, generateTag, NameAddr, parseUri, uriEquals, type HeaderValue, type SipRequest, type SipResponse } from '../message/index.ts';
import { systemTransactionTimers, type ClientTransaction, type TransactionLayer, type TransactionTimers } from '../transaction/index.ts';
import { placeholderVia, type Endpoint } from '../transport/index.ts';

export type OutboundRegistrationStatus = 'pending' | 'registered' | 'failed' | 'auth_failed';

export interface OutboundRegistrationState {
  status: OutboundRegistrationStatus;
  /** Why the last attempt failed, for people: status line or local cause, never a secret. '' after a success. */
  error: string;
  /** When the binding the registrar granted runs out, ms since the epoch; undefined before the first success. */
  expiresAt: number | undefined;
}

/** Attempts as metrics count them. */
export type RegistrationAttemptOutcome = 'registered' | 'challenged' | 'interval_too_brief' | 'auth_failed' | 'rejected' | 'timeout' | 'unreachable' | 'unregistered';

export interface RegistrationRetry {
  /** First back-off after a failure. */
  initialMs: number;
  /** Longest back-off. */
  maxMs: number;
}

/** One place the REGISTERs can go, with our Contact for it (its transport). */
export interface RegistrationTarget {
  destination: Endpoint;
  /** Our Contact URI for this target, e.g. "sip:cb7f3a...@192.0.2.10:5060;transport=tcp". */
  contact: string;
}

export interface OutboundRegistrationOptions {
  layer: TransactionLayer;
  /** Where the REGISTERs go (resolved outbound_host); with `targets`, only until the first resolution. */
  destination: Endpoint;
  /** The registrar's URI, e.g. "sip:sip.carrier.example:5060;transport=tcp"; also the digest uri. */
  requestUri: string;
  /** The address-of-record, To and From: "sip:<outbound_sip_username>@<outbound host>". */
  aor: string;
  /** Our Contact URI (without brackets), e.g. "sip:cb7f3a...@192.0.2.10:5060". */
  contact: string;
  credentials: { username: string; password: string };
  /** The expiry asked for, seconds. */
  expiresSecs: number;
  retry: RegistrationRetry;
  /** Longest wait for the un-REGISTER's answer in stop(). Default 4 s. */
  unregisterTimeoutMs?: number;
  /** Extra header fields (User-Agent...). */
  headers?: [string, HeaderValue][];
  onState?: (state: OutboundRegistrationState) => void;
  onAttempt?: (outcome: RegistrationAttemptOutcome) => void;
  clock?: TransactionTimers;
  now?: () => number;
  /** 0 <= x < 1; default Math.random (the back-off's jitter). */
  random?: () => number;
  /**
   * The registrar's targets in the order to try them (RFC 3263), asked before each attempt; it
   * may throw (a DNS failure: the targets of the last resolution are kept). Without it:
   * `destination` only.
   */
  targets?: () => Promise<readonly RegistrationTarget[]>;
  /** Silence from a target before the next one is tried. Default 4 s (uac.ts DEFAULT_FAILOVER_TIMEOUT_MS). */
  failoverTimeoutMs?: number;
  /** A target failed (failed over from) or answered: for the dead-target memory. */
  onTarget?: (destination: Endpoint, result: 'failed' | 'answered') => void;
  /** RFC 5626 CRLF keep-alives on TCP/TLS (see the file comment); without it, none are sent. */
  keepAlive?: RegistrationKeepAlive;
}

export interface RegistrationKeepAlive {
  /** Pings the open connection to `destination` (SipTransportLayer.pingEndpoint). */
  ping(destination: Endpoint, pongTimeoutMs: number): Promise<'pong' | 'no-pong' | 'no-connection'>;
  /** Ping interval before jitter; default 90 s (DEFAULT_KEEPALIVE_INTERVAL_MS). */
  intervalMs?: number;
  /** How long a pong may take; default 10 s (RFC 5626 4.4.1). */
  pongTimeoutMs?: number;
  /** The flow failed and we re-register (for a log line). */
  onFlowFailed?: (destination: Endpoint, why: 'no-pong' | 'no-connection') => void;
}

/** Challenges answered per registration attempt before giving up (stale nonces, then a proxy). */
const MAX_AUTH_RETRIES = 3;
/** 423s followed per attempt. */
const MAX_INTERVAL_RETRIES = 2;
const DEFAULT_UNREGISTER_TIMEOUT_MS = 4000;
const DEFAULT_FAILOVER_TIMEOUT_MS = 4000;
/**
 * RFC 5626 4.4.1 suggests 95-120 s without a Flow-Timer, but a connection silent for 120 s is
 * closed by our own transport (idleTimeoutMs) and by Kamailio's default tcp_connection_lifetime:
 * a ping drawn near 120 s would race that close and find no connection, and re-register for
 * nothing. 72-90 s keeps every connection busy well inside both.
 */
const DEFAULT_KEEPALIVE_INTERVAL_MS = 90_000;
const DEFAULT_PONG_TIMEOUT_MS = 10_000;

function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  return a.protocol === b.protocol && a.address === b.address && a.port === b.port;
}

/**
 * When to refresh a binding granted for `grantedSecs`: at half of short ones, a minute before the
 * end of long ones (an hour is refreshed after 59 minutes), never sooner than a second. A refresh
 * lost on UDP is retransmitted for up to Timer F (32 s), which a minute's margin covers.
 */
export function refreshDelaySecs(grantedSecs: number): number {
  return Math.max(1, Math.max(grantedSecs / 2, grantedSecs - 60));
}

/** The back-off before retry number `failures` (1 = first), with jitter between half and all of it. */
export function retryDelayMs(failures: number, retry: RegistrationRetry, random: () => number = Math.random): number {
  const full = Math.min(retry.maxMs, retry.initialMs * 2 ** Math.min(30, Math.max(0, failures - 1)));
  return Math.round(full * (0.5 + random() / 2));
}

/** Our Contact's granted expiry in a 2xx: its `expires` param, else Expires, else undefined. */
export function grantedExpirySecs(res: SipResponse, contact: string): number | undefined {
  let ours;
  try {
    const want = parseUri(contact);
    ours = res.contacts.find((c) => uriEquals(c.uri, want));
  } catch {
    ours = undefined;
  }
  const fromContact = ours?.expires;
  if (fromContact !== undefined) return fromContact;
  try {
    return res.expires;
  } catch {
    return undefined;
  }
}

export class OutboundRegistration {
  readonly #o: OutboundRegistrationOptions;
  readonly #clock: TransactionTimers;
  readonly #now: () => number;
  readonly #random: () => number;
  readonly #callId = generateCallId();
  readonly #fromTag = generateTag();
  /** One client per challenge header, each keeping its nonce and count across refreshes. */
  readonly #www: DigestClient;
  readonly #proxy: DigestClient;
  #cseq = 0;
  #expiresSecs: number;
  #state: OutboundRegistrationState = { status: 'pending', error: '', expiresAt: undefined };
  #failures = 0;
  #timer: unknown;
  /** The next keep-alive ping (TCP/TLS while registered). */
  #pingTimer: unknown;
  #tx: ClientTransaction | undefined;
  #started = false;
  #stopped = false;
  /** The registrar has answered a REGISTER of ours (any status). */
  #heardFrom = false;
  /** The targets of this attempt (one without `targets`), and the current one. */
  #list: RegistrationTarget[];
  #current: RegistrationTarget;

  constructor(o: OutboundRegistrationOptions) {
    if (!Number.isInteger(o.expiresSecs) || o.expiresSecs < 1) throw new RangeError(`expiresSecs must be a positive integer, got ${o.expiresSecs}`);
    if (!(o.retry.initialMs > 0) || !(o.retry.maxMs >= o.retry.initialMs)) throw new RangeError('retry needs 0 < initialMs <= maxMs');
    this.#o = o;
    this.#clock = o.clock ?? systemTransactionTimers;
    this.#now = o.now ?? Date.now;
    this.#random = o.random ?? Math.random;
    this.#expiresSecs = o.expiresSecs;
    this.#www = new DigestClient(o.credentials);
    this.#proxy = new DigestClient(o.credentials);
    this.#current = { destination: o.destination, contact: o.contact };
    this.#list = [this.#current];
  }

  /** Where the REGISTERs go now (after a failover, the target that answered). */
  get destination(): Endpoint {
    return this.#current.destination;
  }

  get state(): OutboundRegistrationState {
    return this.#state;
  }

  /** Registers now and keeps the binding refreshed. Idempotent. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#emit({ status: 'pending', error: '', expiresAt: undefined });
    void this.#attempt();
  }

  /**
   * Stops refreshing. With `unregister`, and when the registrar ever answered us, sends
   * Expires 0 for our Contact and resolves once it is answered or after unregisterTimeoutMs.
   * Idempotent; never rejects.
   */
  async stop(options: { unregister: boolean }): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#stopKeepAlive();
    this.#tx?.close();
    this.#tx = undefined;
    // A registrar that never answered holds no binding of ours and would only hold up the caller
    // for unregisterTimeoutMs. One that answered may have accepted a REGISTER whose 200 is still
    // on its way, so it gets the un-REGISTER whatever our state says.
    if (!options.unregister || !this.#started || !this.#heardFrom) return;
    const limit = this.#o.unregisterTimeoutMs ?? DEFAULT_UNREGISTER_TIMEOUT_MS;
    let timer: unknown;
    const timeout = new Promise<void>((resolve) => {
      timer = this.#clock.setTimeout(resolve, limit);
    });
    await Promise.race([this.#exchange(0).then(() => undefined), timeout]);
    this.#clock.clearTimeout(timer);
  }

  // --- one registration attempt ---------------------------------------------------------------

  async #attempt(): Promise<void> {
    this.#timer = undefined;
    this.#stopKeepAlive();
    if (this.#stopped) return;
    await this.#resolveTargets();
    if (this.#stopped) return;
    const result = await this.#exchange(this.#expiresSecs);
    if (this.#stopped) return;
    if (result.kind === 'ok') {
      this.#failures = 0;
      const granted = result.grantedSecs;
      this.#emit({ status: 'registered', error: '', expiresAt: this.#now() + granted * 1000 });
      this.#schedule(refreshDelaySecs(granted) * 1000);
      this.#scheduleKeepAlive();
      return;
    }
    this.#failures++;
    // A failed refresh leaves the last granted expiry visible: the binding may still live there.
    this.#emit({ status: result.kind, error: result.error, expiresAt: this.#state.expiresAt });
    this.#schedule(retryDelayMs(this.#failures, this.#o.retry, this.#random));
  }

  /** Refreshes the target list (with `targets`); keeps the last one when DNS fails or gives none. */
  async #resolveTargets(): Promise<void> {
    if (this.#o.targets === undefined) return;
    let list: readonly RegistrationTarget[];
    try {
      list = await this.#o.targets();
    } catch {
      // DNS failed (the resolver already serves what it had): keep the targets we have, so a
      // DNS outage at refresh time does not drop a binding the registrar still holds.
      return;
    }
    if (list.length === 0) return;
    this.#list = [...list];
    // Sticky: the target that answered last, while DNS still lists it.
    this.#current = this.#list.find((t) => sameEndpoint(t.destination, this.#current.destination)) ?? this.#list[0]!;
  }

  /** After a failure that fails over: the next target of the list, if any (each tried once per exchange). */
  #nextTarget(tried: Set<RegistrationTarget>): boolean {
    this.#tell(this.#current.destination, 'failed');
    const next = this.#list.find((t) => !tried.has(t));
    if (next === undefined) return false;
    this.#current = next;
    return true;
  }

  #tell(destination: Endpoint, result: 'failed' | 'answered'): void {
    try {
      this.#o.onTarget?.(destination, result);
    } catch {
      // the listener's problem
    }
  }

  /** The final response of `tx`, or 'silent' after failoverTimeoutMs without any response when another target is left. */
  #awaitFinal(tx: ClientTransaction, canFailOver: boolean): Promise<SipResponse | 'silent'> {
    if (!canFailOver) return tx.finalResponse;
    return new Promise((resolve) => {
      const timer = this.#clock.setTimeout(() => resolve('silent'), this.#o.failoverTimeoutMs ?? DEFAULT_FAILOVER_TIMEOUT_MS);
      const stop = (): void => this.#clock.clearTimeout(timer);
      tx.once('response', stop);
      void tx.finalResponse.then((r) => {
        stop();
        resolve(r);
      });
    });
  }

  // --- keep-alives (RFC 5626 4.4.1) -------------------------------------------------------------

  #scheduleKeepAlive(): void {
    const k = this.#o.keepAlive;
    if (k === undefined || this.#stopped || this.#current.destination.protocol === 'udp') return;
    // 80-100 % of the interval (4.4.1), so a fleet registered together does not ping in step.
    const ms = Math.round((k.intervalMs ?? DEFAULT_KEEPALIVE_INTERVAL_MS) * (0.8 + 0.2 * this.#random()));
    this.#pingTimer = this.#clock.setTimeout(() => void this.#keepAlive(), ms);
  }

  #stopKeepAlive(): void {
    if (this.#pingTimer !== undefined) this.#clock.clearTimeout(this.#pingTimer);
    this.#pingTimer = undefined;
  }

  async #keepAlive(): Promise<void> {
    this.#pingTimer = undefined;
    const k = this.#o.keepAlive;
    if (k === undefined || this.#stopped) return;
    const destination = this.#current.destination;
    let result: 'pong' | 'no-pong' | 'no-connection';
    try {
      result = await k.ping(destination, k.pongTimeoutMs ?? DEFAULT_PONG_TIMEOUT_MS);
    } catch {
      result = 'no-connection';
    }
    // A refresh or stop() may have run meanwhile; it owns the schedule now.
    if (this.#stopped || this.#timer === undefined || this.#pingTimer !== undefined) return;
    if (result === 'pong') {
      this.#scheduleKeepAlive();
      return;
    }
    try {
      k.onFlowFailed?.(destination, result);
    } catch {
      // the listener's problem
    }
    // The flow failed: register again now, over a new connection (the transport closed the old one).
    this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    void this.#attempt();
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    this.#timer = this.#clock.setTimeout(() => void this.#attempt(), ms);
  }

  /**
   * One REGISTER with its challenges and 423s followed to a final answer. `expires` 0 removes our
   * binding. Never throws.
   */
  async #exchange(expires: number): Promise<{ kind: 'ok'; grantedSecs: number } | { kind: 'failed' | 'auth_failed'; error: string }> {
    let credentials: [string, string][] = [];
    let authRetries = 0;
    let intervalRetries = 0;
    const unregister = expires === 0;
    // The un-REGISTER goes where the binding is: no failover for it.
    const tried = new Set<RegistrationTarget>([this.#current]);
    const failOver = (): boolean => {
      if (unregister || !this.#nextTarget(tried)) return false;
      tried.add(this.#current);
      credentials = [];
      return true;
    };
    for (;;) {
      const req = this.#build(expires, credentials);
      let tx: ClientTransaction;
      try {
        tx = this.#o.layer.sendRequest(req, this.#current.destination);
      } catch (err) {
        this.#count('unreachable');
        if (failOver()) continue;
        return { kind: 'failed', error: `cannot send REGISTER: ${err instanceof Error ? err.message : String(err)}` };
      }
      if (!unregister) this.#tx = tx;
      const res = await this.#awaitFinal(tx, !unregister && this.#list.some((t) => !tried.has(t)));
      if (this.#tx === tx) this.#tx = undefined;
      if (this.#stopped && !unregister) {
        tx.close();
        return { kind: 'failed', error: 'stopped' };
      }
      if (res === 'silent') {
        tx.close();
        this.#count('timeout');
        if (failOver()) continue;
        return { kind: 'failed', error: 'no answer from the registrar (REGISTER timed out)' };
      }
      if (tx.error !== undefined) {
        const timedOut = res.status === 408;
        this.#count(timedOut ? 'timeout' : 'unreachable');
        if (failOver()) continue;
        return { kind: 'failed', error: timedOut ? 'no answer from the registrar (REGISTER timed out)' : `cannot reach the registrar: ${tx.error.message}` };
      }
      this.#heardFrom = true;
      if (res.status === 503 && failOver()) {
        this.#count('rejected');
        continue;
      }
      if (res.status !== 503) this.#tell(this.#current.destination, 'answered');
      if (res.status >= 200 && res.status < 300) {
        this.#count(unregister ? 'unregistered' : 'registered');
        return { kind: 'ok', grantedSecs: unregister ? 0 : Math.max(1, grantedExpirySecs(res, this.#current.contact) ?? expires) };
      }
      const carriedCredentials = req.has('Authorization') || req.has('Proxy-Authorization');
      if (res.status === 401 || res.status === 407) {
        this.#count('challenged');
        const next = this.#authorize(req, res, authRetries);
        if (typeof next === 'string') {
          this.#count('auth_failed');
          return { kind: 'auth_failed', error: `${res.status} ${res.reason}: ${next}` };
        }
        authRetries++;
        credentials = next;
        continue;
      }
      if (res.status === 423 && !unregister && intervalRetries < MAX_INTERVAL_RETRIES) {
        const min = Number(res.get('Min-Expires'));
        if (Number.isInteger(min) && min > expires) {
          this.#count('interval_too_brief');
          intervalRetries++;
          // Kept for the refreshes too: the registrar will not take less.
          expires = this.#expiresSecs = min;
          continue;
        }
      }
      const text = `${res.status} ${res.reason}`;
      if (res.status === 403 && carriedCredentials) {
        this.#count('auth_failed');
        return { kind: 'auth_failed', error: `${text}: the registrar refused the credentials` };
      }
      this.#count('rejected');
      return { kind: 'failed', error: res.status === 403 ? `${text} without a challenge` : text };
    }
  }

  /** The credentials for a challenge, or why there are none (refused, unanswerable, looping). */
  #authorize(req: SipRequest, res: SipResponse, retries: number): [string, string][] | string {
    if (retries >= MAX_AUTH_RETRIES) return `still challenged after ${retries} authenticated attempts`;
    const status = res.status as 401 | 407;
    const client = status === 407 ? this.#proxy : this.#www;
    const header = authorizationHeaderName(status);
    // The first challenge of an exchange may answer our cached (preemptive) credentials, whose
    // nonce the registrar has since dropped: that is a fresh challenge, not refused credentials.
    const previous = retries === 0 ? [] : req.getAll(header);
    const r = client.respond({ challenges: res.getAll(challengeHeaderName(status)), method: 'REGISTER', uri: this.#o.requestUri, previous });
    if (!r.ok) return r.reason === 'rejected' ? `credentials refused${r.realm === undefined ? '' : ` for realm "${r.realm}"`}` : `cannot answer the challenge: ${r.detail}`;
    return r.authorizations.map((a) => [header, a.value]);
  }

  #build(expires: number, credentials: [string, string][]): SipRequest {
    const o = this.#o;
    this.#cseq++;
    const from = new NameAddr(parseUri(o.aor));
    from.tag = this.#fromTag;
    // A refresh carries credentials for the nonce we hold, so a registrar that keeps nonces
    // alive need not challenge every refresh (RFC 3261 22.3).
    const preemptive: [string, string][] =
      credentials.length > 0
        ? []
        : [
            ...this.#www.preemptive({ method: 'REGISTER', uri: o.requestUri }).map((a): [string, string] => ['Authorization', a.value]),
            ...this.#proxy.preemptive({ method: 'REGISTER', uri: o.requestUri }).map((a): [string, string] => ['Proxy-Authorization', a.value]),
          ];
    const req = createRequest({
      method: 'REGISTER',
      uri: o.requestUri,
      from,
      to: new NameAddr(parseUri(o.aor)),
      callId: this.#callId,
      cseq: this.#cseq,
      maxForwards: 70,
      contact: expires === 0 ? `<${this.#current.contact}>;expires=0` : `<${this.#current.contact}>`,
      headers: [['Expires', expires], ...credentials, ...preemptive, ...(o.headers ?? [])],
    });
    // A fresh branch per request; the transport fills sent-by from the socket it uses.
    req.prepend('Via', placeholderVia());
    return req;
  }

  #emit(state: OutboundRegistrationState): void {
    this.#state = state;
    try {
      this.#o.onState?.(state);
    } catch {
      // the listener's problem; the registration goes on
    }
  }

  #count(outcome: RegistrationAttemptOutcome): void {
    try {
      this.#o.onAttempt?.(outcome);
    } catch {
      // as above
    }
  }
}
