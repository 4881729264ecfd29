import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LlmError } from '../../../src/agent/errors.ts';
import { AnthropicMessagesProvider } from '../../../src/agent/providers/llm/anthropic.ts';
import { withFallback, type ResolvedLlm } from '../../../src/agent/providers/llm/fallback.ts';
import { OpenAiChatProvider } from '../../../src/agent/providers/llm/openai.ts';
import type { ChatMessage, LlmDelta } from '../../../src/agent/providers/types.ts';
import { anthropicSse, gate, openAiSse, startFakeLlmServer, type FakeLlmServer } from './fake-llm-servers.ts';
import { collect, textOf, thrown, within } from './helpers.ts';

const messages: ChatMessage[] = [{ role: 'user', content: 'hi' }];
const never = (): Promise<unknown> => new Promise(() => undefined);

let primaryServer: FakeLlmServer;
let fallbackServer: FakeLlmServer;
let primary: ResolvedLlm;
let fallback: ResolvedLlm;
let warnings: Array<{ obj: any; msg: string }>;
const logger = { warn: (obj: object, msg: string) => void warnings.push({ obj, msg }) };

beforeEach(async () => {
  primaryServer = await startFakeLlmServer('openai');
  fallbackServer = await startFakeLlmServer('anthropic');
  primary = { provider: new OpenAiChatProvider({ name: 'openai', baseUrl: primaryServer.baseUrl, apiKey: 'k1' }), model: 'gpt-test' };
  fallback = { provider: new AnthropicMessagesProvider({ name: 'anthropic', baseUrl: fallbackServer.baseUrl, apiKey: 'k2' }), model: 'claude-test' };
  fallbackServer.setDefault({ steps: anthropicSse.text(['From ', 'fallback.']) });
  warnings = [];
});
afterEach(async () => {
  await primaryServer.close();
  await fallbackServer.close();
});

describe('withFallback', () => {
  it('streams the primary alone when it answers in time', async () => {
    primaryServer.enqueue({ steps: openAiSse.text(['From ', 'primary.']) });
    const llm = withFallback(primary, fallback, { firstTokenTimeoutMs: 10_000, logger });
    const deltas = await collect(llm.stream(messages, [], new AbortController().signal));
    expect(textOf(deltas)).toBe('From primary.');
    expect(deltas.at(-1)).toEqual({ type: 'done' });
    expect(fallbackServer.requests).toHaveLength(0);
    expect(warnings).toEqual([]);
  });

  it('falls back when the primary fails before its first delta, and logs why', async () => {
    primaryServer.enqueue({ status: 500, errorBody: { error: { message: 'boom' } } });
    const llm = withFallback(primary, fallback, { firstTokenTimeoutMs: 10_000, logger });
    const deltas = await collect(llm.stream(messages, [], new AbortController().signal));
    expect(textOf(deltas)).toBe('From fallback.');
    expect(deltas.at(-1)).toEqual({ type: 'done' });
    expect(fallbackServer.requests).toHaveLength(1);
    expect(fallbackServer.requests[0]!.body.messages).toEqual([{ role: 'user', content: 'hi' }]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.obj).toMatchObject({ primary: 'openai/gpt-test', fallback: 'anthropic/claude-test', code: 'VENDOR_HTTP_STATUS' });
    expect(warnings[0]!.msg).toContain('failed before its first token');
  });

  it('falls back when the primary gives no first delta within the deadline, and closes the primary', async () => {
    primaryServer.enqueue({ steps: [{ waitFor: never() }] }); // headers sent, then silence
    const llm = withFallback(primary, fallback, { firstTokenTimeoutMs: 100, logger });
    const deltas = await within(collect(llm.stream(messages, [], new AbortController().signal)), 'fallback answer');
    expect(textOf(deltas)).toBe('From fallback.');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.obj).toMatchObject({ code: 'VENDOR_TIMEOUT' });
    expect(warnings[0]!.msg).toContain('no first token within 100 ms');
    await within(primaryServer.requests[0]!.socketClosed, 'the stalled primary connection closing');
  });

  it('does not fall back once the primary has produced output: the error propagates', async () => {
    primaryServer.enqueue({ steps: [openAiSse.chunk({ content: 'Half an ans' }), { delayMs: 20 }, { destroy: true }] });
    const llm = withFallback(primary, fallback, { firstTokenTimeoutMs: 10_000, logger });
    const seen: LlmDelta[] = [];
    const err = await thrown(async () => {
      for await (const d of llm.stream(messages, [], new AbortController().signal)) seen.push(d);
    });
    expect(seen).toEqual([{ type: 'text', text: 'Half an ans' }]);
    expect(err).toBeInstanceOf(LlmError);
    expect(err.code).toBe('VENDOR_UNREACHABLE');
    expect(fallbackServer.requests).toHaveLength(0);
    expect(warnings).toEqual([]);
  });

  it('does not retry when primary and fallback are the same model', async () => {
    primaryServer.enqueue({ status: 503, errorBody: { error: { message: 'unavailable' } } });
    const llm = withFallback(primary, { ...primary }, { firstTokenTimeoutMs: 10_000, logger });
    const err = await thrown(() => collect(llm.stream(messages, [], new AbortController().signal)));
    expect(err).toMatchObject({ code: 'VENDOR_HTTP_STATUS', status: 503 });
    expect(primaryServer.requests).toHaveLength(1);
  });

  it("the caller's abort while waiting for the primary ends the stream without falling back", async () => {
    primaryServer.enqueue({ steps: [{ waitFor: never() }] });
    const llm = withFallback(primary, fallback, { firstTokenTimeoutMs: 10_000, logger });
    const ac = new AbortController();
    const done = collect(llm.stream(messages, [], ac.signal));
    while (primaryServer.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
    ac.abort();
    expect(await within(done, 'end after abort')).toEqual([]);
    await within(primaryServer.requests[0]!.socketClosed, 'the primary connection closing');
    expect(fallbackServer.requests).toHaveLength(0);
    expect(warnings).toEqual([]);
  });

  it("the caller's abort reaches the fallback once it is streaming", async () => {
    primaryServer.enqueue({ status: 500, errorBody: {} });
    const g = gate();
    fallbackServer.enqueue({ steps: [anthropicSse.messageStart(), ...anthropicSse.textBlock(0, ['Hi']).slice(0, 2), { waitFor: g.promise }] });
    const llm = withFallback(primary, fallback, { firstTokenTimeoutMs: 10_000, logger });
    const ac = new AbortController();
    const it = llm.stream(messages, [], ac.signal)[Symbol.asyncIterator]();
    expect((await within(it.next(), 'first fallback delta')).value).toEqual({ type: 'text', text: 'Hi' });
    const pending = it.next();
    ac.abort();
    expect(await within(pending, 'end after abort')).toEqual({ done: true, value: undefined });
    await within(fallbackServer.requests[0]!.socketClosed, 'the fallback connection closing');
  });

  it('a consumer stopping early releases the primary connection', async () => {
    primaryServer.enqueue({ steps: [openAiSse.chunk({ content: 'Hi' }), { waitFor: never() }] });
    const llm = withFallback(primary, fallback, { firstTokenTimeoutMs: 10_000, logger });
    for await (const d of llm.stream(messages, [], new AbortController().signal)) {
      expect(d).toEqual({ type: 'text', text: 'Hi' });
      break;
    }
    await within(primaryServer.requests[0]!.socketClosed, 'the primary connection closing');
  });
});
