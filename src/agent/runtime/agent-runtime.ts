/**
 * The conversation runtime of one voice session: caller audio in, agent speech out. It builds
 * the stages, routes their events (events.ts) and owns what joins them: who may cut whom, what
 * happens after a turn, and how the session ends.
 *
 *   input_audio -> TurnDetector (frames, noise suppression, VAD, STT) -> speech_started/stopped,
 *                                                                        input_audio_transcript
 *   dtmf        -> DtmfCollector -> an entry, as the caller's words      barge-in
 *                                   |                                        |
 *                     user turn committed (final transcript, caller silent)  |
 *                                   v                                        v
 *   tools <-> ReplyLoop (model with fallback, SentenceSplitter) -> SpeechOutput (TTS per
 *             sentence, one ahead; paced audio) -> response_text, response_audio, interruption
 *   ConversationTimers: silence -> re-prompt, silence_timeout_action; default_timeout -> timeout_action
 *   the end -> summarizeCall (summarize_calls)
 *
 * Control before data (pipecat's rule): a barge-in aborts the model and TTS at once and drops
 * queued audio; the history keeps only what the caller heard.
 */
import type { Agent, TimeoutSettings } from '../../domain/agent.ts';
import type { Logger } from '../../log.ts';
import { systemClock, systemTimers, type Clock, type Timers } from '../../media/types.ts';
import type { SessionEndReason } from '../../session/protocol.ts';
import type { SessionContext, SessionIo, SessionRuntime, TranscriptEntry } from '../../session/runtime-contract.ts';
import type { NoiseSuppressor, SttProvider, TtsProvider, VadSettings, VoiceActivityDetector } from '../providers/types.ts';
import { RUNTIME_SAMPLE_RATE } from '../providers/types.ts';
import { substituteVariables } from '../template.ts';
import { clientToolsFromNodes } from '../tools.ts';
import { DtmfCollector } from './dtmf.ts';
import type { AgentTurn, CallerEvent, KeyEvent, ReplyEvent, SpeechEvent, TimerEvent } from './events.ts';
import { ReplyLoop, type ModelStream } from './reply-loop.ts';
import { SpeechOutput, type SpeechOutputOptions } from './speech-output.ts';
import { summarizeCall } from './summary.ts';
import { ConversationTimers } from './timers.ts';
import { TurnDetector } from './turn-detection.ts';

export interface RuntimeDeps {
  stt: SttProvider;
  /** The TTS adapter serving a voice_settings.provider. */
  tts(provider: string): TtsProvider;
  /** The agent's model: llm with fallback_llm. */
  model(agent: SessionContext['agent']): ModelStream;
  createVad(settings: VadSettings): VoiceActivityDetector;
  createNoiseSuppressor(settings: { enabled: boolean; level: number }): NoiseSuppressor | undefined;
  toolTimeoutMs: number;
  logger: Logger;
  clock?: Clock;
  timers?: Timers;
  /** response_audio chunk length, ms (default 40). */
  chunkMs?: number;
  /** How far ahead of the caller's playhead audio is sent, ms (default 200). */
  leadMs?: number;
}

/** Said after silence_timeout_secs of silence, before the last strike. */
export const REPROMPT_TEXT = 'Are you still there?';

export class AgentRuntime implements SessionRuntime {
  readonly #ctx: SessionContext;
  readonly #io: SessionIo;
  readonly #log: Logger;
  readonly #timers: Timers;
  readonly #model: ModelStream;
  readonly #speech: SpeechOutput;
  readonly #replies: ReplyLoop;
  readonly #caller: TurnDetector;
  readonly #keys: DtmfCollector;
  readonly #timeouts: ConversationTimers;
  readonly #transcript: TranscriptEntry[] = [];
  /** A user turn committed during an agent turn the caller could not cut: answered after it. */
  #replyQueued = false;
  #ended = false;

