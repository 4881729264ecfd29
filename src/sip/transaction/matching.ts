/**
 * Which transaction a message belongs to (RFC 3261 17.1.3, 17.2.3, 9.2).
 *
 * Client side (17.1.3): a response matches the client transaction whose request carried the
 * same branch in its top Via and the same method in CSeq (the method matters because a CANCEL
 * shares its INVITE's branch).
 *
 * Server side, RFC 3261 peers (branch starts with "z9hG4bK", 17.2.3): the request's top Via has
 * the same branch and sent-by as the request that created the transaction, and the same method
 * -- except an ACK, which matches the INVITE's transaction.
 *
 *   Via: SIP/2.0/UDP pc33.example.com:5060;branch=z9hG4bK776asdhds   + CSeq method
 *                    \_____sent-by_____/        \___branch____/
 *
 * Server side, RFC 2543 peers (no magic cookie, 17.2.3 last paragraphs): Request-URI, To tag,
 * From tag, Call-ID, CSeq and top Via of the request that created the transaction. An ACK
 * matches by Request-URI, From tag, Call-ID, CSeq number and top Via, and its To tag is the To
 * tag of the response the server transaction sent. A CANCEL (9.2) matches the INVITE's
 * transaction by the same fields as the INVITE (its To has no tag either).
 */
import { uriEquals, type SipRequest, type SipResponse, type Via } from '../message/index.ts';

const SEP = '\u0001';

/** Key of a client transaction: branch and CSeq method (17.1.3). */
export function clientKey(branch: string, method: string): string {
  return branch + SEP + method;
}

/**
 * Key of the server transaction a request with an RFC 3261 branch belongs to, for `method`
 * (an ACK looks for its INVITE's transaction: pass 'INVITE'). The sent-by host is compared
 * without regard to case (host names are case-insensitive, RFC 3261 19.1.4).
 */
export function serverKey(via: Via, method: string): string {
  return (via.branch ?? '') + SEP + via.sentBy.toLowerCase() + SEP + (method === 'ACK' ? 'INVITE' : method);
}

/** The top Via as RFC 2543 matching compares it: protocol, sent-by, branch if any (not received/rport, which the transport adds). */
function viaIdentity(via: Via | undefined): string {
  if (via === undefined) return '';
  return `${via.protocolName}/${via.protocolVersion}/${via.transport} ${via.sentBy.toLowerCase()};${via.branch ?? ''}`;
}

/**
 * Key of an RFC 2543 server transaction: Request-URI, To tag, From tag, Call-ID, CSeq number and
 * method (`method`: the transaction's; 'INVITE' when looking for the INVITE a CANCEL names), top
 * Via. The Request-URI is compared in its serialized form, which is the same for a retransmission.
 */
export function legacyKey(req: SipRequest, method: string): string {
  return [req.uri.toString(), req.to.tag ?? '', req.from.tag ?? '', req.callId, String(req.cseq.seq), method, viaIdentity(req.topVia)].join(SEP);
}

/**
 * Whether an ACK without an RFC 3261 branch acknowledges the final response `final` that an
 * INVITE server transaction created by `invite` sent (17.2.3).
 */
export function legacyAckMatches(invite: SipRequest, final: SipResponse | undefined, ack: SipRequest): boolean {
  if (final === undefined) return false;
  return (
    ack.callId === invite.callId &&
    ack.cseq.seq === invite.cseq.seq &&
    ack.from.tag === invite.from.tag &&
    ack.to.tag === final.to.tag &&
    viaIdentity(ack.topVia) === viaIdentity(invite.topVia) &&
    uriEquals(ack.uri, invite.uri)
  );
}

/** True when the request's top Via carries an RFC 3261 branch (magic cookie "z9hG4bK"). */
export function hasRfc3261Branch(req: SipRequest): boolean {
  return req.topVia?.isRfc3261Branch ?? false;
}
