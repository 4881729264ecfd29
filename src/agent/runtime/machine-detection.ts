/**
 * Answering-machine detection as a stage of the runtime (docs/machine-detection.md): on an
 * outbound phone session whose dial asked for it (machineDetection.mode hangup or
 * leave_message), it runs from the answer (the session's start) until MachineDetector decides,
 * and holds the agent's first message meanwhile: a human says hello and then hears the agent; a
 * machine must not record it.
 *
 *   caller audio -> MachineDetector (beep)        decision -> machine_detection event to the client
 *   VAD edges, transcripts -> (cadence, phrases)           human | unknown -> the first message
 *                                                          machine, hangup -> end machine_detected
 *                                                          machine, leave_message -> wait, speak, end
 *
 * leave_message waits for the beep to end, or, with no beep, for the greeting to end and then
 * beepWaitMs (session.amd_beep_wait_ms) of silence with no beep starting; MESSAGE_WAIT_MS after the decision it speaks
 * whatever it hears. The message (its {{variables}} filled in; default: the first message) is a
 * closing turn: nothing the machine plays cuts it; once heard the session ends voicemail_left.
 *
 * What the caller said while this ran (the greeting, a "hello?") is kept in the transcript but
 * not given to the model: the agent answers the conversation, not the detection.
 */
import type { MachineDetectionOutcome } from '../../domain/call.ts';
import type { ServerEvent, SessionEndReason } from '../../session/protocol.ts';
import type { SessionContext } from '../../session/runtime-contract.ts';
import { DEFAULT_GREETING_MS, DEFAULT_MAX_MS, MachineDetector, type MachineDecision, type MachineDetectionTuning } from '../machine-detector.ts';
import { RUNTIME_SAMPLE_RATE } from '../providers/types.ts';
import { substituteVariables } from '../template.ts';
import type { CallerEvent } from './events.ts';
import { openConversation } from './first-message.ts';
import type { SessionStages } from './stages.ts';

/** leave_message, no beep: silence after the greeting this long (and no beep) before speaking (default of session.amd_beep_wait_ms). */
export const BEEP_WAIT_MS = 1500;
/** leave_message: at most this long after the decision before speaking anyway. */
export const MESSAGE_WAIT_MS = 20_000;

export interface MachineDetectionHooks {
  send(event: ServerEvent): void;
  end(reason: SessionEndReason): void;
  /** Default: DEFAULT_GREETING_MS, DEFAULT_MAX_MS, BEEP_WAIT_MS. */
  tuning?: MachineDetectionTuning | undefined;
}

/**
 * Opens the session: detection first when the session asks for it (returns the stage), else the
 * first message at once (returns undefined).
 */
export function openWithMachineDetection(ctx: SessionContext, stages: SessionStages, hooks: MachineDetectionHooks): MachineDetection | undefined {
  const mode = ctx.machineDetection?.mode ?? 'off';
  if (ctx.direction !== 'outbound' || mode === 'off') {
    openConversation(ctx, stages);
    return undefined;
  }
  return new MachineDetection(ctx, stages, hooks);
}

export class MachineDetection {
  readonly #ctx: SessionContext;
  readonly #stages: SessionStages;
  readonly #hooks: MachineDetectionHooks;
  readonly #detector: MachineDetector;
  readonly #tuning: MachineDetectionTuning;
  /** The outcome, fixed once detection is over (for leave_message: when the message starts). */
  #outcome: MachineDetectionOutcome | undefined;
  #decision: MachineDecision | undefined;
  /** The caller started a turn the detection heard: its commit is absorbed. */
  #turnHeard = false;
  /** Whether a human's turn heard during detection is absorbed (a first message answers it). */
  #absorbHeard = true;
  /** leave_message: waiting for the beep or the silence. */
  #waiting = false;
  #cap: unknown;
  #beepWait: unknown;
  #messageWait: unknown;
  #closed = false;

