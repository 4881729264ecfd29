/**
 * A client transaction as the TU sees it (RFC 3261 17.1): created by TransactionLayer.sendRequest,
 * it sends the request (and retransmits it on UDP), passes responses up as events, ACKs 3xx-6xx
 * responses to an INVITE itself (17.1.1.3), and can CANCEL an INVITE (9.1).
 *
 *   const tx = layer.sendRequest(invite, { protocol: 'udp', address: '203.0.113.5', port: 5060 });
 *   tx.on('provisional', (res) => ...);          // 1xx
 *   tx.on('response', (res) => ...);             // every response passed up, later 2xx included
 *   const final = await tx.finalResponse;        // first final, or a local 408 / 503 / 487
 *   if (tx.error) ...                            // set when that final response was local
 *   tx.cancel();                                 // INVITE only: CANCEL once a 1xx arrived
 */
import { EventEmitter } from 'node:events';
import { SipTransactionError } from '../message/index.ts';
import { createResponse, type SipRequest, type SipResponse } from '../message/index.ts';
import { buildAck, buildCancel, clientInviteStep, startClientInvite, type ClientInviteState } from './client-invite.ts';
import { clientNonInviteStep, startClientNonInvite, type ClientNonInviteState } from './client-noninvite.ts';
import { emitSafely, MachineRunner, sendSafely, type LayerContext, type Runner } from './runner.ts';
import type { TimerValues } from './timers.ts';
import { statusClass, type TxAction } from './types.ts';
import type { Endpoint, Inbound } from '../transport/index.ts';

export type ClientTransactionEvents = {
  /** Every response the transaction passes to the TU: provisional, the final, and later 2xx (RFC 6026 7.2). */
  response: [response: SipResponse, inbound: Inbound<SipResponse> | undefined];
  /** A 1xx. */
  provisional: [response: SipResponse, inbound: Inbound<SipResponse> | undefined];
  /** The first final response received (once). Later 2xx to an INVITE come as 'response' only. */
  final: [response: SipResponse, inbound: Inbound<SipResponse> | undefined];
  /** Timer B or F fired (the TU treats it as 408), or a CANCELled INVITE got no final response (487). */
  timeout: [error: SipTransactionError];
  /**
   * The transport could not send the request (the TU treats it as 503). After a 3xx-6xx 'final'
   * it can only concern the ACK (RFC 3261 figure 5, Completed): informational, `finalResponse`
   * keeps the final response.
   */
  'transport-error': [error: SipTransactionError];
  /** The transaction is over; responses that arrive now are stray. */
  terminated: [];
};

export interface CancelOptions {
  /** Extra header fields of the CANCEL, e.g. [['Reason', 'SIP;cause=487;text="timeout"']] (RFC 3326). */
  headers?: [string, string][];
}

export class ClientTransaction extends EventEmitter<ClientTransactionEvents> {
  readonly kind: 'client-invite' | 'client-non-invite';
  readonly request: SipRequest;
  readonly destination: Endpoint;
  /** The branch of the request's top Via: with the CSeq method, the transaction's identity (17.1.3). */
  readonly branch: string;
  /**
   * Resolves with the first final response -- or, when there is none, with a local one the TU
   * handles as if it had been received: 408 on timeout (RFC 3261 8.1.3.1), 503 on a transport
   * error (8.1.3.1) or when the layer closes, 487 when a CANCELled INVITE got no final response
   * within 64*T1 (9.1). `error` tells the local ones apart. Never rejects.
   */
  readonly finalResponse: Promise<SipResponse>;

  readonly #ctx: LayerContext<ClientTransaction>;
  readonly #runner: Runner;
  readonly #inbound = new WeakMap<SipResponse, Inbound<SipResponse>>();
  #resolve: (r: SipResponse) => void = () => {};
  #final: SipResponse | undefined;
  #error: SipTransactionError | undefined;
  #settled = false;
  #ack: SipRequest | undefined;
  #cancelHeaders: [string, string][] = [];
  #cancelTx: ClientTransaction | undefined;
  readonly #start: () => void;

