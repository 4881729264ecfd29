/**
 * The transcript lines of tool calls, as the service records them: one line when the model calls
 * a tool (the call row: id, name, arguments as a JSON string, start) and one when it is answered
 * (the output row: the output, and the call again with its output and end). The output's line
 * repeats the call's details, so the call is remembered until it is answered.
 */
import type { TranscriptEntry, TranscriptToolCall } from '../../session/runtime-contract.ts';
import { argumentsByName } from '../tools.ts';
import type { ReplyEvent } from './events.ts';

type Line = Omit<TranscriptEntry, 'at'>;

export class ToolTranscript {
  readonly #open = new Map<string, TranscriptToolCall>();

  /** The line of a tool call. */
  called(e: Extract<ReplyEvent, { type: 'tool_call' }>, now = new Date()): Line {
    const toolCall = { callId: e.toolCallId, toolName: e.toolName, arguments: e.rawArguments ?? JSON.stringify(argumentsByName(e.arguments)), startedAt: now.toISOString() };
    this.#open.set(e.toolCallId, toolCall);
    return { role: 'tool', text: `${e.toolName}(${toolCall.arguments})`, toolCall };
  }

  /** The line of a tool's output. */
  answered(e: Extract<ReplyEvent, { type: 'tool_result' }>, now = new Date()): Line {
    const started = this.#open.get(e.toolCallId);
    this.#open.delete(e.toolCallId);
    const toolCall = { callId: e.toolCallId, toolName: e.name, arguments: started?.arguments ?? '{}', output: e.output, startedAt: started?.startedAt ?? now.toISOString(), endedAt: now.toISOString() };
    return { role: 'tool', text: `${e.name}: ${e.output}`, toolCall, toolCallOutput: e.output };
  }
}
