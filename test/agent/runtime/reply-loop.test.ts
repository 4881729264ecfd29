/**
 * The reply and tool loop alone, with a scripted model, on virtual time: the answer streamed
 * into sentences, tools (client tools round trip, their timeout, end_call, transfer_call,
 * send_dtmf), model failures (the apology, the session going on, the fatal third), a cut turn,
 * and the history keeping only what was heard.
 */
import { describe, expect, it } from 'vitest';
import type { AgentTurn, ReplyEvent } from '../../../src/agent/runtime/events.ts';
import { APOLOGY_TEXT, MAX_MODEL_FAILURES, ReplyLoop } from '../../../src/agent/runtime/reply-loop.ts';
import { clientToolsFromNodes, type ToolWebhook } from '../../../src/agent/tools.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { EventLog, scriptedModel, testLogger, text, toolCall, type ModelStep } from './harness.ts';

const LOOKUP = { id: 'n1', type: 'tool', name: 'lookup_order', description: 'Find an order', parameters: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] } };

function loop(steps: ModelStep[], opts: { phone?: boolean; canTransfer?: boolean; toolTimeoutMs?: number; clientAnswersTools?: boolean; toolWebhook?: ToolWebhook; nodes?: Array<Record<string, unknown>> } = {}) {
  const time = new VirtualTime();
  const events = new EventLog<ReplyEvent>(time);
  /** The turn timeline's marks, apart: the sequences below are the conversation's events. */
  const marks: Array<{ mark: string; at: number }> = [];
  const { model, calls } = scriptedModel(steps);
  const { log, lines } = testLogger();
  const replies = new ReplyLoop({
    model,
    prompt: 'Be brief.',
    clientTools: clientToolsFromNodes(opts.nodes ?? [LOOKUP]),
    canTransfer: opts.canTransfer ?? false,
    phone: opts.phone ?? false,
    toolTimeoutMs: opts.toolTimeoutMs ?? 10_000,
    clientAnswersTools: opts.clientAnswersTools ?? true,
    ...(opts.toolWebhook ? { toolWebhook: opts.toolWebhook } : {}),
    session: { orgId: 'o1', callId: 'c1', agentId: 'a1' },
    timers: time,
    log,
    emit: (e) => (e.type === 'mark' ? marks.push({ mark: e.mark, at: time.now() }) : events.emit(e)),
  });
  return { time, events, marks, calls, lines, replies };
}

function turn(): AgentTurn & { abort: AbortController } {
  const abort = new AbortController();
  return { turnId: 't1', kind: 'reply', text: '', signal: abort.signal, abort };
}

/** The events without their turn and time, for comparing sequences. */
const plain = (events: EventLog<ReplyEvent>) => events.list.map(({ at: _at, ...e }) => ('turn' in e ? { ...e, turn: e.turn.turnId } : e));

