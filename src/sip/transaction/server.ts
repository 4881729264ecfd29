/**
 * A server transaction as the TU sees it (RFC 3261 17.2): created by the TransactionLayer for each
 * new request and handed to the TU with the 'request' event. The TU answers with respond(); the
 * transaction sends the response, retransmits it on UDP (3xx-6xx to an INVITE, Timer G), answers
 * retransmitted requests with the last response, absorbs the ACK of a non-2xx final, and sends
 * 100 Trying for an INVITE the TU has not answered within 200 ms.
 *
 *   layer.on('request', (tx, inbound) => {
 *     tx.on('cancel', () => tx.respond(createResponse(tx.request, 487, undefined, { toTag })));
 *     tx.respond(createResponse(tx.request, 180, undefined, { toTag }));
 *   });
 *
 * After a 2xx to an INVITE the transaction is Accepted (RFC 6026 7.1): the TU (dialog layer)
 * retransmits the 2xx by calling respond() again until the ACK comes ('ack' event of the layer);
 * retransmitted INVITEs are absorbed meanwhile.
 */
import { EventEmitter } from 'node:events';
import { SipTransactionError } from '../message/index.ts';
import type { SipRequest, SipResponse } from '../message/index.ts';
import { emitSafely, MachineRunner, sendSafely, type LayerContext, type Runner } from './runner.ts';
import { serverInviteStep, startServerInvite, type ServerInviteState } from './server-invite.ts';
import { serverNonInviteStep, startServerNonInvite, type ServerNonInviteState } from './server-noninvite.ts';
import type { TimerValues } from './timers.ts';
import type { TxAction } from './types.ts';
import type { Inbound } from '../transport/index.ts';

export type ServerTransactionEvents = {
  /**
   * A CANCEL matched this INVITE transaction before its final response (RFC 3261 9.2). The layer
   * has answered the CANCEL 200; the TU answers the INVITE 487 Request Terminated. Without a
   * listener the layer sends that 487 itself.
   */
  cancel: [cancel: Inbound<SipRequest>];
  /** Timer H fired: the ACK for a 3xx-6xx never came (17.2.1). */
  timeout: [error: SipTransactionError];
  /** The transport could not send a response. */
  'transport-error': [error: SipTransactionError];
  terminated: [];
};

export class ServerTransaction extends EventEmitter<ServerTransactionEvents> {
  readonly kind: 'server-invite' | 'server-non-invite';
  /** The request that created the transaction. */
  readonly request: SipRequest;
  /** It as received: source, local listener, connection. Responses go back along it. */
  readonly inbound: Inbound<SipRequest>;

  readonly #ctx: LayerContext;
  readonly #runner: Runner;
  readonly #inbound = new WeakMap<SipRequest, Inbound<SipRequest>>();
  readonly #start: () => void;
  #last: SipResponse | undefined;
  #final: SipResponse | undefined;

