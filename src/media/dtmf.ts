/**
 * DTMF as RFC 4733 telephone-events: the 4-byte payload, the packet schedule a sender follows,
 * and a receiver that turns the packet stream into exactly one digit per key press.
 *
 * Nothing here touches sockets or timers: RtpSession runs the schedule (sendDtmf) and feeds the
 * receiver (the 'dtmf' event), so both halves are tested without a network.
 *
 * Payload, RFC 4733 section 2.3:
 *
 *    0                   1                   2                   3
 *    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *   |     event     |E|R| volume    |          duration             |
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *
 * One key press on the wire (section 2.5.1), all packets with the SAME RTP timestamp (the event's
 * start), each with a new sequence number:
 *
 *   t=0      M  dur=50ms          first packet, marker set (2.5.1.1)
 *   t=50        dur=100ms         updates every 50 ms while the key is down (2.5.1.2)
 *   t=D         E  dur=D          end packet ...
 *   t=D+50      E  dur=D          ... sent three times in all (2.5.1.4), so one can be lost
 *   t=D+100     E  dur=D
 */

/** Event codes 0-15 in order (RFC 4733 section 3.2, table 7). */
export const DTMF_DIGITS = '0123456789*#ABCD';

/** RFC 4733 section 2.3.4: volume is the power level in -dBm0; 10 is the usual DTMF level. */
export const DEFAULT_DTMF_VOLUME = 10;
/** RFC 4733 section 2.5.1.2 suggests updates at 50 ms; most gateways use 50 ms (some ptime). */
export const DEFAULT_DTMF_UPDATE_MS = 50;
/** RFC 4733 section 2.5.1.4: the final packet is sent a total of three times. */
export const DTMF_END_REPEATS = 3;

export interface TelephoneEvent {
  /** 0-255; 0-15 are the DTMF digits. */
  event: number;
  /** E bit: the last packet(s) of the event. */
  end: boolean;
  /** 0-63, in -dBm0. */
  volume: number;
  /** Duration so far, in RTP timestamp units (0-65535). */
  duration: number;
}

/** Event code of a DTMF digit ('0'-'9', '*', '#', 'A'-'D', case-insensitive). @throws RangeError */
export function digitToEvent(digit: string): number {
  const event = digit.length === 1 ? DTMF_DIGITS.indexOf(digit.toUpperCase()) : -1;
  if (event < 0) throw new RangeError(`not a DTMF digit: ${JSON.stringify(digit)}`);
  return event;
}

/** The digit of an event code, or undefined for events beyond 15 (flash, tones, ...). */
export function eventToDigit(event: number): string | undefined {
  return event >= 0 && event < 16 ? DTMF_DIGITS[event] : undefined;
}

/**
 * Writes the 4-byte payload into out at offset (a new array when out is not given).
 * @throws RangeError on a field out of range or too small an out.
 */
export function encodeTelephoneEvent(ev: TelephoneEvent, out?: Uint8Array, offset = 0): Uint8Array {
  const { event, volume, duration } = ev;
  if (!Number.isInteger(event) || event < 0 || event > 255) throw new RangeError(`event ${event} out of 0-255`);
  if (!Number.isInteger(volume) || volume < 0 || volume > 63) throw new RangeError(`volume ${volume} out of 0-63`);
  if (!Number.isInteger(duration) || duration < 0 || duration > 0xffff) {
    throw new RangeError(`duration ${duration} out of 0-65535 timestamp units`);
  }
  const buf = out ?? new Uint8Array(4);
  if (buf.length < offset + 4) throw new RangeError('output too small for a telephone-event');
  buf[offset] = event;
  // The R bit is reserved: sent as 0, ignored on receipt.
  buf[offset + 1] = (ev.end ? 0x80 : 0) | volume;
  buf[offset + 2] = duration >>> 8;
  buf[offset + 3] = duration & 0xff;
  return buf;
}

/**
 * Reads the first event of a payload. Later 4-byte blocks (RFC 4733 section 2.5.1.5 allows
 * several events in one packet for redundancy) are ignored: the repeated end packets already
 * give us the redundancy we need.
 * @throws RangeError when the payload is shorter than 4 bytes.
 */
