import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JitterBuffer, type JitterBufferOptions, type JitterBufferPacket } from '../../src/media/jitter-buffer.ts';

// --- helpers -------------------------------------------------------------------------------------

const G711 = { clockRate: 8000, samplesPerFrame: 160 } as const;

/** A packet whose payload carries `frame` (the frame's index in the stream) in its first 4 bytes. */
function pkt(
  seq: number,
  ts: number,
  arrivalMs: number,
  frame: number,
  extra: { marker?: boolean; ssrc?: number; payloadType?: number; length?: number } = {},
): JitterBufferPacket {
  const payload = new Uint8Array(extra.length ?? 160);
  if (payload.length >= 4) new DataView(payload.buffer).setUint32(0, frame);
  return {
    sequenceNumber: seq & 0xffff,
    timestamp: ts >>> 0,
    arrivalMs,
    payload,
    payloadType: extra.payloadType ?? 0,
    marker: extra.marker ?? false,
    ssrc: extra.ssrc ?? 0x1234,
  };
}

/** A regular stream: frame k sent at k * 20 ms, arriving after `delay(k)` ms. */
function stream(
  frames: number,
  delay: (k: number) => number,
  base: { seq?: number; ts?: number; t0?: number; ssrc?: number; frame0?: number } = {},
): JitterBufferPacket[] {
  const out: JitterBufferPacket[] = [];
  for (let k = 0; k < frames; k++) {
    out.push(
      pkt((base.seq ?? 1000) + k, (base.ts ?? 5000) + k * 160, (base.t0 ?? 0) + k * 20 + delay(k), (base.frame0 ?? 0) + k, {
        marker: k === 0,
        ssrc: base.ssrc ?? 0x1234,
      }),
    );
  }
  return out;
}

interface Tick {
  t: number;
  kind: 'frame' | 'lost' | 'empty';
  frame: number; // -1 unless kind is 'frame'
  payloadType: number;
  timestamp: number;
  depthMs: number;
  targetMs: number;
}

/**
 * Replays packets (in any order; they are delivered by arrival time) into the buffer while a
 * virtual clock ticks every 20 ms from startMs, until all are delivered plus `tail` ticks.
 */
function replay(jb: JitterBuffer, packets: JitterBufferPacket[], startMs: number, tail = 20): Tick[] {
  const byArrival = [...packets].sort((a, b) => a.arrivalMs - b.arrivalMs);
  const lastArrival = byArrival.length > 0 ? (byArrival[byArrival.length - 1]?.arrivalMs ?? 0) : 0;
  const out: Tick[] = [];
  let i = 0;
  for (let t = startMs; i < byArrival.length || t <= lastArrival + tail * 20; t += 20) {
    while (i < byArrival.length && (byArrival[i]?.arrivalMs ?? Infinity) <= t) jb.push(byArrival[i++]!);
    const f = jb.pop(t);
    const s = jb.stats();
    out.push({
      t,
      kind: f.kind,
      frame: f.kind === 'frame' && f.payload.length >= 4 ? new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(0) : -1,
      payloadType: f.kind === 'frame' ? f.payloadType : -1,
      timestamp: f.kind === 'frame' ? f.timestamp : -1,
      depthMs: s.depthMs,
      targetMs: s.targetMs,
    });
  }
  return out;
}

const framesOf = (ticks: Tick[]) => ticks.filter((x) => x.kind === 'frame').map((x) => x.frame);
const firstDisorder = (xs: number[]) => xs.findIndex((x, i) => i > 0 && x <= (xs[i - 1] ?? -Infinity));
const render = (ticks: Tick[]) =>
  ticks.map((x) => (x.kind === 'frame' ? (x.payloadType === 13 ? 'CN' : String(x.frame)) : x.kind === 'lost' ? 'L' : '.')).join(' ');

// --- the quality bar ------------------------------------------------------------------------------

