/**
 * Client audio arrives in chunks of any length; VAD, noise suppression and STT work on 20 ms
 * frames (480 samples at 24 kHz). This cuts the stream into such frames without allocating per
 * frame: the handler gets a view of one reused buffer, valid until it returns.
 */
import { FRAME_SAMPLES } from './providers/types.ts';

export class FrameAssembler {
  readonly #frame = new Int16Array(FRAME_SAMPLES);
  #filled = 0;

  constructor(private readonly onFrame: (frame: Int16Array) => void) {}

  push(samples: Int16Array): void {
    let i = 0;
    while (i < samples.length) {
      const n = Math.min(FRAME_SAMPLES - this.#filled, samples.length - i);
      this.#frame.set(samples.subarray(i, i + n), this.#filled);
      this.#filled += n;
      i += n;
      if (this.#filled === FRAME_SAMPLES) {
        this.#filled = 0;
        this.onFrame(this.#frame);
      }
    }
  }
}
