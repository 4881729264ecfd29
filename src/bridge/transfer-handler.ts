/**
 * A transfer the agent asked for (`session_ended` with reason `transfer`), once the agent's own
 * media is stopped: first the leg's own transfer (a REFER for SIP), and when the caller's side
 * refuses it or cannot reach the target, the fallback: the bridge calls the target itself on a
 * new leg and relays the audio between the two. Callers must not be dropped because their PBX
 * does not do blind transfers.
 */
import type { Logger } from '../log.ts';
import type { CallLeg } from './call-leg.ts';

/** The fallback's new leg, answered by the transfer target. */
export interface TransferTargetLeg {
  readonly id: string;
  hangup(): void;
  /** Starts relaying audio between the caller and this leg; either ending ends the other. */
  relay(): { close(): void };
}

/** Calls `target` for the caller's leg; undefined when nobody answered. */
export type TransferFallback = (target: string) => Promise<TransferTargetLeg | undefined>;

export class TransferHandler {
  readonly #leg: CallLeg;
  readonly #fallback: TransferFallback | undefined;
  readonly #log: Logger;
  #relay: { close(): void } | undefined;

  constructor(leg: CallLeg, fallback: TransferFallback | undefined, log: Logger) {
    this.#leg = leg;
    this.#fallback = fallback;
    this.#log = log;
  }

  /** Transfers the caller to `target`; the leg is ended or relayed when this resolves. */
  async run(target: string): Promise<void> {
    const leg = this.#leg;
    await leg.transfer(target);
    if (leg.closed) return; // transferred: the leg's hangup finishes the bridge
    const reached = await this.#fallback?.(target).catch((err: unknown) => {
      this.#log.warn({ err }, 'transfer fallback: the new leg failed');
      return undefined;
    });
    if (reached === undefined || leg.closed) {
      reached?.hangup();
      if (!leg.closed) leg.hangup();
      return;
    }
    this.#log.info({ transferNumber: target, legCallId: reached.id }, 'transfer fallback: target reached on a new leg, relaying audio');
    this.#relay = reached.relay();
  }

  /** Stops the relay, if one runs (the bridge is finishing). */
  close(): void {
    this.#relay?.close();
  }
}