interface Fixture {
  clockRate: number;
  samplesPerFrame: number;
  frameMs: number;
  frames: number;
  sent: number;
  lost: number;
  reordered: number;
  jitterMs: number;
  packets: [seq: number, timestamp: number, arrivalMs: number, marker: number, frame: number][];
}

describe('jitter buffer quality bar: recorded stream, 5% loss, reordering, 60 ms jitter', () => {
  const fx = JSON.parse(readFileSync(new URL('../fixtures/rtp-jitter-5pct-60ms.json', import.meta.url), 'utf8')) as Fixture;
  const packets = fx.packets.map(([seq, ts, arrival, marker, frame]) => pkt(seq, ts, arrival, frame, { marker: marker === 1 }));
  const minDepthMs = 20;
  const maxDepthMs = 200;
  // Start as shallow as allowed, so the buffer has to find the depth 60 ms of jitter needs.
  const jb = new JitterBuffer({ ...G711, minDepthMs, maxDepthMs, initialDepthMs: 20 });
  // The playout clock's phase is unrelated to the sender's: start 7.3 ms after the first arrival.
  const ticks = replay(jb, packets, (packets[0]?.arrivalMs ?? 0) + 7.3);
  const s = jb.stats();
  const first = ticks.findIndex((x) => x.kind === 'frame');
  const last = ticks.findLastIndex((x) => x.kind === 'frame');
  const span = ticks.slice(first, last + 1);
  const played = framesOf(span);
  const figures =
    `fixture: ${fx.frames} frames, ${fx.lost} lost, ${fx.reordered} reordered; buffer: ${JSON.stringify(s)}; ` +
    `output span ${span.length} ticks`;

  it('plays every frame that arrived in time, in strictly increasing order, each once', () => {
    const bad = firstDisorder(played);
    expect(bad, `out of order at output ${bad}: ...${played.slice(Math.max(0, bad - 5), bad + 5).join(' ')}... (${figures})`).toBe(-1);
    expect(new Set(played).size, figures).toBe(played.length);
    expect(s.duplicates, figures).toBe(0);
    // The payload of each frame matches its timestamp, across the sequence (frame 300) and
    // timestamp (frame 700) wrap-arounds.
    const t0 = fx.packets.find((p) => p[4] === 0)?.[1] ?? 0;
    const wrongTs = span.find((x) => x.kind === 'frame' && x.timestamp !== (t0 + x.frame * fx.samplesPerFrame) % 2 ** 32);
    expect(wrongTs, figures).toBeUndefined();
  });

  it('is continuous: after the start every tick is a frame or a concealed loss, no empty gap', () => {
    const gaps = span.map((x, i) => (x.kind === 'empty' ? i : -1)).filter((i) => i >= 0);
    expect(gaps, `empty ticks inside the stream at ${gaps.slice(0, 10).join(', ')} (${figures})`).toEqual([]);
    expect(played[0], figures).toBe(0);
    expect(played[played.length - 1], figures).toBe(fx.frames - 1);
  });

  it('has the right total duration: every 20 ms of the stream is played or concealed exactly once', () => {
    // Media duration: each of the stream's frames is accounted for exactly once.
    expect(s.played + s.lost + s.dropped, `played + lost + dropped should be ${fx.frames} (${figures})`).toBe(fx.frames);
    // Wall-clock duration: the stream's, plus what the buffer deliberately added (stretch) or
    // removed (shrink) while adapting its depth; that net change is the depth growth the jitter
    // called for, a few frames at most.
    const net = s.stretched - s.shrunk;
    expect(span.length, `output lasted ${span.length * 20} ms for a ${fx.frames * 20} ms stream (${figures})`).toBe(fx.frames + net);
    expect(Math.abs(net) * 20, `net depth adaptation ${net * 20} ms (${figures})`).toBeLessThanOrEqual(maxDepthMs - minDepthMs);
  });

  it('loses about 5% of the frames: the network losses plus the packets that came too late', () => {
    expect(s.lost, `lost should be network losses + late (${figures})`).toBe(fx.lost + s.late);
    const rate = s.lost / fx.frames;
    expect(rate, `loss ${(rate * 100).toFixed(2)}% (${figures})`).toBeGreaterThan(0.04);
    expect(rate, `loss ${(rate * 100).toFixed(2)}% (${figures})`).toBeLessThan(0.07);
    expect(s.late, `late packets ${s.late} (${figures})`).toBeLessThanOrEqual(15);
    expect(s.reordered, figures).toBeGreaterThan(fx.reordered * 0.9);
    // RFC 3550 interarrival jitter of uniform 0..60 ms delays: E|d1 - d2| = 60 / 3 = 20 ms.
    expect(s.jitterMs, figures).toBeGreaterThan(15);
    expect(s.jitterMs, figures).toBeLessThan(30);
  });

  it('keeps its depth within 20..200 ms and adapts upward to the 60 ms of jitter', () => {
    const depths = span.map((x) => x.depthMs);
    const lo = Math.min(...depths);
    const hi = Math.max(...depths);
    const secondHalf = depths.slice(depths.length / 2).sort((a, b) => a - b);
    const median = secondHalf[Math.floor(secondHalf.length / 2)] ?? 0;
    const msg = `depth min ${lo.toFixed(1)} max ${hi.toFixed(1)} median(2nd half) ${median.toFixed(1)} ms, target ${span[0]?.targetMs} -> ${s.targetMs} ms (${figures})`;
    expect(lo, msg).toBeGreaterThanOrEqual(minDepthMs);
    expect(hi, msg).toBeLessThanOrEqual(maxDepthMs);
    expect(s.targetMs, msg).toBeGreaterThanOrEqual(60);
    expect(median, msg).toBeGreaterThanOrEqual(60);
    expect(median, msg).toBeLessThanOrEqual(100);
  });
});

