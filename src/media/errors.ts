/**
 * Errors of the media layer. Each carries a stable `code` that callers (sip/, bridge/, logs,
 * metrics) switch on; messages are for humans and may change. The cause, when there is one, is
 * kept as `cause`.
 *
 * Bad input on the wire (a malformed RTP datagram, RTCP garbage) is never an exception in the
 * media engine: it is counted in the session's stats. These classes are for the caller's own
 * mistakes and for resources running out.
 */
import { CodedError } from '../coded-error.ts';

export const MEDIA_ERROR_CODES = [
  /** Every even RTP port of the configured range is taken (by us or by another process). */
  'MEDIA_PORTS_EXHAUSTED',
  /** A socket could not be bound for a reason other than "port in use" (bad address, ...). */
  'MEDIA_BIND_FAILED',
  /** A packet or payload the caller handed us cannot be encoded/decoded. */
  'MEDIA_BAD_PACKET',
  /** The session (or allocator) was closed before or during the operation. */
  'MEDIA_CLOSED',
  /** A listener of one of our events threw; reported, never rethrown into the socket handler. */
  'MEDIA_LISTENER_FAILED',
  /** The UDP socket reported an error (send failure, ICMP unreachable on some platforms). */
  'MEDIA_SOCKET_ERROR',
] as const;

export type MediaErrorCode = (typeof MEDIA_ERROR_CODES)[number];

export class MediaError extends CodedError<MediaErrorCode> {
  override name = 'MediaError';
}

export class PortsExhaustedError extends MediaError {
  override name = 'PortsExhaustedError';
  constructor(
    readonly min: number,
    readonly max: number,
    address: string,
  ) {
    super('MEDIA_PORTS_EXHAUSTED', `no free RTP port pair in ${min}-${max} on ${address}`);
  }
}

export class BindError extends MediaError {
  override name = 'BindError';
  constructor(address: string, port: number, cause: unknown) {
    super('MEDIA_BIND_FAILED', `cannot bind UDP ${address}:${port}`, { cause });
  }
}

export class BadPacketError extends MediaError {
  override name = 'BadPacketError';
  constructor(message: string) {
    super('MEDIA_BAD_PACKET', message);
  }
}

export class MediaClosedError extends MediaError {
  override name = 'MediaClosedError';
  constructor(what: string) {
    super('MEDIA_CLOSED', `${what} is closed`);
  }
}

export class ListenerError extends MediaError {
  override name = 'ListenerError';
  constructor(
    readonly event: string,
    cause: unknown,
  ) {
    super('MEDIA_LISTENER_FAILED', `a listener of '${event}' threw`, { cause });
  }
}

export class SocketError extends MediaError {
  override name = 'SocketError';
  constructor(cause: unknown) {
    super('MEDIA_SOCKET_ERROR', `UDP socket error: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
  }
}
