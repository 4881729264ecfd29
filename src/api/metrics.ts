/** Prometheus metrics of the HTTP layer; other layers register on the same registry. */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { CLUSTER_ROLE_NAMES, type ClusterRoles } from '../store/cluster-roles.ts';
import type { FastifyInstance } from 'fastify';

export function createRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'callbridge_' });
  return registry;
}

export function installHttpMetrics(app: FastifyInstance, registry: Registry): void {
  const requests = new Counter({
    name: 'callbridge_http_requests_total',
    help: 'HTTP requests by method, route template and status.',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'callbridge_http_request_duration_seconds',
    help: 'HTTP request latency by method and route template.',
    labelNames: ['method', 'route'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  app.addHook('onResponse', (req, reply, done) => {
    // Route templates, never raw URLs: ids in paths would make the label set unbounded.
    const route = req.routeOptions.url ?? 'unmatched';
    requests.inc({ method: req.method, route, status: String(reply.statusCode) });
    latency.observe({ method: req.method, route }, reply.elapsedTime / 1000);
    done();
  });
  app.get('/metrics', { config: { public: true }, schema: { hide: true } }, async (_req, reply) => {
    reply.header('content-type', registry.contentType);
    return registry.metrics();
  });
}

/** Which once-per-cluster work this node runs now (docs/store-postgres.md, "Once per cluster"). */
export function installClusterRoleGauge(registry: Registry, roles: Pick<ClusterRoles, 'holds'>): void {
  new Gauge({
    name: 'callbridge_cluster_role',
    help: 'Once-per-cluster work this node runs now: 1 while it holds the role (carrier_registration, sip_registration_sweep, session_token_sweep), 0 while another node does. Always 1 on SQLite.',
    labelNames: ['role'] as const,
    registers: [registry],
    collect() {
      for (const role of CLUSTER_ROLE_NAMES) this.set({ role }, roles.holds(role) ? 1 : 0);
    },
  });
}
