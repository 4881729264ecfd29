/**
 * Message framing on stream transports (TCP, TLS; RFC 3261 18.3): a connection's bytes arrive in
 * chunks cut anywhere, several messages may share a chunk, and the only way to find where a
 * message ends is its Content-Length:
 *
 *   chunk 1: |INVITE sip:b@x SIP/2.0\r\n...Content-Le|
 *   chunk 2: |ngth: 3\r\n\r\nabcOPTIONS sip:b@x SIP/2.0\r\n...|
 *             ^--- header end (empty line) + 3 body octets = message 1, the rest starts message 2
 *
 * Between messages, CRLFs are keep-alives (RFC 5626 3.5.1): "\r\n\r\n" is a ping, which the
 * transport answers with a "\r\n" pong (onPing); a lone "\r\n" is a pong (onPong). Any other CR
 * or LF before a start line is skipped (RFC 3261 7.5).
 *
 * Caps bound the memory one connection can hold: a header section longer than maxHeaderBytes or
 * a Content-Length above maxBodyBytes throws SipTooLargeError, a Content-Length that cannot be
 * read throws SipParseError. Either way the stream has lost its framing: the transport answers
 * if it can (err.context, context.ts) and closes the connection; the framer stays
 * failed and throws the same error again.
 *
 * Header lines end in CRLF and the header section at the first CRLF CRLF (RFC 3261 7), as for
 * the parser. A bare LF in the header section breaks the framing: a sender that ends lines
 * with LF may end its header section with LF LF, and then nobody knows where its message (and
 * the next one) begins. That is a SipParseError too (400 "bare LF in header section" when the
 * start of a request can be read, then the connection is closed).
 *
 * The framer only frames: each message it returns is then parsed with
 * parseMessage(buf, { stream: true }), whose errors concern one message and leave the
 * connection usable. A message without Content-Length is framed with an empty body and then
 * rejected by the parser with 400 (RFC 3261 20.14 makes the header mandatory on streams).
 */
import { SipParseError, SipTooLargeError } from './errors.ts';
import { tryExtractResponseContext } from './context.ts';
import { BARE_LF_REASON, parseUint, sanitize, trimWs } from './syntax.ts';

export interface SipStreamFramerOptions {
  /** Largest header section (start line to empty line), default 32 KiB. */
  maxHeaderBytes?: number;
  /** Largest Content-Length accepted, default 64 KiB. */
  maxBodyBytes?: number;
  /** "\r\n\r\n" received between messages: answer "\r\n" (RFC 5626 4.4.1). */
  onPing?: () => void;
  /** A lone "\r\n" received between messages: the peer's answer to our ping. */
  onPong?: () => void;
}

const EMPTY = Buffer.alloc(0);
const CRLF_CRLF = Buffer.from('\r\n\r\n');

export class SipStreamFramer {
  private readonly maxHeader: number;
  private readonly maxBody: number;
  private readonly onPing: (() => void) | undefined;
  private readonly onPong: (() => void) | undefined;
  private buf: Buffer = EMPTY;
  /** Where to resume looking for the empty line (bytes before it have been searched). */
  private scanFrom = 0;
  /** Where to resume checking that every LF follows a CR (bytes before it have been checked). */
  private lfFrom = 0;
  /** Total length of the message being received once its header is complete, else -1. */
  private need = -1;
  private failure: SipParseError | undefined;

  constructor(opts: SipStreamFramerOptions = {}) {
    this.maxHeader = opts.maxHeaderBytes ?? 32 * 1024;
    this.maxBody = opts.maxBodyBytes ?? 64 * 1024;
    this.onPing = opts.onPing;
    this.onPong = opts.onPong;
  }

  /** Bytes held for a message not yet complete. */
  get buffered(): number {
    return this.buf.length;
  }

  /**
   * True while part of a message (not a CRLF keep-alive) is held: the message's first byte has
   * arrived, its last has not. The transport's whole-message deadline runs meanwhile.
   */
  get inMessage(): boolean {
    const b = this.buf;
    return b.length > 0 && b[0] !== 0x0d && b[0] !== 0x0a;
  }

  /**
   * A lone "\r\n" held between messages, taken as the pong to a ping we sent: push() keeps it,
   * since the next bytes could make it a ping, but a connection waiting for a pong knows better.
   * True (and the CRLF dropped) when the buffer holds exactly that.
   */
  takePong(): boolean {
    if (this.need >= 0 || this.buf.length !== 2 || this.buf[0] !== 0x0d || this.buf[1] !== 0x0a) return false;
    this.buf = EMPTY;
    return true;
  }

  /** The error that broke the framing, if any. */
  get failed(): SipParseError | undefined {
    return this.failure;
  }

  /**
   * Feeds a chunk; returns the messages it completed, each in its own buffer.
   * @throws SipTooLargeError when a header section or body exceeds its cap, SipParseError when
   *   the Content-Length cannot be read; after that every call throws the same error.
   */
  push(chunk: Uint8Array): Buffer[] {
    if (this.failure) throw this.failure;
    if (chunk.length === 0) return [];
    const c = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    this.buf = this.buf.length === 0 ? c : Buffer.concat([this.buf, c]);
    const out: Buffer[] = [];
    try {
      while (this.step(out));
    } catch (err) {
      this.failure = err instanceof SipParseError ? err : new SipParseError('Bad Request', String(err), { cause: err });
      this.buf = EMPTY;
      throw this.failure;
    }
    if (this.buf.length === 0) this.buf = EMPTY;
    return out;
  }

