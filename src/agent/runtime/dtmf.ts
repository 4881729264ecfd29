/**
 * DTMF collection: the caller's keys, grouped into entries the model reads as the caller's
 * words. Keys pressed with less than DTMF_INTER_DIGIT_MS between them are one entry (an account
 * number typed at the caller's pace); '#' ends an entry at once, as IVRs have taught callers.
 */
import type { Timers } from '../../media/types.ts';
import type { KeyEvent } from './events.ts';

/** Keys pressed with less than this between them are one entry. */
export const DTMF_INTER_DIGIT_MS = 1500;

export interface DtmfCollectorOptions {
  timers: Timers;
  emit(event: KeyEvent): void;
}

export class DtmfCollector {
  readonly #o: DtmfCollectorOptions;
  #digits = '';
  #timer: unknown;
  #closed = false;

  constructor(options: DtmfCollectorOptions) {
    this.#o = options;
  }

  press(digit: string): void {
    if (this.#closed) return;
    this.#o.emit({ type: 'key', first: this.#digits === '' });
    this.#digits += digit;
    this.#o.timers.clearTimeout(this.#timer);
    if (digit === '#') this.#commit();
    else this.#timer = this.#o.timers.setTimeout(() => this.#commit(), DTMF_INTER_DIGIT_MS);
  }

  /** Idempotent; keys not yet committed are dropped. */
  close(): void {
    this.#closed = true;
    this.#o.timers.clearTimeout(this.#timer);
  }

  #commit(): void {
    this.#o.timers.clearTimeout(this.#timer);
    const digits = this.#digits;
    this.#digits = '';
    if (digits === '' || this.#closed) return;
    this.#o.emit({ type: 'entry', digits, text: `[The caller pressed ${digits}]` });
  }
}
