/**
 * CallRecorder on a real temporary directory: the WAV it streams (header fields, both channels
 * sample for sample at 24 kHz, silence for null, resampled rates), that it writes while the call
 * runs instead of holding the call in memory, its file modes, close() idempotence, and that every
 * failure (a path that is a directory, a file in the way, the directory removed mid-call, a write
 * that fails part way under a file size limit) stops the recording without throwing.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bytesPerMinute, CallRecorder, INPUT_FRAME } from '../../src/bridge/call-recorder.ts';
import { wavHeader } from '../../src/media/wav.ts';
import { initResamplers } from '../../src/media/resampler.ts';
import { parseWav, rmsDb } from './wav.ts';

const ID = '0b9f6c1e-3f55-4c1e-9a70-1d2b7c8e9f00';
let dir: string;
let logs: Array<{ level: string; msg: string; code?: string }>;
const logger = {
  error: (o: { code?: string }, msg: string) => logs.push({ level: 'error', msg, code: o?.code }),
  warn: (_o: unknown, msg: string) => logs.push({ level: 'warn', msg }),
  info: (_o: unknown, msg: string) => logs.push({ level: 'info', msg }),
} as never;

/** A 24 kHz frame whose samples encode (side, tick, index), so every sample can be checked. */
const marked = (side: 1 | 2, tick: number): Int16Array => Int16Array.from({ length: INPUT_FRAME }, (_, i) => (side === 1 ? 1 : -1) * (1 + ((tick * 37 + i) % 30000)));
const tone = (hz: number, amp: number, tick: number): Int16Array =>
  Int16Array.from({ length: INPUT_FRAME }, (_, i) => Math.round(amp * Math.sin((2 * Math.PI * hz * (tick * INPUT_FRAME + i)) / 24_000)));

