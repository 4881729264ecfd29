/**
 * OpenAI-compatible chat completions (`POST {base_url}/chat/completions`, `stream: true`).
 * The same wire format is spoken by OpenAI, Azure-style gateways, vLLM, Ollama, LiteLLM, ...,
 * so this one adapter covers most self-hosted models too.
 *
 * Stream shape (one JSON chunk per `data:` line, then `data: [DONE]`):
 *
 *   data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}
 *   data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1",
 *          "type":"function","function":{"name":"f","arguments":"{\"a"}}]}}]}
 *   data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,
 *          "function":{"arguments":"\":1}"}}]}}]}
 *   data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}
 *   data: [DONE]
 *
 * Tool calls arrive in pieces keyed by `index` (parallel calls interleave), so they are
 * assembled here and yielded whole: the runtime can only run a call once its arguments are
 * complete.
 */
import { LlmError } from '../../errors.ts';
import type { ChatMessage, LlmDelta, LlmProvider, LlmRequest, ToolCallRequest, ToolSpec } from '../types.ts';
import { isRecord, parseJsonData, postSse } from './sse.ts';

export interface OpenAiChatOptions {
  /** Provider name (the `provider` of `provider/model`). */
  name: string;
  /** e.g. `https://api.openai.com/v1` (no trailing `/chat/completions`). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer`; local servers often need none. */
  apiKey?: string | undefined;
}

export const OPENAI_DEFAULT_BASE_URL = 'https://api.openai.com/v1';

interface PartialToolCall {
  id?: string;
  name?: string;
  arguments: string;
}

export class OpenAiChatProvider implements LlmProvider {
  readonly name: string;
  readonly #url: string;
  readonly #apiKey: string | undefined;

  constructor(options: OpenAiChatOptions) {
    this.name = options.name;
    this.#url = `${options.baseUrl.replace(/\/+$/, '')}/chat/completions`;
    this.#apiKey = options.apiKey || undefined;
  }

  async *stream(request: LlmRequest): AsyncGenerator<LlmDelta> {
    const body: Record<string, unknown> = {
      model: request.model,
      messages: request.messages.map(toOpenAiMessage),
      stream: true,
    };
    if (request.tools.length > 0) body['tools'] = request.tools.map(toOpenAiTool);

    const events = postSse({
      provider: this.name,
      url: this.#url,
      headers: this.#apiKey ? { authorization: `Bearer ${this.#apiKey}` } : {},
      body,
      signal: request.signal,
      apiKey: this.#apiKey,
    });

    const pending = new Map<number, PartialToolCall>();
    let generated = 0;
    // Yields the assembled calls in index order and forgets them.
    const flush = (): LlmDelta[] => {
      const out: LlmDelta[] = [];
      for (const [index, p] of [...pending.entries()].sort((a, b) => a[0] - b[0])) {
        if (!p.name) throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: tool call ${index} has no function name`);
        const call: ToolCallRequest = { id: p.id || `call_${++generated}`, name: p.name, arguments: p.arguments || '{}' };
        out.push({ type: 'tool_call', call });
      }
      pending.clear();
      return out;
    };

    for await (const event of events) {
      if (event.data.trim() === '[DONE]') {
        yield* flush(); // servers that never send finish_reason tool_calls
        yield { type: 'done' };
        return;
      }
      const chunk = parseJsonData(this.name, event.data);
      if (!isRecord(chunk)) throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: stream chunk is not an object`);
      // Some compatible servers report failures inside a 200 stream.
      if (isRecord(chunk['error'])) {
        const message = typeof chunk['error']['message'] === 'string' ? chunk['error']['message'] : 'unknown error';
        throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: error in stream: ${message.slice(0, 300)}`);
      }
      const choices = chunk['choices'];
      if (choices === undefined) continue;
      if (!Array.isArray(choices)) throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: choices is not a list`);
      // We never ask for n > 1, and a usage-only chunk has choices: [].
      const choice: unknown = choices[0];
      if (!isRecord(choice)) continue;
      const delta = choice['delta'];
      if (isRecord(delta)) {
        if (typeof delta['content'] === 'string' && delta['content'] !== '') yield { type: 'text', text: delta['content'] };
        if (Array.isArray(delta['tool_calls'])) this.#collect(pending, delta['tool_calls']);
      }
      if (typeof choice['finish_reason'] === 'string') yield* flush();
    }
    if (request.signal.aborted) return;
    throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: stream ended without [DONE]`);
  }

  /** Appends one chunk's pieces of tool calls to the calls being assembled. */
  #collect(pending: Map<number, PartialToolCall>, pieces: unknown[]): void {
    pieces.forEach((piece, position) => {
      if (!isRecord(piece)) throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: malformed tool call delta`);
      // `index` is required by OpenAI; a few servers omit it when they send whole calls.
      const index = typeof piece['index'] === 'number' ? piece['index'] : position;
      const p = pending.get(index) ?? { arguments: '' };
      pending.set(index, p);
      if (typeof piece['id'] === 'string' && piece['id'] !== '') p.id = piece['id'];
      const fn = piece['function'];
      if (isRecord(fn)) {
        if (typeof fn['name'] === 'string' && fn['name'] !== '') p.name = fn['name'];
        if (typeof fn['arguments'] === 'string') p.arguments += fn['arguments'];
      }
    });
  }
}

function toOpenAiMessage(m: ChatMessage): Record<string, unknown> {
  switch (m.role) {
    case 'system':
    case 'user':
      return { role: m.role, content: m.content };
    case 'assistant': {
      if (!m.toolCalls || m.toolCalls.length === 0) return { role: 'assistant', content: m.content };
      return {
        role: 'assistant',
        // OpenAI wants null rather than "" when the turn was only tool calls.
        content: m.content === '' ? null : m.content,
        tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
      };
    }
    case 'tool':
      return { role: 'tool', tool_call_id: m.toolCallId, content: m.content };
  }
}

function toOpenAiTool(t: ToolSpec): Record<string, unknown> {
  return { type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } };
}