export function decodeTelephoneEvent(payload: Uint8Array): TelephoneEvent {
  if (payload.length < 4) throw new RangeError(`telephone-event payload of ${payload.length} bytes (< 4)`);
  const b1 = payload[1]!;
  return {
    event: payload[0]!,
    end: (b1 & 0x80) !== 0,
    volume: b1 & 0x3f,
    duration: (payload[2]! << 8) | payload[3]!,
  };
}

/** One packet of a digit's schedule: send `payload` at `atMs` after the event starts. */
export interface DtmfPacketPlan {
  atMs: number;
  payload: Uint8Array;
  /** RTP marker: set on the first packet of the event only (RFC 4733 section 2.5.1.1). */
  marker: boolean;
  end: boolean;
}

export interface DtmfPlanOptions {
  updateIntervalMs?: number;
  volume?: number;
}

/** Duration in timestamp units of durationMs at clockRate. */
export function dtmfDurationUnits(durationMs: number, clockRate: number): number {
  return Math.round((durationMs * clockRate) / 1000);
}

/**
 * The packet schedule of one key press: updates every updateIntervalMs while the key is down,
 * then three end packets at the same interval. The caller stamps every packet with the same RTP
 * timestamp (the event's start) and a new sequence number.
 *
 * Long events (section 2.5.1.3: segments when the duration would pass 65535 units, i.e. 8.19 s at
 * 8 kHz or 1.36 s at 48 kHz) are not produced: no caller needs a key held that long.
 * @throws RangeError on an unknown digit, a non-positive duration or one above 65535 units.
 */
export function planDtmfPackets(
  digit: string,
  durationMs: number,
  clockRate: number,
  options: DtmfPlanOptions = {},
): DtmfPacketPlan[] {
  const event = digitToEvent(digit);
  const interval = options.updateIntervalMs ?? DEFAULT_DTMF_UPDATE_MS;
  const volume = options.volume ?? DEFAULT_DTMF_VOLUME;
  if (!(durationMs > 0)) throw new RangeError(`DTMF duration ${durationMs} ms must be positive`);
  if (!(interval > 0)) throw new RangeError(`DTMF update interval ${interval} ms must be positive`);
  const total = dtmfDurationUnits(durationMs, clockRate);
  if (total > 0xffff) throw new RangeError(`DTMF duration ${durationMs} ms exceeds 65535 units at ${clockRate} Hz`);

  const plan: DtmfPacketPlan[] = [];
  // Each update reports the duration reached by the next update, as common gateways do, so the
  // first packet already says "one interval long" rather than a zero duration.
  for (let at = 0; at < durationMs; at += interval) {
    const duration = Math.min(dtmfDurationUnits(at + interval, clockRate), total);
    plan.push({
      atMs: at,
      payload: encodeTelephoneEvent({ event, end: false, volume, duration }),
      marker: at === 0,
      end: false,
    });
  }
  for (let i = 0; i < DTMF_END_REPEATS; i++) {
    plan.push({
      atMs: durationMs + i * interval,
      payload: encodeTelephoneEvent({ event, end: true, volume, duration: total }),
      marker: false,
      end: true,
    });
  }
  return plan;
}

/** One key press, reported once. */
export interface DtmfDigit {
  digit: string;
  event: number;
  /** Duration in ms from the last duration field seen (the end packet's when it arrived). */
  durationMs: number;
  /** RTP timestamp of the event (its start). */
  timestamp: number;
  volume: number;
  /**
   * How the end was recognised: 'end' (an E packet), 'superseded' (a new event started before
   * any end arrived), 'timeout' (no packet for endTimeoutMs), 'flushed' (reset(): a new SSRC).
   */
  endedBy: 'end' | 'superseded' | 'timeout' | 'flushed';
}

export interface DtmfReceiverOptions {
  clockRate: number;
  /** An event with no packet for this long is over (its end packets were all lost). */
  endTimeoutMs?: number;
  onDigit: (digit: DtmfDigit) => void;
}