  constructor(ctx: SessionContext, stages: SessionStages, hooks: MachineDetectionHooks) {
    this.#ctx = ctx;
    this.#stages = stages;
    this.#hooks = hooks;
    this.#tuning = hooks.tuning ?? { greetingMs: DEFAULT_GREETING_MS, maxMs: DEFAULT_MAX_MS, beepWaitMs: BEEP_WAIT_MS };
    const vad = ctx.agent.vad_settings;
    this.#detector = new MachineDetector(
      {
        sampleRate: RUNTIME_SAMPLE_RATE,
        vadStartMs: vad.start_secs * 1000,
        vadStopMs: vad.stop_secs * 1000,
        greetingMs: this.#tuning.greetingMs,
        maxMs: this.#tuning.maxMs,
        onDecision: (d) => this.#decided(d),
        onBeepEnded: () => this.#beepEnded(),
      },
      stages.clock.now(),
    );
    // Undecided at the cap even if no audio comes (a silent line).
    this.#cap = stages.timers.setTimeout(() => this.#detector.tick(stages.clock.now()), this.#tuning.maxMs);
  }

  /** Caller audio (until the detection is over). */
  audio(pcm: Int16Array): void {
    if (this.#outcome === undefined && !this.#closed) this.#detector.audio(pcm, this.#stages.clock.now());
  }

  /** The TurnDetector's events, seen before the runtime routes them. */
  caller(e: CallerEvent): void {
    if (this.#closed) return;
    const now = this.#stages.clock.now();
    if (e.type === 'speech_started') {
      if (this.#decision === undefined || this.#waiting) this.#turnHeard = true;
      this.#detector.speechStarted(now);
      if (this.#waiting) this.#stages.timers.clearTimeout(this.#beepWait);
    } else if (e.type === 'speech_stopped') {
      this.#detector.speechStopped(now);
      if (this.#waiting && !this.#detector.beeping) this.#armBeepWait();
    } else if (e.type === 'transcript' && this.#decision === undefined) {
      this.#detector.transcript(e.text, now);
    }
  }

  /** A user turn was committed: whether it belongs to the detection (recorded, not answered). */
  absorbs(): boolean {
    if (this.#decision === undefined || this.#decision.result === 'machine') return true;
    const heard = this.#turnHeard && this.#absorbHeard;
    this.#turnHeard = false;
    return heard;
  }

  /** What was decided (undefined while undecided). */
  outcome(): MachineDetectionOutcome | undefined {
    if (this.#outcome) return this.#outcome;
    return this.#decision && this.#outcomeNow(this.#decision);
  }

  close(): void {
    this.#closed = true;
    this.#clearTimers();
  }

  #decided(d: MachineDecision): void {
    if (this.#closed) return;
    this.#decision = d;
    this.#stages.timers.clearTimeout(this.#cap);
    this.#hooks.send({ type: 'machine_detection', data: this.#outcomeNow(d) });
    if (d.result !== 'machine') {
      this.#outcome = this.#outcomeNow(d);
      openConversation(this.#ctx, this.#stages);
      // No first message (an agent that skips it on outbound calls): the model answers the hello.
      this.#absorbHeard = this.#stages.speech.current !== undefined;
      return;
    }
    if (this.#ctx.machineDetection?.mode !== 'leave_message') {
      this.#outcome = this.#outcomeNow(d);
      this.#hooks.end('machine_detected');
      return;
    }
    this.#waiting = true;
    this.#messageWait = this.#stages.timers.setTimeout(() => this.#leaveMessage(), MESSAGE_WAIT_MS);
    if (!this.#detector.beeping && !this.#stages.caller.speaking) this.#armBeepWait();
  }

  #beepEnded(): void {
    if (this.#waiting) this.#leaveMessage();
  }

  #armBeepWait(): void {
    this.#stages.timers.clearTimeout(this.#beepWait);
    this.#beepWait = this.#stages.timers.setTimeout(() => this.#leaveMessage(), this.#tuning.beepWaitMs);
  }

  #leaveMessage(): void {
    if (!this.#waiting || this.#closed) return;
    this.#waiting = false;
    this.#clearTimers();
    this.#outcome = this.#outcomeNow(this.#decision!);
    const ctx = this.#ctx;
    const text = substituteVariables(ctx.machineDetection?.message ?? ctx.firstMessage ?? ctx.agent.first_message, ctx.variables).trim();
    if (text === '') {
      this.#hooks.end('machine_detected');
      return;
    }
    const speech = this.#stages.speech;
    const turn = speech.open('closing');
    speech.say(turn, text);
    speech.finishClosing(turn, () => this.#hooks.end('voicemail_left'));
  }

  #outcomeNow(d: MachineDecision): MachineDetectionOutcome {
    return { result: d.result, decided_after_ms: d.decidedAfterMs, beep: this.#detector.beep };
  }

  #clearTimers(): void {
    const t = this.#stages.timers;
    t.clearTimeout(this.#cap);
    t.clearTimeout(this.#beepWait);
    t.clearTimeout(this.#messageWait);
  }
}
