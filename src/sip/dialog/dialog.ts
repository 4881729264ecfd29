/**
 * SIP dialogs, RFC 3261 section 12 (with 13.2.2.4 / 13.3.1.4 for the 2xx-ACK exchange and 14.2
 * for glare): the state a UA keeps per call leg, the in-dialog requests it builds from that state,
 * and the `DialogManager` that routes in-dialog requests, ACKs and stray 2xx to their dialog.
 *
 * Layering: dialog -> transaction -> transport. This file uses the TransactionLayer's API only
 * ('request', 'ack', 'stray', sendRequest, sendAck) and knows nothing of calls, SDP or media.
 *
 *   dialog ID = Call-ID + local tag + remote tag (12)
 *
 *        1xx with tag           2xx                     BYE sent/received, 481/408 to a
 *   (none) -------> early ---------------> confirmed -------------------------------> terminated
 *           \__________________2xx______/^             in-dialog request, ACK timeout, close()
 *   early --- non-2xx final / CANCEL --> terminated
 */
import { EventEmitter } from 'node:events';
import { SipDialogError } from './errors.ts';
import { createRequest, createResponse, generateTag, type HeaderValue, type NameAddr, type SipRequest, type SipResponse, type Uri } from '../message/index.ts';
import type { ClientTransaction, ServerTransaction, TransactionLayer, TransactionLogger } from '../transaction/index.ts';
import { systemTransactionTimers, type TransactionTimers } from '../transaction/index.ts';
import { emitSafely } from '../transaction/index.ts';
import type { Endpoint, Inbound, TransportProtocol } from '../transport/index.ts';

export { SipDialogError, type SipDialogErrorCode } from './errors.ts';

export type DialogState = 'early' | 'confirmed' | 'terminated';

export type DialogTerminationReason =
  | 'bye-sent'
  | 'bye-received'
  | 'rejected' // non-2xx final to the INVITE that created an early dialog
  | 'cancelled'
  | 'ack-timeout'
  | 'remote-gone' // 481 or 408 to an in-dialog request (12.2.1.2)
  | 'closed';

type Req = [tx: ServerTransaction, inbound: Inbound<SipRequest>];

export type DialogEvents = {
  /** Early -> confirmed (2xx sent or received). */
  confirmed: [];
  /** The ACK for a 2xx we sent arrived (once per 2xx); it may carry the SDP answer. */
  ack: [inbound: Inbound<SipRequest>];
  /** No ACK for our 2xx within 64*T1: a BYE has been sent and the dialog ended (13.3.1.4). */
  'ack-timeout': [];
  /** BYE received: already answered 200 and the dialog terminated; informational. */
  bye: Req;
  /** In-dialog requests, answered by the listener through `tx` (a 2xx to re-INVITE via `answer(opts, tx)`). */
  reinvite: Req;
  update: Req;
  refer: Req;
  info: Req;
  options: Req;
  notify: Req;
  /** PRACK (RFC 3262) for a reliable provisional response; with no listener it is answered 481 (3). */
  prack: Req;
  /** Early INVITE cancelled by the caller; the dialog answered 487. */
  cancel: [inbound: Inbound<SipRequest>];
  terminated: [reason: DialogTerminationReason];
};

/** What a dialog needs from below. */
export interface DialogContext {
  layer: TransactionLayer;
  /** Timer functions (virtual in tests). Default: Node's, unref'd. */
  clock?: TransactionTimers;
  logger?: TransactionLogger;
}

export interface UasDialogOptions extends DialogContext {
  /** Our To tag; default generateTag(). Use the same one for every response of this INVITE. */
  localTag?: string;
  /** Our Contact (remote target for the peer), e.g. '<sip:callbridge@192.0.2.1:5060>'. */
  localContact: NameAddr | string;
  /** First local CSeq number; default random below 2^31 (RFC 3261 8.1.1.5). */
  initialCSeq?: number;
}

export interface UacDialogOptions extends DialogContext {
  /** Our Contact for in-dialog target refreshes; default the INVITE's Contact. */
  localContact?: NameAddr | string;
}

export interface BodyOptions {
  headers?: [string, HeaderValue][];
  body?: Buffer | string;
  contentType?: string;
}

export interface AnswerOptions extends BodyOptions {
  /** 2xx status; default 200. */
  status?: number;
  reason?: string;
}