beforeAll(async () => {
  await initResamplers();
});
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'callbridge-rec-'));
  logs = [];
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('CallRecorder: the WAV', () => {
  it('24 kHz: header fields, and left/right hold exactly the frames given, silence for null', () => {
    const rec = new CallRecorder({ dir: join(dir, 'recordings'), callId: ID, sampleRate: 24_000, logger });
    // The bridge passes views it reuses: the recorder must copy what it keeps.
    const callerView = new Int16Array(INPUT_FRAME);
    const agentView = new Int16Array(INPUT_FRAME);
    const TICKS = 7;
    for (let t = 0; t < TICKS; t++) {
      callerView.set(marked(1, t));
      agentView.set(marked(2, t));
      rec.tick(t === 2 ? null : callerView, t === 4 || t === 5 ? null : agentView);
      callerView.fill(12345);
      agentView.fill(-12345);
    }
    const path = rec.close();
    expect(path).toBe(join(dir, 'recordings', `${ID}.wav`));
    const buf = readFileSync(path!);
    const wav = parseWav(buf);
    const data = TICKS * INPUT_FRAME * 4;
    expect(wav).toMatchObject({ riff: 'RIFF', wave: 'WAVE', fmtSize: 16, audioFormat: 1, channels: 2, sampleRate: 24_000, byteRate: 96_000, blockAlign: 4, bitsPerSample: 16, dataOffset: 44 });
    expect(wav.dataBytes).toBe(data);
    expect(wav.riffSize).toBe(36 + data);
    expect(buf.length).toBe(44 + data);
    expect(rec.dataBytes).toBe(data);
    for (let t = 0; t < TICKS; t++) {
      const l = wav.left.subarray(t * INPUT_FRAME, (t + 1) * INPUT_FRAME);
      const r = wav.right.subarray(t * INPUT_FRAME, (t + 1) * INPUT_FRAME);
      expect(Array.from(l), `left, tick ${t}`).toEqual(t === 2 ? new Array(INPUT_FRAME).fill(0) : Array.from(marked(1, t)));
      expect(Array.from(r), `right, tick ${t}`).toEqual(t === 4 || t === 5 ? new Array(INPUT_FRAME).fill(0) : Array.from(marked(2, t)));
    }
  });

  it('a short or long frame is padded with silence or cut: every tick is exactly 20 ms', () => {
    const rec = new CallRecorder({ dir, callId: ID, sampleRate: 24_000 });
    rec.tick(new Int16Array(100).fill(7), new Int16Array(INPUT_FRAME + 50).fill(9));
    rec.tick(new Int16Array(0), null);
    const wav = parseWav(readFileSync(rec.close()!));
    expect(wav.left.length).toBe(2 * INPUT_FRAME);
    expect(Array.from(wav.left.subarray(0, 100)).every((x) => x === 7)).toBe(true);
    expect(Array.from(wav.left.subarray(100)).every((x) => x === 0)).toBe(true);
    expect(Array.from(wav.right.subarray(0, INPUT_FRAME)).every((x) => x === 9)).toBe(true);
    expect(Array.from(wav.right.subarray(INPUT_FRAME)).every((x) => x === 0)).toBe(true);
  });

  it('16 kHz (the default): fmt says so, 320 samples per tick per side, a tone stays on its side at its level', () => {
    const rec = new CallRecorder({ dir, callId: ID, logger });
    expect(rec.sampleRate).toBe(16_000);
    const TICKS = 100; // 2 s
    for (let t = 0; t < TICKS; t++) rec.tick(tone(1000, 10_000, t), null);
    const wav = parseWav(readFileSync(rec.close()!));
    expect(wav).toMatchObject({ channels: 2, sampleRate: 16_000, byteRate: 64_000, blockAlign: 4, bitsPerSample: 16 });
    expect(wav.dataBytes).toBe(wav.left.length * 4);
    // The resampler is streaming: the same count out as in, times 2/3, give or take its rounding.
    expect(Math.abs(wav.left.length - TICKS * 320)).toBeLessThanOrEqual(2);
    // A 10000-peak sine is -13.3 dBFS; skip the first 100 ms (the filter's start-up).
    const want = 20 * Math.log10(10_000 / Math.SQRT2 / 32768);
    expect(rmsDb(wav.left, 1600)).toBeCloseTo(want, 0);
    expect(rmsDb(wav.right)).toBe(-Infinity);
  });

  it('8 kHz: phone band, a 1 kHz tone passes and a 6 kHz tone (above 4 kHz) is filtered, not aliased', () => {
    const rec = new CallRecorder({ dir, callId: ID, sampleRate: 8000 });
    for (let t = 0; t < 50; t++) rec.tick(tone(1000, 10_000, t), tone(6000, 10_000, t));
    const wav = parseWav(readFileSync(rec.close()!));
    expect(wav).toMatchObject({ sampleRate: 8000, byteRate: 32_000, blockAlign: 4 });
    expect(Math.abs(wav.left.length - 50 * 160)).toBeLessThanOrEqual(2);
    expect(rmsDb(wav.left, 800)).toBeGreaterThan(-15);
    expect(rmsDb(wav.right, 800)).toBeLessThan(-50);
  });

  it('many ticks: a minute of call streams to disk in ~1 s batches (the file grows during the call), size per minute as documented', () => {
    const rec = new CallRecorder({ dir, callId: ID, logger });
    const path = join(dir, `${ID}.wav`);
    const sizes: number[] = [];
    for (let t = 0; t < 3000; t++) {
      rec.tick(t % 3 === 0 ? null : tone(440, 8000, t), t % 2 === 0 ? tone(300, 4000, t) : null);
      if (t % 10 === 9) sizes.push(statSync(path).size);
    }
    // Nothing is written for the first 49 ticks (buffered), then about one second per write.
    expect(sizes[0]).toBe(44);
    expect(sizes[3]).toBe(44);
    expect(sizes[5]).toBeGreaterThan(44);
    expect(new Set(sizes).size).toBeGreaterThanOrEqual(55);
    // Never more than one batch (~1 s, 64000 bytes) behind the call.
    sizes.forEach((s, i) => expect((i + 1) * 10 * 320 * 4 + 44 - s).toBeLessThanOrEqual(64_000 + 4 * 320));
    const out = rec.close()!;
    const wav = parseWav(readFileSync(out));
    expect(Math.abs(wav.dataBytes - bytesPerMinute(16_000))).toBeLessThanOrEqual(8);
    expect(statSync(out).size).toBe(44 + wav.dataBytes);
    expect(bytesPerMinute(16_000)).toBe(3_840_000);
    expect(bytesPerMinute(8000)).toBe(1_920_000);
    expect(bytesPerMinute(24_000)).toBe(5_760_000);
    expect(logs.filter((l) => l.level !== 'info')).toEqual([]);
  });

  it('files are 0600 in a directory created 0700; an existing file is never overwritten', () => {
    const recDir = join(dir, 'recordings');
    const rec = new CallRecorder({ dir: recDir, callId: ID, sampleRate: 24_000 });
    rec.tick(marked(1, 0), marked(2, 0));
    const path = rec.close()!;
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(statSync(recDir).mode & 0o777).toBe(0o700);
    const again = new CallRecorder({ dir: recDir, callId: ID, sampleRate: 24_000, logger });
    again.tick(marked(1, 1), null);
    expect(again.close()).toBeUndefined();
    expect(parseWav(readFileSync(path)).left[0]).toBe(marked(1, 0)[0]);
    expect(logs.some((l) => l.level === 'error' && l.code === 'EEXIST')).toBe(true);
  });

  it('close() is idempotent: the same path, ticks after it ignored; a call with no tick leaves no file', () => {
    const rec = new CallRecorder({ dir, callId: ID, sampleRate: 24_000 });
    rec.tick(marked(1, 0), null);
    const p1 = rec.close();
    const size = statSync(p1!).size;
    rec.tick(marked(1, 1), marked(2, 1));
    expect(rec.close()).toBe(p1);
    expect(rec.closed).toBe(true);
    expect(statSync(p1!).size).toBe(size);
    expect(parseWav(readFileSync(p1!)).dataBytes).toBe(INPUT_FRAME * 4);

    const empty = new CallRecorder({ dir, callId: 'no-ticks', logger });
    expect(empty.close()).toBeUndefined();
    expect(empty.close()).toBeUndefined();
    expect(existsSync(join(dir, 'no-ticks.wav'))).toBe(false);
    expect(logs.some((l) => l.msg.includes('no audio'))).toBe(true);
  });

  it('wavHeader: the canonical 44 bytes', () => {
    const h = wavHeader(16_000, 2, 1000);
    expect(h.length).toBe(44);
    expect(parseWav(Buffer.concat([h, Buffer.alloc(1000)]))).toMatchObject({ riffSize: 1036, channels: 2, sampleRate: 16_000, byteRate: 64_000, blockAlign: 4, dataBytes: 1000 });
  });
});

