/**
 * The keys an agent presses on a call (an IVR's menu): the session's `dtmf` messages played on the
 * leg one after another, in the order the session sent them, even when a message arrives while
 * the previous one's tones are still playing. A failure is logged, never thrown: the call goes on.
 */
import type { Logger } from '../log.ts';
import type { CallLeg } from './call-leg.ts';

export class AgentDigits {
  #chain: Promise<void> = Promise.resolve();
  readonly #leg: Pick<CallLeg, 'sendDtmf'>;
  readonly #log: Logger;
  /** Whether the call is over (the rest of a message is then dropped). */
  readonly #done: () => boolean;

  constructor(leg: Pick<CallLeg, 'sendDtmf'>, log: Logger, done: () => boolean) {
    this.#leg = leg;
    this.#log = log;
    this.#done = done;
  }

  async play(digits: string): Promise<void> {
    const play = (this.#chain = this.#chain.then(async () => {
      for (const d of digits) {
        if (this.#done() || !/^[0-9A-D*#]$/.test(d)) return;
        await this.#leg.sendDtmf(d);
      }
    }));
    await play.catch((err: unknown) => this.#log.warn({ err }, 'sending DTMF failed'));
  }
}
