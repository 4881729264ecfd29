/**
 * Errors of the SIP layer. Each carries a stable `code` that callers (the transport, the
 * transaction layer, logs, metrics) switch on; messages are for humans and may change. The cause,
 * when there is one, is kept as `cause`.
 *
 * The message layer (message*.ts) throws only SipParseError (and its subclasses) for bad input on
 * the wire, and TypeError / RangeError for a caller's own mistakes when building a message (a
 * method that is not a token, a status code outside 100..699), as documented with `@throws` on
 * each function.
 *
 * A malformed *request* must get a stateless 400 (or 505, 513), never silence: a UDP client
 * retransmits an unanswered request for 32 s (RFC 3261 17.1.2.2), and a TCP client waits for
 * Timer F. So SipParseError carries the status and reason phrase to answer with, and, when the
 * message was recognisably a request, the header fields needed to build that answer
 * (`context`; see context.ts). Further layers add their codes to SIP_ERROR_CODES here.
 */
import { CodedError } from '../../coded-error.ts';

export const SIP_ERROR_CODES = [
  /** A message (or one of its header fields, or a URI) does not follow the RFC 3261 grammar. */
  'SIP_PARSE',
  /** A message, its header section or its body is larger than the configured cap. */
  'SIP_TOO_LARGE',
  /** The start line names a SIP version other than 2.0 (answered 505, RFC 3261 21.5.6). */
  'SIP_VERSION',
  // --- transport (transport*.ts) ---
  /** The transport layer is closed, or not started yet. */
  'SIP_TRANSPORT_CLOSED',
  /** The options are unusable (a TLS listener without certificate and key, a bad address). */
  'SIP_TRANSPORT_CONFIG',
  /** A listening socket could not be bound (address in use, not available). */
  'SIP_TRANSPORT_BIND',
  /** No listener (socket) of the protocol and address family needed to send. */
  'SIP_TRANSPORT_NO_LISTENER',
  /** A destination host name could not be resolved. */
  'SIP_TRANSPORT_RESOLVE',
  /** A TCP/TLS connection could not be opened (refused, timed out, TLS handshake failed). */
  'SIP_TRANSPORT_CONNECT',
  /** The socket refused or failed the write (connection gone, EMSGSIZE, unreachable). */
  'SIP_TRANSPORT_SEND',
  /** A socket reported an error outside any send (reported, never fatal). */
  'SIP_TRANSPORT_SOCKET',
  /** A listener of one of the transport's events threw (caught, logged, never rethrown). */
  'SIP_TRANSPORT_LISTENER',
  // --- transactions (transaction*.ts) ---
  /** A client transaction got no final response in time (Timer B or F; the TU treats it as 408). */
  'SIP_TX_TIMEOUT',
  /** The transport could not send a transaction's message (the TU treats it as 503). */
  'SIP_TX_TRANSPORT',
  /** The transaction layer is closed: no new transactions, pending ones ended. */
  'SIP_TX_CLOSED',
  /** A listener of a transaction's or the layer's events threw (caught, logged, never rethrown). */
  'SIP_TX_LISTENER',
] as const;

export type SipErrorCode = (typeof SIP_ERROR_CODES)[number];

export class SipError extends CodedError<SipErrorCode> {
  override name = 'SipError';
}

/**
 * What a stateless error response needs from a request that could not be parsed in full
 * (RFC 3261 8.2.6.2: Via, From, To, Call-ID and CSeq are copied into the response). Values are
 * the raw header field values as received, folded lines joined; any of them may be missing
 * when the request is too broken to find it.
 */
export interface ResponseContext {
  /** The request method from the start line ("INVITE"); an ACK is never answered. */
  method: string;
  /** Every Via header field value in order (each may hold several comma-separated values). */
  via: string[];
  from?: string;
  to?: string;
  callId?: string;
  cseq?: string;
}

export interface SipParseErrorOptions {
  /** The status code of the error response: 400 (default), 505 or 513. */
  status?: number;
  /** The request's header fields, when the message was a request. */
  context?: ResponseContext;
  /** True when the failed message was a response (it is dropped, never answered). */
  isResponse?: boolean;
  cause?: unknown;
}

