/**
 * Session timers, RFC 4028: the negotiation of Session-Expires / Min-SE on INVITE and on the
 * refreshes (re-INVITE or UPDATE) of a dialog, and the `SessionTimer` that keeps one dialog's
 * session alive (we are the refresher) or ends it when the peer stops refreshing (we are not).
 *
 * Why: carriers send `Supported: timer`, `Session-Expires: 1800;refresher=uac`, `Min-SE: 90`,
 * and drop a call whose session is not refreshed in time (RFC 4028 10): e.g. after 900 s when
 * they made us the refresher and we sent nothing.
 *
 *   header              meaning                                                    RFC 4028
 *   Session-Expires: N  the session ends N s after the last refresh (compact `x`)  4
 *     ;refresher=       who refreshes: the UAC or the UAS *of that transaction*    4, 7.4
 *   Min-SE: M           the smallest N the sender accepts (never below 90)         5
 *   422                 "Session Interval Too Small" + the rejecter's Min-SE       6, 7.3
 *   Supported/Require   option tag `timer`                                          3, 7.1, 9
 *
 *   timer                value                                   section
 *   refresh              N/2 after the last refresh (we refresh)  10
 *   refresh retry        N/8 after a failed refresh, until expiry  (ours: 10 leaves it open)
 *   expiry (BYE)         N - min(32, N/3) after the last refresh  10
 *
 * `refresher=uac|uas` names a role in the transaction that carries it, not in the dialog: when
 * the carrier (the INVITE's UAC) refreshes with a re-INVITE it keeps `refresher=uac`, and when we
 * (the INVITE's UAS) refresh with an UPDATE we write `refresher=uac` too. So the functions here
 * take and return the dialog-level `SessionRefresher` ('local' | 'remote') and translate.
 *
 * Layering: this file uses Dialog's public API only (request()); the call layer answers
 * re-INVITEs (it owns the SDP), so it feeds the timer with `refreshed()`.
 */
import type { Dialog } from './dialog.ts';
import { SipDialogError } from './errors.ts';
import { SipParseError, type HeaderValue, type SipMessage, type SipRequest, type SipResponse } from '../message/index.ts';
import type { TransactionLogger } from '../transaction/index.ts';
import { systemTransactionTimers, type TransactionTimers } from '../transaction/index.ts';

/** The option tag of the extension (RFC 4028 3): list it in Supported. */
export const TIMER_OPTION_TAG = 'timer';
/** The floor of every Min-SE (RFC 4028 4, 5): "MUST NOT be less than 90 seconds". */
export const RFC4028_MIN_SE = 90;
/** Our session interval: what we ask for as UAC and insert as UAS (RFC 4028 4 recommends 1800). */
export const DEFAULT_SESSION_INTERVAL = 1800;
/** Reason phrase of 422 (RFC 4028 6). */
export const SESSION_INTERVAL_TOO_SMALL = 'Session Interval Too Small';

/** Who refreshes the session, seen from this side of the dialog. */
export type SessionRefresher = 'local' | 'remote';

/** The `refresher` parameter on the wire: a role in the transaction carrying it (RFC 4028 4). */
export type RefresherParam = 'uac' | 'uas';

export interface SessionTimerConfig {
  /** Session interval in seconds we ask for / insert; default 1800. Not below `minSE`. */
  interval?: number;
  /** Our Min-SE in seconds; default 90 (the RFC floor). Requests below it get 422. */
  minSE?: number;
  /**
   * UAS: when a request names no Session-Expires but its UAC supports `timer`, put one in the 2xx
   * (RFC 4028 9: "The UAS may request a session timer in the 2XX response"). Default true.
   */
  insertWhenAbsent?: boolean;
}

/** The outcome of a negotiation: the interval in seconds and who refreshes. */
export interface NegotiatedSessionTimer {
  interval: number;
  refresher: SessionRefresher;
}