/** Methods `request()` sends in a dialog. ACK goes through `ack()`, CANCEL through the INVITE's ClientTransaction. */
export type InDialogMethod = 'BYE' | 'INFO' | 'OPTIONS' | 'REFER' | 'UPDATE' | 'INVITE' | 'NOTIFY' | 'MESSAGE' | 'PRACK';

/** Methods whose requests carry Contact and whose 2xx replace the remote target (target refresh, 12.2). */
const TARGET_REFRESH = new Set(['INVITE', 'UPDATE', 'SUBSCRIBE', 'NOTIFY', 'REFER']);

/** Methods of a subscription usage (RFC 5057): a 481 to them leaves the call alone. */
const SUBSCRIPTION_USAGE = new Set(['NOTIFY', 'SUBSCRIBE', 'REFER']);

const EVENT_OF: Record<string, 'reinvite' | 'update' | 'refer' | 'info' | 'options' | 'notify' | 'prack'> = {
  INVITE: 'reinvite',
  PRACK: 'prack',
  UPDATE: 'update',
  REFER: 'refer',
  INFO: 'info',
  OPTIONS: 'options',
  NOTIFY: 'notify',
};

/** Our 2xx to an INVITE, retransmitted until its ACK (13.3.1.4). */
interface Pending2xx {
  seq: number;
  tx: ServerTransaction;
  response: SipResponse;
  interval: number;
  retransmit: unknown;
  deadline: unknown;
}

export function dialogKey(callId: string, localTag: string, remoteTag: string): string {
  return `${callId}\n${localTag}\n${remoteTag}`;
}

/**
 * The transport endpoint of a sip:/sips: URI: the host as written (an IP literal, or a name the
 * transport resolves with an A/AAAA lookup when sending: carriers put names in Contact and
 * Record-Route; no RFC 3263 SRV/NAPTR), port default 5060 (5061 for TLS), protocol from
 * `transport=` (udp, tcp, tls), TLS for sips:. `maddr` is ignored.
 * @throws SipDialogError SIP_DIALOG_DESTINATION for other URIs.
 */
export function endpointFromUri(uri: Uri): Endpoint {
  if (uri.kind !== 'sip') throw new SipDialogError('SIP_DIALOG_DESTINATION', `cannot send to a ${uri.kind} URI`);
  const t = uri.transport;
  let protocol: TransportProtocol;
  if (uri.scheme === 'sips' || t === 'tls') protocol = 'tls';
  else if (t === undefined || t === 'udp') protocol = 'udp';
  else if (t === 'tcp') protocol = 'tcp';
  else throw new SipDialogError('SIP_DIALOG_DESTINATION', `transport "${t}" is not supported`);
  return { protocol, address: uri.host, port: uri.port ?? (protocol === 'tls' ? 5061 : 5060) };
}

function toNameAddr(v: NameAddr | string, template: NameAddr): NameAddr {
  if (typeof v !== 'string') return v.clone();
  // Parse through a throwaway request so the message layer's parser validates it.
  const probe = createRequest({ method: 'OPTIONS', uri: template.uri, from: template, to: template, contact: v });
  return probe.contacts[0]!;
}

function withoutTag(n: NameAddr): NameAddr {
  const c = n.clone();
  c.tag = undefined;
  return c;
}

/** Dialog listeners are called like the transaction layer's, reported with the dialog's code. */
function safeEmit(emitter: EventEmitter, event: string, args: unknown[], logger: TransactionLogger | undefined): boolean {
  return emitSafely(emitter, event, args, logger, (e, cause) => new SipDialogError('SIP_DIALOG_LISTENER', `a '${e}' listener threw`, { cause }));
}

export class Dialog extends EventEmitter<DialogEvents> {
  readonly role: 'uac' | 'uas';
  readonly callId: string;
  readonly localTag: string;
  /** '' when the peer sent no From tag (RFC 2543, 12.1.1). */
  readonly remoteTag: string;
  /** From (UAC) / To (UAS) of the dialog-creating INVITE, without tag. */
  readonly local: NameAddr;
  readonly remote: NameAddr;
  /** sips: Request-URI (and TLS, UAS side). */
  readonly secure: boolean;
  localContact: NameAddr;
  /** Last CSeq number we used. */
  localSeq: number;
  /** Highest CSeq number received; undefined until the peer sends a request (UAC side). */
  remoteSeq: number | undefined;
  remoteTarget: Uri;
  /** In the order Route headers take (12.1.1 / 12.1.2). */
  routeSet: NameAddr[];