  constructor(ctx: SessionContext, io: SessionIo, deps: RuntimeDeps) {
    this.#ctx = ctx;
    this.#io = io;
    const clock = deps.clock ?? systemClock;
    const timers = deps.timers ?? systemTimers;
    const log = deps.logger.child({ component: 'agent', sessionId: ctx.sessionId });
    this.#timers = timers;
    this.#log = log;
    const a = ctx.agent;
    // Resolved before the recognizer is opened (TurnDetector), so a voice or model setting that
    // does not resolve throws before a vendor connection exists.
    const vad = deps.createVad({ startSecs: a.vad_settings.start_secs, stopSecs: a.vad_settings.stop_secs });
    const noise = deps.createNoiseSuppressor(a.noise_cancel_settings);
    const tts = deps.tts(a.voice_settings.provider);
    this.#model = deps.model(a);
    this.#speech = new SpeechOutput({
      tts,
      voice: voiceOf(a),
      clock,
      timers,
      chunkSamples: Math.round((RUNTIME_SAMPLE_RATE * (deps.chunkMs ?? 40)) / 1000),
      leadMs: deps.leadMs ?? 200,
      emit: (e) => this.#onSpeech(e),
    });
    this.#replies = new ReplyLoop({
      model: this.#model,
      prompt: substituteVariables(ctx.prompt ?? a.prompt, ctx.variables),
      clientTools: clientToolsFromNodes(ctx.nodes),
      canTransfer: transferNumber(a.timeout_settings, 'timeout') !== undefined,
      phone: ctx.direction !== 'web',
      toolTimeoutMs: deps.toolTimeoutMs,
      timers,
      log,
      emit: (e) => this.#onReply(e),
    });
    this.#caller = new TurnDetector({
      vad,
      noise,
      stt: deps.stt,
      sttOptions: { language: a.default_language, keyterms: a.keyterms },
      timers,
      emit: (e) => this.#onCaller(e),
    });
    this.#keys = new DtmfCollector({ timers, emit: (e) => this.#onKey(e) });
    this.#timeouts = new ConversationTimers({
      silenceTimeoutSecs: a.vad_settings.silence_timeout_secs,
      timeout: a.timeout_settings,
      idle: () => !this.#ended && this.#speech.current === undefined && !this.#caller.speaking,
      timers,
      log,
      emit: (e) => this.#onTimer(e),
    });
    this.#start();
  }

  // --- SessionRuntime ----------------------------------------------------------------------------

  inputAudio(pcm: Int16Array): void {
    if (!this.#ended) this.#caller.audio(pcm);
  }

  toolCallOutput(toolCallId: string, output: string): void {
    this.#replies.toolOutput(toolCallId, output);
  }

  /** A key the caller pressed (collected into entries by the DtmfCollector). */
  dtmf(digit: string): void {
    if (!this.#ended) this.#keys.press(digit);
  }

  transcript(): TranscriptEntry[] {
    return this.#transcript.slice();
  }

  close(): void {
    this.#shutdown();
  }

  // --- the first message -------------------------------------------------------------------------

  #start(): void {
    const a = this.#ctx.agent;
    const playFirst = this.#ctx.direction !== 'outbound' || a.enable_first_message_outbound;
    const first = substituteVariables(this.#ctx.firstMessage ?? a.first_message, this.#ctx.variables).trim();
    if (!playFirst || first === '') {
      this.#timeouts.armSilence();
      return;
    }
    const turn = this.#speech.open('first', { interruptibleForMs: a.first_message_interruption_time * 1000 });
    this.#speech.say(turn, first);
    this.#speech.finish(turn);
    turn.messageIndex = this.#replies.addAgent(first);
  }

  // --- stage events ------------------------------------------------------------------------------

  #onCaller(e: CallerEvent): void {
    switch (e.type) {
      case 'speech_started':
        this.#timeouts.callerActive();
        this.#io.send({ type: 'speech_started', data: { emulated: e.emulated } });
        this.#speech.bargeIn();
        return;
      case 'speech_stopped':
        this.#io.send({ type: 'speech_stopped', data: {} });
        return;
      case 'transcript':
        this.#io.send({ type: 'input_audio_transcript', data: { transcript: e.text, turn_id: e.turnId, is_final: e.isFinal } });
        return;
      case 'user_turn':
        this.#onUserTurn(e.text, e.turnId);
        return;
      case 'failed':
        this.#fail('speech-to-text failed', e.error);
        return;
    }
  }

  #onKey(e: KeyEvent): void {
    if (e.type === 'key') {
      this.#timeouts.callerActive();
      // The first key cuts the agent like speech would (IVR habit).
      if (e.first) this.#speech.bargeIn();
    } else {
      this.#caller.addText(e.text);
    }
  }

  #onUserTurn(text: string, turnId: string): void {
    if (text === '' || this.#ended) {
      if (this.#speech.current === undefined) this.#timeouts.armSilence();
      return;
    }
    this.#record({ role: 'user', text, turn_id: turnId });
    this.#replies.addUser(text);
    if (this.#speech.current !== undefined) {
      // The agent is in a turn the caller could not interrupt: answer once it is over.
      this.#replyQueued = true;
      return;
    }
    this.#reply();
  }

  #reply(): void {
    void this.#replies.run(this.#speech.open('reply'));
  }

  #onReply(e: ReplyEvent): void {
    switch (e.type) {
      case 'text':
        this.#speech.append(e.turn, e.delta);
        return;
      case 'sentence':
        this.#speech.speak(e.turn, e.text);
        return;
      case 'say':
        this.#speech.say(e.turn, e.text);
        return;
      case 'done':
        this.#speech.finish(e.turn);
        return;
      case 'tool_call':
        this.#io.send({ type: 'tool_call', data: { toolCallId: e.toolCallId, toolName: e.toolName, arguments: e.arguments } });
        return;
      case 'tool_result':
        this.#record({ role: 'tool', text: `${e.name}: ${e.output}` });
        return;
      case 'dtmf':
        this.#io.send({ type: 'dtmf', data: { digits: e.digits } });
        return;
      case 'end_call':
        this.#speech.finishClosing(e.turn, () => this.#end('agent_hangup'));
        return;
      case 'transfer':
        this.#transfer(e.turn, 'timeout');
        return;
      case 'failed':
        if (e.fatal) this.#end('error');
        return;
    }
  }

  #onSpeech(e: SpeechEvent): void {
    switch (e.type) {
      case 'turn_started':
        this.#timeouts.agentSpeaking();
        return;
      case 'text':
        this.#io.send({ type: 'response_text', data: { turn_id: e.turnId, text: e.text, is_final: e.isFinal } });
        return;
      case 'audio':
        this.#io.send({ type: 'response_audio', data: { turn_id: e.turnId, audio: e.audio, is_final: e.isFinal } });
        return;
      case 'tts_failed':
        this.#log.warn({ err: e.error, chars: e.text.length }, 'text-to-speech failed for a piece of the answer: skipped');
        return;
      case 'interrupted':
        this.#io.send({ type: 'interruption', data: {} });
        this.#replies.keepHeard(e.turn.messageIndex, e.heard);
        this.#record({ role: 'agent', text: e.heard, turn_id: e.turn.turnId, interrupted: true });
        return;
      case 'heard':
        this.#onHeard(e.turn);
        return;
    }
  }

  /** An agent turn was heard to its end: what comes next. */
  #onHeard(turn: AgentTurn): void {
    if (this.#ended) return;
    this.#record({ role: 'agent', text: turn.text, turn_id: turn.turnId });
    if (turn.then) {
      turn.then();
      return;
    }
    const queued = this.#replyQueued;
    this.#replyQueued = false;
    if (queued) this.#reply();
    else this.#timeouts.armSilence();
  }

  #onTimer(e: TimerEvent): void {
    switch (e.type) {
      case 'reprompt': {
        const turn = this.#speech.open('reprompt');
        this.#speech.say(turn, REPROMPT_TEXT);
        this.#speech.finish(turn);
        this.#replies.addAgent(REPROMPT_TEXT);
        return;
      }
      case 'silence_timeout':
        if (e.action === 'transfer_call') this.#transferOr('silence', 'silence_timeout');
        else this.#end('silence_timeout');
        return;
      case 'max_duration':
        if (e.action === 'transfer_call') this.#transferOr('timeout', 'timeout');
        else this.#end('timeout');
        return;
    }
  }

  // --- transfer and end --------------------------------------------------------------------------

  /**
   * Says the transfer message (when set) in `current` or a new closing turn, then ends the
   * session with reason transfer; with no number to transfer to, hangs up after `current`.
   */
  #transfer(current: AgentTurn | undefined, which: TransferKind): void {
    const t = this.#ctx.agent.timeout_settings;
    const number = transferNumber(t, which);
    if (number === undefined) {
      if (current) this.#speech.finishClosing(current, () => this.#end('agent_hangup'));
      else this.#end('agent_hangup');
      return;
    }
    const message = transferMessage(t, which);
    const turn = current ?? this.#speech.open('closing');
    if (message !== '') this.#speech.say(turn, message);
    this.#speech.finishClosing(turn, () => this.#end('transfer', number));
  }

  /** A timer's transfer action: cuts whatever the agent is saying; with no number, ends with `reason`. */
  #transferOr(which: TransferKind, reason: SessionEndReason): void {
    if (transferNumber(this.#ctx.agent.timeout_settings, which) === undefined) {
      this.#end(reason);
      return;
    }
    this.#speech.cut();
    this.#transfer(undefined, which);
  }

  #fail(what: string, err: unknown): void {
    if (this.#ended) return;
    this.#log.error({ err }, `${what}: ending the session`);
    this.#end('error');
  }

  #end(reason: SessionEndReason, transferNumber?: string): void {
    if (this.#ended) return;
    this.#shutdown();
    this.#io.end(reason, transferNumber !== undefined ? { transferNumber } : undefined);
  }

  /** Stops every stage and timer; then the after-call summary, when the agent asks for one. */
  #shutdown(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#timeouts.close();
    this.#keys.close();
    const cut = this.#speech.cut();
    if (cut && cut.turn.kind !== 'closing' && cut.heard !== '') this.#record({ role: 'agent', text: cut.heard, turn_id: cut.turn.turnId, interrupted: true });
    this.#replies.close();
    this.#caller.close();
    if (this.#ctx.agent.summarize_calls && this.#transcript.length > 0) {
      void summarizeCall(this.#transcript, { model: this.#model, timers: this.#timers, log: this.#log, store: (s) => this.#io.storeSummary(s) });
    }
  }

  #record(e: Omit<TranscriptEntry, 'at'>): void {
    this.#transcript.push({ ...e, at: new Date().toISOString() });
  }
}

/** Whose transfer: the silence action's own settings fall back to the general ones. */
type TransferKind = 'timeout' | 'silence';

/**
 * The transfer target: silence_transfer_number (else transfer_number) for the silence action;
 * transfer_number for the model's transfer tool and the default timeout.
 */
function transferNumber(t: TimeoutSettings, which: TransferKind): string | undefined {
  const n = which === 'silence' ? (t.silence_transfer_number ?? t.transfer_number) : t.transfer_number;
  return n !== undefined && n.trim() !== '' ? n.trim() : undefined;
}

/** What is said before transferring ('' for nothing), chosen like the number. */
function transferMessage(t: TimeoutSettings, which: TransferKind): string {
  const silenceMessage = which === 'silence' ? t.silence_transfer_message?.trim() : undefined;
  return silenceMessage || (t.transfer_message?.trim() ?? '');
}

function voiceOf(a: Agent): SpeechOutputOptions['voice'] {
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
