/** createTtsProviders: slots to adapters, misconfiguration as VENDOR_NOT_CONFIGURED. */
import { describe, expect, it } from 'vitest';
import { TtsError } from '../../../src/agent/errors.ts';
import { TTS_TYPES } from '../../../src/config.ts';
import {
  CartesiaTtsProvider,
  createTtsProviders,
  FishTtsProvider,
  HumeTtsProvider,
  MinimaxTtsProvider,
  TTS_ADAPTER_TYPES,
  LocalEspeakProvider,
  OpenAiSpeechProvider,
  StreamingWsTtsProvider,
} from '../../../src/agent/providers/tts/index.ts';

function notConfigured(fn: () => unknown): TtsError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(TtsError);
    expect((err as TtsError).code).toBe('VENDOR_NOT_CONFIGURED');
    return err as TtsError;
  }
  throw new Error('expected VENDOR_NOT_CONFIGURED');
}

describe('createTtsProviders', () => {
  const providers = createTtsProviders({
    provider_1: { type: 'local' },
    provider_2: { type: 'openai', base_url: 'https://api.example.com/v1', api_key: 'sk-secret', model: 'tts-1-hd' },
    provider_3: { type: 'stream', base_url: 'https://api.elevenlabs.io', api_key: 'xi-secret' },
    provider_4: { type: 'openai' },
    provider_5: { type: 'stream', base_url: '   ' },
    provider_6: { type: 'openai', base_url: 'not a url', api_key: 'sk-in-url' },
  });

  it('builds each type, named by its slot, once', () => {
    const local = providers.get('provider_1');
    expect(local).toBeInstanceOf(LocalEspeakProvider);
    expect(local.name).toBe('provider_1');
    expect(providers.get('provider_2')).toBeInstanceOf(OpenAiSpeechProvider);
    expect(providers.get('provider_3')).toBeInstanceOf(StreamingWsTtsProvider);
    expect(providers.get('provider_3').name).toBe('provider_3');
    expect(providers.get('provider_2')).toBe(providers.get('provider_2'));
  });

  it('openai/stream without base_url, a bad URL, or an unknown slot is VENDOR_NOT_CONFIGURED', () => {
    expect(notConfigured(() => providers.get('provider_4')).message).toContain('provider_4');
    notConfigured(() => providers.get('provider_5'));
    expect(notConfigured(() => providers.get('provider_6')).message).not.toContain('sk-in-url');
    notConfigured(() => providers.get('provider_7'));
    notConfigured(() => createTtsProviders({}).get('provider_1'));
    notConfigured(() => createTtsProviders({ provider_1: { type: 'polly' as never } }).get('provider_1'));
  });

  it('builds every type the configuration accepts', () => {
    expect([...TTS_ADAPTER_TYPES]).toEqual([...TTS_TYPES]);
    const vendors = createTtsProviders({
      provider_3: { type: 'cartesia', base_url: 'https://api.cartesia.ai', api_key: 'sk_car_x' },
      provider_4: { type: 'hume', base_url: 'https://api.hume.ai', api_key: 'hume_x' },
      provider_5: { type: 'minimax', base_url: 'https://api.minimax.io', api_key: 'mm_x' },
      provider_6: { type: 'fish', base_url: 'https://api.fish.audio', api_key: 'fish_x' },
    });
    expect(vendors.get('provider_4')).toBeInstanceOf(HumeTtsProvider);
    expect(vendors.get('provider_5')).toBeInstanceOf(MinimaxTtsProvider);
    expect(vendors.get('provider_6')).toBeInstanceOf(FishTtsProvider);
    expect(vendors.get('provider_3')).toBeInstanceOf(CartesiaTtsProvider);
    expect(vendors.get('provider_3').name).toBe('provider_3');
  });
});
