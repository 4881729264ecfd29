/**
 * The conversation runtime of one voice session (issue 5): caller audio in, agent speech out.
 *
 *   input_audio -> FrameAssembler (20 ms) -> noise suppression -> VAD ----> speech_started/stopped,
 *                                                                 |         barge-in
 *                                                                 v
 *                                                                STT ----> input_audio_transcript
 *                                                                 |
 *                          user turn committed (final transcript, caller silent)
 *                                                                 v
 *   response_text <- LLM (primary, fallback on error/first-token deadline) -> tools
 *   response_audio <- pacer <- TTS per sentence  <-  SentenceSplitter
 *
 * Control before data (pipecat's rule): a barge-in aborts the model and TTS at once and drops
 * queued audio; the history keeps only what the caller heard. Timers: default_timeout ends (or
 * transfers) the session; silence_timeout_secs of silence after the agent spoke re-prompts, and
 * silence_counter such strikes apply silence_timeout_action.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '../log.ts';
import { systemClock, systemTimers, type Clock, type Timers } from '../media/types.ts';
import type { SessionEndReason } from '../session/protocol.ts';
import type { SessionContext, SessionIo, SessionRuntime, TranscriptEntry } from '../session/runtime-contract.ts';
import { FrameAssembler } from './frame-assembler.ts';
import type { ChatMessage, LlmDelta, NoiseSuppressor, SttProvider, SttStream, ToolCallRequest, ToolSpec, Transcript, TtsProvider, VadSettings, VoiceActivityDetector } from './providers/types.ts';
import { RUNTIME_SAMPLE_RATE } from './providers/types.ts';
import { SentenceSplitter } from './sentence-splitter.ts';
import { SpeechTurn } from './speech-turn.ts';
import { substituteVariables } from './template.ts';
import { builtinToolSpecs, clientToolsFromNodes, END_CALL_TOOL, SEND_DTMF_TOOL, toolCallArguments, TRANSFER_CALL_TOOL, type ClientTool } from './tools.ts';

/** Streams one completion of the agent's model (primary with fallback, decided by the factory). */
export type ModelStream = (messages: ChatMessage[], tools: ToolSpec[], signal: AbortSignal) => AsyncIterable<LlmDelta>;

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
/** Said when the model fails (primary and fallback). */
const APOLOGY_TEXT = 'Sorry, I am having trouble answering right now.';
/** Model rounds in one turn (tool call -> result -> model again) before the turn is cut short. */
const MAX_TOOL_ROUNDS = 5;
/** Consecutive failed model turns that end the session with reason error. */
const MAX_MODEL_FAILURES = 3;
/** After speech stopped, how long to wait for a final transcript before committing what there is. */
const FINAL_TRANSCRIPT_GRACE_MS = 2000;
/** Keys pressed with less than this between them are one entry; '#' ends an entry at once. */
const DTMF_INTER_DIGIT_MS = 1500;

type TurnKind = 'first' | 'reply' | 'reprompt' | 'closing';

interface ActiveTurn {
  kind: TurnKind;
  speech: SpeechTurn;
  /** What the turn says (streamed as response_text; committed with is_final once heard or cut). */
  text: string;
  /** Index in the model history of this turn's last assistant message, once it is there. */
  messageIndex?: number;
  /** Aborts the model stream of a reply. */
  abort: AbortController;
  /** First message: interruptible until this performance-clock time (undefined: no limit). */
  interruptibleUntilAudioMs?: number;
  /** What happens once the turn has been heard. */
  then?: () => void;
}

