/**
 * `local/echo`: the built-in deterministic test and demo model. It is NOT a language model: it
 * answers from the last message by fixed rules, with no network and no delay beyond a microtask
 * per word, so that the whole pipeline (streaming text to TTS, tool calls, ending and
 * transferring a call, call summaries) can be exercised and demonstrated with no vendor account.
 *
 * Rules, first match wins:
 * - a system message starting with `SUMMARIZE:` (the runtime's summary request):
 *   "Summary: " + the request's user text (the transcript), trimmed, cut to 500 characters;
 * - last message is a tool result: "The <name> tool returned: <content>.";
 * - last user text empty or blank: "Sorry, I did not catch that.";
 * - `tool <name> [key=value ...]` where <name> is one of the request's tools: one tool call
 *   `echo-call-<n>` with arguments `{"key":"value",...}` (strings), no text;
 * - "goodbye" or "hang up" and a tool `end_call`: "Goodbye!" then a call of end_call `{}`;
 * - "transfer" and a tool `transfer_call`: a call of transfer_call `{}`, no text;
 * - otherwise: "You said: <user text, trimmed>."
 *
 * Text streams one delta per word, the word with its trailing whitespace, so consumers see
 * the answer in pieces as they would from a real model.
 */
import type { ChatMessage, LlmDelta, LlmProvider, LlmRequest, ToolCallRequest } from '../types.ts';

export interface EchoOptions {
  /** Provider name; default `local`. */
  name?: string;
}

/** The model name the echo provider answers to. */
export const ECHO_MODEL = 'echo';
export const SUMMARIZE_PREFIX = 'SUMMARIZE:';
const SUMMARY_MAX = 500;
const TOOL_COMMAND = /\btool\s+([A-Za-z0-9_-]+)((?:\s+[A-Za-z0-9_]+=\S+)*)/i;

interface EchoAnswer {
  text: string;
  calls: Array<Omit<ToolCallRequest, 'id'>>;
}

export class EchoProvider implements LlmProvider {
  readonly name: string;
  /** Numbers the tool calls of this instance: echo-call-1, echo-call-2, ... */
  #calls = 0;

  constructor(options: EchoOptions = {}) {
    this.name = options.name ?? 'local';
  }

  async *stream(request: LlmRequest): AsyncGenerator<LlmDelta> {
    const answer = this.answer(request.messages, request.tools.map((t) => t.name));
    for (const word of answer.text.match(/\S+\s*/g) ?? []) {
      await Promise.resolve(); // one microtask per word: streaming, but no timers
      if (request.signal.aborted) return;
      yield { type: 'text', text: word };
    }
    for (const call of answer.calls) {
      if (request.signal.aborted) return;
      yield { type: 'tool_call', call: { id: `echo-call-${++this.#calls}`, ...call } };
    }
    if (request.signal.aborted) return;
    yield { type: 'done' };
  }

  /** The whole answer at once (exposed for tests and docs). */
  answer(messages: ChatMessage[], toolNames: string[]): EchoAnswer {
    if (messages.some((m) => m.role === 'system' && m.content.startsWith(SUMMARIZE_PREFIX))) {
      const transcript = messages
        .filter((m) => m.role === 'user')
        .map((m) => m.content)
        .join('\n')
        .trim();
      return { text: `Summary: ${transcript.slice(0, SUMMARY_MAX)}`, calls: [] };
    }

    const last = messages[messages.length - 1];
    if (last?.role === 'tool') return { text: `The ${last.name} tool returned: ${last.content}.`, calls: [] };

    const lastUser = [...messages].reverse().find((m) => m.role === 'user');
    const text = lastUser?.content.trim() ?? '';
    if (text === '') return { text: 'Sorry, I did not catch that.', calls: [] };

    const command = TOOL_COMMAND.exec(text);
    if (command && toolNames.includes(command[1] as string)) {
      const args: Record<string, string> = {};
      for (const pair of (command[2] ?? '').trim().split(/\s+/).filter(Boolean)) {
        const eq = pair.indexOf('=');
        args[pair.slice(0, eq)] = pair.slice(eq + 1);
      }
      return { text: '', calls: [{ name: command[1] as string, arguments: JSON.stringify(args) }] };
    }

    const lower = text.toLowerCase();
    if ((lower.includes('goodbye') || lower.includes('hang up')) && toolNames.includes('end_call')) {
      return { text: 'Goodbye!', calls: [{ name: 'end_call', arguments: '{}' }] };
    }
    if (lower.includes('transfer') && toolNames.includes('transfer_call')) {
      return { text: '', calls: [{ name: 'transfer_call', arguments: '{}' }] };
    }
    return { text: `You said: ${text}.`, calls: [] };
  }
}
