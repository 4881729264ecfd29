/**
 * Builds the agent runtime from the configuration (part of the composition root's work, kept
 * here so main.ts stays a list of wiring): the configured STT, the six voice providers, the LLM
 * registry with fallback, energy VAD and RNNoise. Local engines (speex resampler, RNNoise WASM,
 * eSpeak-NG) are loaded once by `prepareAgentRuntime()` before the first session.
 */
import { ttsProvidersBySlot, type Config } from '../config.ts';
import type { Logger } from '../log.ts';
import { initResamplers } from '../media/resampler.ts';
import type { SessionRuntimeFactory } from '../session/runtime-contract.ts';
import { createLlmRegistry } from './providers/llm/registry.ts';
import { withFallback } from './providers/llm/fallback.ts';
import { createNoiseSuppressor, loadRnnoise } from './providers/noise/index.ts';
import { createSttProvider } from './providers/stt/index.ts';
import { createTtsProviders, LocalEspeakProvider } from './providers/tts/index.ts';
import { EnergyVad } from './providers/vad/energy.ts';
import { AgentRuntime, type RuntimeDeps } from './runtime/index.ts';
import type { AgentMetrics } from './agent-metrics.ts';
import { trace, type Context } from '@opentelemetry/api';
import { withVendorSpans } from './vendor-spans.ts';

/**
 * Loads the WASM engines the runtime needs; call once at start-up (idempotent). The local voice
 * (eSpeak-NG, 24 MB of voice data, 0.3-1.4 s to load) starts loading in the background when a
 * voice provider uses it, so the first call's first message is not late, without delaying start.
 */
export async function prepareAgentRuntime(config?: Pick<Config, 'tts'>, logger?: Logger): Promise<void> {
  await Promise.all([initResamplers(), loadRnnoise()]);
  const slots = config ? Object.values(ttsProvidersBySlot(config.tts.providers)) : [];
  if (slots.some((p) => p.type === 'local')) {
    new LocalEspeakProvider().warmUp().catch((err: unknown) => logger?.warn({ err }, 'the local voice could not be loaded at start-up (it is retried on first use)'));
  }
}

/**
 * The runtime's dependencies from the configuration; tests override single fields. With
 * `metrics`, every TTS request's time to first audio is observed there.
 */
export function runtimeDepsFromConfig(config: Config, logger: Logger, overrides: Partial<RuntimeDeps> = {}, metrics?: AgentMetrics): RuntimeDeps {
  const llm = createLlmRegistry(config.llm.providers);
  const tts = createTtsProviders(ttsProvidersBySlot(config.tts.providers), { onFirstByte: metrics?.ttsFirstByte });
  const stt = createSttProvider({ provider: config.stt.provider, base_url: config.stt.base_url, api_key: config.stt.api_key, model: config.stt.model });
  const log = logger.child({ component: 'agent' });
  return {
    stt,
    tts: (provider) => tts.get(provider),
    model: (agent) => {
      const fallback = withFallback(llm.resolve(agent.llm), llm.resolve(agent.fallback_llm), { firstTokenTimeoutMs: config.llm.first_token_timeout_ms, logger: log });
      return (messages, tools, signal) => fallback.stream(messages, tools, signal);
    },
    createVad: (settings) => new EnergyVad(settings),
    createNoiseSuppressor: (settings) => createNoiseSuppressor(settings),
    toolTimeoutMs: config.session.tool_timeout_secs * 1000,
    machineDetection: { greetingMs: config.session.amd_greeting_ms, maxMs: config.session.amd_max_ms, beepWaitMs: config.session.amd_beep_wait_ms },
    logger,
    ...overrides,
  };
}

/** Where a session's trace span is found by session id (src/session/session-spans.ts). */
export interface SessionTraceParents {
  contextOf(sessionId: string): Context | undefined;
}

/**
 * `describe`: what each session runs on, for its first log line (session-providers.ts) and its
 * vendor spans. `traces`: the sessions' spans; a session whose span records (tracing on, sampled)
 * gets its vendor requests traced (vendor-spans.ts), any other runs on the providers as they are.
 */
export function createAgentRuntimeFactory(deps: RuntimeDeps, describe?: SessionRuntimeFactory['describe'], traces?: SessionTraceParents): SessionRuntimeFactory {
  const factory: SessionRuntimeFactory = (context, io) => {
    const parent = traces?.contextOf(context.sessionId);
    const traced = parent !== undefined && trace.getSpan(parent)?.isRecording() === true;
    return new AgentRuntime(context, io, traced ? withVendorSpans(deps, context.agent, describe, () => traces?.contextOf(context.sessionId)) : deps);
  };
  if (describe) factory.describe = describe;
  return factory;
}
