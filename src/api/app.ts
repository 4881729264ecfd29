/**
 * The Fastify application: validation, errors, region pinning, auth, metrics, OpenAPI and one
 * plugin per resource. Built without listening so tests and main.ts decide where it listens.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import swagger from '@fastify/swagger';
import { randomUUID } from 'node:crypto';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { ApiDeps } from './context.ts';
import type { Logger } from '../log.ts';
import { clipForLog } from '../log-fields.ts';
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
import { webhookRoutes } from './routes/webhooks.ts';
import { apiKeyRoutes } from './routes/api-keys.ts';
import { dialRoutes } from './routes/dial.ts';
import { outboundListRoutes } from './routes/outbound-lists.ts';
import { sessionTokenRoutes } from './routes/session-token.ts';
import { twilioRoutes } from './routes/twilio.ts';
import { consoleRoutes } from './routes/console.ts';
import { CONNECTION_PATH, registerSessionServer } from '../session/server.ts';
import { FairShare } from './fair-share.ts';
import { installConnectionLimit, requestTimeoutOptions } from './connection-limits.ts';

export const API_VERSION = '0.2.4';

/**
 * JSON bodies as Fastify parses them (prototype-poisoning checks included), except that an empty
 * body is no body: the service's official SDK sends `Content-Type: application/json` on every
 * request, including those that carry nothing (publish, dial without variables, every DELETE).
 * A route whose schema requires a body still answers 400 for it, at validation.
 */
function installJsonBodyParser(app: FastifyInstance, fairShare: FairShare): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    // The fair share's gate of a request with a JSON body (see installFairShare): the parse,
    // validation, handler and serialization that follow run in one turn.
    fairShare.admit(() => {
      const text = typeof body === 'string' ? body : body.toString('utf8');
      if (text === '') {
        done(null, undefined);
        return;
      }
      // Fastify's own parser answers through done (its type also allows a promise: none here).
      void parseJson(req, text, done);
    });
  });
}

/** Routes the fair share never holds: probes, metrics and the voice socket answer under any REST load. */
const UNSCHEDULED_ROUTES = new Set(['/healthz', '/readyz', '/metrics', CONNECTION_PATH]);

/** Whether the request's body will go through our JSON parser (a method that carries one, application/json). */
function hasJsonBody(req: FastifyRequest): boolean {
  const m = req.method;
  if (m === 'GET' || m === 'HEAD' || m === 'TRACE') return false;
  const ct = req.headers['content-type'];
  return ct !== undefined && (ct.split(';')[0] as string).trim().toLowerCase() === 'application/json';
}

/**
 * REST requests run in turns of http.fair_share_ms on the main thread (src/api/fair-share.ts: a
 * turn ends after the request that uses up the budget), so that SIP signaling, the voice sessions
 * and /readyz are served between turns however many requests wait. Each request passes one gate: its first hook here (before region pinning and
 * auth, whose SQLite read then runs in the turn), or, when it has a JSON body, the body parser
 * (the body arrives after onRequest; parsing, validation, handler and serialization then run in
 * the turn). What stays outside: reading and parsing the HTTP request itself.
 */
function installFairShare(app: FastifyInstance, fairShare: FairShare, registry: Registry): void {
  app.addHook('onRequest', (req, _reply, done) => {
    if (!fairShare.enabled || UNSCHEDULED_ROUTES.has(req.routeOptions.url ?? '') || hasJsonBody(req)) {
      done();
      return;
    }
    fairShare.admit(() => done());
  });
  new Gauge({
    name: 'callbridge_http_requests_waiting',
    help: 'REST requests waiting for a turn of the fair share (http.fair_share_ms).',
    registers: [registry],
    collect() {
      this.set(fairShare.stats.queued);
    },
  });
  new Counter({
    name: 'callbridge_http_fair_share_yields_total',
    help: 'Turns of REST work that used up http.fair_share_ms with requests still waiting (the event loop then served the network before the next turn).',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(fairShare.stats.yields);
    },
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
    // Slow requests: 408 after http.request_timeout_ms (src/api/connection-limits.ts).
    ...requestTimeoutOptions(deps.config.http.request_timeout_ms),
  });

  // The API speaks JSON only: a text/plain body is 415, not a string that fails validation later.
  app.removeContentTypeParser('text/plain');
  const fairShare = new FairShare({ budgetMs: deps.config.http.fair_share_ms, onError: (err) => app.log.error({ err }, 'REST request task failed') });
  installJsonBodyParser(app, fairShare);
  // Before region pinning and auth: the first onRequest hook (installFairShare).
  installFairShare(app, fairShare, registry);
  installValidation(app);
  installErrorHandler(app);
  installRegionPinning(app, deps.config);
  installAuth(app, deps.store);
  installHttpMetrics(app, registry);
  // One line per request at the end, with status and time: enough at 3 a.m., quiet otherwise.
  app.addHook('onResponse', (req, reply, done) => {
    const level = reply.statusCode >= 500 ? 'error' : 'info';
    if ((req.log as Logger).isLevelEnabled(level)) {
      req.log[level]({ method: req.method, url: clipForLog(req.url.split('?')[0] ?? '', 256), status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 }, 'request');
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
  await app.register(webhookRoutes, deps);
  await app.register(apiKeyRoutes, deps);
  await app.register(dialRoutes, deps);
  await app.register(outboundListRoutes, deps);
  await app.register(sessionTokenRoutes, deps);
  if (deps.config.console.enabled) await app.register(consoleRoutes);
  // The voice WebSocket (src/session/server.ts); decorates app.voiceSessions for the drain.
  await registerSessionServer(app, {
    store: deps.store,
    logger: deps.logger,
    tokens: deps.tokens,
    runtimeFactory: deps.runtimeFactory,
    isDraining: () => deps.readiness().draining,
    ...deps.sessionServer,
  });
  // After the session server: the media stream route needs its WebSocket plugin.
  await app.register(async (scope) => twilioRoutes(scope, deps, registry));
  // Last: it takes over the server's 'connection' listeners registered so far.
  installConnectionLimit(app.server, { maxPerSource: deps.config.http.max_connections_per_source, logger: deps.logger.child({ component: 'http' }), registry });
  return app;
}