  readonly #layer: TransactionLayer;
  readonly #clock: TransactionTimers;
  readonly #logger: TransactionLogger | undefined;
  #state: DialogState;
  #inviteTx: ServerTransaction | undefined;
  #pending: Pending2xx | undefined;
  /** ACKs sent per INVITE CSeq, re-sent for each 2xx retransmission (13.2.2.4). */
  readonly #acks = new Map<number, SipRequest>();
  /** INVITE transactions in progress, for glare (14.1 / 14.2). */
  #clientInvite: ClientTransaction | undefined;
  #serverInvite: ServerTransaction | undefined;
  /** Why a BYE we send ends the dialog. */
  #byeReason: DialogTerminationReason = 'bye-sent';

  private constructor(
    ctx: DialogContext,
    init: {
      role: 'uac' | 'uas';
      state: DialogState;
      callId: string;
      localTag: string;
      remoteTag: string;
      local: NameAddr;
      remote: NameAddr;
      localContact: NameAddr;
      localSeq: number;
      remoteSeq: number | undefined;
      remoteTarget: Uri;
      routeSet: NameAddr[];
      secure: boolean;
    },
  ) {
    super();
    this.#layer = ctx.layer;
    this.#clock = ctx.clock ?? systemTransactionTimers;
    this.#logger = ctx.logger;
    this.role = init.role;
    this.#state = init.state;
    this.callId = init.callId;
    this.localTag = init.localTag;
    this.remoteTag = init.remoteTag;
    this.local = init.local;
    this.remote = init.remote;
    this.localContact = init.localContact;
    this.localSeq = init.localSeq;
    this.remoteSeq = init.remoteSeq;
    this.remoteTarget = init.remoteTarget;
    this.routeSet = init.routeSet;
    this.secure = init.secure;
  }

