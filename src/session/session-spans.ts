/**
 * The `session` spans of the voice sessions this server runs (docs/tracing.md), by session id
 * (= the call record's id). A session reached by the call bridge continues the call's trace: its
 * parent is the W3C `traceparent` of the WebSocket upgrade request, extracted with the API's
 * propagator. A web session (no phone leg, no traceparent from its client) starts its own trace.
 *
 * The agent runtime finds a live session's span here by id, to hang its turns and vendor
 * requests under it (src/agent/turn-trace-observer.ts, src/agent/vendor-spans.ts); main.ts gives
 * the same instance to both sides. With tracing off every span is the API's no-op span.
 */
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';

const tracer = trace.getTracer('callbridge.session');

/** The session's facts a span carries (never its token). */
export interface SessionSpanStart {
  sessionId: string;
  orgId: string;
  agentId: string;
  versionId: string | null;
  direction: string;
  transport: string;
  /** The upgrade request's headers (traceparent, tracestate). */
  headers: Record<string, string | string[] | undefined>;
}

/**
 * How long an ended session's span stays a parent: a turn is reported once its timeline is
 * complete, which may be just after the session ended (the call ended mid-turn).
 */
const ENDED_PARENT_GRACE_MS = 10_000;

export class SessionSpans {
  readonly #live = new Map<string, Span>();
  readonly #ended = new Map<string, Span>();

  /** Starts the session's span (a child of the call's when the upgrade carried its context). */
  start(s: SessionSpanStart): void {
    const parent = propagation.extract(ROOT_CONTEXT, s.headers);
    const span = tracer.startSpan(
      'session',
      {
        kind: SpanKind.SERVER,
        attributes: {
          'callbridge.call.id': s.sessionId,
          'callbridge.org.id': s.orgId,
          'callbridge.agent.id': s.agentId,
          ...(s.versionId !== null ? { 'callbridge.agent.version_id': s.versionId } : {}),
          'callbridge.session.direction': s.direction,
          'callbridge.session.transport': s.transport,
        },
      },
      parent,
    );
    this.#live.set(s.sessionId, span);
  }

  /** The live session's span as a parent context, or undefined (not running here, or ended). */
  contextOf(sessionId: string): Context | undefined {
    const span = this.#live.get(sessionId) ?? this.#ended.get(sessionId);
    return span === undefined ? undefined : trace.setSpan(context.active(), span);
  }

  /** Ends the session's span with how the session ended (idempotent). */
  end(sessionId: string, reason: string, attributes: Attributes = {}): void {
    const span = this.#live.get(sessionId);
    if (span === undefined) return;
    this.#live.delete(sessionId);
    // Kept as a parent only when it records: off, no timer per session.
    if (span.isRecording()) {
      this.#ended.set(sessionId, span);
      setTimeout(() => this.#ended.delete(sessionId), ENDED_PARENT_GRACE_MS).unref();
    }
    span.setAttributes({ 'callbridge.session.end_reason': reason, ...attributes });
    if (reason === 'error') span.setStatus({ code: SpanStatusCode.ERROR, message: typeof attributes['callbridge.session.end_detail'] === 'string' ? attributes['callbridge.session.end_detail'] : 'session ended with an error' });
    span.end();
  }
}