  /** Handles what the buffer holds; returns true when it should be called again. */
  private step(out: Buffer[]): boolean {
    const buf = this.buf;
    if (this.need < 0) {
      if (buf.length === 0) return false;
      const b0 = buf[0];
      if (b0 === 0x0d || b0 === 0x0a) return this.keepAlive();
      // Look for the empty line that ends the header section: CRLF CRLF (RFC 3261 7).
      const end = buf.indexOf(CRLF_CRLF, this.scanFrom);
      const nl = end < 0 ? -1 : end + 1; // the LF ending the last header line
      const bodyStart = end + 4;
      const headerEnd = end < 0 ? buf.length : end + 4;
      for (let lf = buf.indexOf(0x0a, this.lfFrom); lf >= 0 && lf < headerEnd; lf = buf.indexOf(0x0a, lf + 1)) {
        // buf[0] is no CR/LF (keepAlive took those), so lf >= 1.
        if (buf[lf - 1] !== 0x0d) throw bareLf(buf, headerEnd, lf);
      }
      if (end < 0) {
        if (buf.length > this.maxHeader) throw new SipTooLargeError('header section', buf.length, this.maxHeader);
        this.scanFrom = Math.max(0, buf.length - 3);
        this.lfFrom = buf.length;
        return false;
      }
      if (nl + 1 > this.maxHeader) throw new SipTooLargeError('header section', nl + 1, this.maxHeader);
      const length = contentLength(buf, nl);
      if (length > this.maxBody) {
        throw new SipTooLargeError('body', length, this.maxBody, { context: tryExtractResponseContext(buf.subarray(0, bodyStart)) });
      }
      this.need = bodyStart + Math.max(0, length);
      this.scanFrom = 0;
      this.lfFrom = 0;
    }
    if (buf.length < this.need) return false;
    out.push(Buffer.from(buf.subarray(0, this.need)));
    this.buf = buf.subarray(this.need);
    this.need = -1;
    return true;
  }

  /** CR / LF at a message boundary: ping, pong, or a stray line end. */
  private keepAlive(): boolean {
    const buf = this.buf;
    if (buf.length >= 4 && buf[0] === 0x0d && buf[1] === 0x0a && buf[2] === 0x0d && buf[3] === 0x0a) {
      this.buf = buf.subarray(4);
      this.onPing?.();
      return true;
    }
    // "\r", "\r\n", "\r\n\r": the start of a ping whose end has not arrived yet. Wait for it
    // rather than mistake half a ping for a pong.
    if (buf.length < 4 && isPingPrefix(buf)) return false;
    if (buf.length >= 2 && buf[0] === 0x0d && buf[1] === 0x0a) {
      this.buf = buf.subarray(2);
      this.onPong?.();
      return true;
    }
    this.buf = buf.subarray(1);
    return true;
  }
}

/** The framing error for a bare LF at `lf`: answerable (400) when a request's start can be read, dropped for a response. */
function bareLf(buf: Buffer, headerEnd: number, lf: number): SipParseError {
  const isResponse = buf.length >= 4 && buf.toString('latin1', 0, 4).toUpperCase() === 'SIP/';
  return new SipParseError(BARE_LF_REASON, `at octet ${lf}`, isResponse ? { isResponse } : { context: tryExtractResponseContext(buf.subarray(0, headerEnd)) });
}

function isPingPrefix(b: Buffer): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== (i % 2 === 0 ? 0x0d : 0x0a)) return false;
  return true;
}

/**
 * The Content-Length of the header section buf[0..nl]: -1 when absent.
 * @throws SipParseError when it is not a number, or given twice with different values: either
 *   way nobody knows where the message ends (RFC 4475 3.1.2.3, 3.3.9).
 */
function contentLength(buf: Buffer, nl: number): number {
  // latin1: one char per octet, and the names and digits we look for are ASCII.
  const text = buf.toString('latin1', 0, nl + 1);
  let found = -1;
  let pos = text.indexOf('\n') + 1;
  while (pos > 0 && pos < text.length) {
    let eol = text.indexOf('\n', pos);
    if (eol < 0) eol = text.length;
    const c0 = text.charCodeAt(pos);
    if (c0 === 0x4c || c0 === 0x6c || c0 === 0x43 || c0 === 0x63) {
      const colon = text.indexOf(':', pos);
      if (colon > 0 && colon < eol) {
        const name = trimWs(text.slice(pos, colon)).toLowerCase();
        if (name === 'content-length' || name === 'l') {
          let value = text.slice(colon + 1, eol);
          // A folded value continues on lines starting with SP / HT (RFC 3261 7.3.1).
          while (eol + 1 < text.length && (text.charCodeAt(eol + 1) === 0x20 || text.charCodeAt(eol + 1) === 0x09)) {
            const next = text.indexOf('\n', eol + 1);
            const end = next < 0 ? text.length : next;
            value += ' ' + text.slice(eol + 1, end);
            eol = end;
          }
          value = trimWs(value.replace(/\r/g, ' '));
          const n = parseUint(value, 0x7fffffff);
          if (n < 0) throw new SipParseError('Bad Request: malformed Content-Length', `"${sanitize(value)}"`, { context: tryExtractResponseContext(buf.subarray(0, nl + 1)) });
          if (found >= 0 && found !== n) throw new SipParseError('Bad Request: multiple Content-Length header fields', `${found} and ${n}`);
          found = n;
        }
      }
    }
    pos = eol + 1;
  }
  return found;
}
