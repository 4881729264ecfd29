/**
 * Test doubles for the transaction layer: an in-memory SipTransport that records what is sent
 * and delivers what a test injects (through a serialize/parse round trip, as a wire would), and
 * virtual timers. The real UDP/TCP transports are tested on their own (test/sip/transport*).
 */
import { EventEmitter } from 'node:events';
import { SipTransportError } from '../../src/sip/message/errors.ts';
import { createRequest, createResponse, createVia, parseMessage, SipRequest, SipResponse, type CreateResponseOptions } from '../../src/sip/message/index.ts';
import type { TransactionTimers } from '../../src/sip/transaction/timers.ts';
import type { Endpoint, Inbound, SipTransport, TransportProtocol } from '../../src/sip/transport/types.ts';

/** Timers on virtual time: nothing fires until advance(). */
export class VirtualClock implements TransactionTimers {
  now = 0;
  #seq = 0;
  readonly #pending = new Map<number, { at: number; cb: () => void }>();

  setTimeout(cb: () => void, ms: number): unknown {
    const id = ++this.#seq;
    this.#pending.set(id, { at: this.now + ms, cb });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.#pending.delete(handle as number);
  }

  /** Moves time forward, firing due timers in order (ties in creation order). */
  advance(ms: number): void {
    const target = this.now + ms;
    for (;;) {
      let best: number | undefined;
      let bestAt = Infinity;
      for (const [id, t] of this.#pending) {
        if (t.at <= target && (t.at < bestAt || (t.at === bestAt && id < best!))) {
          best = id;
          bestAt = t.at;
        }
      }
      if (best === undefined) break;
      const t = this.#pending.get(best)!;
      this.#pending.delete(best);
      this.now = t.at;
      t.cb();
    }
    this.now = target;
  }

  get pending(): number {
    return this.#pending.size;
  }
}

export interface Sent {
  message: SipRequest | SipResponse;
  destination: Endpoint;
  connectionId: string | undefined;
  at: number;
}

export const LOCAL: Endpoint = { protocol: 'udp', address: '192.0.2.1', port: 5060 };
export const PEER: Endpoint = { protocol: 'udp', address: '198.51.100.7', port: 5062 };

/** Serializes and parses again: what a peer receives. */
export function wire<M extends SipRequest | SipResponse>(m: M): M {
  return parseMessage(m.toBuffer()) as M;
}

export class FakeTransport extends EventEmitter implements SipTransport {
  readonly sent: Sent[] = [];
  /** Return true to make send() reject (SIP_TRANSPORT_SEND). */
  failWhen: ((message: SipRequest | SipResponse, destination: Endpoint) => boolean) | undefined;
  /** Throw synchronously instead of rejecting. */
  throwSync = false;
  readonly reliable = new Set<TransportProtocol>(['tcp', 'tls']);

  constructor(readonly clock?: VirtualClock) {
    super();
  }

  isReliable(protocol: TransportProtocol): boolean {
    return this.reliable.has(protocol);
  }

  send(message: SipRequest | SipResponse, destination: Endpoint, connectionId?: string): Promise<void> {
    if (this.failWhen?.(message, destination)) {
      const err = new SipTransportError('SIP_TRANSPORT_SEND', 'fake send failure', { endpoint: destination });
      if (this.throwSync) throw err;
      return Promise.reject(err);
    }
    // Recorded as the wire would carry it.
    this.sent.push({ message: wire(message), destination, connectionId, at: this.clock?.now ?? 0 });
    return Promise.resolve();
  }

  localEndpoint(protocol: TransportProtocol): Endpoint {
    return { ...LOCAL, protocol };
  }

  /** Delivers a request as if received from `source` (received/rport filled in, RFC 3581). */
  deliverRequest(req: SipRequest, source: Endpoint = PEER, connectionId?: string): Inbound<SipRequest> {
    const message = wire(req);
    const via = message.topVia!;
    via.received = source.address;
    if (via.rport === null) via.rport = source.port;
    const inbound: Inbound<SipRequest> = { message, source, local: this.localEndpoint(source.protocol), connectionId };
    this.emit('request', inbound);
    return inbound;
  }

  deliverResponse(res: SipResponse, source: Endpoint = PEER): Inbound<SipResponse> {
    const inbound: Inbound<SipResponse> = { message: wire(res), source, local: this.localEndpoint(source.protocol) };
    this.emit('response', inbound);
    return inbound;
  }

  /** Sent messages, filtered. */
  requests(method?: string): SipRequest[] {
    return this.sent.map((s) => s.message).filter((m): m is SipRequest => m instanceof SipRequest && (method === undefined || m.method === method));
  }

  responses(status?: number): SipResponse[] {
    return this.sent.map((s) => s.message).filter((m): m is SipResponse => m instanceof SipResponse && (status === undefined || m.status === status));
  }

  sentAt(filter: (m: SipRequest | SipResponse) => boolean): number[] {
    return this.sent.filter((s) => filter(s.message)).map((s) => s.at);
  }

  clear(): void {
    this.sent.length = 0;
  }

  async close(): Promise<void> {}
}

/** Lets rejected sends (promises) settle. */
export async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
}

/** A request as a peer would send it to us (its own Via and branch). */
export function peerRequest(
  method: string,
  o: { branch?: string; cseq?: number; callId?: string; fromTag?: string; toTag?: string; protocol?: string; routes?: string[]; sentBy?: [string, number] } = {},
): SipRequest {
  const [host, port] = o.sentBy ?? [PEER.address, PEER.port];
  const via = createVia(o.protocol ?? 'UDP', host, port, o.branch === '' ? 'none' : o.branch);
  // branch '': an RFC 2543 peer's Via without a branch.
  if (o.branch === '') via.branch = undefined;
  const req = createRequest({
    method,
    uri: 'sip:agent@192.0.2.1',
    from: `"Alice" <sip:alice@198.51.100.7>;tag=${o.fromTag ?? 'alicetag'}`,
    to: o.toTag === undefined ? '<sip:agent@192.0.2.1>' : `<sip:agent@192.0.2.1>;tag=${o.toTag}`,
    callId: o.callId ?? 'call-1@198.51.100.7',
    cseq: o.cseq ?? 1,
    via,
    routes: o.routes,
    contact: '<sip:alice@198.51.100.7:5062>',
  });
  return req;
}

/** A request the TU sends (no Via: the layer adds it). */
export function tuRequest(method: string, o: { routes?: string[]; cseq?: number } = {}): SipRequest {
  return createRequest({
    method,
    uri: 'sip:+15551230000@carrier.example.net',
    from: '"callbridge" <sip:+15557654321@192.0.2.1>;tag=ourtag',
    to: '<sip:+15551230000@carrier.example.net>',
    callId: 'out-1@192.0.2.1',
    cseq: o.cseq ?? 1,
    routes: o.routes,
    contact: '<sip:callbridge@192.0.2.1:5060>',
    ...(method === 'INVITE' ? { body: 'v=0\r\n', contentType: 'application/sdp' } : {}),
  });
}

/** The peer's response to a request we sent (as received by the peer). */
export function reply(req: SipRequest, status: number, opts: CreateResponseOptions = {}): SipResponse {
  return createResponse(req, status, undefined, opts);
}
