/**
 * OPTIONS keep-alive pings to trunks' outbound hosts (RFC 3261 11: OPTIONS asks a UA or proxy
 * about its capabilities without ringing anyone, which makes it the usual SIP "are you there").
 *
 *   const pinger = new OptionsPinger({
 *     layer,
 *     targets: () => trunks.map((t) => ({ id: t.id, destination, uri: 'sip:203.0.113.5:5060' })),
 *     onStatus: (id, status, detail) => ...,   // 'up' | 'down', only on change
 *   });
 *   pinger.start();   ...   pinger.close();
 *
 * Each round (every `intervalMs`) reads the targets again, so trunks added, changed or removed
 * through the API are picked up without telling the pinger; a removed target is forgotten (its
 * ping in flight is ended). Per target, one out-of-dialog OPTIONS at a time: Max-Forwards 70,
 * Accept: application/sdp (11.1), a fresh Call-ID and From tag.
 *
 * What counts: ANY final response -- 200, but also 404, 405, 501... -- means something at that
 * address speaks SIP and answered, so the host is up (a carrier SBC that refuses OPTIONS with 405
 * is still alive). Only a transaction timeout (Timer F, 64*T1) or a transport error (connection
 * refused, no route) is a failure. `failuresBeforeDown` consecutive failures mark it down (one
 * lost UDP exchange is not an outage); one success marks it up again. Nothing is logged per ping:
 * one line per status change.
 */
import { createRequest, generateCallId, NameAddr, parseUri, type HeaderValue } from '../message/index.ts';
import type { ClientTransaction, TransactionLayer } from '../transaction/index.ts';
import { systemTransactionTimers, type TransactionTimers } from '../transaction/index.ts';
import { placeholderVia } from '../transport/index.ts';
import type { Endpoint } from '../transport/index.ts';

export interface OptionsPingTarget {
  /** Stable id (the trunk's); status is kept per id. */
  id: string;
  /** Where the OPTIONS goes: an IP literal, port and protocol (see uac.ts resolveDestination). */
  destination: Endpoint;
  /** Request-URI and To, e.g. "sip:203.0.113.5:5060;transport=tcp". */
  uri: string;
}

export type OptionsPingStatus = 'up' | 'down';

export interface OptionsPingDetail {
  /** The final status received; for a failure, the local one (408 timeout, 503 transport error). */
  status: number;
  /** For humans and logs, e.g. "405 Method Not Allowed" or "no final response to OPTIONS (Timer F)". */
  reason: string;
  /** Consecutive failures so far (0 after a success). */
  failures: number;
  /** Round trip of the OPTIONS that decided it (successes only), in ms. */
  rttMs?: number;
  destination: Endpoint;
}

/** Structurally a pino logger. */
export interface OptionsPingLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface OptionsPingerOptions {
  layer: TransactionLayer;
  /** Called at every round; a function that throws counts as no targets this round (logged). */
  targets: () => readonly OptionsPingTarget[];
  /** A status change (the first result counts as one). A listener that throws is logged. */
  onStatus?: (id: string, status: OptionsPingStatus, detail: OptionsPingDetail) => void;
  /** Time between rounds. Default 30 s. */
  intervalMs?: number;
  /** Consecutive failures that mark a target down. Default 2. */
  failuresBeforeDown?: number;
  /** Our From (and identity), e.g. "<sip:callbridge@192.0.2.10>". Default "<sip:callbridge@invalid>". */
  from?: string;
  /** Our Contact, if the peers want one. Default none (RFC 3261 11.1: MAY). */
  contact?: string;
  /** Extra header fields (User-Agent...). */
  headers?: [string, HeaderValue][];
  /** Round timer; default Node's (unref'd: pings alone do not keep the process alive). */
  clock?: TransactionTimers;
  /** Milliseconds, for round trips. Default Date.now. */
  now?: () => number;
  logger?: OptionsPingLogger;
}

export const OPTIONS_PING_DEFAULTS = { intervalMs: 30_000, failuresBeforeDown: 2 } as const;

interface TargetState {
  status: OptionsPingStatus | undefined;
  failures: number;
  /** The ping in flight, if any (one at a time per target). */
  tx: ClientTransaction | undefined;
}

export class OptionsPinger {
  readonly #o: OptionsPingerOptions;
  readonly #interval: number;
  readonly #threshold: number;
  readonly #clock: TransactionTimers;
  readonly #now: () => number;
  readonly #from: NameAddr;
  readonly #state = new Map<string, TargetState>();
  #timer: unknown;
  #started = false;
  #closed = false;

