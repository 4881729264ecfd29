import dgram from 'node:dgram';
import { randomInt } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { RtpPacket } from 'rtp.js/packets';
import {
  DTMF_DIGITS,
  DtmfReceiver,
  decodeTelephoneEvent,
  digitToEvent,
  encodeTelephoneEvent,
  eventToDigit,
  planDtmfPackets,
  type DtmfDigit,
  type DtmfPacketPlan,
} from '../../src/media/dtmf.ts';
import { PortAllocator } from '../../src/media/port-allocator.ts';
import { RtpSession, type RtpSessionOptions, type Timers } from '../../src/media/rtp-session.ts';
import type { Clock, ReceivedRtp } from '../../src/media/types.ts';

const BASE = 20000 + 2 * randomInt(0, 9000);
const allocator = new PortAllocator({ min: BASE, max: BASE + 199, address: '127.0.0.1' });

const open: { close(): void }[] = [];
afterEach(() => {
  for (const o of open.splice(0)) o.close();
});

async function session(options: Partial<RtpSessionOptions> = {}): Promise<RtpSession> {
  const s = new RtpSession({ ports: await allocator.allocate(), clockRate: 8000, rtcpIntervalMs: 0, mediaTimeoutMs: 0, ...options });
  open.push(s);
  return s;
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A receiver fed from a list of (packet, timestamp) with arrival times; returns its digits. */
function receive(packets: { plan: DtmfPacketPlan; ts: number }[], opts: { pollAt?: number } = {}) {
  const digits: DtmfDigit[] = [];
  const rx = new DtmfReceiver({ clockRate: 8000, endTimeoutMs: 500, onDigit: (d) => digits.push(d) });
  let t = 0;
  for (const { plan, ts } of packets) {
    t = Math.max(t, plan.atMs);
    rx.push(plan.payload, ts, t);
  }
  if (opts.pollAt !== undefined) rx.poll(opts.pollAt);
  return { digits, rx };
}

const stream = (digit: string, durationMs: number, ts: number, interval = 50) =>
  planDtmfPackets(digit, durationMs, 8000, { updateIntervalMs: interval }).map((plan) => ({ plan, ts }));

describe('telephone-event payload (RFC 4733 section 2.3)', () => {
  it('maps the 16 DTMF digits to events 0-15', () => {
    expect([...DTMF_DIGITS].map(digitToEvent)).toEqual(Array.from({ length: 16 }, (_, i) => i));
    expect(digitToEvent('a')).toBe(12);
    expect(eventToDigit(11)).toBe('#');
    expect(eventToDigit(16)).toBeUndefined();
    expect(() => digitToEvent('E')).toThrow(RangeError);
    expect(() => digitToEvent('12')).toThrow(RangeError);
  });

  it('encodes the wire layout', () => {
    const bytes = encodeTelephoneEvent({ event: 11, end: true, volume: 10, duration: 800 });
    expect([...bytes]).toEqual([11, 0x80 | 10, 800 >> 8, 800 & 0xff]);
    expect(() => encodeTelephoneEvent({ event: 1, end: false, volume: 64, duration: 0 })).toThrow(RangeError);
    expect(() => encodeTelephoneEvent({ event: 1, end: false, volume: 1, duration: 65536 })).toThrow(RangeError);
    expect(() => decodeTelephoneEvent(new Uint8Array(3))).toThrow(RangeError);
  });

  it('round-trips every field (property)', () => {
    fc.assert(
      fc.property(
        fc.record({
          event: fc.integer({ min: 0, max: 255 }),
          end: fc.boolean(),
          volume: fc.integer({ min: 0, max: 63 }),
          duration: fc.integer({ min: 0, max: 0xffff }),
        }),
        fc.boolean(),
        (ev, reserved) => {
          const bytes = encodeTelephoneEvent(ev);
          if (reserved) bytes[1]! |= 0x40; // R bit set by a sender: ignored
          expect(decodeTelephoneEvent(bytes)).toEqual(ev);
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('DTMF sender schedule (RFC 4733 section 2.5.1)', () => {
  it('starts with the marker, updates every interval, ends with three E packets', () => {
    const plan = planDtmfPackets('7', 120, 8000);
    expect(plan.map((p) => p.atMs)).toEqual([0, 50, 100, 120, 170, 220]);
    expect(plan.map((p) => p.marker)).toEqual([true, false, false, false, false, false]);
    const decoded = plan.map((p) => decodeTelephoneEvent(p.payload));
    expect(decoded.map((d) => d.event)).toEqual([7, 7, 7, 7, 7, 7]);
    expect(decoded.map((d) => d.end)).toEqual([false, false, false, true, true, true]);
    expect(decoded.map((d) => d.duration)).toEqual([400, 800, 960, 960, 960, 960]);
    expect(decoded.every((d) => d.volume === 10)).toBe(true);
  });

  it('refuses what it cannot send', () => {
    expect(() => planDtmfPackets('x', 100, 8000)).toThrow(RangeError);
    expect(() => planDtmfPackets('1', 0, 8000)).toThrow(RangeError);
    expect(() => planDtmfPackets('1', 2000, 48000)).toThrow(RangeError); // 96000 units > 65535
  });
});

describe('DtmfReceiver: one digit per key press', () => {
  it('reports a complete event once, with its duration', () => {
    const { digits, rx } = receive(stream('5', 200, 1000));
    expect(digits).toEqual([{ digit: '5', event: 5, durationMs: 200, timestamp: 1000, volume: 10, endedBy: 'end' }]);
    expect(rx.duplicates).toBe(2); // the two redundant end packets
  });

  it('survives lost updates', () => {
    const s = stream('9', 400, 7);
    const { digits } = receive(s.filter((p, i) => i === 0 || p.plan.end));
    expect(digits.map((d) => [d.digit, d.durationMs, d.endedBy])).toEqual([['9', 400, 'end']]);
  });

  it('survives a lost first packet (no marker seen)', () => {
    const { digits } = receive(stream('#', 150, 99).slice(1));
    expect(digits.map((d) => [d.digit, d.durationMs])).toEqual([['#', 150]]);
  });

  it('reports an event of which only end packets arrived', () => {
    const { digits, rx } = receive(stream('A', 100, 5).filter((p) => p.plan.end));
    expect(digits.map((d) => [d.digit, d.durationMs, d.endedBy])).toEqual([['A', 100, 'end']]);
    expect(rx.duplicates).toBe(2);
  });

  it('ignores duplicated end packets and updates arriving after the end', () => {
    const s = stream('3', 100, 42);
    const ends = s.filter((p) => p.plan.end);
    const { digits } = receive([...s, ...ends, ...ends, s[1]!, s[0]!]);
    expect(digits).toHaveLength(1);
  });

  it('ends an event whose end packets were all lost after endTimeoutMs (poll)', () => {
    const s = stream('0', 200, 3).filter((p) => !p.plan.end);
    const early = receive(s, { pollAt: 150 + 499 });
    expect(early.digits).toHaveLength(0);
    expect(early.rx.deadline).toBe(150 + 500);
    const late = receive(s, { pollAt: 150 + 500 });
    expect(late.digits.map((d) => [d.digit, d.durationMs, d.endedBy])).toEqual([['0', 200, 'timeout']]);
    expect(late.rx.deadline).toBeUndefined();
  });

  it('closes an event whose end was lost when the next one starts', () => {
    const first = stream('1', 100, 800).filter((p) => !p.plan.end);
    const second = stream('1', 100, 800 + 1600);
    const { digits } = receive([...first, ...second]);
    expect(digits.map((d) => [d.digit, d.endedBy, d.timestamp])).toEqual([
      ['1', 'superseded', 800],
      ['1', 'end', 2400],
    ]);
  });

  it('counts and ignores non-DTMF events and short payloads', () => {
    const digits: DtmfDigit[] = [];
    const rx = new DtmfReceiver({ clockRate: 8000, onDigit: (d) => digits.push(d) });
    rx.push(encodeTelephoneEvent({ event: 16, end: true, volume: 10, duration: 800 }), 1, 0); // flash
    rx.push(new Uint8Array(2), 2, 0);
    expect(digits).toHaveLength(0);
    expect(rx.ignored).toBe(1);
    expect(rx.malformed).toBe(1);
  });

  it('yields exactly one digit per press for any loss, duplication and reordering within a press (property)', () => {
    const press = fc.record({
      digit: fc.constantFrom(...DTMF_DIGITS),
      durationMs: fc.integer({ min: 40, max: 600 }),
      gapUnits: fc.integer({ min: 8, max: 8000 }),
    });
    fc.assert(
      fc.property(fc.array(press, { minLength: 1, maxLength: 8 }), fc.infiniteStream(fc.nat(1000)), (presses, rnd) => {
        const it = rnd[Symbol.iterator]();
        const next = () => it.next().value as number;
        const packets: { plan: DtmfPacketPlan; ts: number }[] = [];
        let ts = 0xfffff000; // the timestamp wraps during the run
        let t = 0;
        for (const p of presses) {
          const all = stream(p.digit, p.durationMs, ts).map((x) => ({ ...x, plan: { ...x.plan, atMs: t + x.plan.atMs } }));
          // keep a random non-empty subset, duplicate some, shuffle within the press
          let kept = all.filter(() => next() % 3 !== 0);
          if (kept.length === 0) kept = [all[next() % all.length]!];
          const dups = kept.filter(() => next() % 4 === 0);
          const mixed = [...kept, ...dups].sort(() => (next() % 3) - 1);
          packets.push(...mixed);
          t += p.durationMs + 200;
          ts = (ts + Math.round(p.durationMs * 8) + p.gapUnits) >>> 0;
        }
        const { digits } = receive(packets, { pollAt: t + 10_000 });
        expect(digits.map((d) => d.digit).join('')).toBe(presses.map((p) => p.digit).join(''));
      }),
      { numRuns: 500 },
    );
  });
});

describe('DTMF through RtpSession over loopback', () => {
  it('DTMF: all 16 events decoded from a real RFC 4733 stream', async () => {
    const a = await session({ dtmfUpdateIntervalMs: 20 });
    const b = await session({ dtmfPayloadType: 101 });
    a.setRemote({ address: '127.0.0.1', port: b.local.rtpPort });
    const digits: DtmfDigit[] = [];
    const audio: ReceivedRtp[] = [];
    b.on('dtmf', (d) => digits.push(d));
    b.on('rtp', (p) => audio.push(p));
    // Queued: each digit starts after the previous one's last end packet.
    await Promise.all([...DTMF_DIGITS].map((d) => a.sendDtmf(d, 60, 101)));
    await waitFor('16 digits', () => digits.length === 16);
    expect(digits.map((d) => d.digit).join('')).toBe('0123456789*#ABCD');
    for (const d of digits) {
      expect(d.durationMs).toBe(60);
      expect(d.endedBy).toBe('end');
      expect(d.volume).toBe(10);
    }
    expect(new Set(digits.map((d) => d.timestamp)).size).toBe(16);
    expect(audio).toHaveLength(0); // telephone-events are not handed to the audio path
    expect(a.stats().dtmfSent).toBe(16);
    expect(b.stats().dtmfReceived).toBe(16);
    expect(b.stats().packetsLost).toBe(0);
  });

  it('puts the RFC 4733 packet sequence on the wire', async () => {
    const sniffer = dgram.createSocket('udp4');
    await new Promise<void>((r) => sniffer.bind(0, '127.0.0.1', r));
    open.push({ close: () => sniffer.close() });
    const wire: RtpPacket[] = [];
    sniffer.on('message', (msg) => wire.push(new RtpPacket(new DataView(msg.buffer.slice(msg.byteOffset, msg.byteOffset + msg.length)))));
    const a = await session({ dtmfUpdateIntervalMs: 20 });
    a.setRemote({ address: '127.0.0.1', port: sniffer.address().port });
    await a.sendDtmf('*', 100, 96);
    await waitFor('all packets', () => wire.length === 8);
    // 0, 20, 40, 60, 80 ms updates; end at 100, 120, 140 ms
    expect(wire.map((p) => p.getPayloadType())).toEqual(Array(8).fill(96));
    expect(new Set(wire.map((p) => p.getTimestamp())).size).toBe(1);
    expect(wire.map((p) => p.getMarker())).toEqual([true, false, false, false, false, false, false, false]);
    const seq0 = wire[0]!.getSequenceNumber();
    expect(wire.map((p) => (p.getSequenceNumber() - seq0) & 0xffff)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    const events = wire.map((p) => {
      const v = p.getPayload();
      return decodeTelephoneEvent(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    });
    expect(events.map((e) => e.end)).toEqual([false, false, false, false, false, true, true, true]);
    expect(events.map((e) => e.duration)).toEqual([160, 320, 480, 640, 800, 800, 800, 800]);
  });

  it('mutes audio during the event and resumes it with the timestamp advanced by the duration', async () => {
    // Virtual time for the sender: a clock and a timer queue the test advances.
    const clock: Clock & { t: number } = { t: 0, now: () => clock.t };
    const queue: { at: number; fn: () => void; id: number }[] = [];
    let ids = 0;
    const timers: Timers = {
      setTimeout(fn, ms) {
        const id = ++ids;
        queue.push({ at: clock.t + ms, fn, id });
        return id;
      },
      clearTimeout(handle) {
        const i = queue.findIndex((q) => q.id === handle);
        if (i >= 0) queue.splice(i, 1);
      },
    };
    const advance = (ms: number) => {
      const end = clock.t + ms;
      for (;;) {
        queue.sort((x, y) => x.at - y.at);
        const due = queue[0];
        if (!due || due.at > end) break;
        queue.shift();
        clock.t = due.at;
        due.fn();
      }
      clock.t = end;
    };
    const a = await session({ clock, timers, initialTimestamp: 10_000, dtmfUpdateIntervalMs: 50 });
    const b = await session({ dtmfPayloadType: 101 });
    a.setRemote({ address: '127.0.0.1', port: b.local.rtpPort });
    const audio: ReceivedRtp[] = [];
    const digits: DtmfDigit[] = [];
    b.on('rtp', (p) => audio.push(p));
    b.on('dtmf', (d) => digits.push(d));
    const frame = new Uint8Array(160);
    const sendAudio = () => a.send(frame, { payloadType: 0, timestampIncrement: 160 });

    sendAudio(); // ts 10000, t = 0
    advance(20);
    const done = a.sendDtmf('4', 100, 101); // event ts = 10160, t = 20
    await Promise.resolve(); // let the queued event start
    await Promise.resolve();
    for (let i = 0; i < 4; i++) {
      advance(20);
      expect(sendAudio()).toBe(false); // muted while the key is down
    }
    advance(20); // t = 120: the first end packet; audio may flow again
    expect(sendAudio()).toBe(true);
    advance(100); // the redundant end packets
    await done;
    await waitFor('the digit and two audio packets', () => digits.length === 1 && audio.length === 2);
    expect(digits[0]).toMatchObject({ digit: '4', timestamp: 10160, durationMs: 100, endedBy: 'end' });
    expect(audio[0]!.timestamp).toBe(10000);
    // Resumes at the event's end (10160 + 800), marked as a new talk spurt.
    expect(audio[1]!.timestamp).toBe(10160 + 800);
    expect(audio[1]!.marker).toBe(true);
    expect(a.stats().dropped.mutedByDtmf).toBe(4);
  });

  it('reports a digit whose end packets never come, after the end timeout', async () => {
    const b = await session({ dtmfPayloadType: 101, dtmfEndTimeoutMs: 80 });
    const raw = dgram.createSocket('udp4');
    await new Promise<void>((r) => raw.bind(0, '127.0.0.1', r));
    open.push({ close: () => raw.close() });
    const digits: DtmfDigit[] = [];
    b.on('dtmf', (d) => digits.push(d));
    const packet = (seq: number, duration: number, marker: boolean) => {
      const p = new RtpPacket();
      p.setPayloadType(101);
      p.setSequenceNumber(seq);
      p.setTimestamp(4242);
      p.setSsrc(0x1234);
      p.setMarker(marker);
      const payload = encodeTelephoneEvent({ event: 2, end: false, volume: 10, duration });
      p.setPayload(new DataView(payload.buffer));
      const v = p.getView();
      return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    };
    raw.send(packet(1, 400, true), b.local.rtpPort, '127.0.0.1');
    raw.send(packet(2, 800, false), b.local.rtpPort, '127.0.0.1');
    await waitFor('the timed-out digit', () => digits.length === 1, 2000);
    expect(digits[0]).toMatchObject({ digit: '2', durationMs: 100, endedBy: 'timeout' });
  });
});