export const DEFAULT_DTMF_END_TIMEOUT_MS = 500;

/** How many finished events we remember, to drop their late updates and redundant ends. */
const RECENT = 16;

interface OpenEvent {
  timestamp: number;
  event: number;
  volume: number;
  duration: number;
  lastSeenMs: number;
}

/**
 * Turns a telephone-event packet stream into one DtmfDigit per key press (RFC 4733 section
 * 2.5.2). The event's identity is its RTP timestamp: every packet of one press carries the
 * press's start time, so
 *  - a packet with the timestamp of the open event updates it (lost updates do not matter);
 *  - the first E packet closes it; the redundant E packets that follow hit the "recently
 *    finished" list and are dropped;
 *  - a packet with a new timestamp starts a new event even without the marker (the first packet
 *    was lost), and closes the open one if its end never came;
 *  - an event whose packets stop without an E packet is closed by poll() after endTimeoutMs.
 * Events above 15 (flash, modem tones) are counted and ignored.
 */
export class DtmfReceiver {
  readonly #clockRate: number;
  readonly #endTimeoutMs: number;
  readonly #onDigit: (digit: DtmfDigit) => void;
  #open: OpenEvent | undefined;
  readonly #recent: number[] = [];
  /** Packets shorter than 4 bytes. */
  malformed = 0;
  /** Redundant end packets and late updates of finished events. */
  duplicates = 0;
  /** Events beyond the 16 DTMF digits. */
  ignored = 0;
  /** Digits reported. */
  digits = 0;

  constructor(options: DtmfReceiverOptions) {
    this.#clockRate = options.clockRate;
    this.#endTimeoutMs = options.endTimeoutMs ?? DEFAULT_DTMF_END_TIMEOUT_MS;
    this.#onDigit = options.onDigit;
  }

  /** When poll() should next be called (ms on the caller's clock), or undefined when idle. */
  get deadline(): number | undefined {
    return this.#open ? this.#open.lastSeenMs + this.#endTimeoutMs : undefined;
  }

  /** Feeds one telephone-event RTP packet. Never throws on bad input (it is counted). */
  push(payload: Uint8Array, timestamp: number, arrivalMs: number): void {
    if (payload.length < 4) {
      this.malformed++;
      return;
    }
    const ev = decodeTelephoneEvent(payload);
    if (ev.event > 15) {
      this.ignored++;
      return;
    }
    const open = this.#open;
    if (open && open.timestamp === timestamp) {
      // Reordered updates may carry a smaller duration: keep the largest seen.
      if (ev.duration > open.duration) open.duration = ev.duration;
      open.lastSeenMs = arrivalMs;
      if (ev.end) this.#finish('end');
      return;
    }
    if (this.#recent.includes(timestamp)) {
      this.duplicates++;
      return;
    }
    if (open) this.#finish('superseded');
    this.#open = { timestamp, event: ev.event, volume: ev.volume, duration: ev.duration, lastSeenMs: arrivalMs };
    if (ev.end) this.#finish('end');
  }

  /** Closes an event that has been silent for endTimeoutMs. */
  poll(nowMs: number): void {
    const open = this.#open;
    if (open && nowMs - open.lastSeenMs >= this.#endTimeoutMs) this.#finish('timeout');
  }

  /** Reports the open event (if any) and forgets the history, e.g. on a new SSRC. */
  reset(): void {
    if (this.#open) this.#finish('flushed');
    this.#recent.length = 0;
  }

  #finish(endedBy: DtmfDigit['endedBy']): void {
    const open = this.#open;
    if (!open) return;
    this.#open = undefined;
    this.#recent.push(open.timestamp);
    if (this.#recent.length > RECENT) this.#recent.shift();
    this.digits++;
    this.#onDigit({
      digit: DTMF_DIGITS[open.event]!,
      event: open.event,
      durationMs: (open.duration * 1000) / this.#clockRate,
      timestamp: open.timestamp,
      volume: open.volume,
      endedBy,
    });
  }
}