describe('CallRecorder: failures stop the recording, never the call', () => {
  it('the file path is a directory: no throw, close() undefined, the directory left alone', () => {
    mkdirSync(join(dir, `${ID}.wav`));
    const rec = new CallRecorder({ dir, callId: ID, logger });
    expect(rec.failed).toBe(true);
    for (let t = 0; t < 200; t++) rec.tick(marked(1, t), marked(2, t));
    expect(rec.close()).toBeUndefined();
    expect(statSync(join(dir, `${ID}.wav`)).isDirectory()).toBe(true);
    expect(logs.filter((l) => l.level === 'error').length).toBe(1);
  });

  it('the recordings directory cannot be created (a file is in the way): no throw, undefined', () => {
    writeFileSync(join(dir, 'recordings'), 'not a directory');
    const rec = new CallRecorder({ dir: join(dir, 'recordings'), callId: ID, logger });
    for (let t = 0; t < 60; t++) rec.tick(marked(1, t), null);
    expect(rec.close()).toBeUndefined();
    expect(logs.some((l) => l.level === 'error')).toBe(true);
  });

  it('a call id that is not a file name: nothing recorded, nothing outside the directory', () => {
    const rec = new CallRecorder({ dir: join(dir, 'recordings'), callId: '../escape', logger });
    rec.tick(marked(1, 0), null);
    expect(rec.close()).toBeUndefined();
    expect(existsSync(join(dir, 'escape.wav'))).toBe(false);
  });

  it('the directory removed during the call: no throw, close() undefined (nothing left to serve)', () => {
    const recDir = join(dir, 'recordings');
    const rec = new CallRecorder({ dir: recDir, callId: ID, sampleRate: 24_000, logger });
    for (let t = 0; t < 120; t++) rec.tick(marked(1, t), marked(2, t));
    rmSync(recDir, { recursive: true, force: true });
    for (let t = 0; t < 120; t++) rec.tick(marked(1, t), marked(2, t));
    expect(rec.close()).toBeUndefined();
    expect(logs.some((l) => l.level === 'error' && l.msg.includes('deleted'))).toBe(true);
  });

  it('a write that fails part way (file size limit, like a full disk): the call side sees no throw; what was written is kept as a valid WAV', () => {
    const child = fileURLToPath(new URL('./recorder-fsize-child.ts', import.meta.url));
    // 200 KiB: the header and two 1 s batches (96000 bytes each at 24 kHz) fit, the third is cut short.
    const out = execFileSync('bash', ['-c', 'ulimit -f 200 && exec node --import tsx "$0" "$1" "$2" 250', child, dir, ID], { encoding: 'utf8', cwd: fileURLToPath(new URL('../..', import.meta.url)) });
    const r = JSON.parse(out.trim().split('\n').at(-1)!) as { threw?: string; failedAtTick: number; first?: string; second?: string; failed: boolean; dataBytes: number; errors: string[] };
    expect(r.threw).toBeUndefined();
    expect(r.failed).toBe(true);
    expect(r.failedAtTick).toBe(149); // the third batch's write
    expect(r.errors.some((e) => e.startsWith('EFBIG'))).toBe(true);
    expect(r.first).toBe(join(dir, `${ID}.wav`));
    expect(r.second).toBe(r.first);
    const buf = readFileSync(r.first!);
    expect(buf.length).toBeLessThanOrEqual(200 * 1024);
    const wav = parseWav(buf);
    expect(wav.dataBytes % 4).toBe(0);
    expect(wav.dataBytes).toBe(r.dataBytes);
    expect(buf.length).toBe(44 + wav.dataBytes);
    expect(wav.riffSize).toBe(36 + wav.dataBytes);
    expect(wav.dataBytes).toBeGreaterThan(2 * 96_000);
    // The samples kept are the ones given: tick t is 1000 + t on the left, silence on the right.
    const t = Math.floor(wav.left.length / INPUT_FRAME) - 1;
    expect(wav.left[t * INPUT_FRAME]).toBe(1000 + t);
    expect(Array.from(wav.right).every((x) => x === 0)).toBe(true);
  }, 30_000);
});
