/**
 * Anthropic Messages API (`POST {base_url}/v1/messages`, `stream: true`).
 *
 * Stream shape (`event:` / `data:` pairs; the data's `type` repeats the event name):
 *
 *   message_start                       the message envelope, no content yet
 *   content_block_start  index 0        {type:"text", text:""} | {type:"tool_use", id, name}
 *   content_block_delta  index 0        {type:"text_delta", text} | {type:"input_json_delta",
 *                                        partial_json}      (repeated)
 *   content_block_stop   index 0        a tool_use block's JSON is complete here
 *   ... more blocks ...
 *   message_delta                       stop_reason, usage
 *   message_stop                        the end
 *   ping (any time), error (any time: {error:{type, message}})
 *
 * Differences from the OpenAI format that the mapping below handles: the system prompt is a
 * top-level field, tool calls are `tool_use` content blocks of the assistant, tool results are
 * `tool_result` blocks of a *user* message, and consecutive same-role messages are merged (all
 * results of parallel calls belong in the one user turn that follows the calls).
 */
import { LlmError } from '../../errors.ts';
import type { ChatMessage, LlmDelta, LlmProvider, LlmRequest } from '../types.ts';
import { isRecord, parseJsonData, postSse, redact } from './sse.ts';

export interface AnthropicMessagesOptions {
  /** Provider name (the `provider` of `provider/model`). */
  name: string;
  /** e.g. `https://api.anthropic.com` (without `/v1`). */
  baseUrl: string;
  apiKey?: string | undefined;
  /** Required by the API; a voice turn is short. Default 1024. */
  maxTokens?: number | undefined;
}

export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';
export const ANTHROPIC_VERSION = '2023-06-01';

/** Anthropic's documented error types and the HTTP status each stands for. */
const ERROR_TYPE_STATUS: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
};

type Block = Record<string, unknown>;
interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: Block[];
}

export class AnthropicMessagesProvider implements LlmProvider {
  readonly name: string;
  readonly #url: string;
  readonly #apiKey: string | undefined;
  readonly #maxTokens: number;

  constructor(options: AnthropicMessagesOptions) {
    this.name = options.name;
    this.#url = `${options.baseUrl.replace(/\/+$/, '')}/v1/messages`;
    this.#apiKey = options.apiKey || undefined;
    this.#maxTokens = options.maxTokens ?? 1024;
  }

