/**
 * What a session of an agent runs on, for its first log line (src/session/server.ts): the STT,
 * the LLM (primary and fallback) and the TTS, each by provider and adapter type. Built from the
 * configuration only: base URLs and keys are never part of it.
 */
import { ttsProvidersBySlot, type Config } from '../config.ts';
import type { Agent } from '../domain/agent.ts';
import { servedSlots, type VoiceSlot } from './voice-catalog/slots.ts';

export function describeSessionProviders(config: Pick<Config, 'stt' | 'llm' | 'tts' | 'agent_defaults'>): (agent: Agent) => Record<string, unknown> {
  const slots = ttsProvidersBySlot(config.tts.providers);
  const served = servedSlots(config);
  const llmType = (model: string) => config.llm.providers.find((p) => model.startsWith(`${p.name}/`))?.type ?? 'unknown';
  const stt = config.stt.provider === 'local' ? { provider: 'local', type: 'local', recognizes_words: false } : { provider: config.stt.provider, type: config.stt.provider, model: config.stt.model || undefined };
  return (agent) => ({
    stt,
    llm: { model: agent.llm, type: llmType(agent.llm), fallback_model: agent.fallback_llm, fallback_type: llmType(agent.fallback_llm) },
    tts: {
      provider: agent.voice_settings.provider,
      type: slots[agent.voice_settings.provider as keyof typeof slots]?.type ?? 'unknown',
      model: slots[agent.voice_settings.provider as keyof typeof slots]?.model || undefined,
      voice: agent.voice_settings.id,
      // An agent stored before its provider had to be configured speaks in the local voice: say so.
      ...(served.has(agent.voice_settings.provider as VoiceSlot) ? {} : { configured: false }),
    },
  });
}