// --- ordering, duplicates, lateness -----------------------------------------------------------

describe('jitter buffer: ordering, duplicates and late packets', () => {
  it('plays an in-order stream with constant delay at its initial depth, without loss', () => {
    // (minDepthMs 40 too: otherwise the target decays to 20 ms without jitter and one frame is
    // dropped to follow it, as the shrink test below shows.)
    const jb = new JitterBuffer({ ...G711, initialDepthMs: 40, minDepthMs: 40 });
    const ticks = replay(jb, stream(100, () => 30), 30);
    expect(framesOf(ticks)).toEqual(Array.from({ length: 100 }, (_, k) => k));
    const s = jb.stats();
    expect(s).toMatchObject({ received: 100, played: 100, lost: 0, late: 0, duplicates: 0, reordered: 0, concealed: 5 });
    const playing = ticks.filter((x) => x.kind === 'frame');
    expect(Math.min(...playing.map((x) => x.depthMs))).toBeGreaterThanOrEqual(40);
    expect(Math.max(...playing.map((x) => x.depthMs))).toBeLessThan(60);
  });

  it('works at Opus rates (48 kHz clock, 960 per frame) the same way', () => {
    const jb = new JitterBuffer({ clockRate: 48000, samplesPerFrame: 960 });
    let seed = 3;
    const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
    const packets: JitterBufferPacket[] = [];
    for (let k = 0; k < 300; k++) packets.push(pkt(60000 + k, 2 ** 32 - 960 * 100 + k * 960, k * 20 + rand() * 40, k));
    const ticks = replay(jb, packets, 3);
    const frames = framesOf(ticks);
    expect(firstDisorder(frames)).toBe(-1);
    const s = jb.stats();
    expect(s.played + s.lost + s.dropped, JSON.stringify(s)).toBe(300);
    expect(s.late, JSON.stringify(s)).toBeLessThanOrEqual(3);
    expect(frames[frames.length - 1]).toBe(299);
  });

  it('drops duplicates and counts them', () => {
    const jb = new JitterBuffer(G711);
    const base = stream(50, () => 10);
    const dups = base.filter((_, k) => k % 3 === 0).map((p) => ({ ...p, arrivalMs: p.arrivalMs + 15 }));
    expect(jb.push(base[0]!)).toBe('accepted');
    expect(jb.push(base[0]!)).toBe('duplicate');
    const ticks = replay(jb, [...base.slice(1), ...dups], 10);
    expect(framesOf(ticks)).toEqual(Array.from({ length: 50 }, (_, k) => k));
    expect(jb.stats().duplicates).toBe(1 + dups.length);
  });

  it('drops a packet that arrives after its playout time, conceals its slot, and grows at once', () => {
    const jb = new JitterBuffer({ ...G711, initialDepthMs: 40 });
    // Frame 30 is 150 ms late.
    const packets = stream(80, (k) => (k === 30 ? 160 : 10));
    const ticks = replay(jb, packets, 10);
    const s = jb.stats();
    expect(s.late, JSON.stringify(s)).toBe(1);
    expect(s.lost).toBe(1);
    expect(framesOf(ticks)).not.toContain(30);
    expect(firstDisorder(framesOf(ticks))).toBe(-1);
    // The target now covers a 150 ms spread (it shrinks again slowly).
    expect(s.targetMs, JSON.stringify(s)).toBeGreaterThanOrEqual(140);
    expect(jb.push(packets[79]!)).toBe('duplicate'); // a copy of a packet already played
    expect(jb.push({ ...packets[78]!, sequenceNumber: 1030 })).toBe('late'); // out of the ring: late
  });

  it('holds a missing frame instead of skipping it while shallower than its target (stretch)', () => {
    const jb = new JitterBuffer({ ...G711, initialDepthMs: 20, minDepthMs: 20 });
    // No jitter for 2 s, then every packet 0..100 ms late.
    let seed = 7;
    const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
    const packets = stream(500, (k) => (k < 100 ? 5 : 5 + rand() * 100));
    const ticks = replay(jb, packets, 5);
    const s = jb.stats();
    const msg = JSON.stringify(s);
    expect(firstDisorder(framesOf(ticks)), msg).toBe(-1);
    expect(s.stretched, msg).toBeGreaterThan(0);
    expect(s.targetMs, msg).toBeGreaterThanOrEqual(100);
    // Quick growth: only a handful of packets miss their time before the depth has grown.
    expect(s.late, msg).toBeLessThanOrEqual(8);
    const afterWarmup = ticks.filter((x) => x.t > 5 + 150 * 20 && x.kind === 'frame');
    expect(Math.min(...afterWarmup.map((x) => x.depthMs)), msg).toBeGreaterThanOrEqual(95);
  });

  it('shrinks slowly in a continuous stream: at most one dropped frame per second', () => {
    const jb = new JitterBuffer({ ...G711, initialDepthMs: 200 });
    const ticks = replay(jb, stream(1500, () => 10), 10);
    const s = jb.stats();
    const msg = JSON.stringify(s);
    expect(s.dropped, msg).toBeGreaterThanOrEqual(5);
    expect(s.lost, msg).toBe(0);
    const frames = framesOf(ticks);
    const dropTicks: number[] = [];
    for (let i = 1, seen = 0; i < ticks.length; i++) {
      const x = ticks[i]!;
      if (x.kind !== 'frame') continue;
      if (seen > 0 && x.frame > (frames[seen - 1] ?? 0) + 1) dropTicks.push(x.t);
      seen++;
    }
    const gaps = dropTicks.slice(1).map((t, i) => t - (dropTicks[i] ?? 0));
    expect(Math.min(...gaps), `drops at ${dropTicks.join(', ')}`).toBeGreaterThanOrEqual(1000);
    expect(ticks.findLast((x) => x.kind === 'frame')?.depthMs, msg).toBeLessThanOrEqual(60);
  });

  it('copies payloads (the caller may reuse its buffer) and keeps each payload length', () => {
    const jb = new JitterBuffer({ ...G711, initialDepthMs: 100, minDepthMs: 100 });
    const shared = new Uint8Array(300);
    for (let k = 0; k < 5; k++) {
      shared.fill(k + 1);
      jb.push({ sequenceNumber: k, timestamp: k * 160, arrivalMs: k * 20, payload: shared.subarray(0, 10 + k * 50), payloadType: 8 });
    }
    shared.fill(0);
    const got: string[] = [];
    for (let t = 100; t < 220; t += 20) {
      const f = jb.pop(t);
      if (f.kind === 'frame') got.push(`${f.payload.length}:${f.payload[0]}:${f.payload[f.payload.length - 1]}:${f.payloadType}`);
    }
    expect(got).toEqual(['10:1:1:8', '60:2:2:8', '110:3:3:8', '160:4:4:8', '210:5:5:8']);
  });

  it('discards payloads larger than maxPayloadBytes', () => {
    const jb = new JitterBuffer({ ...G711, maxPayloadBytes: 100 });
    expect(jb.push(pkt(1, 160, 0, 0, { length: 101 }))).toBe('discarded');
    expect(jb.stats().discarded).toBe(1);
  });

  it('rejects impossible options with RangeError', () => {
    expect(() => new JitterBuffer({ clockRate: 0, samplesPerFrame: 160 })).toThrow(RangeError);
    expect(() => new JitterBuffer({ ...G711, minDepthMs: 100, maxDepthMs: 50 })).toThrow(RangeError);
  });

  it('restarts from fresh packets when the consumer stalled and the ring overflowed', () => {
    const jb = new JitterBuffer(G711);
    for (let k = 0; k < 100; k++) jb.push(pkt(k, k * 160, k * 20, k));
    const ticks = replay(jb, stream(20, () => 5, { seq: 100, ts: 100 * 160, t0: 2000, frame0: 100 }), 2000);
    const frames = framesOf(ticks);
    expect(firstDisorder(frames)).toBe(-1);
    expect(frames[frames.length - 1]).toBe(119);
    expect(jb.capacity).toBeGreaterThanOrEqual(2 * 10);
    expect(frames.length).toBeLessThanOrEqual(jb.capacity + 20);
    expect(jb.stats().dropped).toBeGreaterThan(0);
  });
});

