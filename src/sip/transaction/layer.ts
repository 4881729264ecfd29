/**
 * The transaction layer (RFC 3261 17) over a SipTransport: it matches what the transport
 * receives to transactions, creates server transactions for new requests, runs client
 * transactions for the requests the TU sends, and handles CANCEL (9.2) on the server side.
 *
 *            TU (dialog / user agent)
 *     'request'  'ack'  'stray'  |  sendRequest()  sendAck()
 *   ---------------------------- | --------------------------------
 *      ServerTransaction (17.2)  |  ClientTransaction (17.1)
 *        matched by 17.2.3       |    matched by 17.1.3
 *   ---------------------------- | --------------------------------
 *            SipTransport (transport/types.ts): 'request' 'response' send()
 *
 * What goes where:
 * - a response matching a client transaction goes to it; any other response is 'stray' (the
 *   dialog layer ACKs 2xx retransmissions that arrive after Timer M with it, RFC 6026 7.2);
 * - a request matching a server transaction goes to it (a retransmission: absorbed, or answered
 *   with the last response; the ACK of a 3xx-6xx: absorbed);
 * - an ACK matching no server transaction, or matching one in Accepted, is an ACK for a 2xx and
 *   goes to the TU as 'ack' (RFC 3261 17.2.3 / 13.3.1.4, RFC 6026 7.1);
 * - a CANCEL gets its own non-INVITE server transaction, answered here: 200 when it matches a
 *   transaction (9.2), 481 when not; a matched INVITE still without final response emits 'cancel'
 *   (the TU answers 487; without a listener the layer does);
 * - any other new request creates a server transaction and goes to the TU as 'request'. With no
 *   'request' listener it is answered 503; a listener that throws before answering gets a 500.
 */
import { EventEmitter } from 'node:events';
import { SipTransactionError } from '../message/index.ts';
import { createResponse, createVia, generateBranch, generateTag, type SipRequest, type SipResponse, type Via } from '../message/index.ts';
import { ClientTransaction } from './client.ts';
import { clientKey, hasRfc3261Branch, legacyAckMatches, legacyKey, serverKey } from './matching.ts';
import { emitSafely, emptyStats, type LayerContext, type TransactionLogger, type TransactionStats } from './runner.ts';
import { ServerTransaction } from './server.ts';
import { resolveTimerConfig, systemTransactionTimers, timerValues, type TimerValues, type TransactionTimerConfig, type TransactionTimers } from './timers.ts';
import type { TransactionKind } from './types.ts';
import type { Endpoint, Inbound, SipTransport } from '../transport/index.ts';

export interface TransactionLayerOptions {
  transport: SipTransport;
  /** T1, T2, T4, Timer D, the 100 Trying delay (timers.ts). */
  timers?: TransactionTimerConfig;
  /** Timer functions; tests pass virtual ones. Default: Node's, unref'd. */
  clock?: TransactionTimers;
  logger?: TransactionLogger;
}

export type TransactionLayerEvents = {
  /** A new request (not an ACK, not a CANCEL): the TU answers through `tx.respond()`. */
  request: [tx: ServerTransaction, inbound: Inbound<SipRequest>];
  /** An ACK for a 2xx (it belongs to no transaction; the dialog layer takes it). */
  ack: [inbound: Inbound<SipRequest>];
  /** A response that matches no client transaction (late 2xx retransmissions, forks, noise). */
  stray: [inbound: Inbound<SipResponse>];
};

export class TransactionLayer extends EventEmitter<TransactionLayerEvents> {
  readonly #transport: SipTransport;
  readonly #ctx: LayerContext<ClientTransaction>;
  readonly #logger: TransactionLogger | undefined;
  readonly #stats = emptyStats();
  readonly #values: { reliable: TimerValues; unreliable: TimerValues };
  /** Client transactions by branch + CSeq method (17.1.3). */
  readonly #clients = new Map<string, ClientTransaction>();
  /** Server transactions of RFC 3261 requests by branch + sent-by + method (17.2.3). */
  readonly #servers = new Map<string, ServerTransaction>();
  /** Server transactions of RFC 2543 requests (no magic cookie) by their request's fields. */
  readonly #legacy = new Map<string, ServerTransaction>();
  /** The RFC 2543 INVITE server transactions, which an ACK is matched to by scanning. */
  readonly #legacyInvites = new Set<ServerTransaction>();
  readonly #keys = new WeakMap<object, { map: Map<string, ClientTransaction | ServerTransaction>; key: string }>();
  #closed = false;

