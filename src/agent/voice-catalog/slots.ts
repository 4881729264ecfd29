/**
 * Which voice providers (provider_1..provider_6) this configuration serves, and how: an entry of
 * `tts.providers`, or, for `agent_defaults.voice_provider` alone when no entry names it, the
 * embedded local voice (so an agent created with no configuration at all still speaks). Every
 * other provider is not configured: agents cannot pick it and GET /v1/voices lists nothing for it.
 */
import { TTS_PROVIDER_KEYS, type Config, type TtsProviderConfig } from '../../config.ts';
import { VOICE_PROVIDER_NAMES } from '../../domain/agent-aliases.ts';

export type VoiceSlot = (typeof TTS_PROVIDER_KEYS)[number];

export interface ServedSlot {
  slot: VoiceSlot;
  type: TtsProviderConfig['type'];
  baseUrl: string;
  apiKey: string;
  /** True when no tts.providers entry names it: the default voice provider, on the local voice. */
  implicit: boolean;
}

export function servedSlots(config: Pick<Config, 'tts' | 'agent_defaults'>): Map<VoiceSlot, ServedSlot> {
  const served = new Map<VoiceSlot, ServedSlot>();
  for (const e of config.tts.providers) served.set(e.voice_provider, { slot: e.voice_provider, type: e.type, baseUrl: e.base_url ?? '', apiKey: e.api_key ?? '', implicit: false });
  const d = config.agent_defaults.voice_provider as VoiceSlot;
  if (!served.has(d) && (TTS_PROVIDER_KEYS as readonly string[]).includes(d)) served.set(d, { slot: d, type: 'local', baseUrl: '', apiKey: '', implicit: true });
  return served;
}

/** `provider_3 (cartesia)`: the neutral name with the service's vendor name, for messages. */
export function slotLabel(slot: string): string {
  const i = (TTS_PROVIDER_KEYS as readonly string[]).indexOf(slot);
  // VOICE_PROVIDER_NAMES lists the six neutral names, then the six vendor names in the same order.
  const vendor = i >= 0 ? VOICE_PROVIDER_NAMES[TTS_PROVIDER_KEYS.length + i] : undefined;
  return vendor ? `${slot} (${vendor})` : slot;
}
