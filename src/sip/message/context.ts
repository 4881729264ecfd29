/**
 * Stateless error responses to requests that could not be parsed (RFC 3261 8.2.6.2, 18.2.2).
 *
 * A malformed request must be answered, or its sender retransmits it for 32 s (UDP, RFC 3261
 * 17.1.1.2) and then gives up with a timeout rather than a reason. But a malformed request cannot
 * be turned into a SipRequest, so this module recovers the few header fields a response copies
 * (Via, From, To, Call-ID, CSeq) with a forgiving line scan that needs none of them to be valid,
 * and writes the response bytes directly:
 *
 *   request (broken CSeq)                      stateless response
 *   INVITE sip:bob@example.com SIP/2.0         SIP/2.0 400 Bad Request: malformed CSeq
 *   Via: SIP/2.0/UDP pc33;branch=z9hG4bK77 --> Via: SIP/2.0/UDP pc33;branch=z9hG4bK77
 *   From: <sip:alice@a.com>;tag=19         --> From: <sip:alice@a.com>;tag=19
 *   To: <sip:bob@example.com>              --> To: <sip:bob@example.com>;tag=<new>
 *   Call-ID: a84b4c76e66710                --> Call-ID: a84b4c76e66710
 *   CSeq: fourteen INVITE                  --> CSeq: fourteen INVITE
 *                                              Content-Length: 0
 *
 * The transport sends it to the packet's source (the RFC 3261 18.2.2 route of the top Via only
 * for a trusted proxy, docs/sip-transport.md). An ACK is never answered (RFC 3261 17.2.1: there is no transaction to
 * answer), nor is a response.
 */
import { SipParseError, type ResponseContext } from './errors.ts';
import { headerDef } from './headers.ts';
import { generateTag } from './ids.ts';
import { isToken, trimWs } from './syntax.ts';

/** How much of a datagram the forgiving scan looks at. */
const SCAN_LIMIT = 65536;

/**
 * Recovers the method and the raw Via, From, To, Call-ID and CSeq values of what looks like a
 * request. Returns undefined when the input does not start with "<token> SP" (a response, a
 * keep-alive, binary noise): nothing should be sent back to those. Never throws.
 */
export function tryExtractResponseContext(input: Uint8Array | string): ResponseContext | undefined {
  let text: string;
  if (typeof input === 'string') text = input.length > SCAN_LIMIT ? input.slice(0, SCAN_LIMIT) : input;
  else {
    const buf = Buffer.isBuffer(input) ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength);
    const n = Math.min(buf.length, SCAN_LIMIT);
    let end = buf.indexOf('\r\n\r\n');
    if (end < 0 || end > n) end = n;
    text = buf.toString('utf8', 0, end);
  }
  let i = 0;
  while (i < text.length && (text.charCodeAt(i) === 0x0d || text.charCodeAt(i) === 0x0a)) i++;
  text = text.slice(i);
  // Lines end in CRLF, as for the parser: a bare LF inside a line must not make a header here
  // either, or the 400 would echo an injected Via ("Subject: hi<LF>Via: ..."). Only a message
  // with no CR at all is read by LF, so that a sender writing LF line ends throughout still
  // gets its own Via, From, To, Call-ID and CSeq back and can match the 400.
  const lines = text.indexOf('\r') >= 0 ? text.split('\r\n') : text.split('\n');
  const first = lines[0] ?? '';
  const sp = first.indexOf(' ');
  if (sp <= 0) return undefined;
  const method = first.slice(0, sp);
  if (!isToken(method) || method.toUpperCase().startsWith('SIP/')) return undefined;
  const ctx: ResponseContext = { method, via: [] };
  let current: [string, string] | undefined;
  const fields: [string, string][] = [];
  for (let k = 1; k < lines.length; k++) {
    let line = lines[k]!;
    if (line.length === 0) break;
    // What follows a bare LF or CR inside a line is dropped: it is no header of its own, and
    // the value before it is what a matching client transaction knows (a Via's branch).
    const bare = line.search(/[\r\n]/);
    if (bare >= 0) line = line.slice(0, bare);
    const c = line.charCodeAt(0);
    if ((c === 0x20 || c === 0x09) && current) {
      current[1] += ' ' + trimWs(line);
      continue;
    }
    const colon = line.indexOf(':');
    if (colon <= 0) {
      current = undefined;
      continue;
    }
    current = [trimWs(line.slice(0, colon)), trimWs(line.slice(colon + 1))];
    fields.push(current);
  }
  for (const [name, value] of fields) {
    const key = headerDef(name)?.key;
    if (key === 'via') ctx.via.push(value);
    else if (key === 'from') ctx.from ??= value;
    else if (key === 'to') ctx.to ??= value;
    else if (key === 'call-id') ctx.callId ??= value;
    else if (key === 'cseq') ctx.cseq ??= value;
  }
  return ctx;
}

/** Reason phrases may not carry CR or LF (RFC 3261 25.1 Reason-Phrase); keep them to printable ASCII. */
function safeReason(reason: string): string {
  return reason.replace(/[^\x20-\x7e]/g, ' ');
}

/** Raw values are copied, but never a CR, LF or NUL that could split or end a header line. */
function clean(v: string): string {
  return v.replace(/[\r\n\0]/g, ' ');
}

/**
 * The bytes of a stateless response to an unparseable request: status line, the recovered Via,
 * From, To (with a new tag when it has none, RFC 3261 8.2.6.2), Call-ID and CSeq, and
 * `Content-Length: 0`. Returns undefined for an ACK.
 *
 * @param what a SipParseError (its status, reason and context are used) or a context.
 * @param status defaults to the error's status (400 / 505 / 513), else 400.
 * @param reason defaults to the error's reason, else "Bad Request".
 */
export function buildStatelessResponse(what: SipParseError | ResponseContext, status?: number, reason?: string): Buffer | undefined {
  const ctx = what instanceof SipParseError ? what.context : what;
  if (!ctx || ctx.method === 'ACK') return undefined;
  const st = status ?? (what instanceof SipParseError ? what.status : 400);
  const rs = safeReason(reason ?? (what instanceof SipParseError ? what.reason : 'Bad Request'));
  let out = `SIP/2.0 ${st} ${rs}\r\n`;
  for (const v of ctx.via) out += `Via: ${clean(v)}\r\n`;
  if (ctx.from !== undefined) out += `From: ${clean(ctx.from)}\r\n`;
  if (ctx.to !== undefined) out += `To: ${clean(ctx.to)}${/;\s*tag\s*=/i.test(ctx.to) ? '' : `;tag=${generateTag()}`}\r\n`;
  if (ctx.callId !== undefined) out += `Call-ID: ${clean(ctx.callId)}\r\n`;
  if (ctx.cseq !== undefined) out += `CSeq: ${clean(ctx.cseq)}\r\n`;
  out += 'Content-Length: 0\r\n\r\n';
  return Buffer.from(out, 'utf8');
}
