/**
 * Reliable provisional responses, the UAS side of RFC 3262 (100rel / PRACK), for one INVITE:
 *
 *   18x + Require: 100rel + RSeq n  ---->        (retransmitted at T1, 2*T1 ... T2, section 3)
 *                                   <----  PRACK + RAck: n <INVITE CSeq> INVITE
 *   200 (to the PRACK)              ---->        retransmissions stop; waiters run
 *
 * One reliable provisional at a time (section 3: the next waits for the PRACK of the previous);
 * a PRACK that matches none outstanding gets 481. No PRACK within 64*T1: `onUnacknowledged`, whose
 * owner rejects the INVITE with a 5xx (section 3). Nothing here knows of calls or SDP.
 */
import { createResponse, type SipRequest, type SipResponse } from '../message/index.ts';
import type { ServerTransaction, TransactionTimers } from '../transaction/index.ts';
import { systemTransactionTimers } from '../transaction/index.ts';
import type { Inbound } from '../transport/index.ts';
import type { BodyOptions, Dialog } from './dialog.ts';

/** The option tag of RFC 3262 (Supported / Require). */
export const RELIABLE_PROVISIONAL_TAG = '100rel';

/** Whether an INVITE insists on reliable provisional responses (Require: 100rel). A malformed Require counts as no. */
export function requiresReliableProvisional(req: SipRequest): boolean {
  try {
    return req.require.includes(RELIABLE_PROVISIONAL_TAG);
  } catch {
    return false;
  }
}

/** The RAck header of a PRACK (RFC 3262 7.2): RSeq, CSeq number and method of the response it acknowledges. */
export function parseRAck(value: string | undefined): { rseq: number; cseq: number; method: string } | undefined {
  const m = /^\s*(\d{1,10})\s+(\d{1,10})\s+([A-Za-z]+)\s*$/.exec(value ?? '');
  if (m === null) return undefined;
  return { rseq: Number(m[1]), cseq: Number(m[2]), method: m[3]!.toUpperCase() };
}

export interface ReliableProvisionalOptions {
  /** RFC 3261 T1 and T2 (ms): the retransmission intervals and the 64*T1 give-up. */
  t1: number;
  t2: number;
  clock?: TransactionTimers;
  /** No PRACK within 64*T1 for this response: the INVITE should be rejected with a 5xx. */
  onUnacknowledged(response: SipResponse): void;
}

interface Outstanding {
  response: SipResponse;
  rseq: number;
  interval: number;
  retransmit: unknown;
  deadline: unknown;
}

export class ReliableProvisionalSender {
  readonly #dialog: Dialog;
  readonly #o: ReliableProvisionalOptions;
  readonly #clock: TransactionTimers;
  /** The RSeq of the next reliable provisional: random start below 2^31 (7.1), +1 each. */
  #nextRSeq = 1 + Math.floor(Math.random() * 2 ** 30);
  #outstanding: Outstanding | undefined;
  #waiters: (() => void)[] = [];
  #closed = false;

  constructor(dialog: Dialog, options: ReliableProvisionalOptions) {
    this.#dialog = dialog;
    this.#o = options;
    this.#clock = options.clock ?? systemTransactionTimers;
    dialog.on('prack', (tx, inbound) => this.#onPrack(tx, inbound));
    dialog.on('terminated', () => this.close());
  }

  /** True while a reliable provisional response waits for its PRACK. */
  get pending(): boolean {
    return this.#outstanding !== undefined;
  }

  /**
   * Sends a 1xx (not 100) reliably: Require: 100rel and the next RSeq, retransmitted until PRACKed.
   * @throws Error when one is still unacknowledged (section 3) or the dialog has no INVITE to answer.
   */
  send(status: number, opts: BodyOptions = {}): SipResponse {
    if (this.#closed) throw new Error('reliable provisional responses closed');
    if (this.#outstanding !== undefined) throw new Error('a reliable provisional response is still unacknowledged');
    const rseq = this.#nextRSeq++;
    const response = this.#dialog.provisional(status, {
      ...opts,
      headers: [...(opts.headers ?? []), ['Require', RELIABLE_PROVISIONAL_TAG], ['RSeq', String(rseq)]],
    });
    const t1 = this.#o.t1;
    const o: Outstanding = { response, rseq, interval: t1, retransmit: undefined, deadline: undefined };
    o.deadline = this.#clock.setTimeout(() => this.#giveUp(o), 64 * t1);
    this.#outstanding = o;
    this.#scheduleRetransmit(o);
    return response;
  }

  /** Runs `fn` once no reliable provisional is unacknowledged (at once when none is). Dropped on close. */
  whenAcknowledged(fn: () => void): void {
    if (this.#outstanding === undefined) fn();
    else this.#waiters.push(fn);
  }

  /** Stops the retransmissions and forgets the waiters (the INVITE got its final response). Idempotent. */
  close(): void {
    this.#closed = true;
    this.#stop();
    this.#waiters = [];
  }

  #scheduleRetransmit(o: Outstanding): void {
    o.retransmit = this.#clock.setTimeout(() => {
      if (this.#outstanding !== o) return;
      try {
        this.#dialog.resendProvisional(o.response);
      } catch {
        this.#stop(); // the INVITE got its final response meanwhile
        return;
      }
      o.interval = Math.min(o.interval * 2, this.#o.t2);
      this.#scheduleRetransmit(o);
    }, o.interval);
  }

  #onPrack(tx: ServerTransaction, inbound: Inbound<SipRequest>): void {
    const req = inbound.message;
    const rack = parseRAck(req.get('RAck'));
    const o = this.#outstanding;
    const invite = o?.response.cseq;
    if (o === undefined || rack === undefined || invite === undefined || rack.rseq !== o.rseq || rack.cseq !== invite.seq || rack.method !== invite.method) {
      tx.respond(createResponse(req, 481));
      return;
    }
    tx.respond(createResponse(req, 200));
    this.#stop();
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const fn of waiters) fn();
  }

  #giveUp(o: Outstanding): void {
    if (this.#outstanding !== o) return;
    this.close();
    this.#o.onUnacknowledged(o.response);
  }

  #stop(): void {
    const o = this.#outstanding;
    if (o === undefined) return;
    this.#outstanding = undefined;
    this.#clock.clearTimeout(o.retransmit);
    this.#clock.clearTimeout(o.deadline);
  }
}
