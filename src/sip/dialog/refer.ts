/**
 * Call transfer by REFER, as the transferor (RFC 3515, with RFC 3420 message/sipfrag bodies,
 * RFC 6665 for the implicit subscription's NOTIFYs and RFC 4488 for `Refer-Sub: false`).
 *
 *   callbridge (transferor)                 peer (transferee: carrier, PBX)
 *     REFER  Refer-To: <sip:target>   ->
 *                                     <-    202 Accepted            (403/405/501/603: 'rejected')
 *                                     <-    NOTIFY Event: refer      sipfrag "SIP/2.0 100 Trying"
 *     200 OK                          ->
 *                                     <-    NOTIFY ... terminated    sipfrag "SIP/2.0 200 OK"  -> 'success'
 *     200 OK                          ->                              (3xx-6xx: 'failed')
 *
 * The NOTIFY listener is attached before the REFER goes out: a NOTIFY may overtake the 202
 * (RFC 6665 4.1.2.4), and the dialog answers a NOTIFY nobody listens for 501. It is removed when
 * the outcome is known, so a NOTIFY arriving later gets the dialog's default.
 *
 * Receiving REFER (transferee) is not done here: the dialog answers it 501 unless the call layer
 * listens for 'refer'.
 */
import type { Dialog, DialogTerminationReason } from './dialog.ts';
import { SipDialogError } from './errors.ts';
import { createResponse, NameAddr, parseNameAddr, parseUri, type HeaderValue, type SipRequest, type SipResponse, type Uri } from '../message/index.ts';
import type { ServerTransaction, TransactionLogger } from '../transaction/index.ts';
import { systemTransactionTimers, type TransactionTimers } from '../transaction/index.ts';
import type { Inbound } from '../transport/index.ts';

/** How long to wait for a final outcome when the caller says nothing (ms). */
export const REFER_DEFAULT_TIMEOUT_MS = 30_000;

export type TransferOutcome =
  /** A NOTIFY's sipfrag carried a 2xx: the transferee reached the target. */
  | { outcome: 'success'; status: number; reason: string }
  /** A NOTIFY's sipfrag carried a 3xx-6xx: the transferee could not reach the target. */
  | { outcome: 'failed'; status: number; reason: string }
  /** The REFER itself got a non-2xx (403, 405, 501, 603...): no transfer; bridge it ourselves. */
  | { outcome: 'rejected'; status: number; reason: string }
  /**
   * The REFER got a 2xx, but no final result will come: `Refer-Sub: false` in the 2xx (RFC 4488),
   * or the subscription ended without a final sipfrag. `progress`: the last 1xx reported.
   */
  | { outcome: 'accepted'; status: number; progress?: number }
  /** Nothing final within `timeoutMs`. `accepted`: whether the REFER had its 2xx by then. */
  | { outcome: 'timeout'; accepted: boolean; progress?: number }
  /** The dialog terminated meanwhile (BYE from the transferee after success is common). */
  | { outcome: 'ended'; reason: DialogTerminationReason; accepted: boolean };

export interface TransferByReferOptions {
  /** The transfer target: a sip:/sips:/tel: URI (a number is the caller's to turn into one). */
  referTo: string | Uri | NameAddr;
  /** Referred-By (RFC 3892), e.g. our own URI; left out when not given. */
  referredBy?: string | Uri | NameAddr;
  /** Wait for a final outcome this long after sending the REFER; default 30 s. */
  timeoutMs?: number;
  /** Timer functions (virtual in tests). Default: Node's, unref'd. */
  clock?: TransactionTimers;
  logger?: TransactionLogger;
  /** Each sipfrag status as it arrives (1xx progress and the final one). Throws are logged. */
  onProgress?: (status: number, reason: string) => void;
  /**
   * Ask for no implicit subscription (RFC 4488 4: `Refer-Sub: false`, `Supported: norefersub`):
   * the outcome is then 'accepted' on the 2xx when the peer agrees (it echoes `Refer-Sub: false`).
   */
  noSubscription?: boolean;
  /** Extra headers of the REFER. */
  headers?: [string, HeaderValue][];
}

