/**
 * Fires when a vendor has said nothing for `ms` while a sentence waits on it: a vendor that
 * accepts a request and then goes silent (no audio, no error, no close) must fail the sentence
 * with VENDOR_TIMEOUT rather than hold the agent's turn until the caller hangs up.
 */
import { TtsError } from '../../errors.ts';

export const DEFAULT_STALL_MS = 10_000;

/** The error of a sentence that waited `ms` on a silent vendor. */
export function stallError(name: string, ms: number): TtsError {
  return new TtsError('VENDOR_TIMEOUT', `${name}: no answer for ${ms} ms`);
}

export class StallTimer {
  readonly #ms: number;
  readonly #onStall: () => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(ms: number, onStall: () => void) {
    this.#ms = ms;
    this.#onStall = onStall;
  }

  /** Starts or restarts the wait (something was sent or heard). */
  touch(): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(this.#onStall, this.#ms);
    this.#timer.unref();
  }

  /** Nothing is waiting on the vendor any more. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
