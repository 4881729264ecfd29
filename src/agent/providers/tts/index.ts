/**
 * The TTS providers of the configuration: six slots (`provider_1` .. `provider_6`, the values of
 * an agent's voice_settings.provider), each one of the adapter types. Adapters are built
 * on first use and kept, so a misconfigured slot fails only the agents that use it, with
 * VENDOR_NOT_CONFIGURED, instead of the daemon's start.
 */
import { TtsError } from '../../errors.ts';
import type { TtsProvider } from '../types.ts';
import { CartesiaTtsProvider } from './cartesia.ts';
import { withFirstByteTiming } from './first-byte-timing.ts';
import { FishTtsProvider } from './fish.ts';
import { HumeTtsProvider } from './hume.ts';
import { LocalEspeakProvider } from './local-espeak.ts';
import { MinimaxTtsProvider } from './minimax.ts';
import { OpenAiSpeechProvider } from './openai.ts';
import { StreamingWsTtsProvider } from './stream.ts';

export { CartesiaTtsProvider } from './cartesia.ts';
export { FishTtsProvider } from './fish.ts';
export { HumeTtsProvider } from './hume.ts';
export { LocalEspeakProvider } from './local-espeak.ts';
export { MinimaxTtsProvider } from './minimax.ts';
export { OpenAiSpeechProvider } from './openai.ts';
export { StreamingWsTtsProvider } from './stream.ts';

export const TTS_PROVIDER_SLOTS = ['provider_1', 'provider_2', 'provider_3', 'provider_4', 'provider_5', 'provider_6'] as const;
export type TtsProviderSlot = (typeof TTS_PROVIDER_SLOTS)[number];

/** The adapter types: the embedded voice, two generic protocols, then one per vendor protocol. */
export const TTS_ADAPTER_TYPES = ['local', 'openai', 'stream', 'cartesia', 'fish', 'minimax', 'hume'] as const;

export interface TtsProviderConfig {
  type: (typeof TTS_ADAPTER_TYPES)[number];
  base_url?: string;
  api_key?: string;
  model?: string;
}

export interface TtsProviders {
  /**
   * The adapter of a slot.
   * @throws TtsError VENDOR_NOT_CONFIGURED for an unknown slot or one missing what its type needs.
   */
  get(voiceProvider: string): TtsProvider;
}

function build(slot: string, config: TtsProviderConfig): TtsProvider {
  const baseUrl = config.base_url?.trim() ?? '';
  if (config.type === 'local') return new LocalEspeakProvider({ name: slot });
  if (!(TTS_ADAPTER_TYPES as readonly string[]).includes(config.type)) {
    throw new TtsError('VENDOR_NOT_CONFIGURED', `TTS ${slot}: unknown type ${String(config.type)}`);
  }
  if (baseUrl === '') throw new TtsError('VENDOR_NOT_CONFIGURED', `TTS ${slot}: type ${config.type} needs base_url`);
  const options = { name: slot, baseUrl, apiKey: config.api_key, model: config.model };
  try {
    switch (config.type) {
      case 'openai':
        return new OpenAiSpeechProvider(options);
      case 'cartesia':
        return new CartesiaTtsProvider(options);
      case 'fish':
        return new FishTtsProvider(options);
      case 'minimax':
        return new MinimaxTtsProvider(options);
      case 'hume':
        return new HumeTtsProvider(options);
      default:
        return new StreamingWsTtsProvider(options);
    }
  } catch (err) {
    // new URL() rejects a malformed base_url; the message names the slot, not the (maybe keyed) URL
    throw new TtsError('VENDOR_NOT_CONFIGURED', `TTS ${slot}: base_url is not a valid URL`, { cause: err });
  }
}

export interface TtsProvidersOptions {
  /** Each request's time to first audio, seconds, with the slot and its adapter type (metrics). */
  onFirstByte?(slot: string, type: TtsProviderConfig['type'], seconds: number): void;
}

export function createTtsProviders(config: Partial<Record<TtsProviderSlot, TtsProviderConfig>>, options: TtsProvidersOptions = {}): TtsProviders {
  const built = new Map<string, TtsProvider>();
  return {
    get(voiceProvider) {
      const existing = built.get(voiceProvider);
      if (existing !== undefined) return existing;
      const entry = (TTS_PROVIDER_SLOTS as readonly string[]).includes(voiceProvider)
        ? config[voiceProvider as TtsProviderSlot]
        : undefined;
      if (entry === undefined) throw new TtsError('VENDOR_NOT_CONFIGURED', `TTS provider ${voiceProvider} is not configured`);
      const adapter = build(voiceProvider, entry);
      const { onFirstByte } = options;
      const provider = onFirstByte === undefined ? adapter : withFirstByteTiming(adapter, (seconds) => onFirstByte(voiceProvider, entry.type, seconds));
      built.set(voiceProvider, provider);
      return provider;
    },
  };
}
