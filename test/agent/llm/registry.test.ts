import { afterEach, describe, expect, it } from 'vitest';
import { LlmError } from '../../../src/agent/errors.ts';
import { AnthropicMessagesProvider } from '../../../src/agent/providers/llm/anthropic.ts';
import { EchoProvider } from '../../../src/agent/providers/llm/echo.ts';
import { OpenAiChatProvider } from '../../../src/agent/providers/llm/openai.ts';
import { createLlmRegistry } from '../../../src/agent/providers/llm/registry.ts';
import type { LlmProviderConfig } from '../../../src/config.ts';
import { openAiSse, startFakeLlmServer, type FakeLlmServer } from './fake-llm-servers.ts';
import { collect, textOf } from './helpers.ts';

const CONFIG: LlmProviderConfig[] = [
  { name: 'local', type: 'echo', models: ['echo'] },
  { name: 'openai', type: 'openai', api_key: 'sk-x', models: ['gpt-4o-mini', 'gpt-4o'] },
  { name: 'claude', type: 'anthropic', api_key: 'sk-ant-x', models: ['claude-3-5-haiku-latest'] },
  { name: 'router', type: 'openai', base_url: 'http://127.0.0.1:1/v1', models: ['meta-llama/llama-3-8b'] },
];

let server: FakeLlmServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

describe('createLlmRegistry', () => {
  it('resolves provider/model to the adapter of the configured type', () => {
    const registry = createLlmRegistry(CONFIG);
    const echo = registry.resolve('local/echo');
    expect(echo.provider).toBeInstanceOf(EchoProvider);
    expect(echo.provider.name).toBe('local');
    expect(echo.model).toBe('echo');
    const openai = registry.resolve('openai/gpt-4o');
    expect(openai.provider).toBeInstanceOf(OpenAiChatProvider);
    expect(openai).toMatchObject({ model: 'gpt-4o' });
    expect(registry.resolve('openai/gpt-4o-mini').provider).toBe(openai.provider); // one adapter per provider
    const claude = registry.resolve('claude/claude-3-5-haiku-latest');
    expect(claude.provider).toBeInstanceOf(AnthropicMessagesProvider);
    expect(claude.provider.name).toBe('claude');
  });

  it('keeps slashes in model names (split at the first slash only)', () => {
    expect(createLlmRegistry(CONFIG).resolve('router/meta-llama/llama-3-8b').model).toBe('meta-llama/llama-3-8b');
  });

  it.each(['nope/echo', 'local/gpt-4o', 'openai/', 'openai', '', 'local/echo/extra'])('throws VENDOR_NOT_CONFIGURED for %j', (id) => {
    const registry = createLlmRegistry(CONFIG);
    expect(() => registry.resolve(id)).toThrow(LlmError);
    try {
      registry.resolve(id);
    } catch (err) {
      expect((err as LlmError).code).toBe('VENDOR_NOT_CONFIGURED');
    }
  });

  it('lists the catalog ids sorted', () => {
    expect(createLlmRegistry(CONFIG).ids()).toEqual([
      'claude/claude-3-5-haiku-latest',
      'local/echo',
      'openai/gpt-4o',
      'openai/gpt-4o-mini',
      'router/meta-llama/llama-3-8b',
    ]);
  });

  it('a resolved provider talks to its configured base_url with its key', async () => {
    server = await startFakeLlmServer('openai');
    server.enqueue({ steps: openAiSse.text(['Hi!']) });
    const registry = createLlmRegistry([{ name: 'self', type: 'openai', base_url: server.baseUrl, api_key: 'sk-self', models: ['m1'] }]);
    const { provider, model } = registry.resolve('self/m1');
    const deltas = await collect(provider.stream({ model, messages: [{ role: 'user', content: 'x' }], tools: [], signal: new AbortController().signal }));
    expect(textOf(deltas)).toBe('Hi!');
    expect(server.requests[0]!.headers['authorization']).toBe('Bearer sk-self');
    expect(server.requests[0]!.body.model).toBe('m1');
  });

  it('the echo model from the default config answers', async () => {
    const { provider, model } = createLlmRegistry([{ name: 'local', type: 'echo', models: ['echo'] }]).resolve('local/echo');
    const deltas = await collect(provider.stream({ model, messages: [{ role: 'user', content: 'ping' }], tools: [], signal: new AbortController().signal }));
    expect(textOf(deltas)).toBe('You said: ping.');
  });
});
