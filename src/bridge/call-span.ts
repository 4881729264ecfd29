/**
 * The root span of a bridged call (docs/tracing.md): `call`, from the moment the leg reaches the
 * bridge to its end, with the leg's own attributes (a SIP dialog's Call-ID, trunk and final
 * status; a carrier stream's call sid) and the bridge's (direction, numbers, the call record's id,
 * why it ended). Its context travels to the voice session as a W3C `traceparent` header on the
 * WebSocket upgrade, so the session's spans, wherever it runs, join the call's trace.
 *
 * With tracing off the API's tracer is a no-op: the span records nothing and the propagator
 * injects no header.
 */
import { context, propagation, SpanKind, trace, type Attributes, type Span } from '@opentelemetry/api';
import type { CallLeg } from './call-leg.ts';

const tracer = trace.getTracer('callbridge.bridge');

export class CallSpan {
  readonly #span: Span;
  readonly #leg: CallLeg;
  #ended = false;

  constructor(leg: CallLeg) {
    this.#leg = leg;
    this.#span = tracer.startSpan('call', {
      root: true,
      // An inbound call is a request served; an outbound one is placed by us.
      kind: leg.direction === 'inbound' ? SpanKind.SERVER : SpanKind.CLIENT,
      attributes: {
        'callbridge.call.direction': leg.direction,
        'callbridge.call.from': leg.from,
        'callbridge.call.to': leg.to,
        ...(leg.trunkId !== undefined ? { 'callbridge.call.trunk_id': leg.trunkId } : {}),
        ...leg.traceAttributes?.(),
      },
    });
  }

  /** The call record (and voice session) the call is bridged to. */
  sessionOpened(sessionId: string): void {
    this.#span.setAttribute('callbridge.call.id', sessionId);
  }

  /** The headers that carry this span's context to the voice session (none when tracing is off). */
  propagationHeaders(): Record<string, string> {
    const headers: Record<string, string> = {};
    propagation.inject(trace.setSpan(context.active(), this.#span), headers);
    return headers;
  }

  /** Ends the span once: why the call ended, whether it was bridged, the leg's final attributes. */
  end(why: string, bridged: boolean): void {
    if (this.#ended) return;
    this.#ended = true;
    const attributes: Attributes = { 'callbridge.call.end_reason': why, 'callbridge.call.bridged': bridged, ...this.#leg.traceAttributes?.() };
    // No error status: a refusal or a hang-up before the agent spoke is in the attributes (the
    // SIP status, the reason), and which of them is a failure is the reader's call.
    this.#span.setAttributes(attributes);
    this.#span.end();
  }
}