describe('ReplyLoop', () => {
  it('streams the answer as text and cuts it into sentences; the answer joins the history', async () => {
    const r = loop([[text('Hello there. How'), text(' can I'), text(' help?')]]);
    r.replies.addUser('Hi');
    const t = turn();
    await r.replies.run(t);
    expect(plain(r.events)).toEqual([
      { type: 'text', turn: 't1', delta: 'Hello there. How' },
      { type: 'sentence', turn: 't1', text: 'Hello there.' },
      { type: 'text', turn: 't1', delta: ' can I' },
      { type: 'text', turn: 't1', delta: ' help?' },
      { type: 'sentence', turn: 't1', text: 'How can I help?' },
      { type: 'done', turn: 't1' },
    ]);
    // The turn's timeline: the model was asked, and its first delta came (once each).
    expect(r.marks.map((m) => m.mark)).toEqual(['llm_request', 'llm_first_token']);
    expect(r.calls[0]!.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ]);
    expect(r.calls[0]!.tools).toEqual(['end_call', 'lookup_order']);
    expect(r.replies.history.at(-1)).toEqual({ role: 'assistant', content: 'Hello there. How can I help?' });
    expect(t.messageIndex).toBe(2);
  });

  it('a client tool call goes to the client, its output is fed back, and the model answers with it', async () => {
    const r = loop([[text('Let me look.'), toolCall('c1', 'lookup_order', { order_id: '42' })], [text('It has shipped.')]]);
    r.replies.addUser('Where is order 42?');
    const running = r.replies.run(turn());
    await r.time.run(500);
    expect(r.events.of('tool_call')).toEqual([
      { type: 'tool_call', toolCallId: 'c1', toolName: 'lookup_order', arguments: [{ name: 'order_id', type: 'resolved', dataType: 'string', description: '', required: true, value: '42' }], toClient: true, at: expect.any(Number) },
    ]);
    expect(r.calls).toHaveLength(1);
    r.replies.toolOutput('c1', '{"status":"shipped"}');
    await running;
    expect(r.calls[1]!.messages.slice(-2)).toEqual([
      { role: 'assistant', content: 'Let me look.', toolCalls: [{ id: 'c1', name: 'lookup_order', arguments: '{"order_id":"42"}' }] },
      { role: 'tool', toolCallId: 'c1', name: 'lookup_order', content: '{"status":"shipped"}' },
    ]);
    expect(plain(r.events).filter((e) => e.type !== 'text' && e.type !== 'tool_call')).toEqual([
      { type: 'sentence', turn: 't1', text: 'Let me look.' },
      { type: 'tool_result', toolCallId: 'c1', name: 'lookup_order', output: '{"status":"shipped"}' },
      { type: 'sentence', turn: 't1', text: 'It has shipped.' },
      { type: 'done', turn: 't1' },
    ]);
    // An output nobody waits for is logged and ignored.
    r.replies.toolOutput('c1', 'again');
    expect(r.lines.some((l) => l.msg === 'tool_call_output for no pending tool call: ignored')).toBe(true);
  });

  it('a client tool that does not answer gives the model an error result after the tool timeout', async () => {
    const r = loop([[toolCall('c1', 'lookup_order', { order_id: '7' })], [text('Sorry, I cannot check that now.')]], { toolTimeoutMs: 3000 });
    const running = r.replies.run(turn());
    const t0 = r.time.now();
    await r.time.run(2999);
    expect(r.calls).toHaveLength(1);
    await r.time.run(1);
    await running;
    expect(r.time.now() - t0).toBe(3000);
    expect(r.calls[1]!.messages.at(-1)).toEqual({ role: 'tool', toolCallId: 'c1', name: 'lookup_order', content: 'Error: the tool lookup_order did not answer in time.' });
    expect(r.events.types().at(-1)).toBe('done');
  });

  it('without a client that answers tools, a tool call goes to the webhook (not to the client) and its answer is the output', async () => {
    const sent: Parameters<ToolWebhook>[0][] = [];
    const hook: ToolWebhook = (req) => (sent.push(req), Promise.resolve({ ok: true, output: 'shipped on Monday' }));
    const r = loop([[toolCall('c1', 'lookup_order', { order_id: '42' })], [text('It shipped.')]], { clientAnswersTools: false, toolWebhook: hook });
    await r.replies.run(turn());
    expect(sent).toEqual([{ orgId: 'o1', callId: 'c1', agentId: 'a1', toolCallId: 'c1', name: 'lookup_order', arguments: { order_id: '42' } }]);
    expect(r.events.of('tool_call').map((e) => e.toClient)).toEqual([false]);
    expect(r.calls[1]!.messages.at(-1)).toEqual({ role: 'tool', toolCallId: 'c1', name: 'lookup_order', content: 'shipped on Monday' });
  });

  it('a webhook failure, or no webhook at all, is an error result at once; a node naming webhook_id uses the webhook even when the client answers tools', async () => {
    const failing: ToolWebhook = () => Promise.resolve({ ok: false, error: 'the tool endpoint answered HTTP 500' });
    const r = loop([[toolCall('c1', 'lookup_order', {})], [text('Sorry.')]], { clientAnswersTools: false, toolWebhook: failing });
    await r.replies.run(turn());
    expect(r.calls[1]!.messages.at(-1)!.content).toBe('Error: the tool lookup_order failed: the tool endpoint answered HTTP 500.');
    const none = loop([[toolCall('c1', 'lookup_order', {})], [text('Sorry.')]], { clientAnswersTools: false });
    const t0 = none.time.now();
    await none.replies.run(turn());
    expect(none.time.now()).toBe(t0);
    expect(none.calls[1]!.messages.at(-1)!.content).toMatch(/^Error: the tool lookup_order is not available \(no webhook endpoint/);
    const named: string[] = [];
    const hook: ToolWebhook = (req) => (named.push(req.webhookId ?? ''), Promise.resolve({ ok: true, output: 'ok' }));
    const viaNode = loop([[toolCall('c1', 'lookup_order', {})], [text('Done.')]], { clientAnswersTools: true, toolWebhook: hook, nodes: [{ ...LOOKUP, webhook_id: 'wh-1' }] });
    await viaNode.replies.run(turn());
    expect(named).toEqual(['wh-1']);
    expect(viaNode.events.of('tool_call').map((e) => e.toClient)).toEqual([false]);
  });

  it('a webhook that never settles (a lookup that hangs) still gives the model an error a second after the tool timeout', async () => {
    const r = loop([[toolCall('c1', 'lookup_order', {})], [text('Sorry.')]], { clientAnswersTools: false, toolWebhook: () => new Promise(() => {}), toolTimeoutMs: 3000 });
    const running = r.replies.run(turn());
    const t0 = r.time.now();
    await r.time.run(3999);
    expect(r.calls).toHaveLength(1);
    await r.time.run(1);
    await running;
    expect(r.time.now() - t0).toBe(4000);
    expect(r.calls[1]!.messages.at(-1)!.content).toBe('Error: the tool lookup_order did not answer in time.');
  });

  it("a tool's wait_message is said once when the answer takes longer than a second, and not when it comes in time", async () => {
    const nodes = [{ ...LOOKUP, wait_message: 'One moment while I look that up.' }];
    const slow = loop([[toolCall('c1', 'lookup_order', {})], [text('Found it.')]], { nodes });
    const t = turn();
    const running = slow.replies.run(t);
    await slow.time.run(999);
    expect(slow.events.of('say')).toEqual([]);
    await slow.time.run(2000);
    slow.replies.toolOutput('c1', 'found');
    await running;
    expect(plain(slow.events).filter((e) => e.type === 'say')).toEqual([{ type: 'say', turn: 't1', text: 'One moment while I look that up.' }]);
    const fast = loop([[toolCall('c1', 'lookup_order', {})], [text('Found it.')]], { nodes });
    const running2 = fast.replies.run(turn());
    await fast.time.run(500);
    fast.replies.toolOutput('c1', 'found');
    await running2;
    await fast.time.run(5000);
    expect(fast.events.of('say')).toEqual([]);
  });

  it('a model failure is reported, the agent apologises, and the next turn is answered; the third failure in a row is fatal', async () => {
    const r = loop([new Error('500 from the primary and the fallback'), [text('Now it works.')], new Error('down'), new Error('down'), new Error('down')]);
    await r.replies.run(turn());
    expect(plain(r.events)).toEqual([
      { type: 'failed', turn: 't1', failures: 1, fatal: false },
      { type: 'say', turn: 't1', text: APOLOGY_TEXT },
      { type: 'done', turn: 't1' },
    ]);
    expect(r.lines.find((l) => l.msg === 'the model failed (primary and fallback)')).toMatchObject({ level: 50, failures: 1 });
    // The session goes on: the next turn is answered, and the count starts over.
    await r.replies.run(turn());
    expect(r.events.types().slice(3)).toEqual(['text', 'sentence', 'done']);
    for (let i = 0; i < MAX_MODEL_FAILURES; i++) await r.replies.run(turn());
    expect(r.events.of('failed').map((e) => [e.failures, e.fatal])).toEqual([[1, false], [1, false], [2, false], [3, true]]);
    // No apology after the fatal one: the session ends.
    expect(r.events.types().at(-1)).toBe('failed');
  });

  it('end_call and transfer_call close the turn; send_dtmf on a phone call sends the keys and tells the model', async () => {
    const r = loop([[text('Goodbye.'), toolCall('c1', 'end_call')], [toolCall('c2', 'transfer_call')], [toolCall('c3', 'send_dtmf', { digits: '1w#' })], [text('Done.')]], { phone: true, canTransfer: true });
    await r.replies.run(turn());
    await r.replies.run(turn());
    await r.replies.run(turn());
    expect(r.calls[0]!.tools).toEqual(['end_call', 'send_dtmf', 'transfer_call', 'lookup_order']);
    expect(plain(r.events).filter((e) => e.type !== 'text')).toEqual([
      { type: 'sentence', turn: 't1', text: 'Goodbye.' },
      { type: 'end_call', turn: 't1' },
      { type: 'transfer', turn: 't1' },
      { type: 'tool_call', toolCallId: 'c3', toolName: 'send_dtmf', arguments: [], toClient: false, rawArguments: '{"digits":"1w#"}' },
      { type: 'dtmf', digits: '1#' },
      { type: 'tool_result', toolCallId: 'c3', name: 'send_dtmf', output: 'Sent 1#.' },
      { type: 'sentence', turn: 't1', text: 'Done.' },
      { type: 'done', turn: 't1' },
    ]);
  });

  it('a cut turn stops at once: nothing more is emitted, a pending tool is cancelled, and no failure is counted', async () => {
    const r = loop([[toolCall('c1', 'lookup_order', { order_id: '1' })], 'hang']);
    const runCutAfter10ms = async () => {
      const t = turn();
      const running = r.replies.run(t);
      await r.time.run(10);
      t.abort.abort();
      await running;
    };
    // Cut while its client tool is pending: the model is not asked again.
    await runCutAfter10ms();
    expect(r.events.types()).toEqual(['tool_call']);
    expect(r.calls).toHaveLength(1);
    // Cut while the model has not answered yet.
    await runCutAfter10ms();
    expect(r.calls).toHaveLength(2);
    expect(r.events.types()).toEqual(['tool_call']);
  });

  it('close() gives pending tools an error result and reports no failure afterwards', async () => {
    const r = loop([[toolCall('c1', 'lookup_order', { order_id: '1' })], new Error('too late')]);
    const running = r.replies.run(turn());
    await r.time.run(10);
    r.replies.close();
    await running;
    expect(r.calls[1]!.messages.at(-1)).toMatchObject({ role: 'tool', content: 'Error: the session ended.' });
    expect(r.events.of('failed')).toEqual([]);
  });

  it('after a barge-in the history keeps only what was heard', () => {
    const r = loop([]);
    const first = r.replies.addAgent('Hello there. How can I help?');
    r.replies.keepHeard(first, 'Hello there.');
    expect(r.replies.history.at(-1)).toEqual({ role: 'assistant', content: 'Hello there.' });
    // An answer cut before a word of it was heard leaves no trace...
    const answer = r.replies.addAgent('Sure, one moment.');
    r.replies.keepHeard(answer, '');
    expect(r.replies.history.at(-1)).toEqual({ role: 'assistant', content: 'Hello there.' });
    // ...and a turn cut before the model had finished writing adds what was heard.
    r.replies.keepHeard(undefined, 'Let me');
    expect(r.replies.history.at(-1)).toEqual({ role: 'assistant', content: 'Let me' });
  });
});
