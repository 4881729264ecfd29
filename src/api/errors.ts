/**
 * Maps every failure to the API's error contract: `{ "error": "..." }` with the status DESIGN.md
 * assigns, never a stack trace. Fastify's own errors (bad JSON, body too large, bad content type)
 * are translated here too, so clients see one shape.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DomainError, type ErrorKind } from '../domain/errors.ts';

export const STATUS_OF_KIND: Record<ErrorKind, number> = {
  validation: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  unavailable: 503,
  too_many: 429,
  bad_gateway: 502,
  internal: 500,
};

/** Routes whose 401 has no body (the API document says so for duplicate). */
declare module 'fastify' {
  interface FastifyContextConfig {
    emptyUnauthorizedBody?: boolean;
    /** Served without an API key (health, metrics, OpenAPI). */
    public?: boolean;
  }
}

export function sendError(reply: FastifyReply, status: number, message: string): FastifyReply {
  if (status === 401 && reply.request.routeOptions.config?.emptyUnauthorizedBody) {
    return reply.code(401).header('www-authenticate', 'Bearer').send();
  }
  if (status === 401) reply.header('www-authenticate', 'Bearer');
  return reply.code(status).send({ error: message });
}

export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError | DomainError | Error, req: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof DomainError) {
      const status = STATUS_OF_KIND[err.kind];
      if (status >= 500) req.log.error({ err, code: err.code }, err.message);
      return sendError(reply, status, err.message);
    }
    const fe = err as FastifyError;
    if (fe.validation) return sendError(reply, 400, fe.message);
    switch (fe.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return sendError(reply, 413, `request body is larger than ${req.routeOptions.bodyLimit ?? 'the limit'} bytes`);
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return sendError(reply, 400, `malformed JSON body: ${fe.message}`);
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return sendError(reply, 415, `unsupported content type ${req.headers['content-type'] ?? ''}: send application/json`);
      case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
        return sendError(reply, 400, 'content-length does not match the body');
    }
    if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) {
      if (err instanceof SyntaxError) return sendError(reply, 400, `malformed JSON body: ${err.message}`);
      return sendError(reply, fe.statusCode, fe.message);
    }
    req.log.error({ err }, 'unhandled error');
    return sendError(reply, 500, 'internal server error');
  });

  app.setNotFoundHandler((req, reply) => sendError(reply, 404, `no route ${req.method} ${req.url.split('?')[0]}`));
}
