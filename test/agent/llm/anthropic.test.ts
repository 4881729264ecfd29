import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LlmError } from '../../../src/agent/errors.ts';
import { AnthropicMessagesProvider } from '../../../src/agent/providers/llm/anthropic.ts';
import type { ChatMessage, LlmDelta, ToolSpec } from '../../../src/agent/providers/types.ts';
import { anthropicSse, gate, startFakeLlmServer, type FakeLlmServer } from './fake-llm-servers.ts';
import { collect, thrown, within } from './helpers.ts';

const KEY = 'sk-ant-test-SECRET-0987654321';
const user = (content: string): ChatMessage[] => [{ role: 'user', content }];
const LOOKUP: ToolSpec = {
  name: 'lookup_order',
  description: 'Find an order',
  parameters: { type: 'object', properties: { order_id: { type: 'string' } } },
};
const END_CALL: ToolSpec = { name: 'end_call', description: 'Hang up', parameters: { type: 'object', properties: {} } };

let server: FakeLlmServer;
let provider: AnthropicMessagesProvider;
beforeEach(async () => {
  server = await startFakeLlmServer('anthropic');
  provider = new AnthropicMessagesProvider({ name: 'anthropic', baseUrl: server.baseUrl, apiKey: KEY });
});
afterEach(async () => {
  await server.close();
});

const run = (messages: ChatMessage[], tools: ToolSpec[] = [], signal = new AbortController().signal) =>
  provider.stream({ model: 'claude-test', messages, tools, signal });

describe('AnthropicMessagesProvider streaming', () => {
  it('yields text deltas as they arrive, before the stream ends', async () => {
    const g = gate();
    const [blockStart, d1, d2, blockStop] = anthropicSse.textBlock(0, ['Hel', 'lo']) as [string, string, string, string];
    server.enqueue({
      steps: [anthropicSse.messageStart(), blockStart, anthropicSse.event('ping'), d1, { waitFor: g.promise }, d2, blockStop, ...anthropicSse.end()],
    });
    const it = run(user('hi'))[Symbol.asyncIterator]();
    const first = await within(it.next(), 'first delta while the stream is held open');
    expect(first.value).toEqual({ type: 'text', text: 'Hel' });
    g.open();
    const rest: LlmDelta[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    expect(rest).toEqual([{ type: 'text', text: 'lo' }, { type: 'done' }]);
  });

  it('assembles tool_use blocks from input_json_delta pieces; a tool without input gets {}', async () => {
    server.enqueue({
      steps: [
        anthropicSse.messageStart(),
        ...anthropicSse.textBlock(0, ['One moment.']),
        ...anthropicSse.toolUseBlock(1, 'toolu_01', 'lookup_order', ['', '{"order', '_id": "A', '17"}']),
        ...anthropicSse.toolUseBlock(2, 'toolu_02', 'end_call', []),
        ...anthropicSse.end('tool_use'),
      ],
    });
    expect(await collect(run(user('order A17'), [LOOKUP, END_CALL]))).toEqual([
      { type: 'text', text: 'One moment.' },
      { type: 'tool_call', call: { id: 'toolu_01', name: 'lookup_order', arguments: '{"order_id": "A17"}' } },
      { type: 'tool_call', call: { id: 'toolu_02', name: 'end_call', arguments: '{}' } },
      { type: 'done' },
    ]);
  });
});

describe('AnthropicMessagesProvider request', () => {
  it('maps system, tools, assistant tool_use and tool_result blocks, headers and max_tokens', async () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a shop assistant.' },
      { role: 'system', content: 'Caller: +15550100' },
      { role: 'user', content: 'Where are orders A1 and B2?' },
      {
        role: 'assistant',
        content: 'Let me check.',
        toolCalls: [
          { id: 'toolu_1', name: 'lookup_order', arguments: '{"order_id":"A1"}' },
          { id: 'toolu_2', name: 'lookup_order', arguments: '{"order_id":"B2"}' },
        ],
      },
      { role: 'tool', toolCallId: 'toolu_1', name: 'lookup_order', content: 'shipped' },
      { role: 'tool', toolCallId: 'toolu_2', name: 'lookup_order', content: 'pending' },
      { role: 'assistant', content: 'A1 shipped, B2 is pending.' },
      { role: 'user', content: 'Thanks' },
    ];
    await collect(run(messages, [LOOKUP]));
    const req = server.requests[0]!;
    expect(req.path).toBe('/v1/messages');
    expect(req.headers['x-api-key']).toBe(KEY);
    expect(req.headers['anthropic-version']).toBe('2023-06-01');
    expect(req.headers['authorization']).toBeUndefined();
    expect(req.body).toEqual({
      model: 'claude-test',
      max_tokens: 1024,
      stream: true,
      system: 'You are a shop assistant.\n\nCaller: +15550100',
      tools: [{ name: 'lookup_order', description: 'Find an order', input_schema: LOOKUP.parameters }],
      messages: [
        { role: 'user', content: 'Where are orders A1 and B2?' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Let me check.' },
            { type: 'tool_use', id: 'toolu_1', name: 'lookup_order', input: { order_id: 'A1' } },
            { type: 'tool_use', id: 'toolu_2', name: 'lookup_order', input: { order_id: 'B2' } },
          ],
        },
        // Both results of the parallel calls in the one user turn that follows them.
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: 'shipped' },
            { type: 'tool_result', tool_use_id: 'toolu_2', content: 'pending' },
          ],
        },
        { role: 'assistant', content: 'A1 shipped, B2 is pending.' },
        { role: 'user', content: 'Thanks' },
      ],
    });
  });

  it('merges a user text after tool results, drops empty assistant text, honours max_tokens, omits empty fields', async () => {
    const p = new AnthropicMessagesProvider({ name: 'anthropic', baseUrl: server.baseUrl, apiKey: KEY, maxTokens: 256 });
    const messages: ChatMessage[] = [
      { role: 'user', content: 'Bye' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'toolu_9', name: 'end_call', arguments: 'not json' }] },
      { role: 'tool', toolCallId: 'toolu_9', name: 'end_call', content: 'ok' },
      { role: 'user', content: 'wait' },
    ];
    await collect(p.stream({ model: 'claude-test', messages, tools: [], signal: new AbortController().signal }));
    const body = server.requests[0]!.body;
    expect(body.max_tokens).toBe(256);
    expect(body).not.toHaveProperty('system');
    expect(body).not.toHaveProperty('tools');
    expect(body.messages).toEqual([
      { role: 'user', content: 'Bye' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_9', name: 'end_call', input: {} }] },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_9', content: 'ok' },
          { type: 'text', text: 'wait' },
        ],
      },
    ]);
  });
});