export class AgentRuntime implements SessionRuntime {
  readonly #ctx: SessionContext;
  readonly #io: SessionIo;
  readonly #deps: RuntimeDeps;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #timers: Timers;
  readonly #frames: FrameAssembler;
  readonly #vad: VoiceActivityDetector;
  readonly #noise: NoiseSuppressor | undefined;
  readonly #stt: SttStream;
  readonly #tts: TtsProvider;
  readonly #model: ModelStream;
  readonly #clientTools: ClientTool[];
  readonly #tools: ToolSpec[];
  readonly #messages: ChatMessage[] = [];
  readonly #transcript: TranscriptEntry[] = [];
  readonly #pendingTools = new Map<string, (output: string) => void>();
  #turn: ActiveTurn | undefined;
  /** A user turn waiting for a non-interruptible agent turn to end. */
  #queuedUserText: string | undefined;
  #userText: string[] = [];
  #userTurnId = randomUUID();
  /** speech_started was sent for the current utterance (by VAD or emulated from a transcript). */
  #userSpeechOpen = false;
  #emulatedSpeech = false;
  #graceTimer: unknown;
  #silenceTimer: unknown;
  #sessionTimer: unknown;
  #silenceStrikes = 0;
  #dtmfDigits = '';
  #dtmfTimer: unknown;
  #modelFailures = 0;
  #ended = false;

  constructor(ctx: SessionContext, io: SessionIo, deps: RuntimeDeps) {
    this.#ctx = ctx;
    this.#io = io;
    this.#deps = deps;
    this.#clock = deps.clock ?? systemClock;
    this.#timers = deps.timers ?? systemTimers;
    this.#log = deps.logger.child({ component: 'agent', sessionId: ctx.sessionId });
    const a = ctx.agent;
    this.#vad = deps.createVad({ startSecs: a.vad_settings.start_secs, stopSecs: a.vad_settings.stop_secs });
    this.#noise = deps.createNoiseSuppressor(a.noise_cancel_settings);
    this.#tts = deps.tts(a.voice_settings.provider);
    this.#model = deps.model(a);
    this.#clientTools = clientToolsFromNodes(ctx.nodes);
    this.#tools = [...builtinToolSpecs(this.#transferNumber('timeout') !== undefined, ctx.direction !== 'web'), ...this.#clientTools.map((t) => t.spec)];
    this.#frames = new FrameAssembler((f) => this.#onFrame(f));
    this.#stt = deps.stt.open(
      { language: a.default_language, keyterms: a.keyterms },
      { onTranscript: (t) => this.#onTranscript(t), onError: (err) => this.#fail('speech-to-text failed', err) },
    );
    const prompt = substituteVariables(ctx.prompt ?? a.prompt, ctx.variables);
    if (prompt.trim() !== '') this.#messages.push({ role: 'system', content: prompt });
    this.#sessionTimer = this.#timers.setTimeout(() => this.#onSessionTimeout(), a.timeout_settings.default_timeout * 1000);
    this.#start();
  }

  // --- SessionRuntime ----------------------------------------------------------------------------

