/**
 * The HTTP + Server-Sent-Events transport shared by the OpenAI and Anthropic adapters: POST a
 * JSON body, map transport failures to LlmError codes, and yield the parsed SSE events as they
 * arrive (never buffered to the end: the runtime speaks the first sentence while the model is
 * still writing the second).
 *
 * Cancellation: the caller's signal is linked to our own AbortController, which is also
 * aborted when the consumer stops iterating early (break / return()). Aborting the fetch
 * destroys the socket, so the vendor stops generating (and billing) at once.
 */
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { LlmError } from '../../errors.ts';

export interface SseRequest {
  /** Provider name, for messages. */
  provider: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
  signal: AbortSignal;
  /** Redacted from every message we build, in case a vendor echoes it back. */
  apiKey?: string | undefined;
}

/** A line or event longer than this is not a chat stream; bounds what a broken server costs us. */
export const MAX_SSE_BUFFER = 1024 * 1024;
/** Longest piece of a vendor's error message that we keep (they can be verbose). */
const MAX_VENDOR_MESSAGE = 300;

/**
 * Yields the SSE events of the response. Ends quietly (no error) when the signal aborts.
 * @throws LlmError VENDOR_UNREACHABLE (connect failure, connection broken mid-stream) or
 *   VENDOR_HTTP_STATUS (non-2xx answer, with `status`).
 */
export async function* postSse(req: SseRequest): AsyncGenerator<EventSourceMessage> {
  if (req.signal.aborted) return;
  const controller = new AbortController();
  const onAbort = (): void => controller.abort(req.signal.reason);
  req.signal.addEventListener('abort', onAbort, { once: true });
  try {
    let res: Response;
    try {
      res = await fetch(req.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...req.headers },
        body: JSON.stringify(req.body),
        signal: controller.signal,
      });
    } catch (err) {
      if (req.signal.aborted) return;
      throw new LlmError('VENDOR_UNREACHABLE', `${req.provider}: cannot reach ${originOf(req.url)}: ${describe(err)}`, { cause: err });
    }

    if (!res.ok) {
      const vendorMessage = await readErrorMessage(res).catch(() => undefined);
      if (req.signal.aborted) return;
      const detail = vendorMessage === undefined ? '' : `: ${redact(vendorMessage, req.apiKey)}`;
      throw new LlmError('VENDOR_HTTP_STATUS', `${req.provider}: HTTP ${res.status}${detail}`, { status: res.status });
    }
    if (!res.body) throw new LlmError('VENDOR_BAD_RESPONSE', `${req.provider}: response has no body`);

    // The parser calls back synchronously inside feed(); collect, then yield outside it.
    const events: EventSourceMessage[] = [];
    let overflow = false;
    const parser = createParser({
      onEvent: (e) => events.push(e),
      // Unknown fields and bad `retry:` are ignored, as the SSE spec says; only overflow is fatal.
      onError: (e) => void (overflow ||= e.type === 'max-buffer-size-exceeded'),
      maxBufferSize: MAX_SSE_BUFFER,
    });
    const decoder = new TextDecoder();
    const reader = res.body.getReader();
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (req.signal.aborted) return;
        throw new LlmError('VENDOR_UNREACHABLE', `${req.provider}: connection broke mid-stream: ${describe(err)}`, { cause: err });
      }
      if (chunk.done) {
        parser.feed(decoder.decode());
        // A last event without its blank line still counts (some servers end that way).
        parser.reset({ consume: true });
      } else {
        parser.feed(decoder.decode(chunk.value, { stream: true }));
      }
      if (overflow) throw new LlmError('VENDOR_BAD_RESPONSE', `${req.provider}: stream line or event over ${MAX_SSE_BUFFER} characters`);
      while (events.length > 0) {
        if (req.signal.aborted) return;
        yield events.shift() as EventSourceMessage;
      }
      if (chunk.done) return;
    }
  } finally {
    req.signal.removeEventListener('abort', onAbort);
    // Consumer stopped early (or we failed): make sure the socket does not linger.
    controller.abort();
  }
}

/** Parses one SSE data field as JSON, or throws VENDOR_BAD_RESPONSE. */
export function parseJsonData(provider: string, data: string): unknown {
  try {
    return JSON.parse(data);
  } catch (err) {
    throw new LlmError('VENDOR_BAD_RESPONSE', `${provider}: stream event is not JSON: ${data.slice(0, 80)}`, { cause: err });
  }
}

/** Removes the key from a text the vendor wrote (OpenAI echoes a masked key on 401; be sure). */
export function redact(text: string, apiKey: string | undefined): string {
  const short = text.length > MAX_VENDOR_MESSAGE ? `${text.slice(0, MAX_VENDOR_MESSAGE)}...` : text;
  return apiKey ? short.split(apiKey).join('[redacted]') : short;
}

/** The vendor's own message from a JSON error body (`{error:{message}}` for both vendors). */
async function readErrorMessage(res: Response): Promise<string | undefined> {
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined; // HTML error pages from proxies: not worth quoting
  }
  if (!isRecord(json)) return undefined;
  const error = json['error'];
  if (isRecord(error) && typeof error['message'] === 'string') return error['message'];
  if (typeof error === 'string') return error;
  if (typeof json['message'] === 'string') return json['message'];
  return undefined;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function originOf(url: string): string {
  try {
    return new URL(url).origin; // never the path or query: keys sometimes live there
  } catch {
    return 'an invalid URL';
  }
}

/** fetch's TypeError('fetch failed') hides the useful part (ECONNREFUSED) in `cause`. */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${(err.cause as NodeJS.ErrnoException).code ?? err.cause.message}` : '';
  return `${err.message}${cause}`;
}
