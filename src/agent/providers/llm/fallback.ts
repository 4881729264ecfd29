/**
 * An agent's `llm` with its `fallback_llm` behind it. The fallback takes over only while the
 * caller has heard nothing: when the primary fails before its first delta, or gives no first
 * delta within `firstTokenTimeoutMs`. Once the primary has produced output, its errors
 * propagate: the words are already on their way to TTS and cannot be unsaid, and a second
 * model starting the answer over mid-sentence would sound worse than the runtime's error path.
 *
 * The primary runs under its own AbortController (linked to the caller's signal) so that it
 * can be abandoned alone; the fallback runs under the caller's signal directly.
 */
import { LlmError } from '../../errors.ts';
import type { ChatMessage, LlmDelta, LlmProvider, ToolSpec } from '../types.ts';

export interface ResolvedLlm {
  provider: LlmProvider;
  model: string;
}

export interface FallbackOptions {
  /** How long the primary may take to its first delta (text, tool call or done). */
  firstTokenTimeoutMs: number;
  logger?: { warn(obj: object, msg: string): void } | undefined;
}

/** What the runtime calls: one completion, from whichever model answers. */
export interface FallbackLlm {
  stream(messages: ChatMessage[], tools: ToolSpec[], signal: AbortSignal): AsyncIterable<LlmDelta>;
}

export function withFallback(primary: ResolvedLlm, fallback: ResolvedLlm, options: FallbackOptions): FallbackLlm {
  const primaryId = `${primary.provider.name}/${primary.model}`;
  const fallbackId = `${fallback.provider.name}/${fallback.model}`;
  // Retrying the very model that just failed or stalled would only double the wait.
  const same = primaryId === fallbackId;

  async function* stream(messages: ChatMessage[], tools: ToolSpec[], signal: AbortSignal): AsyncGenerator<LlmDelta> {
    if (signal.aborted) return;
    if (same) {
      yield* primary.provider.stream({ model: primary.model, messages, tools, signal });
      return;
    }

    const primaryAbort = new AbortController();
    const onAbort = (): void => primaryAbort.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const it = primary.provider.stream({ model: primary.model, messages, tools, signal: primaryAbort.signal })[Symbol.asyncIterator]();
    let primaryDone = false;
    try {
      let first: IteratorResult<LlmDelta>;
      try {
        first = await firstWithin(it.next(), options.firstTokenTimeoutMs, signal, primaryId);
      } catch (err) {
        if (signal.aborted) return;
        primaryDone = true;
        primaryAbort.abort(); // the stalled primary closes its connection
        it.return?.(undefined).catch(() => undefined); // settles once the abort lands; nobody waits
        const code = err instanceof LlmError ? err.code : 'UNKNOWN';
        options.logger?.warn(
          { primary: primaryId, fallback: fallbackId, code, err },
          code === 'VENDOR_TIMEOUT'
            ? `LLM ${primaryId} gave no first token within ${options.firstTokenTimeoutMs} ms; falling back to ${fallbackId}`
            : `LLM ${primaryId} failed before its first token; falling back to ${fallbackId}`,
        );
        yield* fallback.provider.stream({ model: fallback.model, messages, tools, signal });
        return;
      }
      if (first.done) {
        primaryDone = true;
        return;
      }
      yield first.value;
      for (;;) {
        const r = await it.next(); // errors from here on propagate: output has started
        if (r.done) {
          primaryDone = true;
          return;
        }
        yield r.value;
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      if (!primaryDone) {
        // The consumer stopped early or the primary threw: release it.
        primaryAbort.abort();
        await it.return?.(undefined).catch(() => undefined);
      }
    }
  }

  return { stream };
}

/**
 * The primary's first result, or a VENDOR_TIMEOUT rejection after `ms`, or an empty result
 * when the caller aborts (the primary, being linked, ends on its own shortly after).
 */
function firstWithin(
  next: Promise<IteratorResult<LlmDelta>>,
  ms: number,
  signal: AbortSignal,
  id: string,
): Promise<IteratorResult<LlmDelta>> {
  next.catch(() => undefined); // a rejection after the timeout must not go unhandled
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new LlmError('VENDOR_TIMEOUT', `${id}: no first token within ${ms} ms`));
    }, ms);
    const onAbort = (): void => {
      cleanup();
      resolve({ done: true, value: undefined });
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    next.then(
      (r) => {
        cleanup();
        resolve(r);
      },
      (err: unknown) => {
        cleanup();
        reject(err);
      },
    );
  });
}
