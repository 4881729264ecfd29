/**
 * Cuts the model's streamed text into pieces worth synthesizing on their own: a sentence or a
 * long clause. Speaking starts after the first sentence instead of after the whole answer, which
 * is most of the time-to-first-audio of a turn.
 */

/** A boundary: sentence punctuation followed by whitespace (so "3.5" and "e.g." mid-word do not cut). */
const BOUNDARY = /[.!?;:\u3002\uff01\uff1f](?=\s)/g;
/** A clause longer than this is cut at its last comma or space, so one long sentence does not hold speech back. */
const MAX_PIECE_CHARS = 200;

export class SentenceSplitter {
  #buffer = '';

  /** Adds streamed text; returns the complete pieces it closed (trimmed, non-empty). */
  push(text: string): string[] {
    this.#buffer += text;
    const out: string[] = [];
    for (;;) {
      BOUNDARY.lastIndex = 0;
      const m = BOUNDARY.exec(this.#buffer);
      let cut = m ? m.index + 1 : -1;
      if (cut < 0 && this.#buffer.length > MAX_PIECE_CHARS) {
        const head = this.#buffer.slice(0, MAX_PIECE_CHARS);
        const at = Math.max(head.lastIndexOf(', '), head.lastIndexOf(' '));
        cut = at > 0 ? at + 1 : MAX_PIECE_CHARS;
      }
      if (cut < 0) return out;
      const piece = this.#buffer.slice(0, cut).trim();
      this.#buffer = this.#buffer.slice(cut);
      if (piece !== '') out.push(piece);
    }
  }

  /** The text left at the end of the stream (may be empty). */
  flush(): string {
    const rest = this.#buffer.trim();
    this.#buffer = '';
    return rest;
  }
}
