/**
 * `local/echo`: the built-in deterministic test and demo model. It is NOT a language model: it
 * answers from the last message by fixed rules, with no network and no delay beyond a microtask
 * per word, so that the whole pipeline (streaming text to TTS, tool calls, ending and
 * transferring a call, the post-call analysis) can be exercised and demonstrated with no vendor
 * account.
 *
 * Rules, first match wins:
 * - a system message starting with `ANALYZE:` (the runtime's post-call analysis request): one
 *   JSON object `{"summary": S, "fields": {NAME: CHOICE or null, ...}}` where S is "Summary: " +
 *   the request's user text (the transcript), trimmed, cut to 500 characters, and each field
 *   named on the request's `FIELDS:` line (a JSON list of `{ name, choices }`) gets the first of
 *   its choices, in the order listed, that occurs in that text as a whole word (case-insensitive),
 *   or null when none does;
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
/** How the post-call analysis request starts (src/agent/runtime/analysis.ts). */
export const ANALYZE_PREFIX = 'ANALYZE:';
/** The analysis request's line naming the fields, as JSON. */
export const ANALYSIS_FIELDS_PREFIX = 'FIELDS:';
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
    const analysis = messages.find((m) => m.role === 'system' && m.content.startsWith(ANALYZE_PREFIX));
    if (analysis) {
      const transcript = messages
        .filter((m) => m.role === 'user')
        .map((m) => m.content)
        .join('\n')
        .trim();
      const fields: Record<string, string | null> = {};
      for (const f of requestedFields(analysis.content)) fields[f.name] = f.choices.find((c) => saidAsWord(transcript, c)) ?? null;
      return { text: JSON.stringify({ summary: `Summary: ${transcript.slice(0, SUMMARY_MAX)}`, fields }), calls: [] };
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

/** The fields an analysis request names on its FIELDS: line; none when it names none or the line is not a JSON list of { name, choices }. */
function requestedFields(instruction: string): Array<{ name: string; choices: string[] }> {
  const line = instruction.split('\n').find((l) => l.startsWith(ANALYSIS_FIELDS_PREFIX));
  if (line === undefined) return [];
  try {
    const list: unknown = JSON.parse(line.slice(ANALYSIS_FIELDS_PREFIX.length));
    if (!Array.isArray(list)) return [];
    return list.flatMap((f: { name?: unknown; choices?: unknown }) =>
      typeof f?.name === 'string' && Array.isArray(f.choices) ? [{ name: f.name, choices: f.choices.filter((c): c is string => typeof c === 'string') }] : [],
    );
  } catch {
    return [];
  }
}

/** Whether `word` occurs in `text` as a whole word (not inside a longer one), whatever the case. */
function saidAsWord(text: string, word: string): boolean {
  if (word === '') return false;
  const escaped = word.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(?<![\\p{L}\\p{N}_])${escaped}(?![\\p{L}\\p{N}_])`, 'iu').test(text);
}