  /**
   * UAS: the dialog an incoming INVITE creates once we send a 1xx (`provisional()`) or a 2xx
   * (`answer()`), 12.1.1. Route set = Record-Route as received; remote target = Contact.
   * Answers a CANCEL of the INVITE 487 and terminates the dialog.
   * @throws SipDialogError SIP_DIALOG_INVALID when the request is not an INVITE or has no Contact.
   */
  static fromInvite(tx: ServerTransaction, inbound: Inbound<SipRequest>, options: UasDialogOptions): Dialog {
    const req = inbound.message;
    if (req.method !== 'INVITE') throw new SipDialogError('SIP_DIALOG_INVALID', `${req.method} does not create a dialog here`);
    const contact = req.contacts[0];
    if (contact === undefined) throw new SipDialogError('SIP_DIALOG_INVALID', 'INVITE without Contact');
    const local = withoutTag(req.to);
    const d = new Dialog(options, {
      role: 'uas',
      state: 'early',
      callId: req.callId,
      localTag: options.localTag ?? generateTag(),
      remoteTag: req.from.tag ?? '',
      local,
      remote: withoutTag(req.from),
      localContact: toNameAddr(options.localContact, local),
      localSeq: options.initialCSeq ?? Math.floor(Math.random() * 2 ** 30),
      remoteSeq: req.cseq.seq,
      remoteTarget: contact.uri.clone(),
      routeSet: req.recordRoutes.map((r) => r.clone()),
      secure: req.uri.kind === 'sip' && req.uri.scheme === 'sips' && inbound.source.protocol === 'tls',
    });
    d.#inviteTx = tx;
    d.#serverInvite = tx;
    tx.on('cancel', (cancel) => {
      if (d.#state !== 'early') return;
      tx.respond(createResponse(tx.request, 487, undefined, { toTag: d.localTag }));
      d.#emit('cancel', [cancel]);
      d.#terminate('cancelled');
    });
    return d;
  }

  /**
   * UAC: the dialog a 1xx with To tag or a 2xx to our INVITE creates (12.1.2). Route set =
   * Record-Route of the response reversed; remote target = its Contact.
   * @throws SipDialogError SIP_DIALOG_INVALID for anything else.
   */
  static fromResponse(request: SipRequest, response: SipResponse, options: UacDialogOptions): Dialog {
    if (request.method !== 'INVITE' || response.cseq.method !== 'INVITE') throw new SipDialogError('SIP_DIALOG_INVALID', 'not a response to INVITE');
    if (response.status <= 100 || response.status >= 300) throw new SipDialogError('SIP_DIALOG_INVALID', `a ${response.status} creates no dialog`);
    const remoteTag = response.to.tag;
    const localTag = request.from.tag;
    if (remoteTag === undefined || localTag === undefined) throw new SipDialogError('SIP_DIALOG_INVALID', 'response without To tag');
    const contact = response.contacts[0];
    if (contact === undefined && response.status >= 200) throw new SipDialogError('SIP_DIALOG_INVALID', '2xx without Contact');
    const local = withoutTag(request.from);
    const ourContact = options.localContact ?? request.contacts[0];
    if (ourContact === undefined) throw new SipDialogError('SIP_DIALOG_INVALID', 'INVITE without Contact');
    return new Dialog(options, {
      role: 'uac',
      state: response.status >= 200 ? 'confirmed' : 'early',
      callId: request.callId,
      localTag,
      remoteTag,
      local,
      remote: withoutTag(request.to),
      localContact: toNameAddr(ourContact, local),
      localSeq: request.cseq.seq,
      remoteSeq: undefined,
      remoteTarget: (contact?.uri ?? request.uri).clone(),
      routeSet: response.recordRoutes.map((r) => r.clone()).reverse(),
      secure: request.uri.kind === 'sip' && request.uri.scheme === 'sips',
    });
  }

  get state(): DialogState {
    return this.#state;
  }

  get terminated(): boolean {
    return this.#state === 'terminated';
  }

  get closed(): boolean {
    return this.#state === 'terminated';
  }

  get key(): string {
    return dialogKey(this.callId, this.localTag, this.remoteTag);
  }

  /** True while a 2xx of ours waits for its ACK. */
  get awaitingAck(): boolean {
    return this.#pending !== undefined;
  }

  /** Where the next in-dialog request (or ACK) goes: the first Route if loose, else the remote target (12.2.1.1). */
  nextHop(): Endpoint {
    const first = this.routeSet[0];
    if (first !== undefined) {
      if (first.uri.kind === 'sip' && !first.uri.lr) {
        throw new SipDialogError('SIP_DIALOG_STRICT_ROUTE', 'the route set starts with a strict router (no lr); strict routing is not supported');
      }
      return endpointFromUri(first.uri);
    }
    return endpointFromUri(this.remoteTarget);
  }

  // --- UAS ---------------------------------------------------------------------------------

  /** UAS: a 1xx (default 180) with our tag, Contact and the Record-Route (early dialog, 12.1.1). */
  provisional(status = 180, opts: BodyOptions = {}): SipResponse {
    const tx = this.#requireInviteTx();
    if (status <= 100 || status >= 200) throw new RangeError(`provisional status ${status}`);
    const res = this.#buildResponse(tx, status, undefined, opts, true);
    tx.respond(res);
    return res;
  }

  /** UAS: the same 1xx again (a reliable provisional response's retransmission, RFC 3262 3). */
  resendProvisional(res: SipResponse): void {
    this.#requireInviteTx().respond(res);
  }

  /**
   * UAS: a 2xx to the dialog-creating INVITE or, with `tx`, to a re-INVITE, retransmitted at
   * T1, 2*T1 ... T2 until its ACK arrives (13.3.1.4: end to end, on every transport). Without
   * ACK for 64*T1 the dialog sends BYE, emits 'ack-timeout' and terminates.
   */
  answer(opts: AnswerOptions = {}, tx: ServerTransaction | undefined = this.#inviteTx): SipResponse {
    if (this.#state === 'terminated') throw new SipDialogError('SIP_DIALOG_TERMINATED', 'dialog terminated');
    if (tx === undefined || tx.request.method !== 'INVITE') throw new SipDialogError('SIP_DIALOG_INVALID', 'no INVITE to answer');
    const status = opts.status ?? 200;
    if (status < 200 || status >= 300) throw new RangeError(`answer status ${status}`);
    const res = this.#buildResponse(tx, status, opts.reason, opts, tx === this.#inviteTx);
    tx.respond(res);
    if (tx === this.#inviteTx) this.#inviteTx = undefined;
    if (this.#serverInvite === tx) this.#serverInvite = undefined;
    this.#stopRetransmit();
    const { T1, T2 } = this.#layer.timerValues(false);
    const p: Pending2xx = { seq: tx.request.cseq.seq, tx, response: res, interval: T1, retransmit: undefined, deadline: undefined };
    this.#pending = p;
    const tick = (): void => {
      if (this.#pending !== p) return;
      p.tx.respond(p.response);
      p.interval = Math.min(p.interval * 2, T2);
      p.retransmit = this.#clock.setTimeout(tick, p.interval);
    };
    p.retransmit = this.#clock.setTimeout(tick, T1);
    p.deadline = this.#clock.setTimeout(() => {
      if (this.#pending !== p) return;
      this.#stopRetransmit();
      this.#logger?.warn({ callId: this.callId }, 'no ACK for 2xx within 64*T1: sending BYE');
      this.#emit('ack-timeout', []);
      this.#byeReason = 'ack-timeout';
      this.#trySend('BYE');
      this.#terminate('ack-timeout');
    }, 64 * T1);
    this.#confirm();
    return res;
  }

  /** UAS: a 3xx-6xx to the dialog-creating INVITE; the early dialog ends. */
  reject(status: number, opts: AnswerOptions = {}): SipResponse {
    const tx = this.#requireInviteTx();
    if (status < 300 || status > 699) throw new RangeError(`reject status ${status}`);
    const res = this.#buildResponse(tx, status, opts.reason, opts, false);
    tx.respond(res);
    this.#inviteTx = undefined;
    this.#serverInvite = undefined;
    this.#terminate('rejected');
    return res;
  }

  // --- UAC ---------------------------------------------------------------------------------

  /**
   * UAC: takes a later 1xx/2xx of the same dialog: a 2xx confirms an early dialog and the route
   * set and remote target are recomputed from it (13.2.2.4).
   */
  update(response: SipResponse): void {
    if (this.role !== 'uac' || this.#state !== 'early') return;
    if (response.status >= 200 && response.status < 300) {
      this.routeSet = response.recordRoutes.map((r) => r.clone()).reverse();
      const c = response.contacts[0];
      if (c !== undefined) this.remoteTarget = c.uri.clone();
      this.#confirm();
    } else if (response.status >= 300) {
      this.#terminate('rejected');
    }
  }

  /**
   * UAC: the ACK for a 2xx to our (re-)INVITE (13.2.2.4): Request-URI the remote target, Route
   * the route set, the INVITE's CSeq number, sent to the next hop with `layer.sendAck()`. The
   * same ACK is re-sent for retransmissions of that 2xx (including those arriving as 'stray').
   */
  ack(response: SipResponse, opts: BodyOptions = {}): SipRequest {
    if (response.status < 200 || response.status >= 300 || response.cseq.method !== 'INVITE') {
      throw new SipDialogError('SIP_DIALOG_INVALID', 'only a 2xx to INVITE is ACKed by the dialog');
    }
    if (this.#state === 'early') this.update(response);
    const seq = response.cseq.seq;
    let ack = this.#acks.get(seq);
    if (ack === undefined) {
      ack = createRequest({
        method: 'ACK',
        uri: this.remoteTarget.clone(),
        from: this.#localWithTag(),
        to: this.#remoteWithTag(),
        callId: this.callId,
        cseq: seq,
        routes: this.routeSet.map((r) => r.clone()),
        headers: opts.headers,
        body: opts.body,
        contentType: opts.contentType,
      });
      this.#acks.set(seq, ack);
    }
    this.#layer.sendAck(ack, this.nextHop()).catch((err: unknown) => this.#logger?.debug({ err, callId: this.callId }, 'ACK not sent'));
    return ack;
  }

  /**
   * UAC: re-ACK the 2xx retransmissions of the dialog-creating INVITE that its transaction still
   * passes up (Accepted, RFC 6026); after Timer M they come as 'stray' and the manager does it.
   */
  watch(tx: ClientTransaction): void {
    this.#watch(tx, false);
  }

  #watch(tx: ClientTransaction, targetRefresh: boolean): void {
    tx.on('response', (res) => {
      if (res.status < 200 || res.status >= 300 || this.#state === 'terminated') return;
      if (res.to.tag !== undefined && res.to.tag !== this.remoteTag) return; // another fork: not this dialog
      if (targetRefresh) {
        const c = res.contacts[0];
        if (c !== undefined) this.remoteTarget = c.uri.clone();
      }
      // A retransmission of a 2xx we ACKed already: the same ACK again (13.2.2.4).
      if (res.cseq.method === 'INVITE' && this.#acks.has(res.cseq.seq)) this.ack(res);
    });
  }

  /** Whether an ACK for the INVITE with this CSeq number has been sent. */
  hasAcked(seq: number): boolean {
    return this.#acks.has(seq);
  }

  // --- in-dialog requests ------------------------------------------------------------------

  /**
   * An in-dialog request (12.2.1.1): Request-URI the remote target, Route the route set, From /
   * To with the tags, the Call-ID, the next CSeq, Contact for target refreshes; sent to the next
   * hop. BYE terminates the dialog at once; a 481 or 408 to any request terminates it (12.2.1.2);
   * a 2xx to a target refresh replaces the remote target. INVITE's 2xx must be `ack()`ed.
   * @throws SipDialogError SIP_DIALOG_TERMINATED, SIP_DIALOG_STRICT_ROUTE, SIP_DIALOG_DESTINATION
   */
  request(method: InDialogMethod, opts: BodyOptions = {}): ClientTransaction {
    if (this.#state === 'terminated') throw new SipDialogError('SIP_DIALOG_TERMINATED', `dialog terminated: cannot send ${method}`);
    const req = this.#build(method, opts);
    const destination = this.nextHop();
    const tx = this.#layer.sendRequest(req, destination);
    if (method === 'INVITE') this.#clientInvite = tx;
    this.#watch(tx, TARGET_REFRESH.has(method));
    tx.on('final', (res) => {
      if (this.#clientInvite === tx) this.#clientInvite = undefined;
      // RFC 5057 5.6: a 481 to a request of a subscription usage (NOTIFY, SUBSCRIBE, REFER)
      // ends that usage only; the invite usage (the call) goes on.
      if (res.status === 481 && SUBSCRIPTION_USAGE.has(method)) return;
      if (res.status === 481 || res.status === 408) this.#gone(method, res.status === 408);
    });
    tx.on('timeout', () => {
      if (this.#clientInvite === tx) this.#clientInvite = undefined;
      this.#gone(method, true);
    });
    if (method === 'BYE') this.#terminate(this.#byeReason);
    return tx;
  }

  /** Sends BYE (15.1.1) and terminates; undefined when already terminated. */
  bye(opts: BodyOptions = {}): ClientTransaction | undefined {
    if (this.#state === 'terminated') return undefined;
    return this.request('BYE', opts);
  }

  /** Ends the dialog locally without sending anything (the manager's close(), shutdown). Idempotent. */
  close(): void {
    this.#terminate('closed');
  }

  // --- inbound (called by DialogManager) --------------------------------------------------

  /** @internal An ACK for this dialog (no transaction). */
  receiveAck(inbound: Inbound<SipRequest>): void {
    const p = this.#pending;
    if (p === undefined || inbound.message.cseq.seq !== p.seq) return; // ACK retransmission or stale
    this.#stopRetransmit();
    this.#emit('ack', [inbound]);
  }

  /** @internal A 2xx that matched no client transaction (after Timer M): re-ACK if we ACKed it before. */
  receiveStray(inbound: Inbound<SipResponse>): void {
    const res = inbound.message;
    if (this.#acks.has(res.cseq.seq)) this.ack(res);
  }

  /** @internal An in-dialog request (12.2.2). */
  receiveRequest(tx: ServerTransaction, inbound: Inbound<SipRequest>): void {
    const req = inbound.message;
    if (this.#state === 'terminated') {
      tx.respond(createResponse(req, 481));
      return;
    }
    const seq = req.cseq.seq;
    if (this.remoteSeq !== undefined && seq <= this.remoteSeq) {
      tx.respond(createResponse(req, 500, 'Server Internal Error', { headers: [['Warning', '399 callbridge "CSeq out of order"']] }));
      return;
    }
    this.remoteSeq = seq;
    if (req.method === 'BYE') {
      tx.respond(createResponse(req, 200));
      this.#emit('bye', [tx, inbound]);
      this.#terminate('bye-received');
      return;
    }
    if (req.method === 'INVITE') {
      // 14.2 glare: our own re-INVITE pending -> 491; theirs still unanswered -> 500 + Retry-After.
      if (this.#clientInvite !== undefined && !this.#clientInvite.terminated && this.#clientInvite.final === undefined) {
        tx.respond(createResponse(req, 491));
        return;
      }
      if (this.#serverInvite !== undefined && this.#serverInvite.finalResponse === undefined) {
        tx.respond(createResponse(req, 500, undefined, { headers: [['Retry-After', String(Math.floor(Math.random() * 10))]] }));
        return;
      }
      this.#serverInvite = tx;
    }
    if (TARGET_REFRESH.has(req.method)) {
      const c = req.contacts[0];
      if (c !== undefined) this.remoteTarget = c.uri.clone();
    }
    const event = EVENT_OF[req.method];
    if (event === undefined || this.listenerCount(event) === 0) {
      // Nobody handles it: OPTIONS is answered 200; an offer we cannot take 488; a PRACK acknowledges
      // no reliable provisional response of ours, 481 (RFC 3262 3); the rest 501.
      const status = req.method === 'OPTIONS' ? 200 : req.method === 'INVITE' || req.method === 'UPDATE' ? 488 : req.method === 'PRACK' ? 481 : 501;
      tx.respond(createResponse(req, status));
      return;
    }
    if (this.#emit(event, [tx, inbound]) && tx.finalResponse === undefined) tx.respond(createResponse(req, 500));
  }

  // --- internals ---------------------------------------------------------------------------

  #requireInviteTx(): ServerTransaction {
    if (this.role !== 'uas' || this.#state !== 'early' || this.#inviteTx === undefined) {
      throw new SipDialogError('SIP_DIALOG_INVALID', 'no unanswered INVITE in this dialog');
    }
    return this.#inviteTx;
  }

  #buildResponse(tx: ServerTransaction, status: number, reason: string | undefined, opts: BodyOptions, copyRecordRoute: boolean): SipResponse {
    return createResponse(tx.request, status, reason, {
      toTag: this.localTag,
      copyRecordRoute,
      headers: [...(status < 300 ? ([['Contact', this.localContact.clone()]] as [string, HeaderValue][]) : []), ...(opts.headers ?? [])],
      body: opts.body,
      contentType: opts.contentType,
    });
  }

  #localWithTag(): NameAddr {
    const n = this.local.clone();
    n.tag = this.localTag;
    return n;
  }

  #remoteWithTag(): NameAddr {
    const n = this.remote.clone();
    if (this.remoteTag !== '') n.tag = this.remoteTag;
    return n;
  }

  #build(method: string, opts: BodyOptions): SipRequest {
    this.localSeq = (this.localSeq + 1) % 2 ** 32;
    return createRequest({
      method,
      uri: this.remoteTarget.clone(),
      from: this.#localWithTag(),
      to: this.#remoteWithTag(),
      callId: this.callId,
      cseq: this.localSeq,
      routes: this.routeSet.map((r) => r.clone()),
      contact: TARGET_REFRESH.has(method) ? this.localContact.clone() : undefined,
      headers: opts.headers,
      body: opts.body,
      contentType: opts.contentType,
    });
  }

  /**
   * The peer did not answer an in-dialog request (408 or timeout) or no longer knows the dialog
   * (481): the dialog ends (12.2.1.2). After a 408/timeout a BYE is still sent, so a peer that is
   * only slow (RFC 4028 10: a failed session refresh) releases the call too; never for a BYE.
   */
  #gone(method: string, sendBye: boolean): void {
    if (this.#state === 'terminated') return;
    if (sendBye && method !== 'BYE') {
      this.#byeReason = 'remote-gone';
      this.#trySend('BYE');
    }
    this.#terminate('remote-gone');
  }

  /** Sends a request from inside the dialog's own machinery, logging instead of throwing. */
  #trySend(method: InDialogMethod): void {
    try {
      this.request(method);
    } catch (err) {
      this.#logger?.warn({ err, callId: this.callId }, `${method} not sent`);
    }
  }

  #confirm(): void {
    if (this.#state !== 'early') return;
    this.#state = 'confirmed';
    this.#emit('confirmed', []);
  }

  #stopRetransmit(): void {
    const p = this.#pending;
    if (p === undefined) return;
    this.#pending = undefined;
    this.#clock.clearTimeout(p.retransmit);
    this.#clock.clearTimeout(p.deadline);
  }

  #terminate(reason: DialogTerminationReason): void {
    if (this.#state === 'terminated') return;
    this.#state = 'terminated';
    this.#stopRetransmit();
    this.#emit('terminated', [reason]);
  }

  #emit<K extends keyof DialogEvents>(event: K, args: DialogEvents[K]): boolean {
    return safeEmit(this as unknown as EventEmitter, event, args, this.#logger);
  }
}

export type DialogManagerEvents = {
  /** A request without To tag (out of dialog): the UAS core's (answer it, or create a dialog with `fromInvite`). */
  'new-request': [tx: ServerTransaction, inbound: Inbound<SipRequest>];
  /** A dialog was added. */
  dialog: [dialog: Dialog];
};

/**
 * Owns the dialogs, keyed by Call-ID + local tag + remote tag, and takes the TransactionLayer's
 * 'request', 'ack' and 'stray' events: requests with a To tag go to their dialog (481 when there
 * is none, 12.2.2), ACKs stop their 2xx's retransmission, stray 2xx are re-ACKed; requests without
 * To tag are 'new-request' (503 when nobody listens).
 */
export class DialogManager extends EventEmitter<DialogManagerEvents> {
  readonly #ctx: DialogContext;
  readonly #dialogs = new Map<string, Dialog>();
  #closed = false;
  readonly #onRequest = (tx: ServerTransaction, inbound: Inbound<SipRequest>): void => this.#request(tx, inbound);
  readonly #onAck = (inbound: Inbound<SipRequest>): void => {
    const m = inbound.message;
    this.#dialogs.get(dialogKey(m.callId, m.to.tag ?? '', m.from.tag ?? ''))?.receiveAck(inbound);
  };
  readonly #onStray = (inbound: Inbound<SipResponse>): void => {
    const m = inbound.message;
    if (m.status < 200 || m.status >= 300 || m.cseq.method !== 'INVITE') return;
    this.#dialogs.get(dialogKey(m.callId, m.from.tag ?? '', m.to.tag ?? ''))?.receiveStray(inbound);
  };

  constructor(ctx: DialogContext) {
    super();
    this.#ctx = ctx;
    ctx.layer.on('request', this.#onRequest);
    ctx.layer.on('ack', this.#onAck);
    ctx.layer.on('stray', this.#onStray);
  }

  get closed(): boolean {
    return this.#closed;
  }

  get size(): number {
    return this.#dialogs.size;
  }

  get dialogs(): Dialog[] {
    return [...this.#dialogs.values()];
  }

  get(callId: string, localTag: string, remoteTag: string): Dialog | undefined {
    return this.#dialogs.get(dialogKey(callId, localTag, remoteTag));
  }

  /** UAS: `Dialog.fromInvite` with this manager's layer and clock, registered. */
  fromInvite(tx: ServerTransaction, inbound: Inbound<SipRequest>, opts: Omit<UasDialogOptions, keyof DialogContext>): Dialog {
    return this.#add(Dialog.fromInvite(tx, inbound, { ...this.#ctx, ...opts }));
  }

  /** UAC: the dialog of this 1xx/2xx (an existing one is updated and returned, e.g. early -> confirmed). */
  fromResponse(request: SipRequest, response: SipResponse, opts: Omit<UacDialogOptions, keyof DialogContext> = {}): Dialog {
    const existing = this.#dialogs.get(dialogKey(request.callId, request.from.tag ?? '', response.to.tag ?? ''));
    if (existing !== undefined) {
      existing.update(response);
      return existing;
    }
    return this.#add(Dialog.fromResponse(request, response, { ...this.#ctx, ...opts }));
  }

  /** Detaches from the layer and closes every dialog (no BYE: call `bye()` first for that). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#ctx.layer.off('request', this.#onRequest);
    this.#ctx.layer.off('ack', this.#onAck);
    this.#ctx.layer.off('stray', this.#onStray);
    for (const d of [...this.#dialogs.values()]) d.close();
    this.#dialogs.clear();
  }

  #add(d: Dialog): Dialog {
    if (this.#closed) {
      d.close();
      throw new SipDialogError('SIP_DIALOG_TERMINATED', 'dialog manager closed');
    }
    this.#dialogs.set(d.key, d);
    d.once('terminated', () => {
      if (this.#dialogs.get(d.key) === d) this.#dialogs.delete(d.key);
    });
    safeEmit(this as unknown as EventEmitter, 'dialog', [d], this.#ctx.logger);
    return d;
  }

  #request(tx: ServerTransaction, inbound: Inbound<SipRequest>): void {
    const req = inbound.message;
    const toTag = req.to.tag;
    if (toTag === undefined) {
      if (this.listenerCount('new-request') === 0) {
        tx.respond(createResponse(req, 503));
        return;
      }
      const threw = safeEmit(this as unknown as EventEmitter, 'new-request', [tx, inbound], this.#ctx.logger);
      if (threw && tx.finalResponse === undefined) tx.respond(createResponse(req, 500));
      return;
    }
    const d = this.#dialogs.get(dialogKey(req.callId, toTag, req.from.tag ?? ''));
    if (d === undefined) {
      tx.respond(createResponse(req, 481));
      return;
    }
    d.receiveRequest(tx, inbound);
  }
}