  /** @internal Created by the TransactionLayer. */
  constructor(ctx: LayerContext, inbound: Inbound<SipRequest>, t: TimerValues) {
    super();
    this.#ctx = ctx;
    this.inbound = inbound;
    this.request = inbound.message;
    this.kind = this.request.method === 'INVITE' ? 'server-invite' : 'server-non-invite';
    const host = { timers: ctx.timers, execute: (a: TxAction) => this.#execute(a), onTerminated: () => this.#onTerminated() };
    if (this.kind === 'server-invite') {
      const runner = new MachineRunner<ServerInviteState>(serverInviteStep, host);
      this.#runner = runner;
      this.#start = () => runner.start(startServerInvite(this.request, t));
    } else {
      const runner = new MachineRunner<ServerNonInviteState>(serverNonInviteStep, host);
      this.#runner = runner;
      this.#start = () => runner.start(startServerNonInvite(this.request, t));
    }
  }

  /** @internal Enters Proceeding / Trying (the 100 Trying timer of an INVITE starts). */
  begin(): void {
    this.#start();
  }

  /** @internal A request matched to this transaction: a retransmission, or an ACK (17.2.3). */
  receive(inbound: Inbound<SipRequest>): void {
    this.#inbound.set(inbound.message, inbound);
    this.#runner.input({ kind: 'request', request: inbound.message });
  }

  get method(): string {
    return this.request.method;
  }

  /** The state of the RFC figure: Trying, Proceeding, Completed, Confirmed, Accepted, Terminated. */
  get state(): string {
    return this.#runner.stateName;
  }

  get terminated(): boolean {
    return this.#runner.terminated;
  }

  get closed(): boolean {
    return this.#runner.terminated;
  }

  /** The last response sent (provisional or final). */
  get lastResponse(): SipResponse | undefined {
    return this.#last;
  }

  /** The final response sent, if any. */
  get finalResponse(): SipResponse | undefined {
    return this.#final;
  }

  /** The To tag of the last response sent, if it had one (the CANCEL's 200 reuses it, 9.2). */
  get toTag(): string | undefined {
    return this.#last?.to.tag;
  }

  /**
   * Passes a response to the transaction, which sends it if its state allows (RFC 3261 17.2):
   * provisional responses before the final one; one final response (a later one is discarded,
   * 17.2.2); for an INVITE in Accepted, the TU's retransmissions of the 2xx (RFC 6026 7.1). A
   * response the state does not allow, or one given after the transaction ended, is dropped.
   * @throws TypeError when the response's CSeq method is not the request's.
   */
  respond(response: SipResponse): void {
    if (response.cseq.method !== this.request.method) {
      throw new TypeError(`a response with CSeq method ${response.cseq.method} does not belong to a ${this.request.method} transaction`);
    }
    if (this.#runner.terminated) {
      this.#ctx.logger?.debug({ status: response.status, method: this.request.method }, 'response to a terminated server transaction dropped');
      return;
    }
    this.#runner.input({ kind: 'tu-response', response });
  }

  /** Ends the transaction now, without waiting for its timers. Idempotent. */
  close(): void {
    this.#runner.kill();
  }

  #execute(a: TxAction): void {
    const ctx = this.#ctx;
    switch (a.type) {
      case 'send-response': {
        const r = a.response;
        if (a.retransmission) ctx.stats.retransmissions.responses++;
        this.#last = r;
        if (r.status >= 200 && this.#final === undefined) this.#final = r;
        sendSafely(ctx.transport, r, this.inbound.source, this.inbound.connectionId, (err) => {
          ctx.stats.transportErrors++;
          ctx.logger?.debug({ err, status: r.status, method: this.request.method }, 'transport failed to send a response');
          this.#runner.input({ kind: 'transport-error', error: err });
        });
        break;
      }
      case 'pass-ack': {
        const inbound = this.#inbound.get(a.request);
        if (inbound) ctx.passAck(inbound);
        break;
      }
      case 'timeout': {
        ctx.stats.timeouts.H++;
        const error = new SipTransactionError('SIP_TX_TIMEOUT', `no ACK for the ${this.#final?.status ?? ''} response to INVITE (Timer ${a.timer})`, {
          status: 408,
          timer: a.timer,
        });
        this.#emit('timeout', [error]);
        break;
      }
      case 'transport-error': {
        const error = new SipTransactionError('SIP_TX_TRANSPORT', `the transport could not send a response to ${this.request.method}`, { status: 503, cause: a.error });
        this.#emit('transport-error', [error]);
        break;
      }
      default:
        break;
    }
  }

  #onTerminated(): void {
    this.#ctx.terminated(this, this.kind);
    this.#emit('terminated', []);
  }

  #emit<K extends keyof ServerTransactionEvents>(event: K, args: ServerTransactionEvents[K]): void {
    emitSafely(this as unknown as EventEmitter, event, args, this.#ctx.logger);
  }
}