/** What a UAS does with an INVITE, re-INVITE or UPDATE as far as session timers go. */
export type UasSessionTimerDecision =
  | {
      action: 'accept';
      /** The session timer to run from now on; undefined: none. */
      timer: NegotiatedSessionTimer | undefined;
      /** To add to the 2xx: Session-Expires, Require: timer (may be empty). */
      headers: [string, HeaderValue][];
    }
  | {
      action: 'reject';
      /** 422 (interval below our Min-SE, RFC 4028 9) or 400 (malformed header, RFC 3261 21.4.1). */
      status: 422 | 400;
      reason: string;
      /** For the rejection: `Min-SE` on a 422 (RFC 4028 6 makes it mandatory). */
      headers: [string, HeaderValue][];
    };

function checkSeconds(name: string, v: number, min: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new RangeError(`${name} must be an integer number of seconds >= ${min}, got ${String(v)}`);
  return v;
}

/**
 * The config with defaults filled in and checked.
 * @throws RangeError when minSE < 90 (RFC 4028 5) or interval < minSE.
 */
export function resolveSessionTimerConfig(config: SessionTimerConfig = {}): Required<SessionTimerConfig> {
  const minSE = checkSeconds('minSE', config.minSE ?? RFC4028_MIN_SE, RFC4028_MIN_SE);
  const interval = checkSeconds('interval', config.interval ?? Math.max(DEFAULT_SESSION_INTERVAL, minSE), minSE);
  return { interval, minSE, insertWhenAbsent: config.insertWhenAbsent ?? true };
}

function hasOptionTag(msg: SipMessage, header: 'supported' | 'require'): boolean {
  // Option tags compared case-insensitively: lenient with peers that write "Timer".
  return msg.tokens(header).some((t) => t.toLowerCase() === TIMER_OPTION_TAG);
}

/** The wire parameter for a dialog-level refresher, seen as the UAC or the UAS of a transaction. */
function toParam(refresher: SessionRefresher, weAre: RefresherParam): RefresherParam {
  if (refresher === 'local') return weAre;
  return weAre === 'uac' ? 'uas' : 'uac';
}

function fromParam(param: RefresherParam, weAre: RefresherParam): SessionRefresher {
  return param === weAre ? 'local' : 'remote';
}

function sessionExpiresValue(interval: number, refresher: RefresherParam | undefined): string {
  return refresher === undefined ? String(interval) : `${interval};refresher=${refresher}`;
}

/**
 * UAS side (RFC 4028 9), for an initial INVITE or a session refresh (re-INVITE, UPDATE) we are
 * about to accept:
 *
 * - Session-Expires below our Min-SE -> reject 422 with our `Min-SE` (9, 6).
 * - Session-Expires present -> the 2xx copies the interval (we never reduce it, which 9 allows
 *   but nothing here needs) and names the refresher by table 2 of 9: the UAC's choice when it
 *   made one; `uas` (us) when the UAC does not support `timer` (a proxy inserted the header and
 *   the UAC would never refresh); else, when `current` is given (a refresh), the refresher so far,
 *   and otherwise `uac`, which puts the work on the side that asked for the timer.
 * - `Require: timer` in the 2xx whenever the UAC supports `timer` (9: MUST with refresher=uac,
 *   SHOULD with uas); never otherwise (the UAC would not understand it).
 * - No Session-Expires and the UAC supports `timer` -> we insert one (config `insertWhenAbsent`):
 *   our interval, raised to the request's Min-SE (9: "MUST NOT be set to a duration lower than
 *   the value in the Min-SE"), refresher as above.
 * - No Session-Expires and no support -> no session timer; except on a refresh of a session we
 *   already refresh ourselves, which we keep (refresher=uas, no Require).
 *
 * Malformed Session-Expires, Min-SE, Supported or Require -> reject 400 with the parser's reason.
 */