  inputAudio(pcm: Int16Array): void {
    if (!this.#ended) this.#frames.push(pcm);
  }

  toolCallOutput(toolCallId: string, output: string): void {
    const resolve = this.#pendingTools.get(toolCallId);
    if (resolve === undefined) {
      this.#log.warn({ toolCallId }, 'tool_call_output for no pending tool call: ignored');
      return;
    }
    this.#pendingTools.delete(toolCallId);
    resolve(output);
  }

  /**
   * A key the caller pressed. The first key cuts the agent like speech would (IVR habit); keys
   * are collected until '#' or a pause, then go to the model as the caller's turn.
   */
  dtmf(digit: string): void {
    if (this.#ended) return;
    this.#timers.clearTimeout(this.#silenceTimer);
    this.#silenceStrikes = 0;
    if (this.#dtmfDigits === '') this.#bargeIn();
    this.#dtmfDigits += digit;
    this.#timers.clearTimeout(this.#dtmfTimer);
    if (digit === '#') this.#commitDtmf();
    else this.#dtmfTimer = this.#timers.setTimeout(() => this.#commitDtmf(), DTMF_INTER_DIGIT_MS);
  }

  #commitDtmf(): void {
    this.#timers.clearTimeout(this.#dtmfTimer);
    const digits = this.#dtmfDigits;
    this.#dtmfDigits = '';
    if (digits === '' || this.#ended) return;
    this.#userText.push(`[The caller pressed ${digits}]`);
    if (!this.#userSpeechOpen) this.#commitUserTurn();
  }

  transcript(): TranscriptEntry[] {
    return this.#transcript.slice();
  }

  close(): void {
    this.#shutdown();
  }

  // --- start -------------------------------------------------------------------------------------

  #start(): void {
    const a = this.#ctx.agent;
    const playFirst = this.#ctx.direction !== 'outbound' || a.enable_first_message_outbound;
    const first = substituteVariables(this.#ctx.firstMessage ?? a.first_message, this.#ctx.variables).trim();
    if (!playFirst || first === '') {
      this.#armSilenceTimer();
      return;
    }
    const turn = this.#newTurn('first');
    turn.interruptibleUntilAudioMs = a.first_message_interruption_time * 1000;
    this.#say(turn, first);
    turn.speech.finish();
    turn.messageIndex = this.#messages.push({ role: 'assistant', content: first }) - 1;
  }

  // --- caller audio ------------------------------------------------------------------------------

  #onFrame(frame: Int16Array): void {
    const clean = this.#noise ? this.#noise.process(frame) : frame;
    this.#stt.write(clean);
    const ev = this.#vad.process(clean);
    if (ev === 'speech_started') this.#onSpeechStarted(false);
    else if (ev === 'speech_stopped') this.#onSpeechStopped();
  }

  #onSpeechStarted(emulated: boolean): void {
    if (this.#userSpeechOpen) {
      // The recognizer was first (emulated start); now VAD hears it too: from here on it is a
      // real utterance, ended by VAD and transcribed to its end.
      if (this.#emulatedSpeech && !emulated) {
        this.#emulatedSpeech = false;
        this.#stt.speechStarted();
      }
      return;
    }
    this.#userSpeechOpen = true;
    this.#emulatedSpeech = emulated;
    this.#timers.clearTimeout(this.#silenceTimer);
    this.#timers.clearTimeout(this.#graceTimer);
    this.#graceTimer = undefined;
    this.#silenceStrikes = 0;
    this.#io.send({ type: 'speech_started', data: { emulated } });
    if (!emulated) this.#stt.speechStarted();
    this.#bargeIn();
  }

  #onSpeechStopped(): void {
    if (!this.#userSpeechOpen) return;
    this.#userSpeechOpen = false;
    this.#io.send({ type: 'speech_stopped', data: {} });
    if (this.#emulatedSpeech) {
      this.#commitUserTurn();
      return;
    }
    this.#stt.speechEnded();
    // The final transcript normally follows; if the recognizer never sends one, commit anyway.
    this.#graceTimer = this.#timers.setTimeout(() => this.#commitUserTurn(), FINAL_TRANSCRIPT_GRACE_MS);
  }

  #onTranscript(t: Transcript): void {
    if (this.#ended) return;
    // A transcript with no speech_started before it: the recognizer heard what VAD did not.
    if (!this.#userSpeechOpen && !this.#vad.speaking && t.text.trim() !== '' && !this.#awaitingFinal()) this.#onSpeechStarted(true);
    this.#io.send({ type: 'input_audio_transcript', data: { transcript: t.text, turn_id: this.#userTurnId, is_final: t.isFinal } });
    if (!t.isFinal) return;
    if (t.text.trim() !== '') this.#userText.push(t.text.trim());
    if (this.#emulatedSpeech && this.#userSpeechOpen) {
      this.#onSpeechStopped();
      return;
    }
    if (!this.#vad.speaking) this.#commitUserTurn();
  }

  #awaitingFinal(): boolean {
    return this.#graceTimer !== undefined;
  }

  #commitUserTurn(): void {
    this.#timers.clearTimeout(this.#graceTimer);
    this.#graceTimer = undefined;
    const text = this.#userText.join(' ').trim();
    this.#userText = [];
    const turnId = this.#userTurnId;
    this.#userTurnId = randomUUID();
    if (text === '' || this.#ended) {
      if (this.#turn === undefined) this.#armSilenceTimer();
      return;
    }
    this.#record({ role: 'user', text, turn_id: turnId });
    this.#messages.push({ role: 'user', content: text });
    if (this.#turn !== undefined) {
      // The agent is in a turn the caller could not interrupt: answer once it is over.
      this.#queuedUserText = text;
      return;
    }
    void this.#reply();
  }

  /** The caller started speaking: cut the agent's turn if it may be cut. */
  #bargeIn(): void {
    const turn = this.#turn;
    if (turn === undefined || turn.kind === 'closing') return;
    if (turn.interruptibleUntilAudioMs !== undefined) {
      const started = turn.speech.audioStartedAt;
      const elapsed = started === undefined ? 0 : this.#clock.now() - started;
      if (elapsed >= turn.interruptibleUntilAudioMs) return;
    }
    this.#turn = undefined;
    turn.abort.abort();
    const heard = turn.speech.cut();
    this.#io.send({ type: 'interruption', data: {} });
    this.#commitInterrupted(turn, heard);
  }

  /**
   * The history keeps only what the caller heard of an interrupted turn: its assistant message
   * (already there when the model had finished writing) is cut to the heard text.
   */
  #commitInterrupted(turn: ActiveTurn, heard: string): void {
    const i = turn.messageIndex;
    const own = i === undefined ? undefined : this.#messages[i];
    if (own?.role === 'assistant') {
      if (heard === '' && !own.toolCalls?.length && i === this.#messages.length - 1) this.#messages.pop();
      else own.content = heard;
    } else if (heard !== '') {
      this.#messages.push({ role: 'assistant', content: heard });
    }
    this.#record({ role: 'agent', text: heard, turn_id: turn.speech.turnId, interrupted: true });
    this.#commitText(turn, heard);
  }

  // --- agent turns -------------------------------------------------------------------------------

  /** Speaks a fixed text in the turn, shown at once as not yet committed. */
  #say(turn: ActiveTurn, text: string): void {
    turn.text = turn.text === '' ? text : `${turn.text} ${text}`;
    turn.speech.speak(text);
    this.#io.send({ type: 'response_text', data: { turn_id: turn.speech.turnId, text: turn.text, is_final: false } });
  }

  /**
   * Commits a turn's text (`is_final: true`) once it is settled: when the caller has heard all of
   * it, or, after a barge-in, with only what was heard. Exactly once per turn.
   */
  #commitText(turn: ActiveTurn, text: string): void {
    this.#io.send({ type: 'response_text', data: { turn_id: turn.speech.turnId, text, is_final: true } });
  }

