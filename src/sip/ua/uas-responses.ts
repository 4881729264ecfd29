/**
 * Answers the UAS core sends outside a dialog, shared by the INVITE path (uas.ts) and the
 * registrar (registrar.ts): a response with the request's To tag, and the answer to a source
 * over its challenge rate.
 */
import type { ThrottleDecision } from './inbound-routing.ts';
import { createResponse, generateTag, type SipRequest } from '../message/index.ts';
import type { ServerTransaction } from '../transaction/index.ts';
import type { Inbound } from '../transport/index.ts';

export function respond(tx: ServerTransaction, req: SipRequest, status: number, reason?: string, headers: [string, string][] = []): void {
  // 8.2.6.2: every response but 100 carries a To tag, the same for all of one request.
  tx.respond(createResponse(req, status, reason, { toTag: tx.toTag ?? generateTag(), headers }));
}

export interface ThrottleContext {
  logger: { warn(obj: object, msg?: string): void };
  count(outcome: string): void;
}

/**
 * Over the source's challenge rate (sip.challenge_rate). UDP: no answer at all. A 503 (or the
 * 401) would be retransmitted by Timer G until ACKed, so a flooder that never ACKs would get ten
 * datagrams per INVITE; silence costs nothing, and an honest sender's retransmissions (Timer A
 * or E: 0.5, 1, 2... s) are its retry, which finds a token again. TCP/TLS: no retransmission,
 * so silence would leave an honest client waiting for Timer B or F (32 s); a 503 with
 * Retry-After is one write (RFC 3261 21.5.4).
 */
export function throttle(ctx: ThrottleContext, tx: ServerTransaction, inbound: Inbound<SipRequest>, base: Record<string, unknown>, decision: ThrottleDecision): void {
  ctx.count('throttled');
  const udp = inbound.source.protocol === 'udp';
  if (decision.log) ctx.logger.warn({ ...base, ...decision.detail, transport: inbound.source.protocol }, `${inbound.message.method} ${udp ? 'dropped' : 'refused (503)'}: ${decision.why}`);
  if (udp) tx.close();
  else respond(tx, inbound.message, 503, 'Service Unavailable', [['Retry-After', String(decision.retryAfter)]]);
}
