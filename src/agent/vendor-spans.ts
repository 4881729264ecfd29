/**
 * The vendor requests of one session as trace spans (docs/tracing.md): the runtime's providers
 * wrapped per session, so every adapter (HTTP or WebSocket, any vendor) is traced the same way
 * without each one knowing of traces.
 *
 *   stt  from speechEnded() (the utterance is complete, the recognizer is asked for its final
 *        result) to the final transcript, or the vendor's error
 *   llm  one model request (the agent's llm, with fallback_llm behind it) from the call to the
 *        end of its stream
 *   tts  one synthesis (a sentence or clause) from the request to its last audio
 *
 * Each is a child of the session's span (src/session/session-spans.ts) with the vendor's
 * provider, adapter type and model (from the configuration: never a base URL or a key), and the
 * outcome: an error's code and the vendor's HTTP status when there was one. Cancelled requests
 * (barge-in) end with `callbridge.vendor.cancelled`.
 */
import { SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';
import type { Agent } from '../domain/agent.ts';
import type { SttHandlers, SttOptions, SttProvider, SttStream, TtsProvider, TtsRequest } from './providers/types.ts';
import type { RuntimeDeps } from './runtime/index.ts';

const tracer = trace.getTracer('callbridge.agent');

/** What the session runs on, as describeSessionProviders() says it (session-providers.ts). */
export type DescribeProviders = (agent: Agent) => Record<string, unknown>;

/** The runtime's deps for one session, each vendor request a span under `parent()`. */
export function withVendorSpans(deps: RuntimeDeps, agent: Agent, describe: DescribeProviders | undefined, parent: () => Context | undefined): RuntimeDeps {
  const described = safeDescribe(describe, agent);
  const start = (name: string, attributes: Attributes): Span => tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, parent());
  const model = deps.model;
  return {
    ...deps,
    stt: tracedStt(deps.stt, vendorAttributes('stt', described.stt), start),
    tts: (provider) => tracedTts(deps.tts(provider), vendorAttributes('tts', described.tts), start),
    model: (a) => {
      const stream = model(a);
      const attributes = vendorAttributes('llm', described.llm);
      return (messages, tools, signal) => traceIterable(start('llm', { ...attributes, 'callbridge.llm.messages': messages.length }), stream(messages, tools, signal), signal);
    },
  };
}

function safeDescribe(describe: DescribeProviders | undefined, agent: Agent): Record<string, unknown> {
  try {
    return describe?.(agent) ?? {};
  } catch {
    return {};
  }
}

/** The vendor's names from a describe() entry: strings only, and only these keys. */
function vendorAttributes(kind: string, entry: unknown): Attributes {
  const e = typeof entry === 'object' && entry !== null ? (entry as Record<string, unknown>) : {};
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  const attributes: Attributes = { 'callbridge.vendor.kind': kind };
  const provider = str(e.provider) ?? str(e.model)?.split('/')[0];
  if (provider !== undefined) attributes['callbridge.vendor.provider'] = provider;
  const type = str(e.type);
  if (type !== undefined) attributes['callbridge.vendor.type'] = type;
  // llm: `provider/model`; the model part is the vendor's model name.
  const model = kind === 'llm' ? str(e.model)?.split('/').slice(1).join('/') : str(e.model);
  if (model !== undefined) attributes['callbridge.vendor.model'] = model;
  if (kind === 'tts' && str(e.voice) !== undefined) attributes['callbridge.tts.voice'] = str(e.voice);
  return attributes;
}

/** Ends a vendor span with the outcome: ok, cancelled, or the error's code and HTTP status. */
function endSpan(span: Span, err?: unknown, cancelled = false): void {
  if (cancelled) span.setAttribute('callbridge.vendor.cancelled', true);
  else if (err !== undefined) {
    const e = err as { code?: unknown; status?: unknown; name?: unknown };
    if (typeof e.status === 'number') span.setAttribute('http.response.status_code', e.status);
    const code = typeof e.code === 'string' ? e.code : typeof e.name === 'string' ? e.name : 'error';
    span.setAttribute('error.type', code);
    // The adapters' messages name the vendor and the failure, never a credential (agent/errors.ts).
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message.slice(0, 200) : code });
  }
  span.end();
}

/** A stream whose iteration is the span: yields what it yields, ends the span however it ends. */
async function* traceIterable<T>(span: Span, source: AsyncIterable<T>, signal: AbortSignal): AsyncGenerator<T> {
  let failure: unknown;
  let items = 0;
  try {
    for await (const item of source) {
      items++;
      yield item;
    }
  } catch (err) {
    failure = err;
    throw err;
  } finally {
    span.setAttribute('callbridge.vendor.chunks', items);
    endSpan(span, signal.aborted ? undefined : failure, signal.aborted);
  }
}

function tracedTts(provider: TtsProvider, attributes: Attributes, start: (name: string, a: Attributes) => Span): TtsProvider {
  return {
    name: provider.name,
    synthesize: (request: TtsRequest) => traceIterable(start('tts', { ...attributes, 'callbridge.tts.characters': request.text.length }), provider.synthesize(request), request.signal),
  };
}

function tracedStt(provider: SttProvider, attributes: Attributes, start: (name: string, a: Attributes) => Span): SttProvider {
  return {
    name: provider.name,
    open(options: SttOptions, handlers: SttHandlers): SttStream {
      // One utterance at a time: from speechEnded() to its final transcript.
      let pending: Span | undefined;
      const settle = (err?: unknown, cancelled = false) => {
        if (pending !== undefined) endSpan(pending, err, cancelled);
        pending = undefined;
      };
      const stream = provider.open(options, {
        onTranscript: (t) => {
          if (t.isFinal) {
            pending?.setAttribute('callbridge.stt.characters', t.text.length);
            settle();
          }
          handlers.onTranscript(t);
        },
        onError: (err) => {
          settle(err);
          handlers.onError(err);
        },
      });
      return {
        write: (frame) => stream.write(frame),
        speechStarted: () => stream.speechStarted(),
        speechEnded: () => {
          // An utterance the recognizer never finished is over: a new one is asked for.
          settle(undefined, true);
          pending = start('stt', attributes);
          stream.speechEnded();
        },
        close: () => {
          settle(undefined, true);
          stream.close();
        },
      };
    },
  };
}