export function negotiateSessionTimerUas(
  req: SipRequest,
  config: SessionTimerConfig = {},
  current?: NegotiatedSessionTimer,
): UasSessionTimerDecision {
  const cfg = resolveSessionTimerConfig(config);
  let se: { seconds: number; refresher: RefresherParam | undefined } | undefined;
  let theirMinSE: number | undefined;
  let supported: boolean;
  try {
    se = req.sessionExpires;
    theirMinSE = req.minSE;
    supported = hasOptionTag(req, 'supported') || hasOptionTag(req, 'require');
  } catch (err) {
    if (err instanceof SipParseError) return { action: 'reject', status: 400, reason: err.reason, headers: [] };
    throw err;
  }

  if (se !== undefined && se.seconds < cfg.minSE) {
    // RFC 4028 9: too small for us -> 422 with the smallest we accept (6: Min-SE is mandatory).
    return { action: 'reject', status: 422, reason: SESSION_INTERVAL_TOO_SMALL, headers: [['Min-SE', String(cfg.minSE)]] };
  }

  let interval: number;
  let param: RefresherParam;
  if (se !== undefined) {
    interval = se.seconds;
    if (!supported) param = 'uas';
    else param = se.refresher ?? (current ? toParam(current.refresher, 'uas') : 'uac');
  } else if (supported && cfg.insertWhenAbsent) {
    interval = current?.interval ?? Math.max(cfg.interval, theirMinSE ?? 0);
    param = current ? toParam(current.refresher, 'uas') : 'uac';
  } else if (current?.refresher === 'local') {
    interval = current.interval;
    param = 'uas';
  } else {
    return { action: 'accept', timer: undefined, headers: [] };
  }

  const headers: [string, HeaderValue][] = [['Session-Expires', sessionExpiresValue(interval, param)]];
  if (supported) headers.push(['Require', TIMER_OPTION_TAG]);
  return { action: 'accept', timer: { interval, refresher: fromParam(param, 'uas') }, headers };
}

/**
 * UAC side, the initial INVITE (RFC 4028 7.1): `Supported: timer`, `Session-Expires: N` and
 * `Min-SE: M`. No refresher parameter unless asked: 7.1 leaves the choice to the UAS then, and
 * carriers answer `refresher=uac` (we refresh) or `uas`. A separate `Supported` entry is fine:
 * several header fields of a list header combine (RFC 3261 7.3.1).
 */
export function sessionTimerUacHeaders(config: SessionTimerConfig = {}, opts: { refresher?: RefresherParam } = {}): [string, HeaderValue][] {
  const cfg = resolveSessionTimerConfig(config);
  return [
    ['Supported', TIMER_OPTION_TAG],
    ['Session-Expires', sessionExpiresValue(cfg.interval, opts.refresher)],
    ['Min-SE', String(cfg.minSE)],
  ];
}

/**
 * UAC side, the 2xx to a request we sent (the INVITE, or a refresh re-INVITE / UPDATE), RFC
 * 4028 7.2: with Session-Expires, its refresher says who refreshes (`uac` = us); a missing
 * refresher (the UAS must set one) is taken as us, the safe reading: refreshing needlessly costs
 * a request, not refreshing costs the call. Without Session-Expires there is no session
 * expiration (7.2) -> undefined, unless `refreshWhenAbsent`: then we refresh at our interval on
 * our own (a re-INVITE or UPDATE is always allowed in a dialog).
 * @throws SipParseError when the response's Session-Expires is malformed.
 */
export function sessionTimerFromUacResponse(
  res: SipResponse,
  config: SessionTimerConfig = {},
  opts: { refreshWhenAbsent?: boolean } = {},
): NegotiatedSessionTimer | undefined {
  const se = res.sessionExpires;
  if (se === undefined || se.seconds === 0) {
    return opts.refreshWhenAbsent ? { interval: resolveSessionTimerConfig(config).interval, refresher: 'local' } : undefined;
  }
  return { interval: se.seconds, refresher: fromParam(se.refresher ?? 'uac', 'uac') };
}

/**
 * UAC side, a 422 to our INVITE or refresh (RFC 4028 7.3): the retry carries the largest Min-SE
 * seen and a Session-Expires not below it. Returns the new values and the headers for the retry
 * (same Call-ID, next CSeq: the caller's), or undefined when retrying cannot help: no usable
 * Min-SE in the 422, or one our interval already met (a confused peer: no retry loop).
 */
