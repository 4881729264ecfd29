/**
 * The reply and tool loop: the model's history, and one agent turn's answer at a time.
 *
 *   history -> model (streamed) -> text deltas -> SentenceSplitter -> sentences
 *                               -> tool calls -> end_call / transfer_call: the turn closes
 *                                             -> send_dtmf: keys to the phone line
 *                                             -> client tools: tool_call ... tool_call_output
 *                               <- results in the history, the model again (MAX_TOOL_ROUNDS)
 *
 * The history holds only what the caller heard: after a barge-in, the runtime hands the heard
 * text back (`keepHeard`), and the interrupted answer is cut to it. A model failure (primary and
 * fallback, decided by the factory) makes the agent apologise and the session go on, until
 * MAX_MODEL_FAILURES turns in a row have failed.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '../../log.ts';
import type { Timers } from '../../media/types.ts';
import type { ChatMessage, LlmDelta, ToolCallRequest, ToolSpec } from '../providers/types.ts';
import { SentenceSplitter } from '../sentence-splitter.ts';
import { argumentsByName, builtinToolSpecs, END_CALL_TOOL, SEND_DTMF_TOOL, toolCallArguments, TRANSFER_CALL_TOOL, WAIT_MESSAGE_AFTER_MS, type ClientTool, type ToolWebhook } from '../tools.ts';
import type { ToolCallArgument } from '../../session/protocol.ts';
import type { AgentTurn, ReplyEvent } from './events.ts';

/** Streams one completion of the agent's model (primary with fallback, decided by the factory). */
export type ModelStream = (messages: ChatMessage[], tools: ToolSpec[], signal: AbortSignal) => AsyncIterable<LlmDelta>;

/** Said when the model fails (primary and fallback). */
export const APOLOGY_TEXT = 'Sorry, I am having trouble answering right now.';
/** Model rounds in one turn (tool call -> result -> model again) before the turn is cut short. */
export const MAX_TOOL_ROUNDS = 5;
/** How much longer than the tool timeout a webhook tool's result is awaited (the sender's own deadline comes first). */
const WEBHOOK_GRACE_MS = 1000;
/** Consecutive failed model turns that end the session with reason error. */
export const MAX_MODEL_FAILURES = 3;

export interface ReplyLoopOptions {
  model: ModelStream;
  /** The agent's prompt, variables substituted ('' for none). */
  prompt: string;
  /** The version's client tools (flow nodes of type tool). */
  clientTools: ClientTool[];
  /** Offer transfer_call (the agent has a transfer number). */
  canTransfer: boolean;
  /** A phone call: send_dtmf is offered and carried out. */
  phone: boolean;
  /** How long a client tool has to answer before the model gets an error result, ms. */
  toolTimeoutMs: number;
  /**
   * Whether the session's client answers tool_call (a web client does; callbridge's own bridge,
   * the client of every phone call, does not): when not, client tools go to the webhook.
   */
  clientAnswersTools: boolean;
  /** Sends a tool call to the organization's webhook endpoint; absent: no endpoint (an error result). */
  toolWebhook?: ToolWebhook;
  /** Who is calling the tool, for the webhook's body. */
  session: { orgId: string; callId: string; agentId: string };
  timers: Timers;
  log: Logger;
  emit(event: ReplyEvent): void;
}

export class ReplyLoop {
  readonly #o: ReplyLoopOptions;
  readonly #tools: ToolSpec[];
  readonly #messages: ChatMessage[] = [];
  readonly #pendingTools = new Map<string, (output: string) => void>();
  /** Webhook tools waiting for their endpoint (apart: a client cannot answer them). */
  readonly #pendingWebhooks = new Map<string, (output: string) => void>();
  #failures = 0;
  #closed = false;

  constructor(options: ReplyLoopOptions) {
    this.#o = options;
    this.#tools = [...builtinToolSpecs(options.canTransfer, options.phone), ...options.clientTools.map((t) => t.spec)];
    if (options.prompt.trim() !== '') this.#messages.push({ role: 'system', content: options.prompt });
  }

  /** The model's history (read-only view, for tests and logs). */
  get history(): readonly ChatMessage[] {
    return this.#messages;
  }

  /** What the model is offered. */
  get tools(): readonly ToolSpec[] {
    return this.#tools;
  }

  /** A committed user turn. */
  addUser(text: string): void {
    this.#messages.push({ role: 'user', content: text });
  }

  /** Something the agent says outside the model (first message, re-prompt). Returns its index. */
  addAgent(text: string): number {
    return this.#messages.push({ role: 'assistant', content: text }) - 1;
  }

