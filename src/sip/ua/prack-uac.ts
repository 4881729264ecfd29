/**
 * The UAC side of RFC 3262 (100rel / PRACK) for one outbound INVITE: a reliable 18x (Require:
 * 100rel and an RSeq) makes the early dialog of its To tag, and is acknowledged with a PRACK in
 * that dialog (RAck: RSeq, the INVITE's CSeq number and method), sent through the transaction
 * layer as a non-INVITE client transaction, which retransmits it by itself.
 *
 * Section 4: per early dialog, the first reliable 18x may carry any RSeq; the next ones must be
 * one higher. A repeated RSeq (the UAS retransmitting because our PRACK is still on its way) and
 * an out-of-order one are not PRACKed and not processed further.
 */
import type { Dialog, DialogManager } from '../dialog/index.ts';
import { RELIABLE_PROVISIONAL_TAG } from '../dialog/index.ts';
import type { SipRequest, SipResponse } from '../message/index.ts';

export interface PrackLogger {
  debug(obj: object, msg: string): void;
}

/** What became of a 1xx: unreliable (process it as usual), acknowledged (a new reliable one: PRACK sent, process it), ignored. */
export type ProvisionalVerdict = 'unreliable' | 'acknowledged' | 'ignored';

/** A reliable 18x's RSeq (RFC 3262 7.1: 1 to 2^32-1), or undefined when the 1xx is not sent reliably. */
export function reliableRSeq(res: SipResponse): number | undefined {
  if (res.status <= 100 || res.status >= 200) return undefined;
  let required: string[];
  try {
    required = res.require;
  } catch {
    return undefined;
  }
  if (!required.includes(RELIABLE_PROVISIONAL_TAG)) return undefined;
  const raw = res.get('RSeq')?.trim() ?? '';
  if (!/^\d{1,10}$/.test(raw)) return undefined;
  const rseq = Number(raw);
  return rseq >= 1 && rseq < 2 ** 32 ? rseq : undefined;
}

export interface PrackSenderOptions {
  dialogs: DialogManager;
  /** Digest credentials for a request to `uri` with `method` (those the INVITE needed), as header fields. */
  credentials(method: string, uri: string): [string, string][];
  callId: string;
  logger?: PrackLogger | undefined;
}

export class PrackSender {
  readonly #o: PrackSenderOptions;
  /** Early dialogs by To tag, with the RSeq last PRACKed in each. */
  readonly #early = new Map<string, { dialog: Dialog; rseq: number }>();

  constructor(options: PrackSenderOptions) {
    this.#o = options;
  }

  /** Called with each 1xx to `invite`: PRACKs a new reliable one and says whether to process it. */
  receive(invite: SipRequest, res: SipResponse): ProvisionalVerdict {
    const rseq = reliableRSeq(res);
    const tag = res.to.tag;
    if (rseq === undefined || tag === undefined) return 'unreliable';
    const known = this.#early.get(tag);
    if (known !== undefined && rseq !== (known.rseq + 1) % 2 ** 32) {
      this.#o.logger?.debug({ callId: this.#o.callId, rseq, last: known.rseq }, rseq === known.rseq ? 'reliable provisional repeated: PRACK already sent' : 'reliable provisional out of order: ignored');
      return 'ignored';
    }
    let dialog: Dialog;
    try {
      dialog = known?.dialog ?? this.#o.dialogs.fromResponse(invite, res);
      const uri = dialog.remoteTarget.toString();
      dialog.request('PRACK', { headers: [['RAck', `${rseq} ${res.cseq.seq} ${res.cseq.method}`], ...this.#o.credentials('PRACK', uri)] });
    } catch (err) {
      this.#o.logger?.debug({ err, callId: this.#o.callId, rseq }, 'PRACK not sent');
      return 'ignored';
    }
    this.#early.set(tag, { dialog, rseq });
    return 'acknowledged';
  }

  /**
   * The INVITE is over (a final response, or we gave up): the early dialogs still early are closed.
   * The one a 2xx confirmed is the call's and stays.
   */
  settle(): void {
    for (const { dialog } of this.#early.values()) {
      if (dialog.state === 'early') dialog.close();
    }
    this.#early.clear();
  }
}
