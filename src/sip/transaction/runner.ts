/**
 * Runs one transaction state machine: feeds it inputs, carries out its actions in order, owns its
 * timers. Inputs that arrive while actions are being carried out (a TU calling respond() or
 * cancel() from inside an event listener, say) are queued and processed once the current step's
 * actions are done, so every step runs to completion in the order the RFC figures give.
 *
 * Also the internal plumbing the transactions share with the layer (not part of the public API):
 * the context a transaction gets from its layer, safe sending and safe event emission.
 */
import type { EventEmitter } from 'node:events';
import { SipTransactionError } from '../message/index.ts';
import type { SipRequest, SipResponse } from '../message/index.ts';
import type { Endpoint, Inbound, SipTransport } from '../transport/index.ts';
import type { TimerName, TimerValues, TransactionTimers } from './timers.ts';
import type { TransactionKind, Transition, TxAction, TxInput } from './types.ts';

/** What the layer logs through: a pino logger fits. */
export interface TransactionLogger {
  debug(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** Counters for metrics; see TransactionLayer.stats(). */
export interface TransactionStats {
  /** Transactions alive now, by kind. */
  active: Record<TransactionKind, number>;
  /** Transactions created since the layer started, by kind. */
  created: Record<TransactionKind, number>;
  /** Timers that ended a transaction without its response (B, F: no final response; H: no ACK; Cancel: RFC 3261 9.1). */
  timeouts: { B: number; F: number; H: number; Cancel: number };
  /** Sends the transport refused or failed. */
  transportErrors: number;
  /** Messages sent again: requests (Timer A, E), responses (Timer G, or to a retransmitted request), ACKs. */
  retransmissions: { requests: number; responses: number; acks: number };
  /** Requests that matched an existing server transaction (retransmissions and non-2xx ACKs). */
  absorbed: number;
  /** Responses that matched no client transaction, passed to the TU as 'stray'. */
  stray: number;
  /** ACKs passed to the TU ('ack' events): ACKs for 2xx. */
  acks: number;
  /** CANCELs received: matched an INVITE server transaction (200), or not (481). */
  cancels: { matched: number; unmatched: number };
}

export function emptyStats(): TransactionStats {
  const kinds = (): Record<TransactionKind, number> => ({ 'client-invite': 0, 'client-non-invite': 0, 'server-invite': 0, 'server-non-invite': 0 });
  return {
    active: kinds(),
    created: kinds(),
    timeouts: { B: 0, F: 0, H: 0, Cancel: 0 },
    transportErrors: 0,
    retransmissions: { requests: 0, responses: 0, acks: 0 },
    absorbed: 0,
    stray: 0,
    acks: 0,
    cancels: { matched: 0, unmatched: 0 },
  };
}

/**
 * What a transaction gets from its layer. @internal
 * `Client` is the client transaction type sendRequest returns (ClientTransaction): a parameter
 * so that this module, which client.ts imports, does not import client.ts back.
 */
export interface LayerContext<Client extends object = object> {
  readonly transport: SipTransport;
  readonly timers: TransactionTimers;
  readonly logger: TransactionLogger | undefined;
  readonly stats: TransactionStats;
  /** The timer values for a reliable or an unreliable transport. */
  timerValues(reliable: boolean): TimerValues;
  /** Starts a client transaction (the CANCEL of an INVITE goes through here). */
  sendRequest(request: SipRequest, destination: Endpoint): Client;
  /** A transaction reached Terminated (or was closed): forget it. */
  terminated(tx: object, kind: TransactionKind): void;
  /** An INVITE server transaction in Accepted passes an ACK to the TU (RFC 6026 7.1). */
  passAck(inbound: Inbound<SipRequest>): void;
}

/** The part of a runner a transaction uses, whatever its machine's state type. */
export interface Runner {
  readonly stateName: string;
  readonly terminated: boolean;
  input(input: TxInput): void;
  /** Ends the transaction without going through the machine (layer closed, transaction closed). */
  kill(): void;
}

/** What a runner needs from the transaction it runs. */
export interface RunnerHost {
  readonly timers: TransactionTimers;
  /** Carries out a send / pass / timeout / transport-error action. Must not throw. */
  execute(action: TxAction): void;
  /** The machine reached Terminated, or kill() was called. Called once. */
  onTerminated(): void;
}

export class MachineRunner<S extends { readonly name: string }> implements Runner {
  #state: S | undefined;
  readonly #step: (s: S, input: TxInput) => Transition<S>;
  readonly #host: RunnerHost;
  readonly #handles = new Map<TimerName, unknown>();
  readonly #queue: TxInput[] = [];
  #busy = false;
  #dead = false;

  constructor(step: (s: S, input: TxInput) => Transition<S>, host: RunnerHost) {
    this.#step = step;
    this.#host = host;
  }

  /** Enters the initial state and carries out its actions. */
  start(initial: Transition<S>): void {
    this.#state = initial.state;
    this.#busy = true;
    try {
      this.#run(initial.actions);
    } finally {
      this.#busy = false;
    }
    this.#drain();
  }

  get state(): S | undefined {
    return this.#state;
  }

  get stateName(): string {
    return this.#dead ? 'Terminated' : (this.#state?.name ?? 'Terminated');
  }

  get terminated(): boolean {
    return this.#dead;
  }

  input(input: TxInput): void {
    if (this.#dead) return;
    this.#queue.push(input);
    if (!this.#busy) this.#drain();
  }

  kill(): void {
    if (this.#dead) return;
    this.#die();
  }

  #drain(): void {
    if (this.#busy) return;
    this.#busy = true;
    try {
      while (this.#queue.length > 0 && !this.#dead && this.#state !== undefined) {
        const next = this.#queue.shift()!;
        const t = this.#step(this.#state, next);
        this.#state = t.state;
        this.#run(t.actions);
      }
    } finally {
      this.#busy = false;
    }
  }

  #run(actions: TxAction[]): void {
    for (const a of actions) {
      if (this.#dead) return;
      switch (a.type) {
        case 'start-timer':
          this.#startTimer(a.timer, a.ms);
          break;
        case 'stop-timer':
          this.#stopTimer(a.timer);
          break;
        case 'terminate':
          this.#die();
          return;
        default:
          this.#host.execute(a);
      }
    }
  }

  #startTimer(timer: TimerName, ms: number): void {
    this.#stopTimer(timer);
    const handle = this.#host.timers.setTimeout(() => {
      if (this.#handles.get(timer) === handle) this.#handles.delete(timer);
      this.input({ kind: 'timer', timer });
    }, ms);
    this.#handles.set(timer, handle);
  }

  #stopTimer(timer: TimerName): void {
    const h = this.#handles.get(timer);
    if (h === undefined) return;
    this.#handles.delete(timer);
    this.#host.timers.clearTimeout(h);
  }

  #die(): void {
    this.#dead = true;
    this.#queue.length = 0;
    for (const h of this.#handles.values()) this.#host.timers.clearTimeout(h);
    this.#handles.clear();
    this.#host.onTerminated();
  }
}

/**
 * Passes a message to the transport; a refusal (thrown at once or rejected later) goes to
 * `onError`, always asynchronously, so a caller that attaches listeners right after creating a
 * transaction does not miss the error.
 */
export function sendSafely(
  transport: SipTransport,
  message: SipRequest | SipResponse,
  destination: Endpoint,
  connectionId: string | undefined,
  onError: (err: unknown) => void,
): void {
  let p: Promise<void>;
  try {
    p = Promise.resolve(transport.send(message, destination, connectionId));
  } catch (err) {
    p = Promise.reject(err);
  }
  p.catch(onError);
}

/** The error logged when a listener throws; each layer names it with its own code. */
export type ListenerErrorFactory = (event: string, cause: unknown) => Error & { code: string };

const transactionListenerError: ListenerErrorFactory = (event, cause) =>
  new SipTransactionError('SIP_TX_LISTENER', `a '${event}' listener threw`, { cause });

/**
 * Calls each listener of an event in turn; a listener that throws is logged (SIP_TX_LISTENER,
 * or the caller's own error) and the others still run. Returns whether one threw.
 */
export function emitSafely(
  emitter: EventEmitter,
  event: string,
  args: unknown[],
  logger: TransactionLogger | undefined,
  listenerError: ListenerErrorFactory = transactionListenerError,
): boolean {
  let threw = false;
  for (const listener of emitter.rawListeners(event)) {
    try {
      (listener as (...a: unknown[]) => unknown).apply(emitter, args);
    } catch (err) {
      threw = true;
      const error = listenerError(event, err);
      logger?.warn({ err: error, code: error.code }, error.message);
    }
  }
  return threw;
}