  /** @throws RangeError for a bad interval or threshold; TypeError for a bad `from`. */
  constructor(options: OptionsPingerOptions) {
    this.#o = options;
    this.#interval = options.intervalMs ?? OPTIONS_PING_DEFAULTS.intervalMs;
    if (!(this.#interval > 0) || !Number.isFinite(this.#interval)) throw new RangeError(`intervalMs must be a positive number, got ${this.#interval}`);
    this.#threshold = options.failuresBeforeDown ?? OPTIONS_PING_DEFAULTS.failuresBeforeDown;
    if (!Number.isInteger(this.#threshold) || this.#threshold < 1) throw new RangeError(`failuresBeforeDown must be a positive integer, got ${this.#threshold}`);
    this.#clock = options.clock ?? systemTransactionTimers;
    this.#now = options.now ?? Date.now;
    // Parsed once through the message layer, which validates it.
    this.#from = createRequest({ method: 'OPTIONS', uri: 'sip:invalid', from: options.from ?? '<sip:callbridge@invalid>', to: '<sip:invalid>' }).from;
    this.#from.tag = undefined;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The current status of a target; undefined before its first result or when unknown. */
  status(id: string): OptionsPingStatus | undefined {
    return this.#state.get(id)?.status;
  }

  /** Pings every target now and every intervalMs after. Idempotent. */
  start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    this.#round();
  }

  /** Stops the rounds and ends the pings in flight (no status is reported after). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const s of this.#state.values()) s.tx?.close();
    this.#state.clear();
  }

  #round(): void {
    this.#timer = undefined;
    if (this.#closed) return;
    let targets: readonly OptionsPingTarget[];
    try {
      targets = this.#o.targets();
    } catch (err) {
      this.#o.logger?.warn({ err }, 'OPTIONS ping: targets() threw');
      targets = [];
    }
    const current = new Map<string, OptionsPingTarget>();
    for (const t of targets) if (!current.has(t.id)) current.set(t.id, t);
    for (const [id, s] of this.#state) {
      if (current.has(id)) continue;
      // Removed (trunk deleted, or its outbound host cleared): forget it, stop its ping.
      this.#state.delete(id);
      s.tx?.close();
    }
    for (const t of current.values()) {
      let s = this.#state.get(t.id);
      if (s === undefined) {
        s = { status: undefined, failures: 0, tx: undefined };
        this.#state.set(t.id, s);
      }
      if (s.tx === undefined) this.#ping(t, s);
    }
    if (!this.#closed) this.#timer = this.#clock.setTimeout(() => this.#round(), this.#interval);
  }

  #ping(t: OptionsPingTarget, s: TargetState): void {
    let tx: ClientTransaction;
    const started = this.#now();
    try {
      const from = this.#from.clone();
      const req = createRequest({
        method: 'OPTIONS',
        uri: t.uri,
        from,
        to: new NameAddr(parseUri(t.uri)),
        callId: generateCallId(),
        cseq: 1,
        maxForwards: 70,
        contact: this.#o.contact,
        headers: [['Accept', 'application/sdp'], ...(this.#o.headers ?? [])],
      });
      // A fresh branch; the transport fills sent-by from the socket it uses.
      req.prepend('Via', placeholderVia());
      tx = this.#o.layer.sendRequest(req, t.destination);
    } catch (err) {
      // A bad uri, no listener for the protocol, the layer closed: a failure like any other.
      this.#failure(t, s, 503, err instanceof Error ? err.message : String(err));
      return;
    }
    s.tx = tx;
    void tx.finalResponse.then((res) => {
      if (s.tx !== tx) return;
      s.tx = undefined;
      if (this.#closed || this.#state.get(t.id) !== s) return;
      if (tx.error !== undefined) this.#failure(t, s, res.status, tx.error.message);
      else this.#success(t, s, res.status, `${res.status} ${res.reason}`, this.#now() - started);
    });
  }

  #success(t: OptionsPingTarget, s: TargetState, status: number, reason: string, rttMs: number): void {
    s.failures = 0;
    if (s.status === 'up') return;
    s.status = 'up';
    this.#o.logger?.info({ id: t.id, destination: t.destination, status, rttMs }, 'OPTIONS ping: host up');
    this.#report(t.id, 'up', { status, reason, failures: 0, rttMs, destination: t.destination });
  }

  #failure(t: OptionsPingTarget, s: TargetState, status: number, reason: string): void {
    s.failures++;
    if (s.failures < this.#threshold || s.status === 'down') return;
    s.status = 'down';
    this.#o.logger?.warn({ id: t.id, destination: t.destination, status, failures: s.failures }, `OPTIONS ping: host down: ${reason}`);
    this.#report(t.id, 'down', { status, reason, failures: s.failures, destination: t.destination });
  }

  #report(id: string, status: OptionsPingStatus, detail: OptionsPingDetail): void {
    try {
      this.#o.onStatus?.(id, status, detail);
    } catch (err) {
      this.#o.logger?.warn({ err, id }, 'OPTIONS ping: onStatus threw');
    }
  }
}