describe('AnthropicMessagesProvider errors', () => {
  it('maps HTTP 401 to VENDOR_HTTP_STATUS with the vendor message and never the key', async () => {
    server.enqueue({
      status: 401,
      errorBody: { type: 'error', error: { type: 'authentication_error', message: `invalid x-api-key ${KEY}` } },
    });
    const err = await thrown(() => collect(run(user('hi'))));
    expect(err).toBeInstanceOf(LlmError);
    expect(err).toMatchObject({ code: 'VENDOR_HTTP_STATUS', status: 401 });
    expect(err.message).toContain('anthropic');
    expect(err.message).toContain('invalid x-api-key');
    expect(err.message).not.toContain(KEY);
  });

  it('maps HTTP 500 to VENDOR_HTTP_STATUS 500', async () => {
    server.enqueue({ status: 500, errorBody: { type: 'error', error: { type: 'api_error', message: 'Internal server error' } } });
    const err = await thrown(() => collect(run(user('hi'))));
    expect(err).toMatchObject({ code: 'VENDOR_HTTP_STATUS', status: 500 });
    expect(err.message).toContain('Internal server error');
  });

  it('maps an overloaded error event mid-stream to VENDOR_HTTP_STATUS 529 after the text already given', async () => {
    server.enqueue({
      steps: [
        anthropicSse.messageStart(),
        anthropicSse.event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
        anthropicSse.event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hi' } }),
        anthropicSse.error('overloaded_error', 'Overloaded'),
      ],
    });
    const seen: LlmDelta[] = [];
    const err = await thrown(async () => {
      for await (const d of run(user('hi'))) seen.push(d);
    });
    expect(seen).toEqual([{ type: 'text', text: 'Hi' }]);
    expect(err).toMatchObject({ code: 'VENDOR_HTTP_STATUS', status: 529 });
    expect(err.message).toContain('Overloaded');
  });

  it('maps an error event of an unknown type to VENDOR_BAD_RESPONSE', async () => {
    server.enqueue({ steps: [anthropicSse.messageStart(), anthropicSse.error('strange_error', 'What')] });
    const err = await thrown(() => collect(run(user('hi'))));
    expect(err).toMatchObject({ code: 'VENDOR_BAD_RESPONSE' });
    expect(err.message).toContain('What');
  });

  it('maps malformed data and a stream without message_stop to VENDOR_BAD_RESPONSE', async () => {
    server.enqueue({ steps: ['event: message_start\ndata: {bad\n\n'] }, { steps: [anthropicSse.messageStart(), ...anthropicSse.textBlock(0, ['Hi'])] });
    expect(await thrown(() => collect(run(user('hi'))))).toMatchObject({ code: 'VENDOR_BAD_RESPONSE' });
    expect(await thrown(() => collect(run(user('hi'))))).toMatchObject({ code: 'VENDOR_BAD_RESPONSE' });
  });
});

describe('AnthropicMessagesProvider cancellation', () => {
  it('an abort mid-stream ends the iteration quietly and closes the connection', async () => {
    server.enqueue({
      steps: [anthropicSse.messageStart(), ...anthropicSse.textBlock(0, ['Hi']).slice(0, 2), { waitFor: new Promise(() => undefined) }],
    });
    const ac = new AbortController();
    const it = run(user('hi'), [], ac.signal)[Symbol.asyncIterator]();
    expect((await within(it.next(), 'first delta')).value).toEqual({ type: 'text', text: 'Hi' });
    const pending = it.next();
    ac.abort();
    expect(await within(pending, 'end of iteration after abort')).toEqual({ done: true, value: undefined });
    await within(server.requests[0]!.socketClosed, 'the fake server seeing the socket close');
  });
});