// --- wrap-around, talk spurts, resets ---------------------------------------------------------

describe('jitter buffer: wrap-around', () => {
  it('orders packets across the 16-bit sequence and 32-bit timestamp wraps, reordered at the seam', () => {
    const jb = new JitterBuffer(G711);
    const packets = stream(40, (k) => (k === 19 ? 45 : 5), { seq: 65536 - 20, ts: 2 ** 32 - 160 * 10 });
    const ticks = replay(jb, packets, 5);
    const played = ticks.filter((x) => x.kind === 'frame');
    expect(played.map((x) => x.frame)).toEqual(Array.from({ length: 40 }, (_, k) => k));
    expect(played.map((x) => x.timestamp)).toEqual(packets.map((p) => p.timestamp));
    expect(jb.stats()).toMatchObject({ lost: 0, late: 0, resets: 0, reordered: 1 });
  });

  it('detects loss across the wrap by sequence number', () => {
    const jb = new JitterBuffer(G711);
    const packets = stream(40, () => 5, { seq: 65536 - 3 }).filter((_, k) => k !== 3 && k !== 4);
    const ticks = replay(jb, packets, 5);
    expect(render(ticks)).toContain('2 L L 5');
    expect(jb.stats().lost).toBe(2);
  });
});

describe('jitter buffer: talk spurts (DTX / silence suppression)', () => {
  /** Spurt 1: frames 0..49; silence of `pauseFrames`; spurt 2: 50 frames, marker on its first. */
  function twoSpurts(pauseFrames: number, cn = false): JitterBufferPacket[] {
    const a = stream(50, () => 10);
    if (cn) a.push(pkt(1050, 5000 + 50 * 160, 50 * 20 + 10, 9999, { payloadType: 13, length: 1 }));
    const seq2 = 1050 + (cn ? 1 : 0);
    const b = stream(50, () => 10, { seq: seq2, ts: 5000 + (50 + pauseFrames) * 160, t0: (50 + pauseFrames) * 20, frame0: 50 });
    return [...a, ...b];
  }

  it('treats a timestamp jump with the marker bit and no sequence gap as a pause, not loss', () => {
    const jb = new JitterBuffer(G711);
    const ticks = replay(jb, twoSpurts(50), 10);
    const s = jb.stats();
    expect(framesOf(ticks)).toEqual(Array.from({ length: 100 }, (_, k) => k));
    expect(s.lost, JSON.stringify(s)).toBe(0);
    // The buffer cannot know the talker paused until the next spurt arrives: it conceals the
    // first 100 ms of the silence (which the concealment fades out), then plays nothing.
    const text = render(ticks);
    expect(text).toMatch(/49 L L L L L( \.)+ 50 /);
  });

  it('after comfort noise (RFC 3389) the pause is silent from its first tick', () => {
    const jb = new JitterBuffer(G711);
    const ticks = replay(jb, twoSpurts(50, true), 10);
    expect(render(ticks)).toMatch(/49 CN( \.)+ 50 /);
    // (The only concealment is the tail of spurt 2, which has no comfort noise after it.)
    expect(jb.stats()).toMatchObject({ lost: 0, concealed: 5 });
  });

  it('tells a lost first packet of a spurt from the pause before it', () => {
    const jb = new JitterBuffer(G711);
    const packets = twoSpurts(50).filter((p) => p.sequenceNumber !== 1050);
    const ticks = replay(jb, packets, 10);
    expect(framesOf(ticks)).toEqual([...Array.from({ length: 50 }, (_, k) => k), ...Array.from({ length: 49 }, (_, k) => 51 + k)]);
    expect(jb.stats().lost).toBe(1);
  });

  it('moves the depth to its new target at a spurt start, where it costs nothing audible', () => {
    // shrinkIntervalMs off, so the only way down is the spurt start.
    const jb = new JitterBuffer({ ...G711, initialDepthMs: 160, targetDecayMs: 500, shrinkIntervalMs: 1e9 });
    const a = stream(150, () => 10);
    const b = stream(100, () => 10, { seq: 1150, ts: 5000 + 250 * 160, t0: 250 * 20, frame0: 150 });
    const ticks = replay(jb, [...a, ...b], 10);
    const first = ticks.find((x) => x.frame === 0)!;
    const second = ticks.find((x) => x.frame === 150)!;
    expect(first.depthMs).toBeGreaterThanOrEqual(160);
    expect(second.depthMs, `spurt 2 started at depth ${second.depthMs}`).toBeLessThan(60);
    expect(jb.stats()).toMatchObject({ lost: 0, dropped: 0 });
  });

  it('counts nothing lost when a pause has no marker (the sequence numbers tell)', () => {
    const jb = new JitterBuffer({ ...G711, minDepthMs: 40 });
    const packets = twoSpurts(25).map((p) => ({ ...p, marker: false }));
    replay(jb, packets, 10);
    expect(jb.stats()).toMatchObject({ lost: 0, played: 100 });
  });
});

