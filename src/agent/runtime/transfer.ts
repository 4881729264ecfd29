/**
 * A transfer the session asked for, and how the session ends around it: the transfer number and
 * message of the agent's timeout_settings, said in the turn under way or a closing turn of its
 * own, then the end with reason `transfer` (the client transfers the call); with no number, the
 * session just ends (the agent hangs up, or the timer's own reason).
 *
 *   the model's transfer_call tool   -> transfer(turn, 'timeout'): message in that turn
 *   silence_timeout_action transfer  -> timerAction('silence', 'silence_timeout'): cuts the agent
 *   timeout_action transfer          -> timerAction('timeout', 'timeout'): cuts the agent
 *
 * Apart from the runtime because it is a decision table over settings (which number, which
 * message, which end) that can be checked alone with a fake speech output.
 */
import type { TimeoutSettings } from '../../domain/agent.ts';
import type { SessionEndReason } from '../../session/protocol.ts';
import type { AgentTurn } from './events.ts';
import type { SpeechOutput } from './speech-output.ts';

/** Whose transfer: the silence action's own settings fall back to the general ones. */
export type TransferKind = 'timeout' | 'silence';

/**
 * The transfer target: silence_transfer_number (else transfer_number) for the silence action;
 * transfer_number for the model's transfer tool and the default timeout.
 */
export function transferNumber(t: TimeoutSettings, which: TransferKind): string | undefined {
  const n = which === 'silence' ? (t.silence_transfer_number ?? t.transfer_number) : t.transfer_number;
  return n !== undefined && n.trim() !== '' ? n.trim() : undefined;
}

/** What is said before transferring ('' for nothing), chosen like the number. */
export function transferMessage(t: TimeoutSettings, which: TransferKind): string {
  const silenceMessage = which === 'silence' ? t.silence_transfer_message?.trim() : undefined;
  return silenceMessage || (t.transfer_message?.trim() ?? '');
}

export interface SessionTransfersOptions {
  settings: TimeoutSettings;
  speech: Pick<SpeechOutput, 'open' | 'say' | 'finishClosing' | 'cut'>;
  /** Ends the session (once; the runtime's end). */
  end(reason: SessionEndReason, transferNumber?: string): void;
}

export class SessionTransfers {
  readonly #o: SessionTransfersOptions;

  constructor(options: SessionTransfersOptions) {
    this.#o = options;
  }

  /**
   * Says the transfer message (when set) in `current` or a new closing turn, then ends the
   * session with reason transfer; with no number to transfer to, hangs up after `current`.
   */
  transfer(current: AgentTurn | undefined, which: TransferKind): void {
    const { settings, speech, end } = this.#o;
    const number = transferNumber(settings, which);
    if (number === undefined) {
      if (current) speech.finishClosing(current, () => end('agent_hangup'));
      else end('agent_hangup');
      return;
    }
    const message = transferMessage(settings, which);
    const turn = current ?? speech.open('closing');
    if (message !== '') speech.say(turn, message);
    speech.finishClosing(turn, () => end('transfer', number));
  }

  /** A timer's transfer action: cuts whatever the agent is saying; with no number, ends with `reason`. */
  timerAction(which: TransferKind, reason: SessionEndReason): void {
    if (transferNumber(this.#o.settings, which) === undefined) {
      this.#o.end(reason);
      return;
    }
    this.#o.speech.cut();
    this.transfer(undefined, which);
  }
}