export function sessionTimerRetryAfter422(
  res: SipResponse,
  sent: { interval: number; minSE: number },
): { interval: number; minSE: number; headers: [string, HeaderValue][] } | undefined {
  let theirs: number | undefined;
  try {
    theirs = res.minSE;
  } catch {
    return undefined;
  }
  if (theirs === undefined || theirs <= sent.interval) return undefined;
  const minSE = Math.max(theirs, sent.minSE);
  const interval = minSE;
  return { interval, minSE, headers: sessionTimerUacHeaders({ interval, minSE }) };
}

/**
 * The headers of a refresh request we send (re-INVITE or UPDATE, RFC 4028 7.4): the current
 * interval, the current refresher written from our side as the refresh's UAC (so `uac` when we
 * refresh), our Min-SE, and `Supported: timer`.
 */
export function sessionRefreshHeaders(timer: NegotiatedSessionTimer, minSE: number = RFC4028_MIN_SE): [string, HeaderValue][] {
  return [
    ['Supported', TIMER_OPTION_TAG],
    ['Session-Expires', sessionExpiresValue(timer.interval, toParam(timer.refresher, 'uac'))],
    ['Min-SE', String(Math.min(minSE, timer.interval))],
  ];
}

/** Whether the peer's INVITE or 2xx lists UPDATE in Allow (RFC 3311 5.1; RFC 4028 7.4 prefers UPDATE then). */
export function peerAllowsUpdate(msg: SipMessage): boolean {
  return msg.getAll('Allow').some((m) => m.trim() === 'UPDATE');
}

export type UpdateRefreshResult =
  | { ok: true; timer: NegotiatedSessionTimer; response: SipResponse }
  | {
      ok: false;
      /**
       * update-not-allowed: the peer's Allow has no UPDATE, nothing sent (refresh by re-INVITE);
       * rejected: a non-2xx other than 408/481 (405/501: re-INVITE instead; 491/5xx: later);
       * remote-gone: 408, 481 or no answer, the dialog ended (RFC 3261 12.2.1.2);
       * dialog-terminated: the dialog was over before sending; send-failed: no route to send.
       */
      reason: 'update-not-allowed' | 'rejected' | 'remote-gone' | 'dialog-terminated' | 'send-failed';
      status?: number;
      response?: SipResponse;
      error?: unknown;
    };

export interface UpdateRefreshOptions {
  /** The session timer as it stands (we normally are the refresher: 'local'). */
  timer: NegotiatedSessionTimer;
  /** Our Min-SE; default 90. */
  minSE?: number;
  /** From `peerAllowsUpdate(their INVITE or 2xx)`; false: nothing is sent. */
  peerAllowsUpdate: boolean;
  /** Extra headers of the UPDATE. */
  headers?: [string, HeaderValue][];
}

/**
 * A session refresh by UPDATE without body (RFC 4028 7.4 and RFC 3311: no offer, so no SDP to
 * build and no glare with the media), when the peer allows UPDATE. A 422 is retried once with
 * its Min-SE (7.3). The 2xx's Session-Expires gives the new timer; a 2xx without one (7.2: the
 * peer stops the timer) keeps ours, so we go on refreshing, which costs the peer nothing.
 */