  /** @internal Created by TransactionLayer.sendRequest, which gives the request its Via. */
  constructor(ctx: LayerContext<ClientTransaction>, request: SipRequest, destination: Endpoint, t: TimerValues) {
    super();
    this.#ctx = ctx;
    this.request = request;
    this.destination = destination;
    this.branch = request.topVia?.branch ?? '';
    this.kind = request.method === 'INVITE' ? 'client-invite' : 'client-non-invite';
    this.finalResponse = new Promise((resolve) => {
      this.#resolve = resolve;
    });
    const host = { timers: ctx.timers, execute: (a: TxAction) => this.#execute(a), onTerminated: () => this.#onTerminated() };
    if (this.kind === 'client-invite') {
      const runner = new MachineRunner<ClientInviteState>(clientInviteStep, host);
      this.#runner = runner;
      this.#start = () => runner.start(startClientInvite(t));
    } else {
      const runner = new MachineRunner<ClientNonInviteState>(clientNonInviteStep, host);
      this.#runner = runner;
      this.#start = () => runner.start(startClientNonInvite(t));
    }
  }

  /** @internal Sends the request: the machine enters Calling / Trying. */
  begin(): void {
    this.#start();
  }

  /** @internal A response matched to this transaction (17.1.3). */
  receive(inbound: Inbound<SipResponse>): void {
    this.#inbound.set(inbound.message, inbound);
    this.#runner.input({ kind: 'response', response: inbound.message });
  }

  /** The state of the RFC figure: Calling, Trying, Proceeding, Completed, Accepted, Terminated. */
  get state(): string {
    return this.#runner.stateName;
  }

  get terminated(): boolean {
    return this.#runner.terminated;
  }

  /** Same as `terminated` (the lifecycle getter every long-lived object has). */
  get closed(): boolean {
    return this.#runner.terminated;
  }

  /** The first final response received, if any. */
  get final(): SipResponse | undefined {
    return this.#final;
  }

  /** Why the transaction ended without a final response (timeout, transport error, closed). */
  get error(): SipTransactionError | undefined {
    return this.#error;
  }

  /** The non-INVITE client transaction of the CANCEL, once it was sent. */
  get cancelTransaction(): ClientTransaction | undefined {
    return this.#cancelTx;
  }

  /**
   * Cancels an INVITE (RFC 3261 9.1): the CANCEL is built from the INVITE (same Request-URI,
   * Call-ID, To, From, CSeq number, top Via, Route) and sent in its own non-INVITE client
   * transaction to the same destination -- at once when a provisional response has arrived,
   * else as soon as one does. Returns false when it is too late (a final response arrived, or
   * the transaction is over): then nothing is sent. Asking twice sends one CANCEL.
   * @throws TypeError for a transaction that is not an INVITE.
   */
  cancel(options: CancelOptions = {}): boolean {
    if (this.kind !== 'client-invite') throw new TypeError(`a ${this.request.method} cannot be cancelled: only an INVITE (RFC 3261 9.1)`);
    const s = this.#runner.stateName;
    if (s !== 'Calling' && s !== 'Proceeding') return false;
    if (this.#cancelTx === undefined) this.#cancelHeaders = options.headers ?? [];
    this.#runner.input({ kind: 'cancel' });
    return true;
  }

  /**
   * Ends the transaction now, without waiting for its timers: no more retransmissions, responses
   * that arrive later are stray. An unsettled `finalResponse` resolves with a local 503
   * (SIP_TX_CLOSED). Idempotent.
   */
  close(): void {
    this.#runner.kill();
  }

  #execute(a: TxAction): void {
    const ctx = this.#ctx;
    switch (a.type) {
      case 'send-request':
        if (a.retransmission) ctx.stats.retransmissions.requests++;
        this.#send(this.request);
        break;
      case 'send-ack':
        if (a.retransmission) ctx.stats.retransmissions.acks++;
        // One ACK per transaction: a retransmitted final response is the same response, so the
        // ACK sent again is the same one (17.1.1.3).
        this.#ack ??= buildAck(this.request, a.response);
        this.#send(this.#ack);
        break;
      case 'send-cancel':
        this.#sendCancel();
        break;
      case 'pass-response': {
        const r = a.response;
        const inbound = this.#inbound.get(r);
        this.#emit('response', [r, inbound]);
        if (statusClass(r.status) === 1) {
          this.#emit('provisional', [r, inbound]);
        } else if (this.#final === undefined) {
          this.#final = r;
          this.#settle(r);
          this.#emit('final', [r, inbound]);
        }
        break;
      }
      case 'timeout': {
        const timer = a.timer;
        if (timer === 'B' || timer === 'F' || timer === 'H' || timer === 'Cancel') ctx.stats.timeouts[timer]++;
        const cancelled = timer === 'Cancel';
        const status = cancelled ? 487 : 408;
        const error = new SipTransactionError(
          'SIP_TX_TIMEOUT',
          cancelled
            ? `no final response to the CANCELled ${this.request.method} within 64*T1 (RFC 3261 9.1)`
            : `no final response to ${this.request.method} (Timer ${timer})`,
          { status, timer },
        );
        this.#fail(error);
        this.#emit('timeout', [error]);
        break;
      }
      case 'transport-error': {
        const error = new SipTransactionError('SIP_TX_TRANSPORT', `the transport could not send the ${this.request.method}`, { status: 503, cause: a.error });
        this.#fail(error);
        this.#emit('transport-error', [error]);
        break;
      }
      default:
        break;
    }
  }

  #send(message: SipRequest): void {
    sendSafely(this.#ctx.transport, message, this.destination, undefined, (err) => {
      this.#ctx.stats.transportErrors++;
      this.#ctx.logger?.debug({ err, method: message.method, branch: this.branch }, 'transport failed to send a request');
      this.#runner.input({ kind: 'transport-error', error: err });
    });
  }

  #sendCancel(): void {
    try {
      const cancel = buildCancel(this.request, this.#cancelHeaders);
      this.#cancelTx = this.#ctx.sendRequest(cancel, this.destination);
    } catch (err) {
      // The layer is closing: nothing to cancel any more.
      this.#ctx.logger?.debug({ err, branch: this.branch }, 'could not send CANCEL');
    }
  }

  #fail(error: SipTransactionError): void {
    if (this.#settled) return;
    this.#error = error;
    this.#settle(createResponse(this.request, error.status));
  }

  #settle(r: SipResponse): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve(r);
  }

  #onTerminated(): void {
    if (!this.#settled) this.#fail(new SipTransactionError('SIP_TX_CLOSED', `the ${this.request.method} transaction was closed before a final response`, { status: 503 }));
    this.#ctx.terminated(this, this.kind);
    this.#emit('terminated', []);
  }

  #emit<K extends keyof ClientTransactionEvents>(event: K, args: ClientTransactionEvents[K]): void {
    emitSafely(this as unknown as EventEmitter, event, args, this.#ctx.logger);
  }
}
