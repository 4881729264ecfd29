/**
 * Errors of the domain and store layers. Each carries a stable `code` and a `kind`; the API layer
 * maps the kind to an HTTP status (api/errors.ts), other callers (SIP, CLI) map it their own way.
 */
export type ErrorKind =
  | 'validation'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'unavailable'
  | 'too_many'
  | 'bad_gateway'
  | 'internal';

export class DomainError extends Error {
  override name = 'DomainError';
  constructor(
    readonly kind: ErrorKind,
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export const validation = (message: string, code = 'VALIDATION') => new DomainError('validation', code, message);
export const notFound = (what: string) => new DomainError('not_found', 'NOT_FOUND', `${what} not found`);
export const conflict = (message: string, code = 'CONFLICT') => new DomainError('conflict', code, message);
export const forbidden = (message: string, code = 'FORBIDDEN') => new DomainError('forbidden', code, message);
export const unavailable = (message: string, code = 'UNAVAILABLE') => new DomainError('unavailable', code, message);
/** A rate or concurrency limit (DESIGN.md: 429). */
export const tooMany = (message: string, code = 'TOO_MANY') => new DomainError('too_many', code, message);
export const badGateway = (message: string, code = 'BAD_GATEWAY', cause?: unknown) =>
  new DomainError('bad_gateway', code, message, { cause });
