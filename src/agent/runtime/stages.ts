/**
 * The wiring of one session's stages: the providers resolved from the agent's settings (VAD,
 * noise suppression, TTS voice, model) and each stage built with its share of the session
 * context (prompt and first message with the session's variables, client tools from the flow's
 * nodes, the chunk size of response_audio), its events going to the runtime's routes.
 *
 * Apart from the runtime (agent-runtime.ts), which routes the events and owns the rules that join
 * stages: what a stage is given is decided here once, and can be checked without running a
 * conversation. Order matters: every provider is resolved before the recognizer is opened
 * (TurnDetector), so a voice or model setting that does not resolve throws before a vendor
 * connection exists.
 */
import type { Agent } from '../../domain/agent.ts';
import type { Logger } from '../../log.ts';
import { systemClock, systemTimers, type Clock, type Timers } from '../../media/types.ts';
import type { SessionContext } from '../../session/runtime-contract.ts';
import type { TurnAudioReports } from '../../session/turn-audio.ts';
import type { TurnTimelineObserver } from '../../domain/turn-latency.ts';
import type { NoiseSuppressor, SttProvider, TtsProvider, VadSettings, VoiceActivityDetector } from '../providers/types.ts';
import { RUNTIME_SAMPLE_RATE } from '../providers/types.ts';
import { substituteVariables } from '../template.ts';
import { clientToolsFromNodes, type ToolWebhook } from '../tools.ts';
import { DtmfCollector } from './dtmf.ts';
import type { CallerEvent, KeyEvent, ReplyEvent, SpeechEvent, TimerEvent } from './events.ts';
import { ReplyLoop, type ModelStream } from './reply-loop.ts';
import { SpeechOutput, type SpeechOutputOptions } from './speech-output.ts';
import { ConversationTimers } from './timers.ts';
import { transferNumber } from './transfer.ts';
import { TurnDetector } from './turn-detection.ts';

/** What a session's runtime is built from: the providers, the clock and the pacing. */
export interface RuntimeDeps {
  stt: SttProvider;
  /** The TTS adapter serving a voice_settings.provider. */
  tts(provider: string): TtsProvider;
  /** The agent's model: llm with fallback_llm. */
  model(agent: SessionContext['agent']): ModelStream;
  createVad(settings: VadSettings): VoiceActivityDetector;
  createNoiseSuppressor(settings: { enabled: boolean; level: number }): NoiseSuppressor | undefined;
  toolTimeoutMs: number;
  /** Sends tool calls to the organization's webhook endpoint (absent: none answers them). */
  toolWebhook?: ToolWebhook;
  logger: Logger;
  clock?: Clock;
  timers?: Timers;
  /** response_audio chunk length, ms (default 40). */
  chunkMs?: number;
  /** How far ahead of the caller's playhead audio is sent, ms (default 200). */
  leadMs?: number;
  /** Told of every agent turn's timeline once complete (store, metrics, traces); none: nothing is recorded. */
  turnTimelineObservers?: readonly TurnTimelineObserver[];
  /** Where the bridge reports a phone call's first RTP packet of each turn (audio_out_first). */
  turnAudio?: TurnAudioReports;
}

/** Where each stage's events go (the runtime's handlers). */
export interface StageRoutes {
  caller(e: CallerEvent): void;
  key(e: KeyEvent): void;
  reply(e: ReplyEvent): void;
  speech(e: SpeechEvent): void;
  timer(e: TimerEvent): void;
  /** The session has ended: the silence timers are never idle then. */
  ended(): boolean;
}

export interface SessionStages {
  timers: Timers;
  model: ModelStream;
  speech: SpeechOutput;
  replies: ReplyLoop;
  caller: TurnDetector;
  keys: DtmfCollector;
  timeouts: ConversationTimers;
}

/** Builds the stages of one session. @throws what a provider throws for a setting it cannot serve (before any recognizer opens). */
export function buildStages(ctx: SessionContext, deps: RuntimeDeps, log: Logger, routes: StageRoutes): SessionStages {
  const clock = deps.clock ?? systemClock;
  const timers = deps.timers ?? systemTimers;
  const a = ctx.agent;
  const vad = deps.createVad({ startSecs: a.vad_settings.start_secs, stopSecs: a.vad_settings.stop_secs });
  const noise = deps.createNoiseSuppressor(a.noise_cancel_settings);
  const tts = deps.tts(a.voice_settings.provider);
  const model = deps.model(a);
  const speech = new SpeechOutput({
    tts,
    voice: voiceOf(a),
    clock,
    timers,
    chunkSamples: Math.round((RUNTIME_SAMPLE_RATE * (deps.chunkMs ?? 40)) / 1000),
    leadMs: deps.leadMs ?? 200,
    emit: (e) => routes.speech(e),
  });
  const replies = new ReplyLoop({
    model,
    prompt: substituteVariables(ctx.prompt ?? a.prompt, ctx.variables),
    clientTools: clientToolsFromNodes(ctx.nodes),
    canTransfer: transferNumber(a.timeout_settings, 'timeout') !== undefined,
    phone: ctx.direction !== 'web',
    toolTimeoutMs: deps.toolTimeoutMs,
    clientAnswersTools: ctx.clientAnswersTools,
    ...(deps.toolWebhook !== undefined ? { toolWebhook: deps.toolWebhook } : {}),
    session: { orgId: ctx.orgId, callId: ctx.sessionId, agentId: ctx.agent.id },
    timers,
    log,
    emit: (e) => routes.reply(e),
  });
  const caller = new TurnDetector({
    vad,
    noise,
    stt: deps.stt,
    sttOptions: { language: a.default_language, keyterms: a.keyterms },
    timers,
    emit: (e) => routes.caller(e),
  });
  const keys = new DtmfCollector({ timers, emit: (e) => routes.key(e) });
  const timeouts = new ConversationTimers({
    silenceTimeoutSecs: a.vad_settings.silence_timeout_secs,
    timeout: a.timeout_settings,
    idle: () => !routes.ended() && speech.current === undefined && !caller.speaking,
    timers,
    log,
    emit: (e) => routes.timer(e),
  });
  return { timers, model, speech, replies, caller, keys, timeouts };
}

/** The TTS voice of the agent's voice_settings (only the options it sets). */
export function voiceOf(a: Agent): SpeechOutputOptions['voice'] {
  const v = a.voice_settings;
  return {
    voiceId: v.id,
    language: a.default_language,
    ...(v.speed ? { speed: v.speed } : {}),
    ...(v.stability ? { stability: v.stability } : {}),
    ...(v.similarity_boost ? { similarityBoost: v.similarity_boost } : {}),
    ...(v.volume ? { volume: v.volume } : {}),
  };
}