export async function refreshSessionByUpdate(dialog: Dialog, opts: UpdateRefreshOptions): Promise<UpdateRefreshResult> {
  if (!opts.peerAllowsUpdate) return { ok: false, reason: 'update-not-allowed' };
  let timer = opts.timer;
  let minSE = opts.minSE ?? RFC4028_MIN_SE;
  for (let attempt = 0; ; attempt++) {
    if (dialog.terminated) return { ok: false, reason: 'dialog-terminated' };
    let response: SipResponse;
    try {
      const tx = dialog.request('UPDATE', { headers: [...sessionRefreshHeaders(timer, minSE), ...(opts.headers ?? [])] });
      response = await tx.finalResponse;
    } catch (error) {
      const terminated = error instanceof SipDialogError && error.code === 'SIP_DIALOG_TERMINATED';
      return { ok: false, reason: terminated ? 'dialog-terminated' : 'send-failed', error };
    }
    const status = response.status;
    if (status >= 200 && status < 300) {
      let next: NegotiatedSessionTimer | undefined;
      try {
        next = sessionTimerFromUacResponse(response);
      } catch {
        next = undefined;
      }
      return { ok: true, timer: next ?? timer, response };
    }
    if (status === 408 || status === 481 || dialog.terminated) return { ok: false, reason: 'remote-gone', status, response };
    if (status === 422 && attempt === 0) {
      const retry = sessionTimerRetryAfter422(response, { interval: timer.interval, minSE });
      if (retry !== undefined) {
        timer = { interval: retry.interval, refresher: timer.refresher };
        minSE = retry.minSE;
        continue;
      }
    }
    return { ok: false, reason: 'rejected', status, response };
  }
}

/** When the refresher refreshes: half the interval (RFC 4028 10), in ms. */
export function refreshDelayMs(interval: number): number {
  return (interval * 1000) / 2;
}

/** When the session counts as expired: N - min(32, N/3) after the last refresh (RFC 4028 10), in ms. */
export function expiryDelayMs(interval: number): number {
  return (interval - Math.min(32, interval / 3)) * 1000;
}

/** The pause before trying a failed refresh again: N/8, so 3 tries fit before the expiry. */
export function refreshRetryDelayMs(interval: number): number {
  return (interval * 1000) / 8;
}

export interface SessionTimerOptions {
  /** Negotiated interval (Session-Expires), seconds. */
  interval: number;
  refresher: SessionRefresher;
  /**
   * Send a refresh (re-INVITE with the current SDP, or `refreshSessionByUpdate`); resolve true
   * on a 2xx. Called when we are the refresher, at N/2 and after failures every N/8 until the
   * expiry. Calling `refreshed()` from inside it with the 2xx's values is fine.
   */
  refresh: () => Promise<boolean>;
  /**
   * No successful refresh in time (RFC 4028 10): the call layer sends BYE. The timer is closed
   * by then. Called at most once.
   */
  expired: () => void;
  /** Default: Node's timers, unref'd. */
  clock?: TransactionTimers;
  logger?: TransactionLogger;
  /** When given, the timer closes itself when this dialog terminates. */
  dialog?: Dialog;
}

/**
 * The session timer of one dialog (RFC 4028 10). It arms two timers from every refresh (and from
 * construction, which is the 2xx that set it up): the expiry at N - min(32, N/3), and, when we
 * are the refresher, the refresh at N/2. A refresh that succeeds, ours or the peer's (the call
 * layer reports those with `refreshed()`), re-arms both with the interval and refresher it
 * negotiated. Callbacks that throw or reject are logged, never thrown into the clock.
 */
export class SessionTimer {
  #interval: number;
  #refresher: SessionRefresher;
  readonly #opts: SessionTimerOptions;
  readonly #clock: TransactionTimers;
  readonly #logger: TransactionLogger | undefined;
  #refreshTimer: unknown;
  #expiryTimer: unknown;
  /** Bumped at each arming, so a refresh that resolves after a re-arm does not re-arm again. */
  #generation = 0;
  #inFlight = false;
  #closed = false;
  #expired = false;
  #refreshes = 0;
  readonly #onTerminated = (): void => this.close();

  /** @throws RangeError when the interval is not a positive number of seconds. */
  constructor(opts: SessionTimerOptions) {
    this.#interval = SessionTimer.#checkInterval(opts.interval);
    this.#refresher = opts.refresher;
    this.#opts = opts;
    this.#clock = opts.clock ?? systemTransactionTimers;
    this.#logger = opts.logger;
    if (opts.dialog?.terminated) {
      this.#closed = true;
      return;
    }
    opts.dialog?.once('terminated', this.#onTerminated);
    this.#arm();
  }

  static #checkInterval(v: number): number {
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new RangeError(`session interval must be a positive number of seconds, got ${String(v)}`);
    return v;
  }

