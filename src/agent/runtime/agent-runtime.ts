/**
 * The conversation runtime of one voice session: caller audio in, agent speech out. Its stages
 * are built by stages.ts; it routes their events (events.ts) and owns what joins them: who may
 * cut whom, what happens after a turn, and how the session ends (a transfer's number and message:
 * transfer.ts).
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
 *   after the end (the server asks, once the end is stored) -> analyzeCall (summarize_calls)
 *
 * Control before data (pipecat's rule): a barge-in aborts the model and TTS at once and drops
 * queued audio; the history keeps only what the caller heard.
 */
import type { CallAnalysis } from '../../domain/call.ts';
import type { Logger } from '../../log.ts';
import type { SessionEndReason } from '../../session/protocol.ts';
import type { SessionContext, SessionIo, SessionRuntime, TranscriptEntry } from '../../session/runtime-contract.ts';
import type { AgentTurn, CallerEvent, KeyEvent, ReplyEvent, SpeechEvent, TimerEvent } from './events.ts';
import { buildStages, type RuntimeDeps, type SessionStages } from './stages.ts';
import { analyzeCall } from './analysis.ts';
import { SessionTransfers } from './transfer.ts';
import { openConversation } from './first-message.ts';
import { ToolTranscript } from './tool-transcript.ts';
import { createTurnTimeline, type TurnTimelineRecorder } from './turn-timeline.ts';

export type { RuntimeDeps };

/** Said after silence_timeout_secs of silence, before the last strike. */
export const REPROMPT_TEXT = 'Are you still there?';

export class AgentRuntime implements SessionRuntime {
  readonly #ctx: SessionContext;
  readonly #io: SessionIo;
  readonly #log: Logger;
  readonly #stages: SessionStages;
  readonly #transfers: SessionTransfers;
  readonly #transcript: TranscriptEntry[] = [];
  /** The transcript lines of tool calls (an output's line repeats its call's details). */
  readonly #toolLines = new ToolTranscript();
  /** Where each agent turn's time went (undefined: no observer wants it). */
  readonly #timeline: TurnTimelineRecorder | undefined;
  /** A user turn committed during an agent turn the caller could not cut: answered after it. */
  #replyQueued = false;
  #ended = false;

  constructor(ctx: SessionContext, io: SessionIo, deps: RuntimeDeps) {
    this.#ctx = ctx;
    this.#io = io;
    this.#log = deps.logger.child({ component: 'agent', sessionId: ctx.sessionId });
    const timeline = (this.#timeline = createTurnTimeline(ctx, deps, this.#log));
    // The timeline sees each event before it is acted on: a committed user turn's marks wait
    // for the reply that the runtime opens while routing it.
    this.#stages = buildStages(ctx, deps, this.#log, {
      caller: (e) => {
        timeline?.caller(e);
        this.#onCaller(e);
      },
      key: (e) => this.#onKey(e),
      reply: (e) => {
        timeline?.reply(e);
        this.#onReply(e);
      },
      speech: (e) => {
        timeline?.speech(e);
        this.#onSpeech(e);
      },
      timer: (e) => this.#onTimer(e),
      ended: () => this.#ended,
    });
    this.#transfers = new SessionTransfers({ settings: ctx.agent.timeout_settings, speech: this.#stages.speech, end: (reason, number) => this.#end(reason, number) });
    openConversation(ctx, this.#stages);
  }

  // --- SessionRuntime ----------------------------------------------------------------------------

