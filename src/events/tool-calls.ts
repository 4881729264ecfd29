/**
 * A tool call answered by the organization's webhook endpoint (`tool.call`, synchronous): one
 * signed POST, and its answer is the tool's output. Used for sessions whose client does not answer
 * `tool_call` (every bridged phone call) and for tool nodes that name a `webhook_id`.
 *
 *   POST <endpoint url>                      webhook-id: <body id>  (Standard Webhooks headers)
 *   { "type": "tool.call", "id", "created_at",
 *     "data": { "call_id", "agent_id", "tool_call_id", "name", "arguments": { name: value } } }
 *
 *   2xx { "output": "..." }  -> the output (any other 2xx body: the raw body is the output)
 *   anything else            -> an error result for the model, at once (never a retry: a caller
 *                               is waiting on the line)
 *
 * Never throws: every failure becomes an error result, so the conversation always goes on.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '../log.ts';
import type { DestinationPolicy } from './destination.ts';
import { PostError, postJson, type PostAnswer } from './http-post.ts';
import { signWebhook } from './standard-webhooks.ts';
import type { ToolCallTargets } from './targets.ts';

export const TOOL_CALL_EVENT = 'tool.call';

export interface ToolWebhookCall {
  orgId: string;
  /** The call (and session) id. */
  callId: string;
  agentId: string;
  toolCallId: string;
  /** The tool's name (the flow node's `name`). */
  name: string;
  /** The arguments as one object: static values as the node sets them, the model's for the rest. */
  arguments: Record<string, unknown>;
  /** The tool node's `webhook_id`, when it names one. */
  webhookId?: string;
}

/** What the model gets: the endpoint's output, or why there is none. */
export type ToolWebhookResult = { ok: true; output: string } | { ok: false; error: string };

export interface ToolCallSenderOptions {
  targets: ToolCallTargets;
  policy: DestinationPolicy;
  /** The whole attempt's deadline (session.tool_timeout_secs), ms. */
  timeoutMs: number;
  log: Logger;
  /** Clock of `created_at` (tests). */
  now?: () => Date;
}

export type ToolCallSender = (call: ToolWebhookCall) => Promise<ToolWebhookResult>;

/** The sender of tool.call requests for the daemon's sessions. */
export function createToolCallSender(o: ToolCallSenderOptions): ToolCallSender {
  const now = o.now ?? (() => new Date());
  return async (call) => {
    const log = o.log.child({ component: 'tool-webhook', callId: call.callId, tool: call.name, toolCallId: call.toolCallId });
    let target;
    try {
      target = await o.targets.forToolCall(call.orgId, call.webhookId);
    } catch (err) {
      log.error({ err }, 'tool call: the webhook endpoints could not be read');
      return { ok: false, error: 'the tool endpoint could not be looked up' };
    }
    if (target === undefined) {
      log.warn({ webhookId: call.webhookId }, 'tool call: no webhook endpoint answers tool calls for this organization');
      return { ok: false, error: call.webhookId !== undefined ? `no webhook endpoint ${call.webhookId} answers tool calls` : 'no webhook endpoint answers tool calls' };
    }
    const id = randomUUID();
    const body = JSON.stringify({
      type: TOOL_CALL_EVENT,
      id,
      created_at: now().toISOString(),
      data: { call_id: call.callId, agent_id: call.agentId, tool_call_id: call.toolCallId, name: call.name, arguments: call.arguments },
    });
    const started = Date.now();
    let answer: PostAnswer;
    try {
      answer = await postJson(target.url, body, { policy: o.policy, timeoutMs: o.timeoutMs, headers: signWebhook(target.secret, id, body) });
    } catch (err) {
      if (!(err instanceof PostError)) throw err;
      // The endpoint's id, never its URL (it may carry a token) nor its secret.
      log.warn({ endpointId: target.id, failure: err.kind, detail: err.message, ms: Date.now() - started }, 'tool call: the webhook endpoint gave no answer');
      return { ok: false, error: failureText(err) };
    }
    const result = toolOutputOf(answer);
    if (!result.ok) log.warn({ endpointId: target.id, status: answer.status, ms: Date.now() - started }, 'tool call: the webhook endpoint answered an error');
    else log.info({ endpointId: target.id, status: answer.status, ms: Date.now() - started }, 'tool call answered by the webhook endpoint');
    return result;
  };
}

/**
 * The tool output of an endpoint's answer: a 2xx whose body is a JSON object with a string
 * `output` gives that string; any other 2xx body is the output as it is (a plain-text answer, or
 * JSON the model can read); a non-2xx status is an error.
 */
export function toolOutputOf(answer: PostAnswer): ToolWebhookResult {
  if (answer.status < 200 || answer.status > 299) return { ok: false, error: `the tool endpoint answered HTTP ${answer.status}` };
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body);
  } catch {
    return { ok: true, output: answer.body };
  }
  if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) && typeof (parsed as { output?: unknown }).output === 'string') {
    return { ok: true, output: (parsed as { output: string }).output };
  }
  return { ok: true, output: answer.body };
}

function failureText(err: PostError): string {
  switch (err.kind) {
    case 'timeout':
      return 'the tool endpoint did not answer in time';
    case 'destination':
      return "the tool endpoint's address is not allowed";
    case 'network':
      return `the tool endpoint could not be reached (${err.message})`;
  }
}