  get interval(): number {
    return this.#interval;
  }

  get refresher(): SessionRefresher {
    return this.#refresher;
  }

  /** Closed by close(), by the expiry, or by the dialog's end. */
  get closed(): boolean {
    return this.#closed;
  }

  /** True when the session expired (the `expired` callback ran). */
  get expired(): boolean {
    return this.#expired;
  }

  /** Successful refreshes so far (ours and the peer's). */
  get refreshes(): number {
    return this.#refreshes;
  }

  /**
   * A refresh succeeded: the peer's re-INVITE / UPDATE we answered 2xx, or the 2xx to ours. The
   * timers restart from now with the new values (default: unchanged). No-op once closed.
   * @throws RangeError for an interval that is not a positive number.
   */
  refreshed(interval: number = this.#interval, refresher: SessionRefresher = this.#refresher): void {
    if (this.#closed) return;
    this.#interval = SessionTimer.#checkInterval(interval);
    this.#refresher = refresher;
    this.#refreshes++;
    this.#arm();
  }

  /** Stops the timers; no callback runs afterwards. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#generation++;
    this.#clear();
    this.#opts.dialog?.off('terminated', this.#onTerminated);
  }

  #clear(): void {
    if (this.#refreshTimer !== undefined) this.#clock.clearTimeout(this.#refreshTimer);
    if (this.#expiryTimer !== undefined) this.#clock.clearTimeout(this.#expiryTimer);
    this.#refreshTimer = undefined;
    this.#expiryTimer = undefined;
  }

  #arm(): void {
    this.#clear();
    const gen = ++this.#generation;
    this.#expiryTimer = this.#clock.setTimeout(() => this.#expire(gen), expiryDelayMs(this.#interval));
    if (this.#refresher === 'local') this.#refreshTimer = this.#clock.setTimeout(() => this.#tryRefresh(gen), refreshDelayMs(this.#interval));
  }

  #scheduleRetry(gen: number): void {
    this.#refreshTimer = this.#clock.setTimeout(() => this.#tryRefresh(gen), refreshRetryDelayMs(this.#interval));
  }

  #tryRefresh(gen: number): void {
    this.#refreshTimer = undefined;
    if (this.#closed || gen !== this.#generation) return;
    if (this.#inFlight) {
      this.#scheduleRetry(gen);
      return;
    }
    this.#inFlight = true;
    const done = (ok: boolean, err?: unknown): void => {
      this.#inFlight = false;
      // Closed, or re-armed meanwhile (refreshed() called from inside refresh, or a peer refresh).
      if (this.#closed || gen !== this.#generation) return;
      if (ok) {
        this.#refreshes++;
        this.#arm();
        return;
      }
      this.#logger?.warn({ err, interval: this.#interval }, 'session refresh failed (RFC 4028 10): retrying until the session expires');
      this.#scheduleRetry(gen);
    };
    let p: Promise<boolean>;
    try {
      p = this.#opts.refresh();
    } catch (err) {
      done(false, new SipDialogError('SIP_DIALOG_LISTENER', 'the session timer refresh callback threw', { cause: err }));
      return;
    }
    Promise.resolve(p).then(
      (ok) => done(ok === true),
      (err: unknown) => done(false, new SipDialogError('SIP_DIALOG_LISTENER', 'the session timer refresh callback rejected', { cause: err })),
    );
  }

  #expire(gen: number): void {
    if (this.#closed || gen !== this.#generation) return;
    this.#expired = true;
    this.close();
    this.#logger?.warn({ interval: this.#interval, refresher: this.#refresher }, 'session expired without refresh (RFC 4028 10)');
    try {
      this.#opts.expired();
    } catch (err) {
      const error = new SipDialogError('SIP_DIALOG_LISTENER', 'the session timer expired callback threw', { cause: err });
      this.#logger?.warn({ err: error, code: error.code }, error.message);
    }
  }
}
