import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LlmError } from '../../../src/agent/errors.ts';
import { OpenAiChatProvider } from '../../../src/agent/providers/llm/openai.ts';
import type { ChatMessage, LlmDelta, ToolSpec } from '../../../src/agent/providers/types.ts';
import { gate, openAiSse, startFakeLlmServer, type FakeLlmServer } from './fake-llm-servers.ts';
import { closedPort, collect, textOf, thrown, within } from './helpers.ts';

const KEY = 'sk-test-SECRET-1234567890';
const user = (content: string): ChatMessage[] => [{ role: 'user', content }];
const WEATHER: ToolSpec = {
  name: 'get_weather',
  description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

let server: FakeLlmServer;
let provider: OpenAiChatProvider;
beforeEach(async () => {
  server = await startFakeLlmServer('openai');
  provider = new OpenAiChatProvider({ name: 'openai', baseUrl: server.baseUrl, apiKey: KEY });
});
afterEach(async () => {
  await server.close();
});

const run = (messages: ChatMessage[], tools: ToolSpec[] = [], signal = new AbortController().signal) =>
  provider.stream({ model: 'gpt-test', messages, tools, signal });

describe('OpenAiChatProvider streaming', () => {
  it('yields text deltas as they arrive, before the stream ends', async () => {
    const g = gate();
    server.enqueue({
      steps: [openAiSse.chunk({ role: 'assistant', content: '' }), openAiSse.chunk({ content: 'Hel' }), { waitFor: g.promise }, ...openAiSse.text(['lo']).slice(1)],
    });
    const it = run(user('hi'))[Symbol.asyncIterator]();
    // The server holds the rest of the answer until the gate opens: a buffering client would hang here.
    const first = await within(it.next(), 'first delta while the stream is held open');
    expect(first.value).toEqual({ type: 'text', text: 'Hel' });
    g.open();
    const rest: LlmDelta[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    expect(rest).toEqual([{ type: 'text', text: 'lo' }, { type: 'done' }]);
  });

  it('assembles parallel tool calls from interleaved argument chunks, in index order', async () => {
    server.enqueue({
      steps: [
        openAiSse.chunk({ role: 'assistant', content: null }),
        openAiSse.chunk({ content: 'Checking. ' }),
        openAiSse.toolStart(0, 'call_A', 'get_weather'),
        openAiSse.toolArgs(0, '{"ci'),
        openAiSse.toolStart(1, 'call_B', 'get_weather'),
        openAiSse.toolArgs(1, '{"city":'),
        openAiSse.toolArgs(0, 'ty":"Par'),
        openAiSse.toolArgs(1, '"Rome"}'),
        openAiSse.toolArgs(0, 'is"}'),
        openAiSse.chunk({}, 'tool_calls'),
        openAiSse.done,
      ],
    });
    expect(await collect(run(user('weather?'), [WEATHER]))).toEqual([
      { type: 'text', text: 'Checking. ' },
      { type: 'tool_call', call: { id: 'call_A', name: 'get_weather', arguments: '{"city":"Paris"}' } },
      { type: 'tool_call', call: { id: 'call_B', name: 'get_weather', arguments: '{"city":"Rome"}' } },
      { type: 'done' },
    ]);
  });

  it('yields tool calls at [DONE] when the server sends no finish_reason, generating missing ids', async () => {
    server.enqueue({
      steps: [
        openAiSse.chunk({ tool_calls: [{ index: 0, function: { name: 'end_call', arguments: '' } }] }),
        openAiSse.toolArgs(0, '{}'),
        openAiSse.done,
      ],
    });
    const deltas = await collect(run(user('bye'), [WEATHER]));
    expect(deltas).toEqual([{ type: 'tool_call', call: { id: 'call_1', name: 'end_call', arguments: '{}' } }, { type: 'done' }]);
  });
});

describe('OpenAiChatProvider request', () => {
  it('maps messages, tools, model and auth onto the wire format', async () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
      { role: 'tool', toolCallId: 'call_1', name: 'get_weather', content: 'sunny' },
      { role: 'assistant', content: 'It is sunny.' },
      { role: 'user', content: 'Thanks' },
    ];
    await collect(run(messages, [WEATHER]));
    expect(server.requests).toHaveLength(1);
    const req = server.requests[0]!;
    expect(req.path).toBe('/v1/chat/completions');
    expect(req.headers['authorization']).toBe(`Bearer ${KEY}`);
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.body).toEqual({
      model: 'gpt-test',
      stream: true,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        { role: 'assistant', content: 'It is sunny.' },
        { role: 'user', content: 'Thanks' },
      ],
      tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: WEATHER.parameters } }],
    });
  });

  it('sends no Authorization header without a key and no tools field without tools', async () => {
    const keyless = new OpenAiChatProvider({ name: 'vllm', baseUrl: `${server.baseUrl}/` });
    await collect(keyless.stream({ model: 'm', messages: user('hi'), tools: [], signal: new AbortController().signal }));
    const req = server.requests[0]!;
    expect(req.path).toBe('/v1/chat/completions'); // trailing slash of base_url tolerated
    expect(req.headers['authorization']).toBeUndefined();
    expect(req.body).not.toHaveProperty('tools');
  });
});