/**
 * The status line of a message/sipfrag body (RFC 3420 2; RFC 3515 2.4.5 needs only the status
 * line): `SIP/2.0 180 Ringing` -> { status: 180, reason: 'Ringing' }. Leading blank lines are
 * skipped; anything else (a request line, garbage, an empty body) -> undefined.
 */
export function parseSipfrag(body: Buffer | string): { status: number; reason: string } | undefined {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  const line = text.replace(/^[\r\n\t ]+/, '').split(/\r?\n/, 1)[0] ?? '';
  const m = /^SIP\/2\.0[ \t]+([1-6][0-9][0-9])(?:[ \t]+(.*))?$/i.exec(line.trimEnd());
  if (m === null) return undefined;
  return { status: Number(m[1]), reason: (m[2] ?? '').trim() };
}

function toNameAddr(v: string | Uri | NameAddr, header: string): NameAddr {
  if (v instanceof NameAddr) return v.clone();
  if (typeof v !== 'string') return new NameAddr(v.clone());
  const s = v.trim();
  try {
    // A bare URI goes between angle brackets, so its own parameters (user=phone, a Replaces
    // header in ?...) stay in the URI instead of becoming header parameters (RFC 3261 20.10).
    return s.includes('<') ? parseNameAddr(s, header) : new NameAddr(parseUri(s));
  } catch (err) {
    throw new TypeError(`invalid ${header} "${s}"`, { cause: err });
  }
}

/** Is this NOTIFY one of our REFER's (RFC 3515 2.4.4, RFC 6665 8.2.1: Event: refer;id=<CSeq>)? */
function notifyMatch(req: SipRequest, referSeq: number | undefined): 'ours' | 'other-refer' | 'other-event' | 'no-event' {
  let event;
  try {
    event = req.event;
  } catch {
    return 'no-event';
  }
  if (event === undefined) return 'no-event';
  if (event.value.toLowerCase() !== 'refer') return 'other-event';
  // 2.4.6: the id may be left out for the first REFER of a dialog; when present it is the CSeq.
  const id = event.params.getUnquoted('id');
  if (id === undefined || referSeq === undefined || id === String(referSeq)) return 'ours';
  return 'other-refer';
}

function subscriptionTerminated(req: SipRequest): boolean {
  try {
    return req.valueWithParams('subscription-state')?.value.toLowerCase() === 'terminated';
  } catch {
    return false;
  }
}

/**
 * Transfers the call: sends REFER in `dialog` with `Refer-To: <uri>` and waits for the outcome
 * (see TransferOutcome). Every NOTIFY of the implicit subscription is answered 200 (RFC 6665
 * 4.1.3), also one whose body is not a sipfrag we can read: a non-2xx would make the notifier
 * end the subscription (RFC 6665 4.2.2) and we would never hear the final status, while the
 * body is only information for us (RFC 3515 2.4.5 lets the notifier send any status line).
 * NOTIFYs of other subscriptions are left to other listeners; when ours is the only listener they
 * get 481 (RFC 6665 4.1.3, a REFER id we do not know), 489 Bad Event (another package) or 400
 * (no Event).
 *
 * Never rejects for the peer's behaviour; the promise rejects only when the REFER cannot be sent
 * at all (SipDialogError SIP_DIALOG_STRICT_ROUTE / SIP_DIALOG_DESTINATION), or
 * @throws TypeError at once for a Refer-To / Referred-By that does not parse.
 */