  async *stream(request: LlmRequest): AsyncGenerator<LlmDelta> {
    const body: Record<string, unknown> = {
      model: request.model,
      max_tokens: this.#maxTokens,
      messages: toAnthropicMessages(request.messages),
      stream: true,
    };
    const system = request.messages.filter((m) => m.role === 'system').map((m) => m.content);
    if (system.length > 0) body['system'] = system.join('\n\n');
    if (request.tools.length > 0) {
      body['tools'] = request.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
    }

    const headers: Record<string, string> = { 'anthropic-version': ANTHROPIC_VERSION };
    if (this.#apiKey) headers['x-api-key'] = this.#apiKey;
    const events = postSse({ provider: this.name, url: this.#url, headers, body, signal: request.signal, apiKey: this.#apiKey });

    // tool_use blocks being assembled, by content block index.
    const toolBlocks = new Map<number, { id: string; name: string; json: string }>();
    for await (const event of events) {
      const data = parseJsonData(this.name, event.data);
      if (!isRecord(data)) throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: stream event is not an object`);
      const type = typeof data['type'] === 'string' ? data['type'] : event.event;
      const index = typeof data['index'] === 'number' ? data['index'] : -1;
      switch (type) {
        case 'content_block_start': {
          const block = data['content_block'];
          if (isRecord(block) && block['type'] === 'tool_use') {
            if (typeof block['id'] !== 'string' || typeof block['name'] !== 'string') {
              throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: tool_use block without id or name`);
            }
            toolBlocks.set(index, { id: block['id'], name: block['name'], json: '' });
          } else if (isRecord(block) && block['type'] === 'text' && typeof block['text'] === 'string' && block['text'] !== '') {
            yield { type: 'text', text: block['text'] };
          }
          break;
        }
        case 'content_block_delta': {
          const delta = data['delta'];
          if (!isRecord(delta)) throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: content_block_delta without delta`);
          if (delta['type'] === 'text_delta' && typeof delta['text'] === 'string') {
            if (delta['text'] !== '') yield { type: 'text', text: delta['text'] };
          } else if (delta['type'] === 'input_json_delta' && typeof delta['partial_json'] === 'string') {
            const tool = toolBlocks.get(index);
            if (!tool) throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: input_json_delta for unknown block ${index}`);
            tool.json += delta['partial_json'];
          }
          // Other delta types (thinking, signatures, citations) carry nothing we speak.
          break;
        }
        case 'content_block_stop': {
          const tool = toolBlocks.get(index);
          if (tool) {
            toolBlocks.delete(index);
            // A tool without parameters streams no JSON at all.
            yield { type: 'tool_call', call: { id: tool.id, name: tool.name, arguments: tool.json.trim() === '' ? '{}' : tool.json } };
          }
          break;
        }
        case 'message_stop':
          yield { type: 'done' };
          return;
        case 'error':
          throw this.#streamError(data['error']);
        default:
          // message_start, message_delta, ping, and event types added later: nothing to say.
          break;
      }
    }
    if (request.signal.aborted) return;
    throw new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: stream ended without message_stop`);
  }

  /** An `event: error` mid-stream (overloaded, rate limit): as if the HTTP status had said it. */
  #streamError(error: unknown): LlmError {
    const kind = isRecord(error) && typeof error['type'] === 'string' ? error['type'] : 'unknown_error';
    const message = isRecord(error) && typeof error['message'] === 'string' ? redact(error['message'], this.#apiKey) : 'no message';
    const status = ERROR_TYPE_STATUS[kind];
    if (status === undefined) return new LlmError('VENDOR_BAD_RESPONSE', `${this.name}: error in stream: ${kind}: ${message}`);
    return new LlmError('VENDOR_HTTP_STATUS', `${this.name}: error in stream (${status} ${kind}): ${message}`, { status });
  }
}

/** ChatMessage[] -> Anthropic `messages` (system messages are dropped: they go to `system`). */
export function toAnthropicMessages(messages: ChatMessage[]): Array<{ role: 'user' | 'assistant'; content: string | Block[] }> {
  const out: AnthropicMessage[] = [];
  const push = (role: 'user' | 'assistant', blocks: Block[]): void => {
    if (blocks.length === 0) return; // the API rejects empty content
    const last = out[out.length - 1];
    if (last && last.role === role) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  };
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        break;
      case 'user':
        push('user', textBlocks(m.content));
        break;
      case 'assistant':
        push('assistant', [
          ...textBlocks(m.content),
          ...(m.toolCalls ?? []).map((c) => ({ type: 'tool_use', id: c.id, name: c.name, input: parseArguments(c.arguments) })),
        ]);
        break;
      case 'tool':
        push('user', [{ type: 'tool_result', tool_use_id: m.toolCallId, content: m.content }]);
        break;
    }
  }
  // A lone text block is sent as the plain string form: the common, shortest shape.
  return out.map((m) => {
    const only = m.content.length === 1 ? m.content[0] : undefined;
    return only && only['type'] === 'text' ? { role: m.role, content: only['text'] as string } : m;
  });
}

function textBlocks(text: string): Block[] {
  // Anthropic rejects empty text blocks ("text content blocks must be non-empty").
  return text.trim() === '' ? [] : [{ type: 'text', text }];
}

/** tool_use.input must be an object; a model's malformed arguments become {} rather than a 400. */
function parseArguments(args: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(args);
    return isRecord(v) ? v : {};
  } catch {
    return {};
  }
}