describe('OpenAiChatProvider errors', () => {
  it('maps HTTP 401 to VENDOR_HTTP_STATUS with the vendor message and never the key', async () => {
    // OpenAI quotes (part of) the key back in its 401 message; we must not pass it on.
    server.enqueue({ status: 401, errorBody: { error: { message: `Incorrect API key provided: ${KEY}.`, type: 'invalid_request_error' } } });
    const err = await thrown(() => collect(run(user('hi'))));
    expect(err).toBeInstanceOf(LlmError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(401);
    expect(err.message).toContain('openai');
    expect(err.message).toContain('401');
    expect(err.message).toContain('Incorrect API key provided');
    expect(err.message).not.toContain(KEY);
  });

  it('maps HTTP 500 with a non-JSON body to VENDOR_HTTP_STATUS 500', async () => {
    server.enqueue({ status: 500, errorBody: '<html>Internal Server Error</html>' });
    const err = await thrown(() => collect(run(user('hi'))));
    expect(err).toMatchObject({ code: 'VENDOR_HTTP_STATUS', status: 500 });
    expect(err.message).toContain('500');
    expect(err.message).not.toContain('<html>');
  });

  it('maps a refused connection to VENDOR_UNREACHABLE', async () => {
    const p = new OpenAiChatProvider({ name: 'openai', baseUrl: `http://127.0.0.1:${await closedPort()}/v1`, apiKey: KEY });
    const err = await thrown(() => collect(p.stream({ model: 'm', messages: user('hi'), tools: [], signal: new AbortController().signal })));
    expect(err).toMatchObject({ code: 'VENDOR_UNREACHABLE' });
    expect(err.message).not.toContain(KEY);
  });

  it('maps a connection broken mid-stream to VENDOR_UNREACHABLE after the text already given', async () => {
    server.enqueue({ steps: [openAiSse.chunk({ content: 'Hel' }), { delayMs: 20 }, { destroy: true }] });
    const seen: LlmDelta[] = [];
    const err = await thrown(async () => {
      for await (const d of run(user('hi'))) seen.push(d);
    });
    expect(seen).toEqual([{ type: 'text', text: 'Hel' }]);
    expect(err).toMatchObject({ code: 'VENDOR_UNREACHABLE' });
  });

  it('maps a chunk that is not JSON to VENDOR_BAD_RESPONSE', async () => {
    server.enqueue({ steps: ['data: {"choices": [oops\n\n', openAiSse.done] });
    expect(await thrown(() => collect(run(user('hi'))))).toMatchObject({ code: 'VENDOR_BAD_RESPONSE' });
  });

  it('maps a stream that ends without [DONE] to VENDOR_BAD_RESPONSE', async () => {
    server.enqueue({ steps: [openAiSse.chunk({ content: 'Hi' })] });
    expect(await thrown(() => collect(run(user('hi'))))).toMatchObject({ code: 'VENDOR_BAD_RESPONSE' });
  });

  it('maps an endless line (over the SSE buffer bound) to VENDOR_BAD_RESPONSE', async () => {
    const piece = 'x'.repeat(64 * 1024);
    server.enqueue({ steps: ['data: ', ...Array.from({ length: 20 }, () => piece), '\n\n', openAiSse.done] });
    const err = await thrown(() => collect(run(user('hi'))));
    expect(err).toMatchObject({ code: 'VENDOR_BAD_RESPONSE' });
    expect(err.message).toMatch(/over \d+ characters/);
  });

  it('maps a tool call without a function name to VENDOR_BAD_RESPONSE', async () => {
    server.enqueue({ steps: [openAiSse.toolArgs(0, '{}'), openAiSse.chunk({}, 'tool_calls'), openAiSse.done] });
    expect(await thrown(() => collect(run(user('hi'), [WEATHER])))).toMatchObject({ code: 'VENDOR_BAD_RESPONSE' });
  });
});

describe('OpenAiChatProvider cancellation', () => {
  it('an abort mid-stream ends the iteration quietly and closes the connection', async () => {
    server.enqueue({ steps: [openAiSse.chunk({ content: 'Hi' }), { waitFor: new Promise(() => undefined) }] });
    const ac = new AbortController();
    const it = run(user('hi'), [], ac.signal)[Symbol.asyncIterator]();
    expect((await within(it.next(), 'first delta')).value).toEqual({ type: 'text', text: 'Hi' });
    const pending = it.next();
    ac.abort();
    expect(await within(pending, 'end of iteration after abort')).toEqual({ done: true, value: undefined });
    await within(server.requests[0]!.socketClosed, 'the fake server seeing the socket close');
  });

  it('an abort before the response headers closes the connection', async () => {
    server.enqueue({ delayMs: 60_000, steps: openAiSse.text(['late']) });
    const ac = new AbortController();
    const done = collect(run(user('hi'), [], ac.signal));
    while (server.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
    ac.abort();
    expect(await within(done, 'end of iteration after abort')).toEqual([]);
    await within(server.requests[0]!.socketClosed, 'the fake server seeing the socket close');
  });

  it('a consumer that stops iterating early closes the connection', async () => {
    server.enqueue({ steps: [openAiSse.chunk({ content: 'Hi' }), { waitFor: new Promise(() => undefined) }] });
    for await (const d of run(user('hi'))) {
      expect(d).toEqual({ type: 'text', text: 'Hi' });
      break;
    }
    await within(server.requests[0]!.socketClosed, 'the fake server seeing the socket close');
  });

  it('an already aborted signal sends nothing', async () => {
    const ac = new AbortController();
    ac.abort();
    expect(await collect(run(user('hi'), [], ac.signal))).toEqual([]);
    expect(server.requests).toHaveLength(0);
  });

  it('a full answer joins to the text the server sent', async () => {
    server.enqueue({ steps: openAiSse.text(['One ', 'two ', 'three.']) });
    expect(textOf(await collect(run(user('count'))))).toBe('One two three.');
  });
});
