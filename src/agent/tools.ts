/**
 * The tools a session's model may call:
 * - built-in: `end_call` (always) and `transfer_call` (when the agent has a transfer number):
 *   the runtime carries them out itself;
 * - client tools: the version's flow nodes of `type: "tool"` (DESIGN.md: `name`, `description`,
 *   `parameters`), sent to the client as `tool_call` and answered with `tool_call_output`.
 *
 * `parameters` of a node may be a JSON Schema object (`{ type: "object", properties, required }`)
 * or a list of `{ name, type|dataType, description, required, value? }` (a flow editor's shape).
 * A parameter with a `value` is static: the model does not fill it, the client gets it as set.
 *
 * Who answers a client tool: the session's client (`tool_call` ... `tool_call_output`) when it
 * answers tools (a web session), else the organization's webhook endpoint (`tool.call`, every
 * bridged phone call); a node naming `webhook_id` always goes to that endpoint. `wait_message`:
 * a short phrase said when the answer takes longer than a second.
 */
import type { ToolCallArgument } from '../session/protocol.ts';
import type { ToolCallRequest, ToolSpec } from './providers/types.ts';
import type { ToolWebhookCall, ToolWebhookResult } from '../events/tool-calls.ts';

export const END_CALL_TOOL = 'end_call';
export const TRANSFER_CALL_TOOL = 'transfer_call';
export const SEND_DTMF_TOOL = 'send_dtmf';

interface ParamDef {
  name: string;
  dataType: string;
  description: string;
  required: boolean;
  /** Set for static parameters. */
  staticValue?: unknown;
}

export interface ClientTool {
  spec: ToolSpec;
  params: ParamDef[];
  /** The node's `webhook_id`: this tool is answered by that webhook endpoint, whatever the client. */
  webhookId?: string;
  /** The node's `wait_message`: said once when the answer takes longer than WAIT_MESSAGE_AFTER_MS. */
  waitMessage?: string;
}

/** How long a tool's answer may take before its wait message is said, ms. */
export const WAIT_MESSAGE_AFTER_MS = 1000;

/**
 * A tool call answered by the organization's webhook endpoint (`tool.call`), as the runtime asks
 * for it: the request and result types are the sender's (src/events/tool-calls.ts), which the
 * composition root wires in. It never throws: a failure is `{ ok: false, error }`, given to the
 * model at once.
 */
export type ToolWebhook = (request: ToolWebhookCall) => Promise<ToolWebhookResult>;

const str = (v: unknown, d = ''): string => (typeof v === 'string' ? v : d);

function paramsOf(raw: unknown): ParamDef[] {
  if (Array.isArray(raw)) {
    return raw.flatMap((p): ParamDef[] => {
      if (typeof p !== 'object' || p === null || typeof (p as { name?: unknown }).name !== 'string') return [];
      const o = p as Record<string, unknown>;
      return [{ name: o.name as string, dataType: str(o.dataType, str(o.type, 'string')), description: str(o.description), required: o.required === true, ...('value' in o && o.value !== undefined && o.value !== '' ? { staticValue: o.value } : {}) }];
    });
  }
  if (typeof raw === 'object' && raw !== null) {
    const schema = raw as { properties?: Record<string, Record<string, unknown>>; required?: unknown };
    const required = new Set(Array.isArray(schema.required) ? (schema.required as unknown[]).filter((x): x is string => typeof x === 'string') : []);
    return Object.entries(schema.properties ?? {}).map(([name, p]) => ({ name, dataType: str(p?.type, 'string'), description: str(p?.description), required: required.has(name) }));
  }
  return [];
}

/** The client tools declared in the version's nodes; nodes of other types are ignored. */
export function clientToolsFromNodes(nodes: ReadonlyArray<Record<string, unknown>>): ClientTool[] {
  const tools: ClientTool[] = [];
  const seen = new Set<string>([END_CALL_TOOL, TRANSFER_CALL_TOOL, SEND_DTMF_TOOL]);
  for (const node of nodes) {
    if (node.type !== 'tool' || typeof node.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(node.name) || seen.has(node.name)) continue;
    seen.add(node.name);
    const params = paramsOf(node.parameters);
    const modelParams = params.filter((p) => p.staticValue === undefined);
    const webhookId = str(node.webhook_id).trim();
    const waitMessage = str(node.wait_message).trim();
    tools.push({
      params,
      ...(webhookId !== '' ? { webhookId } : {}),
      ...(waitMessage !== '' ? { waitMessage } : {}),
      spec: {
        name: node.name,
        description: str(node.description, `Client tool ${node.name}`),
        parameters: {
          type: 'object',
          properties: Object.fromEntries(modelParams.map((p) => [p.name, { type: jsonType(p.dataType), description: p.description }])),
          required: modelParams.filter((p) => p.required).map((p) => p.name),
        },
      },
    });
  }
  return tools;
}

function jsonType(dataType: string): string {
  const t = dataType.toLowerCase();
  if (t === 'number' || t === 'integer' || t === 'boolean' || t === 'object' || t === 'array') return t;
  return 'string';
}

export function builtinToolSpecs(canTransfer: boolean, phone = false): ToolSpec[] {
  const specs: ToolSpec[] = [{ name: END_CALL_TOOL, description: 'End the call when the conversation is over or the caller asks to hang up. Say goodbye first.', parameters: { type: 'object', properties: {}, required: [] } }];
  if (phone) {
    specs.push({
      name: SEND_DTMF_TOOL,
      description: 'Press keys on the phone line (to navigate an automated phone menu).',
      parameters: { type: 'object', properties: { digits: { type: 'string', description: 'keys to press: 0-9, *, #, A-D' } }, required: ['digits'] },
    });
  }
  if (canTransfer) {
    specs.push({ name: TRANSFER_CALL_TOOL, description: 'Transfer the caller to a human when they ask for one or you cannot help.', parameters: { type: 'object', properties: {}, required: [] } });
  }
  return specs;
}

/**
 * The `tool_call` arguments list (DESIGN.md): every declared parameter, static ones with their
 * set value, resolved ones with what the model wrote. Arguments the model invented beyond the
 * declaration are passed along as resolved strings rather than dropped.
 * @throws SyntaxError when the model's arguments are not a JSON object.
 */
export function toolCallArguments(tool: ClientTool, call: ToolCallRequest): ToolCallArgument[] {
  const parsed: unknown = call.arguments.trim() === '' ? {} : JSON.parse(call.arguments);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new SyntaxError('tool arguments are not a JSON object');
  const given = parsed as Record<string, unknown>;
  const out: ToolCallArgument[] = tool.params.map((p) =>
    p.staticValue !== undefined
      ? { name: p.name, type: 'static', dataType: p.dataType, description: p.description, required: p.required, value: p.staticValue }
      : { name: p.name, type: 'resolved', dataType: p.dataType, description: p.description, required: p.required, value: given[p.name] ?? null },
  );
  for (const [name, value] of Object.entries(given)) {
    if (!tool.params.some((p) => p.name === name)) out.push({ name, type: 'resolved', dataType: typeof value, description: '', required: false, value });
  }
  return out;
}

/** The arguments of a tool_call as one object by name (the tool.call webhook's `arguments`). */
export function argumentsByName(args: readonly ToolCallArgument[]): Record<string, unknown> {
  return Object.fromEntries(args.map((a) => [a.name, a.value]));
}