describe('jitter buffer: restarts', () => {
  it('resets on a new SSRC, plays the new stream, and ignores stragglers of the old one', () => {
    const jb = new JitterBuffer(G711);
    const a = stream(30, () => 10, { ssrc: 1 });
    const b = stream(30, () => 10, { ssrc: 2, seq: 40000, ts: 123456789, t0: 30 * 20, frame0: 100 });
    const straggler = { ...a[29]!, arrivalMs: 30 * 20 + 25, sequenceNumber: (a[29]!.sequenceNumber + 1) & 0xffff };
    const ticks = replay(jb, [...a, ...b, straggler], 10);
    const frames = framesOf(ticks);
    expect(frames.filter((f) => f >= 100)).toEqual(Array.from({ length: 30 }, (_, k) => 100 + k));
    expect(frames.indexOf(100)).toBeGreaterThan(frames.indexOf(Math.max(...frames.filter((f) => f < 100))));
    expect(jb.stats()).toMatchObject({ resets: 1, discarded: 1 });
  });

  it('believes a large sequence jump only when the next packet confirms it (RFC 3550 A.1)', () => {
    const jb = new JitterBuffer(G711);
    for (let k = 0; k < 10; k++) expect(jb.push(pkt(100 + k, k * 160, k * 20, k))).toBe('accepted');
    expect(jb.push(pkt(30000, 10 * 160, 200, 10))).toBe('discarded'); // a stray
    expect(jb.push(pkt(110, 10 * 160, 200, 10))).toBe('accepted');
    expect(jb.push(pkt(50000, 0, 220, 11))).toBe('discarded');
    expect(jb.push(pkt(50001, 160, 240, 12))).toBe('reset');
    expect(jb.stats()).toMatchObject({ resets: 1, discarded: 2 });
  });

  it('resets when the timestamp runs backwards while the sequence number advances', () => {
    const jb = new JitterBuffer(G711);
    for (let k = 0; k < 5; k++) jb.push(pkt(k, 80000 + k * 160, k * 20, k));
    expect(jb.push(pkt(5, 160, 100, 5))).toBe('reset');
    expect(jb.stats().resets).toBe(1);
  });

  it('reset() and close() are safe to repeat; a closed buffer plays nothing', () => {
    const jb = new JitterBuffer(G711);
    jb.push(pkt(1, 160, 0, 0));
    jb.reset();
    expect(jb.pop(1000).kind).toBe('empty');
    jb.close();
    jb.close();
    expect(jb.closed).toBe(true);
    expect(jb.push(pkt(2, 320, 20, 1))).toBe('discarded');
    expect(jb.pop(2000).kind).toBe('empty');
  });
});

