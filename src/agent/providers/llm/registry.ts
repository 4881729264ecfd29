/**
 * The configured language models (`llm.providers`), resolved by the catalog id
 * `provider/model` that agents store in `llm` and `fallback_llm`. One adapter instance per
 * provider entry, shared by all sessions (adapters keep no per-call state).
 */
import type { LlmProviderConfig } from '../../../config.ts';
import { LlmError } from '../../errors.ts';
import type { LlmProvider } from '../types.ts';
import { ANTHROPIC_DEFAULT_BASE_URL, AnthropicMessagesProvider } from './anthropic.ts';
import { EchoProvider } from './echo.ts';
import { OPENAI_DEFAULT_BASE_URL, OpenAiChatProvider } from './openai.ts';

export interface LlmRegistry {
  /**
   * @throws LlmError VENDOR_NOT_CONFIGURED when the provider or the model is not configured.
   */
  resolve(id: string): { provider: LlmProvider; model: string };
  /** Every `provider/model` id, sorted (the model catalog). */
  ids(): string[];
}

export function createLlmRegistry(providers: LlmProviderConfig[]): LlmRegistry {
  const entries = new Map<string, { provider: LlmProvider; models: Set<string> }>();
  for (const config of providers) {
    entries.set(config.name, { provider: createProvider(config), models: new Set(config.models) });
  }

  return {
    resolve(id) {
      // Split at the first slash only: model names may contain slashes (`meta-llama/Llama-3`).
      const slash = id.indexOf('/');
      const providerName = slash < 0 ? id : id.slice(0, slash);
      const model = slash < 0 ? '' : id.slice(slash + 1);
      const entry = entries.get(providerName);
      if (!entry || !entry.models.has(model)) {
        throw new LlmError('VENDOR_NOT_CONFIGURED', `language model ${JSON.stringify(id)} is not configured`);
      }
      return { provider: entry.provider, model };
    },
    ids() {
      return [...entries.entries()].flatMap(([name, e]) => [...e.models].map((m) => `${name}/${m}`)).sort();
    },
  };
}

function createProvider(config: LlmProviderConfig): LlmProvider {
  switch (config.type) {
    case 'echo':
      return new EchoProvider({ name: config.name });
    case 'openai':
      return new OpenAiChatProvider({ name: config.name, baseUrl: config.base_url || OPENAI_DEFAULT_BASE_URL, apiKey: config.api_key });
    case 'anthropic':
      return new AnthropicMessagesProvider({
        name: config.name,
        baseUrl: config.base_url || ANTHROPIC_DEFAULT_BASE_URL,
        apiKey: config.api_key,
      });
  }
}
