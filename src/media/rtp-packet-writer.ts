/**
 * Writes outgoing RTP packets: the fixed 12-byte header (RFC 3550 5.1; no CSRCs, extensions or
 * padding) and the payload, into one reused buffer.
 *
 *    0                   1                   2                   3
 *    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *   |V=2|P|X|  CC   |M|     PT      |       sequence number         |
 *   |                           timestamp                           |
 *   |           synchronization source (SSRC) identifier            |
 *
 * A DataView write into a preallocated buffer costs 0.035 us and allocates nothing; building an
 * rtp.js packet per send costs 1.8 us and ~1 kB of garbage (docs/media-rtp.md). At 50 packets/s
 * per call and hundreds of calls per core, the send side is the one that matters.
 *
 * The buffer is reused because the socket's lookup is synchronous for IP literals
 * (port-allocator.ts): the datagram is normally with the kernel when send() returns. When it is
 * not (a full kernel queue), the caller hands the buffer over with detach().
 */

export const RTP_HEADER_BYTES = 12;
/** A buffer for one Ethernet MTU: every audio packet fits. */
const MIN_BUFFER_BYTES = 1500;
/** Room kept behind every packet for an SRTP authentication tag (srtp.ts protects in place). */
export const RTP_TRAILER_ROOM = 16;

export class RtpPacketWriter {
  readonly #ssrc: number;
  #buffer: Buffer;
  #view: DataView;

  constructor(ssrc: number) {
    this.#ssrc = ssrc;
    this.#buffer = Buffer.alloc(MIN_BUFFER_BYTES);
    this.#view = new DataView(this.#buffer.buffer, this.#buffer.byteOffset, this.#buffer.byteLength);
  }

  /** The buffer the last write() went into; its first write()-returned bytes are the packet. */
  get buffer(): Buffer {
    return this.#buffer;
  }

  /** Writes header and payload into buffer; returns the packet's length. */
  write(sequence: number, timestamp: number, payloadType: number, marker: boolean, payload: Uint8Array): number {
    const length = RTP_HEADER_BYTES + payload.byteLength;
    if (length + RTP_TRAILER_ROOM > this.#buffer.length) this.#replaceBuffer(length + RTP_TRAILER_ROOM);
    const buf = this.#buffer;
    const view = this.#view;
    buf[0] = 0x80; // V=2, no padding, no extension, no CSRC
    buf[1] = (marker ? 0x80 : 0) | payloadType;
    view.setUint16(2, sequence);
    view.setUint32(4, timestamp);
    view.setUint32(8, this.#ssrc);
    buf.set(payload, RTP_HEADER_BYTES);
    return length;
  }

  /**
   * The socket still references buffer (libuv queued the send): leave it to the socket and
   * write the next packet into a fresh one of the same size.
   */
  detach(): void {
    this.#replaceBuffer(this.#buffer.length);
  }

  #replaceBuffer(size: number): void {
    this.#buffer = Buffer.alloc(Math.max(size, MIN_BUFFER_BYTES));
    this.#view = new DataView(this.#buffer.buffer, this.#buffer.byteOffset, this.#buffer.byteLength);
  }
}
