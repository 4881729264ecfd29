/**
 * The Fastify application: validation, errors, region pinning, auth, metrics, OpenAPI and one
 * plugin per resource. Built without listening so tests and main.ts decide where it listens.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import { randomUUID } from 'node:crypto';
import type { Registry } from 'prom-client';
import type { ApiDeps } from './context.ts';
import type { Logger } from '../log.ts';
import { installErrorHandler } from './errors.ts';
import { installValidation } from './validation.ts';
import { installRegionPinning } from './region.ts';
import { installAuth } from './auth.ts';
import { createRegistry, installHttpMetrics } from './metrics.ts';
import { healthRoutes } from './routes/health.ts';
import { agentRoutes } from './routes/agents.ts';
import { versionRoutes } from './routes/versions.ts';
import { catalogRoutes } from './routes/catalog.ts';
import { telcoRoutes } from './routes/telco.ts';
import { sipTrunkRoutes } from './routes/sip-trunks.ts';
import { callRoutes } from './routes/calls.ts';
import { dialRoutes } from './routes/dial.ts';
import { sessionTokenRoutes } from './routes/session-token.ts';
import { registerSessionServer } from '../session/server.ts';

export const API_VERSION = '0.2.4';

/**
 * JSON bodies as Fastify parses them (prototype-poisoning checks included), except that an empty
 * body is no body: the service's official SDK sends `Content-Type: application/json` on every
 * request, including those that carry nothing (publish, dial without variables, every DELETE).
 * A route whose schema requires a body still answers 400 for it, at validation.
 */
function installJsonBodyParser(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (text === '') {
      done(null, undefined);
      return;
    }
    parseJson(req, text, done);
  });
}

export async function buildApp(deps: ApiDeps, registry: Registry = createRegistry()): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger.child({ component: 'http' }) as FastifyBaseLogger,
    bodyLimit: deps.config.http.body_limit,
    trustProxy: false,
    requestIdHeader: 'x-request-id',
    genReqId: () => randomUUID(),
    // Fastify's two lines per request are replaced by our one line at the end (below).
    logController: new LogController({ requestIdLogLabel: 'reqId', disableRequestLogging: true }),
    // Keep-alive sockets must not hold a restart or a test teardown hostage.
    forceCloseConnections: true,
  });

  // The API speaks JSON only: a text/plain body is 415, not a string that fails validation later.
  app.removeContentTypeParser('text/plain');
  installJsonBodyParser(app);
  installValidation(app);
  installErrorHandler(app);
  installRegionPinning(app, deps.config);
  installAuth(app, deps.store);
  installHttpMetrics(app, registry);
  // One line per request at the end, with status and time: enough at 3 a.m., quiet otherwise.
  app.addHook('onResponse', (req, reply, done) => {
    const level = reply.statusCode >= 500 ? 'error' : 'info';
    if ((req.log as Logger).isLevelEnabled(level)) {
      req.log[level]({ method: req.method, url: req.url.split('?')[0], status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 }, 'request');
    }
    done();
  });
  // Set first, so every answer carries it, the hooks' early 4xx replies included.
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('x-request-id', req.id);
    done();
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'callbridge: Voice Agent Service API', version: API_VERSION },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
  });
  app.get('/v1/openapi.json', { config: { public: true }, schema: { hide: true } }, async () => app.swagger());

  await app.register(healthRoutes, deps);
  await app.register(agentRoutes, deps);
  await app.register(versionRoutes, deps);
  await app.register(catalogRoutes, deps);
  await app.register(telcoRoutes, deps);
  await app.register(sipTrunkRoutes, deps);
  await app.register(callRoutes, deps);
  await app.register(dialRoutes, deps);
  await app.register(sessionTokenRoutes, deps);
  // The voice WebSocket (src/session/server.ts); decorates app.voiceSessions for the drain.
  await registerSessionServer(app, {
    store: deps.store,
    logger: deps.logger,
    tokens: deps.tokens,
    runtimeFactory: deps.runtimeFactory,
    isDraining: () => deps.readiness().draining,
    ...deps.sessionServer,
  });
  return app;
}