  inputAudio(pcm: Int16Array): void {
    if (!this.#ended) this.#stages.caller.audio(pcm);
  }

  toolCallOutput(toolCallId: string, output: string): void {
    this.#stages.replies.toolOutput(toolCallId, output);
  }

  /** A key the caller pressed (collected into entries by the DtmfCollector). */
  dtmf(digit: string): void {
    if (!this.#ended) this.#stages.keys.press(digit);
  }

  transcript(): TranscriptEntry[] {
    return this.#transcript.slice();
  }

  /** The post-call analysis, when the agent asks for one and something was said (analysis.ts). */
  async analyze(signal: AbortSignal): Promise<CallAnalysis | undefined> {
    if (!this.#ctx.agent.summarize_calls || this.#transcript.length === 0) return undefined;
    return analyzeCall(this.#transcript, this.#ctx.agent.analysis_fields, { model: this.#stages.model, timers: this.#stages.timers, signal });
  }

  close(): void {
    this.#shutdown();
  }

  // --- stage events ------------------------------------------------------------------------------

  #onCaller(e: CallerEvent): void {
    switch (e.type) {
      case 'speech_started':
        this.#stages.timeouts.callerActive();
        this.#io.send({ type: 'speech_started', data: { emulated: e.emulated } });
        this.#stages.speech.bargeIn();
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
      this.#stages.timeouts.callerActive();
      // The first key cuts the agent like speech would (IVR habit).
      if (e.first) this.#stages.speech.bargeIn();
    } else {
      this.#stages.caller.addText(e.text);
    }
  }

  #onUserTurn(text: string, turnId: string): void {
    if (text === '' || this.#ended) {
      if (this.#stages.speech.current === undefined) this.#stages.timeouts.armSilence();
      return;
    }
    this.#record({ role: 'user', text, turn_id: turnId });
    this.#stages.replies.addUser(text);
    if (this.#stages.speech.current !== undefined) {
      // The agent is in a turn the caller could not interrupt: answer once it is over.
      this.#replyQueued = true;
      return;
    }
    this.#reply();
  }

  #reply(): void {
    void this.#stages.replies.run(this.#stages.speech.open('reply'));
  }

  #onReply(e: ReplyEvent): void {
    switch (e.type) {
      case 'text':
        this.#stages.speech.append(e.turn, e.delta);
        return;
      case 'sentence':
        this.#stages.speech.speak(e.turn, e.text);
        return;
      case 'say':
        this.#stages.speech.say(e.turn, e.text);
        return;
      case 'done':
        this.#stages.speech.finish(e.turn);
        return;
      case 'tool_call':
        this.#record(this.#toolLines.called(e));
        if (e.toClient) this.#io.send({ type: 'tool_call', data: { toolCallId: e.toolCallId, toolName: e.toolName, arguments: e.arguments } });
        return;
      case 'tool_result':
        this.#record(this.#toolLines.answered(e));
        return;
      case 'dtmf':
        this.#io.send({ type: 'dtmf', data: { digits: e.digits } });
        return;
      case 'end_call':
        this.#stages.speech.finishClosing(e.turn, () => this.#end('agent_hangup'));
        return;
      case 'transfer':
        this.#transfers.transfer(e.turn, 'timeout');
        return;
      case 'failed':
        if (e.fatal) this.#end('error');
        return;
    }
  }

  #onSpeech(e: SpeechEvent): void {
    switch (e.type) {
      case 'turn_started':
        this.#stages.timeouts.agentSpeaking();
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
        this.#stages.replies.keepHeard(e.turn.messageIndex, e.heard);
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
    else this.#stages.timeouts.armSilence();
  }

  #onTimer(e: TimerEvent): void {
    switch (e.type) {
      case 'reprompt': {
        const turn = this.#stages.speech.open('reprompt');
        this.#stages.speech.say(turn, REPROMPT_TEXT);
        this.#stages.speech.finish(turn);
        this.#stages.replies.addAgent(REPROMPT_TEXT);
        return;
      }
      case 'silence_timeout':
        if (e.action === 'transfer_call') this.#transfers.timerAction('silence', 'silence_timeout');
        else this.#end('silence_timeout');
        return;
      case 'max_duration':
        if (e.action === 'transfer_call') this.#transfers.timerAction('timeout', 'timeout');
        else this.#end('timeout');
        return;
    }
  }

  // --- the end ---------------------------------------------------------------------------------

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

  /** Stops every stage and timer (the post-call analysis comes later: analyze()). */
  #shutdown(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#stages.timeouts.close();
    this.#stages.keys.close();
    const cut = this.#stages.speech.cut();
    if (cut && cut.turn.kind !== 'closing' && cut.heard !== '') this.#record({ role: 'agent', text: cut.heard, turn_id: cut.turn.turnId, interrupted: true });
    this.#timeline?.close();
    this.#stages.replies.close();
    this.#stages.caller.close();
  }

  #record(e: Omit<TranscriptEntry, 'at'>): void {
    this.#transcript.push({ ...e, at: new Date().toISOString() });
  }
}