/**
 * The message could not be parsed. `reason` is a Reason-Phrase to answer with, e.g.
 * "Bad Request: missing CSeq"; `message` adds detail for logs (it may quote a few characters of
 * the offending input, sanitised).
 */
export class SipParseError extends SipError {
  override name = 'SipParseError';
  /** Status code of the stateless error response (400, 505 or 513). */
  readonly status: number;
  /** Reason-Phrase for that response: printable ASCII, no CR/LF. */
  readonly reason: string;
  /** Set by the parser when the input was a request with enough of a header section. */
  context: ResponseContext | undefined;
  /** True when the input was a response (no answer is ever sent for it). */
  isResponse: boolean;
  /** What exactly was wrong, for logs (may quote a little of the input, sanitised). */
  readonly detail: string | undefined;

  constructor(reason: string, detail?: string, options: SipParseErrorOptions = {}, code: SipErrorCode = 'SIP_PARSE') {
    super(code, detail ? `${reason} (${detail})` : reason, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = options.status ?? 400;
    this.reason = reason;
    this.detail = detail;
    this.context = options.context;
    this.isResponse = options.isResponse ?? false;
  }
}

/** The message, its header section or its body exceeds the cap: 513 Message Too Large (RFC 3261 21.5.7). */
export class SipTooLargeError extends SipParseError {
  override name = 'SipTooLargeError';
  constructor(what: string, size: number, limit: number, options: SipParseErrorOptions = {}) {
    super('Message Too Large', `${what} of ${size} bytes exceeds the limit of ${limit}`, { status: 513, ...options }, 'SIP_TOO_LARGE');
  }
}

/** The start line names a version other than SIP/2.0: 505 Version Not Supported (RFC 3261 21.5.6). */
export class SipVersionError extends SipParseError {
  override name = 'SipVersionError';
  constructor(version: string, options: SipParseErrorOptions = {}) {
    super('Version Not Supported', `version ${version}`, { status: 505, ...options }, 'SIP_VERSION');
  }
}

/**
 * Errors of the transport layer (transport*.ts, RFC 3261 18): sockets that cannot be bound,
 * destinations that cannot be reached, writes that fail. `send()` rejects with one of these, which
 * the transaction layer reports to its user as a transport error (RFC 3261 17.1.1.2, 17.1.2.2:
 * "503 Service Unavailable" to the TU, 8.1.3.1). `endpoint` names the remote side when there is
 * one, `connectionId` the stream connection involved.
 */
export class SipTransportError extends SipError {
  override name = 'SipTransportError';
  constructor(
    code: SipErrorCode,
    message: string,
    options: { cause?: unknown; endpoint?: { protocol: string; address: string; port: number }; connectionId?: string } = {},
  ) {
    super(code, message, options.cause === undefined ? undefined : { cause: options.cause });
    this.endpoint = options.endpoint;
    this.connectionId = options.connectionId;
  }
  /** The remote endpoint the operation was for, when there is one. */
  readonly endpoint: { protocol: string; address: string; port: number } | undefined;
  /** The stream connection involved, when there is one. */
  readonly connectionId: string | undefined;
}

/**
 * Errors of the transaction layer (transaction*.ts, RFC 3261 17). A client transaction that ends
 * without a final response reports one of these, and its `status` is the response the TU should
 * act on as if it had been received: 408 for a timeout (Timer B, F: RFC 3261 8.1.3.1), 503 for a
 * transport error (8.1.3.1, 17.1.1.2), 487 when a CANCELled INVITE never got its final response
 * (9.1). `timer` names the RFC timer that fired, when one did.
 */
export class SipTransactionError extends SipError {
  override name = 'SipTransactionError';
  /** The status the TU should treat the outcome as (408, 503, 487). */
  readonly status: number;
  /** The RFC 3261 timer that fired ("B", "F", "H"...), for timeouts. */
  readonly timer: string | undefined;
  constructor(code: SipErrorCode, message: string, options: { status?: number; timer?: string; cause?: unknown } = {}) {
    super(code, message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = options.status ?? (code === 'SIP_TX_TIMEOUT' ? 408 : 503);
    this.timer = options.timer;
  }
}