  #newTurn(kind: TurnKind): ActiveTurn {
    const a = this.#ctx.agent;
    const chunkMs = this.#deps.chunkMs ?? 40;
    const speech = new SpeechTurn({
      turnId: randomUUID(),
      tts: this.#tts,
      voice: {
        voiceId: a.voice_settings.id,
        language: a.default_language,
        ...(a.voice_settings.speed ? { speed: a.voice_settings.speed } : {}),
        ...(a.voice_settings.stability ? { stability: a.voice_settings.stability } : {}),
        ...(a.voice_settings.similarity_boost ? { similarityBoost: a.voice_settings.similarity_boost } : {}),
        ...(a.voice_settings.volume ? { volume: a.voice_settings.volume } : {}),
      },
      clock: this.#clock,
      timers: this.#timers,
      chunkSamples: Math.round((RUNTIME_SAMPLE_RATE * chunkMs) / 1000),
      leadMs: this.#deps.leadMs ?? 200,
      sendAudio: (turnId, audio, isFinal) => this.#io.send({ type: 'response_audio', data: { turn_id: turnId, audio, is_final: isFinal } }),
      onDone: () => this.#onTurnDone(turn),
      onTtsError: (err, text) => this.#log.warn({ err, chars: text.length }, 'text-to-speech failed for a piece of the answer: skipped'),
    });
    const turn: ActiveTurn = { kind, speech, text: '', abort: new AbortController() };
    this.#timers.clearTimeout(this.#silenceTimer);
    this.#turn = turn;
    return turn;
  }

  #onTurnDone(turn: ActiveTurn): void {
    if (this.#turn !== turn || this.#ended) return;
    this.#turn = undefined;
    if (turn.then) {
      turn.then();
      return;
    }
    this.#record({ role: 'agent', text: turn.text, turn_id: turn.speech.turnId });
    this.#commitText(turn, turn.text);
    const queued = this.#queuedUserText;
    this.#queuedUserText = undefined;
    if (queued !== undefined) void this.#reply();
    else this.#armSilenceTimer();
  }

  /** Answers the conversation so far through the model, with tools. */
  async #reply(): Promise<void> {
    const turn = this.#newTurn('reply');
    const { speech, abort } = turn;
    const splitter = new SentenceSplitter();
    try {
      for (let round = 0; round < MAX_TOOL_ROUNDS; round++) {
        const calls: ToolCallRequest[] = [];
        let roundText = '';
        for await (const delta of this.#model(this.#messages, this.#tools, abort.signal)) {
          if (abort.signal.aborted) return;
          if (delta.type === 'text') {
            roundText += delta.text;
            turn.text += delta.text;
            this.#io.send({ type: 'response_text', data: { turn_id: speech.turnId, text: turn.text, is_final: false } });
            for (const piece of splitter.push(delta.text)) speech.speak(piece);
          } else if (delta.type === 'tool_call') {
            calls.push(delta.call);
          }
        }
        if (abort.signal.aborted) return;
        speech.speak(splitter.flush());
        if (calls.length === 0) {
          turn.messageIndex = this.#messages.push({ role: 'assistant', content: roundText }) - 1;
          break;
        }
        turn.messageIndex = this.#messages.push({ role: 'assistant', content: roundText, toolCalls: calls }) - 1;
        if (await this.#runTools(turn, calls)) return;
        if (abort.signal.aborted) return;
      }
      this.#modelFailures = 0;
      speech.finish();
    } catch (err) {
      if (abort.signal.aborted || this.#ended) return;
      this.#modelFailures++;
      this.#log.error({ err, failures: this.#modelFailures }, 'the model failed (primary and fallback)');
      if (this.#modelFailures >= MAX_MODEL_FAILURES) {
        this.#end('error');
        return;
      }
      this.#say(turn, APOLOGY_TEXT);
      speech.finish();
    }
  }

  /**
   * Runs the model's tool calls. Returns true when one of them ends the turn for good
   * (end_call, transfer_call); otherwise their results are in the history for the next round.
   */
  async #runTools(turn: ActiveTurn, calls: ToolCallRequest[]): Promise<boolean> {
    for (const call of calls) {
      if (call.name === END_CALL_TOOL) {
        this.#closeWith(turn, () => this.#end('agent_hangup'));
        return true;
      }
      if (call.name === TRANSFER_CALL_TOOL) {
        this.#transfer(turn, 'timeout');
        return true;
      }
      if (call.name === SEND_DTMF_TOOL && this.#ctx.direction !== 'web') {
        const output = this.#sendDtmf(call);
        this.#messages.push({ role: 'tool', toolCallId: call.id, name: call.name, content: output });
        this.#record({ role: 'tool', text: `${call.name}: ${output}` });
        continue;
      }
      const output = await this.#runClientTool(call, turn.abort.signal);
      if (turn.abort.signal.aborted) return false;
      this.#messages.push({ role: 'tool', toolCallId: call.id, name: call.name, content: output });
      this.#record({ role: 'tool', text: `${call.name}: ${output}` });
    }
    return false;
  }

  /** send_dtmf: the keys go to the phone line (the bridge plays them as RFC 4733 events). */
  #sendDtmf(call: ToolCallRequest): string {
    let args: { digits?: unknown };
    try {
      args = JSON.parse(call.arguments || '{}') as { digits?: unknown };
    } catch {
      return 'Error: the arguments are not a JSON object.';
    }
    const digits = typeof args.digits === 'string' ? args.digits.toUpperCase().replace(/[^0-9A-D*#]/g, '') : '';
    if (digits === '') return 'Error: digits must contain 0-9, *, # or A-D.';
    this.#io.send({ type: 'dtmf', data: { digits } });
    return `Sent ${digits}.`;
  }

  async #runClientTool(call: ToolCallRequest, signal: AbortSignal): Promise<string> {
    const tool = this.#clientTools.find((t) => t.spec.name === call.name);
    if (tool === undefined) return `Error: there is no tool named ${call.name}.`;
    let args;
    try {
      args = toolCallArguments(tool, call);
    } catch (err) {
      return `Error: the arguments are not a JSON object (${(err as Error).message}).`;
    }
    const toolCallId = call.id || randomUUID();
    this.#io.send({ type: 'tool_call', data: { toolCallId, toolName: call.name, arguments: args } });
    return new Promise<string>((resolve) => {
      const timer = this.#timers.setTimeout(() => {
        this.#pendingTools.delete(toolCallId);
        this.#log.warn({ tool: call.name, toolCallId }, 'client tool timed out');
        resolve(`Error: the tool ${call.name} did not answer in time.`);
      }, this.#deps.toolTimeoutMs);
      const done = (output: string) => {
        this.#timers.clearTimeout(timer);
        resolve(output);
      };
      this.#pendingTools.set(toolCallId, done);
      signal.addEventListener('abort', () => {
        this.#pendingTools.delete(toolCallId);
        done('Error: cancelled.');
      }, { once: true });
    });
  }

  /** Lets the turn's speech finish (no longer interruptible), then runs `then`. */
  #closeWith(turn: ActiveTurn, then: () => void): void {
    turn.kind = 'closing';
    turn.then = () => {
      this.#record({ role: 'agent', text: turn.text, turn_id: turn.speech.turnId });
      this.#commitText(turn, turn.text);
      then();
    };
    turn.speech.finish();
  }

  /**
   * Says the transfer message (when set), then ends the session with reason transfer. `which`
   * picks the target and message: the silence action's own (silence_transfer_number,
   * silence_transfer_message) fall back to the general ones; the model's transfer tool and the
   * default timeout use transfer_number and transfer_message.
   */
  #transfer(current: ActiveTurn | undefined, which: 'timeout' | 'silence'): void {
    const number = this.#transferNumber(which);
    if (number === undefined) {
      if (current) this.#closeWith(current, () => this.#end('agent_hangup'));
      else this.#end('agent_hangup');
      return;
    }
    const t = this.#ctx.agent.timeout_settings;
    const silenceMessage = which === 'silence' ? t.silence_transfer_message?.trim() : undefined;
    const message = silenceMessage || (t.transfer_message?.trim() ?? '');
    const turn = current ?? this.#newTurn('closing');
    if (message !== '') this.#say(turn, message);
    this.#closeWith(turn, () => this.#end('transfer', number));
  }

  #transferNumber(which: 'timeout' | 'silence'): string | undefined {
    const t = this.#ctx.agent.timeout_settings;
    const n = which === 'silence' ? (t.silence_transfer_number ?? t.transfer_number) : t.transfer_number;
    return n !== undefined && n.trim() !== '' ? n.trim() : undefined;
  }

  // --- timers ------------------------------------------------------------------------------------

  #armSilenceTimer(): void {
    if (this.#ended) return;
    this.#timers.clearTimeout(this.#silenceTimer);
    const secs = this.#ctx.agent.vad_settings.silence_timeout_secs;
    if (secs <= 0) return;
    this.#silenceTimer = this.#timers.setTimeout(() => this.#onSilence(), secs * 1000);
  }

  #onSilence(): void {
    if (this.#ended || this.#turn !== undefined || this.#userSpeechOpen) return;
    this.#silenceStrikes++;
    const t = this.#ctx.agent.timeout_settings;
    if (this.#silenceStrikes >= Math.max(1, t.silence_counter)) {
      this.#log.info({ strikes: this.#silenceStrikes, action: t.silence_timeout_action }, 'caller silent: applying silence_timeout_action');
      if (t.silence_timeout_action === 'transfer_call') this.#transferOr('silence', 'silence_timeout');
      else this.#end('silence_timeout');
      return;
    }
    const turn = this.#newTurn('reprompt');
    this.#say(turn, REPROMPT_TEXT);
    turn.speech.finish();
    this.#messages.push({ role: 'assistant', content: REPROMPT_TEXT });
  }

  #onSessionTimeout(): void {
    if (this.#ended) return;
    const t = this.#ctx.agent.timeout_settings;
    this.#log.info({ secs: t.default_timeout, action: t.timeout_action }, 'default_timeout reached');
    if (t.timeout_action === 'transfer_call') this.#transferOr('timeout', 'timeout');
    else this.#end('timeout');
  }

  /** Transfers when a number is configured, else ends with `reason`. */
  #transferOr(which: 'timeout' | 'silence', reason: SessionEndReason): void {
    const number = this.#transferNumber(which);
    if (number === undefined) {
      this.#end(reason);
      return;
    }
    const current = this.#turn;
    if (current) {
      this.#turn = undefined;
      current.abort.abort();
      current.speech.cut();
    }
    this.#transfer(undefined, which);
  }

  // --- end ---------------------------------------------------------------------------------------

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
    for (const t of [this.#silenceTimer, this.#sessionTimer, this.#graceTimer, this.#dtmfTimer]) this.#timers.clearTimeout(t);
    const turn = this.#turn;
    this.#turn = undefined;
    if (turn) {
      turn.abort.abort();
      const heard = turn.speech.cut();
      if (turn.kind !== 'closing' && heard !== '') this.#record({ role: 'agent', text: heard, turn_id: turn.speech.turnId, interrupted: true });
    }
    for (const resolve of this.#pendingTools.values()) resolve('Error: the session ended.');
    this.#pendingTools.clear();
    this.#stt.close();
    this.#noise?.close();
    if (this.#ctx.agent.summarize_calls && this.#transcript.length > 0) void this.#summarize();
  }

  async #summarize(): Promise<void> {
    const lines = this.#transcript.map((e) => `${e.role}: ${e.text}`).join('\n');
    const abort = new AbortController();
    const timer = this.#timers.setTimeout(() => abort.abort(), 30_000);
    try {
      let summary = '';
      const messages: ChatMessage[] = [
        { role: 'system', content: 'SUMMARIZE: Summarize this phone call in at most three sentences: who called, what they wanted, how it ended.' },
        { role: 'user', content: lines },
      ];
      for await (const d of this.#model(messages, [], abort.signal)) if (d.type === 'text') summary += d.text;
      if (summary.trim() !== '') this.#io.storeSummary(summary.trim());
    } catch (err) {
      this.#log.warn({ err }, 'call summary failed');
    } finally {
      this.#timers.clearTimeout(timer);
    }
  }

  #record(e: Omit<TranscriptEntry, 'at'>): void {
    this.#transcript.push({ ...e, at: new Date().toISOString() });
  }
}