  /**
   * An agent turn was cut: its assistant message at `index` (there when the model had finished
   * writing) keeps only the heard text; an answer cut before any of it was heard and that called
   * no tool leaves no trace.
   */
  keepHeard(index: number | undefined, heard: string): void {
    const own = index === undefined ? undefined : this.#messages[index];
    if (own?.role === 'assistant') {
      if (heard === '' && !own.toolCalls?.length && index === this.#messages.length - 1) this.#messages.pop();
      else own.content = heard;
    } else if (heard !== '') {
      this.#messages.push({ role: 'assistant', content: heard });
    }
  }

  /** Answers the conversation so far in `turn`, with tools, until done, cut or failed. */
  async run(turn: AgentTurn): Promise<void> {
    const { signal } = turn;
    const emit = (event: ReplyEvent) => this.#o.emit(event);
    const splitter = new SentenceSplitter();
    let answered = false;
    emit({ type: 'mark', turn, mark: 'llm_request' });
    try {
      for (let round = 0; round < MAX_TOOL_ROUNDS; round++) {
        const calls: ToolCallRequest[] = [];
        let roundText = '';
        for await (const delta of this.#o.model(this.#messages, this.#tools, signal)) {
          if (signal.aborted) return;
          if (!answered) {
            answered = true;
            emit({ type: 'mark', turn, mark: 'llm_first_token' });
          }
          if (delta.type === 'text') {
            roundText += delta.text;
            emit({ type: 'text', turn, delta: delta.text });
            for (const piece of splitter.push(delta.text)) emit({ type: 'sentence', turn, text: piece });
          } else if (delta.type === 'tool_call') {
            calls.push(delta.call);
          }
        }
        if (signal.aborted) return;
        const rest = splitter.flush();
        if (rest !== '') emit({ type: 'sentence', turn, text: rest });
        if (calls.length === 0) {
          turn.messageIndex = this.#messages.push({ role: 'assistant', content: roundText }) - 1;
          break;
        }
        turn.messageIndex = this.#messages.push({ role: 'assistant', content: roundText, toolCalls: calls }) - 1;
        if (await this.#runTools(turn, calls)) return;
        if (signal.aborted) return;
      }
      this.#failures = 0;
      emit({ type: 'done', turn });
    } catch (err) {
      if (signal.aborted || this.#closed) return;
      this.#failures++;
      const fatal = this.#failures >= MAX_MODEL_FAILURES;
      this.#o.log.error({ err, failures: this.#failures }, 'the model failed (primary and fallback)');
      emit({ type: 'failed', turn, failures: this.#failures, fatal });
      if (fatal) return;
      emit({ type: 'say', turn, text: APOLOGY_TEXT });
      emit({ type: 'done', turn });
    }
  }

  /** The client's answer to a tool_call. */
  toolOutput(toolCallId: string, output: string): void {
    const resolve = this.#pendingTools.get(toolCallId);
    if (resolve === undefined) {
      this.#o.log.warn({ toolCallId }, 'tool_call_output for no pending tool call: ignored');
      return;
    }
    this.#pendingTools.delete(toolCallId);
    resolve(output);
  }

  /** The session ended: tools still waiting get an error result; no failure is reported after. */
  close(): void {
    this.#closed = true;
    for (const resolve of [...this.#pendingTools.values(), ...this.#pendingWebhooks.values()]) resolve('Error: the session ended.');
    this.#pendingTools.clear();
    this.#pendingWebhooks.clear();
  }

  /**
   * Runs the model's tool calls. Returns true when one of them ends the turn for good
   * (end_call, transfer_call); otherwise their results are in the history for the next round.
   */
  async #runTools(turn: AgentTurn, calls: ToolCallRequest[]): Promise<boolean> {
    for (const call of calls) {
      if (call.name === END_CALL_TOOL) {
        this.#o.emit({ type: 'end_call', turn });
        return true;
      }
      if (call.name === TRANSFER_CALL_TOOL) {
        this.#o.emit({ type: 'transfer', turn });
        return true;
      }
      const toolCallId = call.id || randomUUID();
      let output: string;
      if (call.name === SEND_DTMF_TOOL && this.#o.phone) {
        this.#o.emit({ type: 'tool_call', toolCallId, toolName: call.name, arguments: [], toClient: false, rawArguments: call.arguments || '{}' });
        output = this.#sendDtmf(call);
      } else {
        output = await this.#runClientTool(call, toolCallId, turn);
        if (turn.signal.aborted) return false;
      }
      this.#messages.push({ role: 'tool', toolCallId: call.id, name: call.name, content: output });
      this.#o.emit({ type: 'tool_result', toolCallId, name: call.name, output });
    }
    return false;
  }

  /** send_dtmf: the keys go to the phone line (the bridge plays them as RFC 4733 events). */
  #sendDtmf(call: ToolCallRequest): string {
    let args: { digits?: unknown };
    try {
      args = JSON.parse(call.arguments || '{}') as { digits?: unknown };
    } catch {
      return 'Error: the arguments are not a JSON object.';
    }
    const digits = typeof args.digits === 'string' ? args.digits.toUpperCase().replace(/[^0-9A-D*#]/g, '') : '';
    if (digits === '') return 'Error: digits must contain 0-9, *, # or A-D.';
    this.#o.emit({ type: 'dtmf', digits });
    return `Sent ${digits}.`;
  }

  /**
   * A client tool: answered by the client (tool_call ... tool_call_output) or by the webhook
   * endpoint (module doc of tools.ts). The tool's wait message is said once when the answer takes
   * longer than WAIT_MESSAGE_AFTER_MS.
   */
  async #runClientTool(call: ToolCallRequest, toolCallId: string, turn: AgentTurn): Promise<string> {
    const tool = this.#o.clientTools.find((t) => t.spec.name === call.name);
    if (tool === undefined) return `Error: there is no tool named ${call.name}.`;
    let args: ToolCallArgument[];
    try {
      args = toolCallArguments(tool, call);
    } catch (err) {
      return `Error: the arguments are not a JSON object (${(err as Error).message}).`;
    }
    const viaWebhook = !this.#o.clientAnswersTools || tool.webhookId !== undefined;
    this.#o.emit({ type: 'tool_call', toolCallId, toolName: call.name, arguments: args, toClient: !viaWebhook });
    const timers = this.#o.timers;
    const waitMessage = tool.waitMessage;
    const waiting = waitMessage === undefined ? undefined : timers.setTimeout(() => {
      if (!turn.signal.aborted && !this.#closed) this.#o.emit({ type: 'say', turn, text: waitMessage });
    }, WAIT_MESSAGE_AFTER_MS);
    try {
      return await (viaWebhook ? this.#webhookAnswer(tool, toolCallId, args, turn.signal) : this.#clientAnswer(call.name, toolCallId, turn.signal));
    } finally {
      if (waiting !== undefined) timers.clearTimeout(waiting);
    }
  }

  /** The client's tool_call_output, or an error result after toolTimeoutMs. */
  #clientAnswer(name: string, toolCallId: string, signal: AbortSignal): Promise<string> {
    const timers = this.#o.timers;
    return new Promise<string>((resolve) => {
      const timer = timers.setTimeout(() => {
        this.#pendingTools.delete(toolCallId);
        this.#o.log.warn({ tool: name, toolCallId }, 'client tool timed out');
        resolve(`Error: the tool ${name} did not answer in time.`);
      }, this.#o.toolTimeoutMs);
      const done = (output: string) => {
        timers.clearTimeout(timer);
        resolve(output);
      };
      this.#pendingTools.set(toolCallId, done);
      signal.addEventListener('abort', () => {
        this.#pendingTools.delete(toolCallId);
        done('Error: cancelled.');
      }, { once: true });
    });
  }

  /**
   * The webhook endpoint's answer. Its sender bounds the POST by the same tool timeout; this wait
   * is bounded too (a second later), so that a lookup of the endpoint that hangs cannot hold the
   * turn. A session that ends or a turn that is cut stops waiting at once; the request runs out
   * on its own.
   */
  #webhookAnswer(tool: ClientTool, toolCallId: string, args: ToolCallArgument[], signal: AbortSignal): Promise<string> {
    const send = this.#o.toolWebhook;
    if (send === undefined) return Promise.resolve(`Error: the tool ${tool.spec.name} is not available (no webhook endpoint answers tool calls).`);
    return new Promise<string>((resolve) => {
      const timers = this.#o.timers;
      const timer = timers.setTimeout(() => {
        this.#o.log.warn({ tool: tool.spec.name, toolCallId }, 'tool webhook: no result in time');
        settle(`Error: the tool ${tool.spec.name} did not answer in time.`);
      }, this.#o.toolTimeoutMs + WEBHOOK_GRACE_MS);
      this.#pendingWebhooks.set(toolCallId, (output) => {
        timers.clearTimeout(timer);
        resolve(output);
      });
      const settle = (output: string) => {
        const done = this.#pendingWebhooks.get(toolCallId);
        if (done === undefined) return;
        this.#pendingWebhooks.delete(toolCallId);
        done(output);
      };
      signal.addEventListener('abort', () => settle('Error: cancelled.'), { once: true });
      send({ ...this.#o.session, toolCallId, name: tool.spec.name, arguments: argumentsByName(args), ...(tool.webhookId !== undefined ? { webhookId: tool.webhookId } : {}) })
        .then((r) => settle(r.ok ? r.output : `Error: the tool ${tool.spec.name} failed: ${r.error}.`))
        .catch((err: unknown) => {
          this.#o.log.error({ err, tool: tool.spec.name }, 'tool webhook failed unexpectedly');
          settle(`Error: the tool ${tool.spec.name} failed.`);
        });
    });
  }
}
