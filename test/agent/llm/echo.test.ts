import { describe, expect, it } from 'vitest';
import { EchoProvider } from '../../../src/agent/providers/llm/echo.ts';
import type { ChatMessage, ToolSpec } from '../../../src/agent/providers/types.ts';
import { collect, textOf } from './helpers.ts';

const tool = (name: string): ToolSpec => ({ name, description: name, parameters: { type: 'object', properties: {} } });
const TOOLS = [tool('end_call'), tool('transfer_call'), tool('lookup_order')];
const signal = () => new AbortController().signal;

async function answer(messages: ChatMessage[], tools: ToolSpec[] = TOOLS, echo = new EchoProvider()) {
  return collect(echo.stream({ model: 'echo', messages, tools, signal: signal() }));
}

describe('EchoProvider', () => {
  it('is named local by default, configurable', () => {
    expect(new EchoProvider().name).toBe('local');
    expect(new EchoProvider({ name: 'demo' }).name).toBe('demo');
  });

  it('echoes the user text word by word, one delta per word with its trailing space', async () => {
    const deltas = await answer([
      { role: 'system', content: 'You are helpful.' },
      { role: 'user', content: '  hello   there  ' },
    ]);
    expect(deltas).toEqual([
      { type: 'text', text: 'You ' },
      { type: 'text', text: 'said: ' },
      { type: 'text', text: 'hello   ' },
      { type: 'text', text: 'there.' },
      { type: 'done' },
    ]);
  });

  it('reports a tool result when the last message is one', async () => {
    const deltas = await answer([
      { role: 'user', content: 'tool lookup_order id=7' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'echo-call-1', name: 'lookup_order', arguments: '{"id":"7"}' }] },
      { role: 'tool', toolCallId: 'echo-call-1', name: 'lookup_order', content: 'shipped' },
    ]);
    expect(textOf(deltas)).toBe('The lookup_order tool returned: shipped.');
    expect(deltas.at(-1)).toEqual({ type: 'done' });
  });

  it('apologizes for an empty or blank user message', async () => {
    expect(textOf(await answer([{ role: 'user', content: '   ' }]))).toBe('Sorry, I did not catch that.');
    expect(textOf(await answer([{ role: 'user', content: '' }]))).toBe('Sorry, I did not catch that.');
  });

  it('calls a named tool with key=value arguments as strings, no text, numbering the calls', async () => {
    const echo = new EchoProvider();
    const first = await answer([{ role: 'user', content: 'please Tool lookup_order order_id=A17 urgent=yes thanks' }], TOOLS, echo);
    expect(first).toEqual([
      { type: 'tool_call', call: { id: 'echo-call-1', name: 'lookup_order', arguments: '{"order_id":"A17","urgent":"yes"}' } },
      { type: 'done' },
    ]);
    const second = await answer([{ role: 'user', content: 'tool end_call' }], TOOLS, echo);
    expect(second).toEqual([{ type: 'tool_call', call: { id: 'echo-call-2', name: 'end_call', arguments: '{}' } }, { type: 'done' }]);
  });

  it('does not call a tool the request does not offer', async () => {
    expect(textOf(await answer([{ role: 'user', content: 'tool format_disk' }]))).toBe('You said: tool format_disk.');
  });

  it('says Goodbye! and calls end_call on goodbye or hang up, only when end_call is offered', async () => {
    for (const text of ['OK, GoodBye', 'please hang up now']) {
      const deltas = await answer([{ role: 'user', content: text }]);
      expect(deltas).toEqual([
        { type: 'text', text: 'Goodbye!' },
        { type: 'tool_call', call: { id: 'echo-call-1', name: 'end_call', arguments: '{}' } },
        { type: 'done' },
      ]);
    }
    expect(textOf(await answer([{ role: 'user', content: 'goodbye' }], [tool('transfer_call')]))).toBe('You said: goodbye.');
  });

  it('calls transfer_call on transfer, only when transfer_call is offered', async () => {
    expect(await answer([{ role: 'user', content: 'Transfer me to a human' }])).toEqual([
      { type: 'tool_call', call: { id: 'echo-call-1', name: 'transfer_call', arguments: '{}' } },
      { type: 'done' },
    ]);
    expect(textOf(await answer([{ role: 'user', content: 'transfer me' }], []))).toBe('You said: transfer me.');
  });

  it('answers an ANALYZE: request with one JSON object: the transcript (cut to 500 characters) and each FIELDS: field\'s first choice said as a word', async () => {
    const fields = 'FIELDS: [{"name":"outcome","choices":["booked","declined"]},{"name":"mood","choices":["Calm","angry"]},{"name":"none","choices":["x"]}]';
    const short = await answer([
      { role: 'system', content: `ANALYZE: review this call.\n${fields}` },
      { role: 'user', content: '  user: I am calm, please decline\nagent: Declined. Booked nothing.  ' },
    ]);
    expect(JSON.parse(textOf(short))).toEqual({ summary: 'Summary: user: I am calm, please decline\nagent: Declined. Booked nothing.', fields: { outcome: 'booked', mood: 'Calm', none: null } });
    const long = 'word '.repeat(300);
    const deltas = await answer([
      { role: 'system', content: 'ANALYZE: ...' },
      { role: 'user', content: long },
    ]);
    // No FIELDS: line (or one that is not a JSON list): no fields.
    expect(JSON.parse(textOf(deltas))).toEqual({ summary: `Summary: ${long.trim().slice(0, 500)}`, fields: {} });
    expect(JSON.parse(textOf(await answer([{ role: 'system', content: 'ANALYZE: x\nFIELDS: {oops' }, { role: 'user', content: 'hi' }]))).fields).toEqual({});
  });

  it('stops at once when the signal aborts', async () => {
    const ac = new AbortController();
    const seen: string[] = [];
    for await (const d of new EchoProvider().stream({ model: 'echo', messages: [{ role: 'user', content: 'one two three four' }], tools: [], signal: ac.signal })) {
      if (d.type === 'text') seen.push(d.text);
      ac.abort();
    }
    expect(seen).toEqual(['You ']);
  });
});