  /** @throws RangeError for unusable timer settings. */
  constructor(options: TransactionLayerOptions) {
    super();
    this.#transport = options.transport;
    this.#logger = options.logger;
    const config = resolveTimerConfig(options.timers);
    this.#values = { reliable: timerValues(config, true), unreliable: timerValues(config, false) };
    const clock = options.clock ?? systemTransactionTimers;
    this.#ctx = {
      transport: this.#transport,
      timers: clock,
      logger: this.#logger,
      stats: this.#stats,
      timerValues: (reliable) => (reliable ? this.#values.reliable : this.#values.unreliable),
      sendRequest: (request, destination) => this.sendRequest(request, destination),
      terminated: (tx, kind) => this.#forget(tx, kind),
      passAck: (inbound) => this.#passAck(inbound),
    };
    this.#transport.on('request', (inbound) => this.#onRequest(inbound));
    this.#transport.on('response', (inbound) => this.#onResponse(inbound));
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The timer values in use for a reliable or unreliable transport. */
  timerValues(reliable: boolean): TimerValues {
    return reliable ? this.#values.reliable : this.#values.unreliable;
  }

  /**
   * Sends a request in a new client transaction (INVITE: 17.1.1; any other method but ACK:
   * 17.1.2) to `destination` (already resolved: RFC 3263 is the caller's).
   *
   * The transaction owns the request's top Via: when the request has none, one is added for the
   * transport's local endpoint of the destination's protocol (with `rport`, RFC 3581); when its
   * top Via has no RFC 3261 branch, or a branch a live client transaction of the same method
   * already uses, it gets a fresh branch. A top Via with an unused RFC 3261 branch is kept (the
   * CANCEL of an INVITE carries the INVITE's).
   * @throws TypeError for an ACK (sendAck) or a CSeq method that is not the request's.
   * @throws SipTransactionError SIP_TX_CLOSED after close().
   * @throws whatever transport.localEndpoint() throws when a Via is needed and there is no listener.
   */
  sendRequest(request: SipRequest, destination: Endpoint): ClientTransaction {
    if (this.#closed) throw new SipTransactionError('SIP_TX_CLOSED', 'the transaction layer is closed');
    const method = request.method;
    if (method === 'ACK') throw new TypeError('an ACK has no client transaction: send it with sendAck() (RFC 3261 17.1.1.3, 13.2.2.4)');
    if (request.cseq.method !== method) throw new TypeError(`CSeq method ${request.cseq.method} is not the request's ${method} (RFC 3261 8.1.1.5)`);
    const via = this.#ensureVia(request, destination);
    if (!via.isRfc3261Branch || this.#clients.has(clientKey(via.branch ?? '', method))) via.branch = generateBranch();
    const key = clientKey(via.branch ?? '', method);
    const tx = new ClientTransaction(this.#ctx, request, destination, this.timerValues(this.#transport.isReliable(destination.protocol)));
    this.#clients.set(key, tx);
    this.#keys.set(tx, { map: this.#clients, key });
    this.#count(tx.kind);
    tx.begin();
    return tx;
  }

  /**
   * Sends an ACK for a 2xx (RFC 3261 13.2.2.4): no transaction, the transport directly. The
   * dialog layer calls it once per 2xx received (retransmissions included). A missing top Via is
   * added as for sendRequest; a Via without a branch gets a fresh one (the ACK for a 2xx is a
   * transaction of its own, 17.1.1.3).
   * Rejects with TypeError when the request is not an ACK, SipTransactionError SIP_TX_CLOSED after
   * close(), and whatever the transport's send() rejects with.
   */
  async sendAck(ack: SipRequest, destination: Endpoint): Promise<void> {
    if (ack.method !== 'ACK') throw new TypeError(`sendAck() sends ACKs, not ${ack.method}`);
    if (this.#closed) throw new SipTransactionError('SIP_TX_CLOSED', 'the transaction layer is closed');
    const via = this.#ensureVia(ack, destination);
    if (via.branch === undefined) via.branch = generateBranch();
    await this.#transport.send(ack, destination);
  }

  /** A copy of the counters (active transactions by kind, timeouts, retransmissions...). */
  stats(): TransactionStats {
    return structuredClone(this.#stats);
  }

  /**
   * Ends every transaction (client transactions resolve `finalResponse` with a local 503,
   * SIP_TX_CLOSED) and ignores what the transport delivers from now on. The transport is not
   * the layer's to close. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const all: (ClientTransaction | ServerTransaction)[] = [...this.#clients.values(), ...this.#servers.values(), ...this.#legacy.values()];
    for (const tx of all) tx.close();
    this.#clients.clear();
    this.#servers.clear();
    this.#legacy.clear();
    this.#legacyInvites.clear();
  }

  // --- receiving --------------------------------------------------------------------------------

  #onResponse(inbound: Inbound<SipResponse>): void {
    if (this.#closed) return;
    const res = inbound.message;
    const branch = res.topVia?.branch;
    const tx = branch === undefined ? undefined : this.#clients.get(clientKey(branch, res.cseq.method));
    if (tx !== undefined && !tx.terminated) {
      tx.receive(inbound);
      return;
    }
    this.#stats.stray++;
    this.#emit('stray', [inbound]);
  }

  #onRequest(inbound: Inbound<SipRequest>): void {
    if (this.#closed) return;
    const req = inbound.message;
    if (req.topVia === undefined) return; // the parser refuses such requests; nothing to answer along
    if (req.method === 'ACK') {
      const tx = this.#findAckTarget(req);
      if (tx !== undefined) {
        // Completed/Confirmed absorb it (the ACK of a 3xx-6xx); Accepted passes it up (passAck).
        if (tx.state !== 'Accepted') this.#stats.absorbed++;
        tx.receive(inbound);
      } else {
        this.#passAck(inbound);
      }
      return;
    }
    const existing = this.#findServer(req, req.method);
    if (existing !== undefined) {
      this.#stats.absorbed++;
      existing.receive(inbound);
      return;
    }
    const tx = this.#createServer(inbound);
    if (req.method === 'CANCEL') {
      this.#onCancel(tx, inbound);
      return;
    }
    if (this.listenerCount('request') === 0) {
      this.#logger?.warn({ method: req.method, callId: req.callId }, "no 'request' listener: answered 503");
      tx.respond(createResponse(req, 503, undefined, { toTag: generateTag() }));
      return;
    }
    const threw = this.#emit('request', [tx, inbound]);
    if (threw && tx.finalResponse === undefined && !tx.terminated) tx.respond(createResponse(req, 500, undefined, { toTag: tx.toTag ?? generateTag() }));
  }

  /**
   * CANCEL (RFC 3261 9.2): find the INVITE transaction it names -- same branch and sent-by, method
   * INVITE (RFC 2543: same Request-URI, tags, Call-ID, CSeq number, top Via) -- answer the CANCEL
   * 200 (481 when there is none) and, when the INVITE has no final response yet, emit 'cancel'.
   * A CANCEL of a non-INVITE request gets 481: UAs do not cancel those (9.2), and they are
   * answered at once anyway.
   */
  #onCancel(cancelTx: ServerTransaction, inbound: Inbound<SipRequest>): void {
    const cancel = inbound.message;
    const target = this.#findServer(cancel, 'INVITE');
    if (target === undefined) {
      this.#stats.cancels.unmatched++;
      cancelTx.respond(createResponse(cancel, 481, undefined, { toTag: generateTag() }));
      return;
    }
    this.#stats.cancels.matched++;
    // 9.2: the To tag of the 200 SHOULD be the one of the INVITE's responses.
    const toTag = target.toTag ?? generateTag();
    cancelTx.respond(createResponse(cancel, 200, undefined, { toTag }));
    if (target.finalResponse !== undefined || target.terminated) return; // no effect (9.2)
    if (target.listenerCount('cancel') > 0) {
      emitSafely(target as unknown as EventEmitter, 'cancel', [inbound], this.#logger);
    } else {
      target.respond(createResponse(target.request, 487, undefined, { toTag }));
    }
  }

  #findServer(req: SipRequest, method: string): ServerTransaction | undefined {
    const via = req.topVia;
    if (via === undefined) return undefined;
    if (via.isRfc3261Branch) return this.#servers.get(serverKey(via, method));
    return this.#legacy.get(legacyKey(req, method));
  }

  #findAckTarget(ack: SipRequest): ServerTransaction | undefined {
    if (hasRfc3261Branch(ack)) return this.#servers.get(serverKey(ack.topVia!, 'INVITE'));
    for (const tx of this.#legacyInvites) {
      if (legacyAckMatches(tx.request, tx.finalResponse, ack)) return tx;
    }
    return undefined;
  }

  #createServer(inbound: Inbound<SipRequest>): ServerTransaction {
    const req = inbound.message;
    const tx = new ServerTransaction(this.#ctx, inbound, this.timerValues(this.#transport.isReliable(inbound.source.protocol)));
    if (hasRfc3261Branch(req)) {
      const key = serverKey(req.topVia!, req.method);
      this.#servers.set(key, tx);
      this.#keys.set(tx, { map: this.#servers, key });
    } else {
      const key = legacyKey(req, req.method);
      this.#legacy.set(key, tx);
      this.#keys.set(tx, { map: this.#legacy, key });
      if (tx.kind === 'server-invite') this.#legacyInvites.add(tx);
    }
    this.#count(tx.kind);
    tx.begin();
    return tx;
  }

  #passAck(inbound: Inbound<SipRequest>): void {
    this.#stats.acks++;
    this.#emit('ack', [inbound]);
  }

  // --- bookkeeping ------------------------------------------------------------------------------

  #ensureVia(request: SipRequest, destination: Endpoint): Via {
    const top = request.topVia;
    if (top !== undefined) return top;
    const local = this.#transport.localEndpoint(destination.protocol);
    request.prepend('Via', createVia(destination.protocol.toUpperCase(), local.address, local.port));
    return request.topVia!;
  }

  #count(kind: TransactionKind): void {
    this.#stats.created[kind]++;
    this.#stats.active[kind]++;
  }

  #forget(tx: object, kind: TransactionKind): void {
    this.#stats.active[kind]--;
    const entry = this.#keys.get(tx);
    if (entry !== undefined && entry.map.get(entry.key) === tx) entry.map.delete(entry.key);
    if (tx instanceof ServerTransaction) this.#legacyInvites.delete(tx);
  }

  #emit<K extends keyof TransactionLayerEvents>(event: K, args: TransactionLayerEvents[K]): boolean {
    return emitSafely(this as unknown as EventEmitter, event, args, this.#logger);
  }
}
