/**
 * OpenTelemetry traces (docs/tracing.md): one trace per call, exported over OTLP/HTTP, off by
 * default. Started by the composition root (main.ts) only when an OTLP endpoint is configured
 * through the standard variables; with none, no SDK is loaded and every span the bridge, the
 * session server and the agent start goes to @opentelemetry/api's no-op tracer.
 *
 * The SDK reads its own variables: the exporter OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT and
 * OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, the tracer provider OTEL_TRACES_SAMPLER[_ARG], the
 * resource's env detector OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, register()
 * OTEL_PROPAGATORS (default W3C TraceContext and baggage). Decided here: whether to start at all
 * (an endpoint is set, OTEL_SDK_DISABLED is not true), as the SDK has no such switch itself.
 */
import type { Logger } from './log.ts';

/** The variables naming where traces go: one of them set turns tracing on. */
const ENDPOINT_VARIABLES = ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_ENDPOINT'] as const;
export const CALLBRIDGE_SERVICE_NAME = 'callbridge';

export interface Tracing {
  /** Flushes the spans still queued and stops the SDK (the drain's last step). Idempotent. */
  shutdown(): Promise<void>;
}

/** The endpoint traces would go to, or undefined when tracing stays off. */
export function tracingEndpoint(env: NodeJS.ProcessEnv = process.env): string | undefined {
  // The specification's boolean: only a case-insensitive "true" disables.
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  for (const name of ENDPOINT_VARIABLES) {
    const value = env[name]?.trim();
    if (value) return name === 'OTEL_EXPORTER_OTLP_ENDPOINT' ? `${value.replace(/\/+$/, '')}/v1/traces` : value;
  }
  return undefined;
}

/**
 * Starts the SDK when an endpoint is configured (undefined otherwise: nothing was loaded). The
 * SDK's modules are imported here, on demand, so a daemon with tracing off does not even load them.
 */
export async function startTracing(logger: Logger, env: NodeJS.ProcessEnv = process.env): Promise<Tracing | undefined> {
  const endpoint = tracingEndpoint(env);
  if (endpoint === undefined) return undefined;
  const [{ NodeTracerProvider }, { BatchSpanProcessor }, { OTLPTraceExporter }, resources, semconv, api] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/semantic-conventions'),
    import('@opentelemetry/api'),
  ]);
  // Ours first, then what the environment says (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) wins.
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ [semconv.ATTR_SERVICE_NAME]: CALLBRIDGE_SERVICE_NAME }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())] });
  // No context manager: every span of ours names its parent explicitly (the call's traceparent,
  // the session's span by id), so nothing needs the active context carried across every await,
  // and the daemon's promises do not pay for AsyncLocalStorage while tracing is on.
  provider.register({ contextManager: null });
  // The endpoint only: the headers (OTEL_EXPORTER_OTLP_HEADERS) carry the backend's keys.
  logger.info({ endpoint: withoutCredentials(endpoint), serviceName: resource.attributes[semconv.ATTR_SERVICE_NAME], sampler: env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on' }, 'tracing on: exporting traces over OTLP/HTTP');
  let stopping: Promise<void> | undefined;
  return {
    shutdown() {
      stopping ??= provider
        .shutdown()
        .catch((err: unknown) => logger.warn({ err }, 'tracing: flushing the last spans failed'))
        .finally(() => {
          // The globals go back to the no-op API: a daemon started again in this process (tests)
          // registers its own provider.
          api.trace.disable();
          api.propagation.disable();
          api.context.disable();
        });
      return stopping;
    },
  };
}

/** A URL as it can be logged: no user:password, no query (some collectors take a key there). */
function withoutCredentials(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return '(not a URL)';
  }
}