// --- properties -------------------------------------------------------------------------------

describe('jitter buffer: properties', () => {
  const fixed: JitterBufferOptions = { ...G711, minDepthMs: 100, maxDepthMs: 100, initialDepthMs: 100 };

  it('any reordering and duplication within the depth window plays every frame once, in order', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 0, max: 65535 }),
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        fc.double({ min: 0, max: 19.99, noNaN: true }),
        fc.array(fc.tuple(fc.double({ min: 0, max: 79, noNaN: true }), fc.nat(2), fc.double({ min: 0, max: 79, noNaN: true })), {
          minLength: 40,
          maxLength: 40,
        }),
        (n, seq0, ts0, phase, jitter) => {
          const jb = new JitterBuffer(fixed);
          const packets: JitterBufferPacket[] = [];
          let copies = 0;
          for (let k = 0; k < n; k++) {
            const [j, dups, jd] = jitter[k]!;
            packets.push(pkt(seq0 + k, ts0 + k * 160, k * 20 + j, k));
            for (let d = 0; d < dups; d++) packets.push(pkt(seq0 + k, ts0 + k * 160, k * 20 + jd + d, k));
            copies += dups;
          }
          const ticks = replay(jb, packets, phase);
          expect(framesOf(ticks)).toEqual(Array.from({ length: n }, (_, k) => k));
          const s = jb.stats();
          expect(s.duplicates + s.late).toBe(copies); // a copy after its frame played reads as late
          expect(s.lost).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('whatever the arrival order, duplicates and gaps, output is strictly ordered and never repeats', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 65535 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 60 }), fc.double({ min: 0, max: 1500, noNaN: true })), { minLength: 1, maxLength: 120 }),
        (seq0, arrivals) => {
          const jb = new JitterBuffer(G711);
          const packets = arrivals.map(([k, at]) => pkt(seq0 + k, 1000 + k * 160, at, k));
          const ticks = replay(jb, packets, 0);
          const frames = framesOf(ticks);
          expect(firstDisorder(frames)).toBe(-1);
          const s = jb.stats();
          expect(s.played).toBe(frames.length);
          expect(s.played + s.dropped).toBeLessThanOrEqual(new Set(arrivals.map(([k]) => k)).size);
          expect(s.received + s.duplicates + s.late + s.discarded).toBe(packets.length);
        },
      ),
      { numRuns: 300 },
    );
  });
});
