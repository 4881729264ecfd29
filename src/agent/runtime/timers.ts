/**
 * The conversation's timers: caller silence and the session's maximum duration.
 *
 * - Silence: armed when the agent's turn has been heard (or a user turn brought nothing to
 *   answer), disarmed while the agent speaks; after silence_timeout_secs (0: never) with the
 *   caller still quiet, a strike. Strikes before the silence_counter-th re-prompt the caller;
 *   that one applies silence_timeout_action. Any sign of the caller (speech, a key) clears the
 *   strikes.
 * - Max duration: default_timeout after the start, timeout_action, whatever is going on.
 *
 * What the actions do (end, transfer, the re-prompt's words) is the runtime's business: this
 * stage only says when.
 */
import type { TimeoutSettings } from '../../domain/agent.ts';
import type { Logger } from '../../log.ts';
import type { Timers } from '../../media/types.ts';
import type { TimerEvent } from './events.ts';

export interface ConversationTimersOptions {
  /** vad_settings.silence_timeout_secs */
  silenceTimeoutSecs: number;
  timeout: Pick<TimeoutSettings, 'default_timeout' | 'timeout_action' | 'silence_counter' | 'silence_timeout_action'>;
  /** Whether the conversation is idle (no agent turn, the caller not speaking): a silence counts. */
  idle(): boolean;
  timers: Timers;
  log: Logger;
  emit(event: TimerEvent): void;
}

export class ConversationTimers {
  readonly #o: ConversationTimersOptions;
  #silence: unknown;
  readonly #maxDuration: unknown;
  #strikes = 0;
  #closed = false;

  /** Starts the max-duration timer. */
  constructor(options: ConversationTimersOptions) {
    this.#o = options;
    this.#maxDuration = options.timers.setTimeout(() => this.#onMaxDuration(), options.timeout.default_timeout * 1000);
  }

  /** The caller's silence counts from now. */
  armSilence(): void {
    if (this.#closed) return;
    this.#o.timers.clearTimeout(this.#silence);
    const secs = this.#o.silenceTimeoutSecs;
    if (secs <= 0) return;
    this.#silence = this.#o.timers.setTimeout(() => this.#onSilence(), secs * 1000);
  }

  /** The agent speaks: its turn is not the caller's silence. */
  agentSpeaking(): void {
    this.#o.timers.clearTimeout(this.#silence);
  }

  /** The caller spoke or pressed a key: not silent, and the strikes start over. */
  callerActive(): void {
    this.#o.timers.clearTimeout(this.#silence);
    this.#strikes = 0;
  }

  /** Idempotent. */
  close(): void {
    this.#closed = true;
    this.#o.timers.clearTimeout(this.#silence);
    this.#o.timers.clearTimeout(this.#maxDuration);
  }

  #onSilence(): void {
    if (this.#closed || !this.#o.idle()) return;
    this.#strikes++;
    const t = this.#o.timeout;
    if (this.#strikes >= Math.max(1, t.silence_counter)) {
      this.#o.log.info({ strikes: this.#strikes, action: t.silence_timeout_action }, 'caller silent: applying silence_timeout_action');
      this.#o.emit({ type: 'silence_timeout', strikes: this.#strikes, action: t.silence_timeout_action });
      return;
    }
    this.#o.emit({ type: 'reprompt', strike: this.#strikes });
  }

  #onMaxDuration(): void {
    if (this.#closed) return;
    const t = this.#o.timeout;
    this.#o.log.info({ secs: t.default_timeout, action: t.timeout_action }, 'default_timeout reached');
    this.#o.emit({ type: 'max_duration', action: t.timeout_action });
  }
}