export function transferByRefer(dialog: Dialog, opts: TransferByReferOptions): Promise<TransferOutcome> {
  const referTo = toNameAddr(opts.referTo, 'Refer-To');
  const referredBy = opts.referredBy === undefined ? undefined : toNameAddr(opts.referredBy, 'Referred-By');
  const timeoutMs = opts.timeoutMs ?? REFER_DEFAULT_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new RangeError(`timeoutMs must be a positive number, got ${String(timeoutMs)}`);
  const clock = opts.clock ?? systemTransactionTimers;
  const logger = opts.logger;

  if (dialog.terminated) return Promise.resolve({ outcome: 'ended', reason: 'closed', accepted: false });

  return new Promise<TransferOutcome>((resolve, reject) => {
    let done = false;
    let accepted: number | undefined; // status of the REFER's 2xx
    let progress: number | undefined;
    // Set once the REFER is out; read by the listeners attached before it.
    const sent: { referSeq: number | undefined; timer: unknown } = { referSeq: undefined, timer: undefined };

    const finish = (outcome: TransferOutcome | Error): void => {
      if (done) return;
      done = true;
      if (sent.timer !== undefined) clock.clearTimeout(sent.timer);
      dialog.off('notify', onNotify);
      dialog.off('terminated', onTerminated);
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };

    const report = (status: number, reason: string): void => {
      if (opts.onProgress === undefined) return;
      try {
        opts.onProgress(status, reason);
      } catch (err) {
        const error = new SipDialogError('SIP_DIALOG_LISTENER', 'a REFER onProgress callback threw', { cause: err });
        logger?.warn({ err: error, code: error.code }, error.message);
      }
    };

    const onNotify = (tx: ServerTransaction, inbound: Inbound<SipRequest>): void => {
      const req = inbound.message;
      const match = notifyMatch(req, sent.referSeq);
      if (match !== 'ours') {
        if (dialog.listenerCount('notify') === 1 && tx.finalResponse === undefined) {
          const status = match === 'other-refer' ? 481 : match === 'other-event' ? 489 : 400;
          tx.respond(createResponse(req, status, status === 400 ? 'Bad Request: missing Event' : undefined));
        }
        return;
      }
      tx.respond(createResponse(req, 200));
      const ct = req.contentType;
      const frag = ct === undefined || ct.mime === 'message/sipfrag' ? parseSipfrag(req.body) : undefined;
      if (frag === undefined) logger?.debug({ callId: dialog.callId, contentType: ct?.toString() }, 'REFER NOTIFY without a readable sipfrag: answered 200, ignored');
      else report(frag.status, frag.reason);
      if (frag !== undefined && frag.status >= 200) {
        finish({ outcome: frag.status < 300 ? 'success' : 'failed', status: frag.status, reason: frag.reason });
        return;
      }
      if (frag !== undefined) progress = frag.status;
      if (subscriptionTerminated(req)) {
        // The subscription ended without a final status (RFC 6665 4.1.3: no more NOTIFYs).
        finish({ outcome: 'accepted', status: accepted ?? 202, ...(progress === undefined ? {} : { progress }) });
      }
    };

    const onTerminated = (reason: DialogTerminationReason): void => finish({ outcome: 'ended', reason, accepted: accepted !== undefined });

    dialog.on('notify', onNotify);
    dialog.once('terminated', onTerminated);

    const headers: [string, HeaderValue][] = [['Refer-To', referTo]];
    if (referredBy !== undefined) headers.push(['Referred-By', referredBy]);
    if (opts.noSubscription) headers.push(['Refer-Sub', 'false'], ['Supported', 'norefersub']);
    headers.push(...(opts.headers ?? []));

    let tx;
    try {
      tx = dialog.request('REFER', { headers });
    } catch (err) {
      if (err instanceof SipDialogError && err.code === 'SIP_DIALOG_TERMINATED') finish({ outcome: 'ended', reason: 'closed', accepted: false });
      else finish(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    sent.referSeq = tx.request.cseq.seq;
    sent.timer = clock.setTimeout(() => finish({ outcome: 'timeout', accepted: accepted !== undefined, ...(progress === undefined ? {} : { progress }) }), timeoutMs);

    // 'final' rather than finalResponse: synchronous, after the dialog's own listener (which
    // ends the dialog on 481/408, 12.2.1.2), so those come out as 'ended'.
    const onFinal = (res: SipResponse): void => {
      if (done) return;
      if (res.status >= 300) {
        finish({ outcome: 'rejected', status: res.status, reason: res.reason });
        return;
      }
      accepted = res.status;
      // RFC 4488 4: Refer-Sub: false in the 2xx means no subscription was created.
      if (res.get('Refer-Sub')?.trim().toLowerCase() === 'false') finish({ outcome: 'accepted', status: res.status });
    };
    tx.once('final', onFinal);
    // A timeout or transport error resolves finalResponse with a local 408/503 but emits no 'final'.
    void tx.finalResponse.then((res) => {
      if (tx.error !== undefined) onFinal(res);
    });
  });
}
