/**
 * The labelled set of answering-machine detection (bench/amd.ts, docs/machine-detection.md):
 * what the callee's side of an answered outbound call sounds like in its first seconds, human or
 * machine, made with Debian's espeak-ng (several voices, speeds and pitches), taken to the phone
 * band (8 kHz) and through G.711 mu-law, with white noise at a few SNRs.
 *
 *   human:   lead-in silence, a short answer ("Hello?", "Yes, Sam speaking."), silence; some
 *            say "Hello?" twice with a pause between (the case cadence gets wrong most).
 *   machine: lead-in silence, a voicemail greeting of 3-6 s, then a beep of 1 kHz or 1.4 kHz for
 *            0.3-0.6 s after a short gap (2 in 3 of them) or none, then silence.
 *
 * Deterministic: everything is drawn from a seeded PRNG, and espeak-ng's output for the same
 * text, voice, speed and pitch is the same; each rendered utterance is cached (as raw 8 kHz PCM)
 * in the cache directory (.cache/amd-corpus/, not committed), so a second run does not call
 * espeak-ng. Answers made from real recordings (alsa-utils' voice clips, when installed) are
 * bench/lib/amd-real-corpus.ts; they share this module's phone band, noise and composition.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import alawmulaw from 'alawmulaw';
import { createResampler, initResamplers } from '../../src/media/resampler.ts';
import { prng } from '../../test/helpers/prng.ts';
import { concat } from '../../test/agent/vad/signals.ts';

const { mulaw } = alawmulaw;

export const CORPUS_RATE = 8000;

export type AmdLabel = 'human' | 'machine';

/** Where an answer's speech comes from: espeak-ng (synthetic) or alsa-utils' recordings of a real voice. */
export type AmdSource = 'espeak-ng' | 'alsa-utils';

export interface AmdSample {
  id: string;
  label: AmdLabel;
  /** What is said (the simulated recognizer reveals these words). */
  text: string;
  /** PCM16 8 kHz, after G.711 mu-law and noise. */
  pcm: Int16Array;
  /** Where the speech is, in samples: [start, end) per utterance. */
  speech: Array<[number, number]>;
  /** The beep, when there is one: [start, end) in samples and its frequency. */
  beep?: { start: number; end: number; hz: number };
  voice: string;
  snrDb: number;
  source: AmdSource;
}

const HUMAN_TEXTS = ['Hello?', 'Hello, this is Sam.', 'Yes?', 'Hi, who is this?', 'Hello, Dana speaking.', 'Good morning, Pat here.', 'Yeah, hello?', 'Hello, can I help you?'];
const MACHINE_TEXTS = [
  "Hi, you've reached Sam. I can't take your call right now, please leave a message after the tone.",
  'The person you are calling is not available. Please record your message after the beep.',
  "Hello, this is Dana. Sorry I missed you, leave your name and number and I'll get back to you.",
  'Thank you for calling. Nobody is here to take your call, at the tone please leave a message.',
  "Hi, it's Pat. I'm away from the phone at the moment. Leave a message and I will call you back.",
  'You have reached the voicemail of extension two one four. Please leave a message.',
];
const VOICES = ['en-us', 'en-us+f3', 'en-gb', 'en-gb+f2', 'en-gb-scotland', 'en-029+m3'];
const SNRS_DB = [30, 20, 10];

/** The seedable generator the tests use (mulberry32): the set is the same on every run. */
export { prng };

export const DEFAULT_CACHE_DIR = join(process.cwd(), '.cache', 'amd-corpus');

/** One utterance by espeak-ng at 8 kHz (cached). */
export async function speak(text: string, voice: string, wpm: number, pitch: number, cacheDir = DEFAULT_CACHE_DIR): Promise<Int16Array> {
  const key = createHash('sha256').update(JSON.stringify([text, voice, wpm, pitch])).digest('hex').slice(0, 20);
  const file = join(cacheDir, `${key}.pcm`);
  if (existsSync(file)) {
    const b = readFileSync(file);
    return new Int16Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  }
  mkdirSync(cacheDir, { recursive: true });
  const wavPath = join(tmpdir(), `amd-${process.pid}-${key}.wav`);
  execFileSync('espeak-ng', ['-v', voice, '-s', String(wpm), '-p', String(pitch), '-w', wavPath, text]);
  const wav = readFileSync(wavPath);
  // espeak-ng writes a 44-byte header, PCM16 mono 22,050 Hz.
  const rate = wav.readUInt32LE(24);
  const pcm = new Int16Array(wav.buffer.slice(wav.byteOffset + 44, wav.byteOffset + wav.length - ((wav.length - 44) % 2)));
  const trimmed = trimSilence(await toCorpusRate(pcm, rate));
  // Written aside and renamed: a reader in another process never sees half a file.
  const partial = `${file}.${process.pid}.tmp`;
  writeFileSync(partial, Buffer.from(trimmed.buffer, trimmed.byteOffset, trimmed.byteLength));
  renameSync(partial, file);
  rmSync(wavPath, { force: true });
  return trimmed;
}

/** PCM16 at `rate` to the set's 8 kHz, the resampler's delay flushed (nothing of the end lost). */
export async function toCorpusRate(pcm: Int16Array, rate: number): Promise<Int16Array> {
  await initResamplers();
  const r = createResampler(rate, CORPUS_RATE);
  const body = r.process(pcm).slice();
  const tail = r.process(new Int16Array(Math.ceil((r.delaySamples * rate) / CORPUS_RATE) + 3)).slice();
  r.close();
  const out = new Int16Array(body.length + tail.length);
  out.set(body, 0);
  out.set(tail, body.length);
  return out;
}

/** espeak-ng pads its output with silence (and recordings start and end with some): cut it so the speech positions are exact. */
export function trimSilence(pcm: Int16Array): Int16Array {
  let a = 0;
  let b = pcm.length;
  while (a < b && Math.abs(pcm[a]!) < 200) a++;
  while (b > a && Math.abs(pcm[b - 1]!) < 200) b--;
  return pcm.slice(a, b);
}

/** A sine beep at -12 dBFS with 5 ms ramps. */
export function beepTone(hz: number, ms: number, rate = CORPUS_RATE): Int16Array {
  const n = Math.round((rate * ms) / 1000);
  const ramp = Math.round(rate * 0.005);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const g = Math.min(1, i / ramp, (n - 1 - i) / ramp);
    out[i] = Math.round(8000 * g * Math.sin((2 * Math.PI * hz * i) / rate));
  }
  return out;
}

/** Through G.711 mu-law and back (what a phone line carries). */
export function g711(pcm: Int16Array): Int16Array {
  return mulaw.decode(mulaw.encode(pcm));
}

export function rms(pcm: Int16Array): number {
  let s = 0;
  let n = 0;
  for (const x of pcm) {
    if (Math.abs(x) < 200) continue;
    s += x * x;
    n++;
  }
  return Math.sqrt(s / Math.max(1, n));
}

/** Adds white noise at `snrDb` below the speech's active level (seeded). */
export function addNoise(pcm: Int16Array, speechRms: number, snrDb: number, rand: () => number): Int16Array {
  const sigma = speechRms / 10 ** (snrDb / 20);
  const out = new Int16Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) {
    // Irwin-Hall(12) - 6: close to a unit normal.
    let g = -6;
    for (let k = 0; k < 12; k++) g += rand();
    out[i] = Math.max(-32768, Math.min(32767, Math.round(pcm[i]! + sigma * g)));
  }
  return out;
}

export interface AmdCall {
  label: AmdLabel;
  text: string;
  pcm: Int16Array;
  speech: Array<[number, number]>;
  beep?: { start: number; end: number; hz: number };
}

const ms = (x: number) => Math.round((CORPUS_RATE * x) / 1000);

/** One part of an answer: words by espeak-ng, a recorded utterance (8 kHz, trimmed), silence or a beep. */
export type AnswerPart = { speak: string; voice: string; wpm: number; pitch: number } | { recorded: Int16Array } | { silenceMs: number } | { beepHz: number; beepMs: number };

/** One answer, clean (no noise, no G.711): the parts laid end to end. */
export async function composeAnswer(
  parts: AnswerPart[],
  cacheDir = DEFAULT_CACHE_DIR,
): Promise<Omit<AmdCall, 'label' | 'text'>> {
  const chunks: Int16Array[] = [];
  const speech: Array<[number, number]> = [];
  let beep: AmdCall['beep'];
  let at = 0;
  for (const p of parts) {
    let c: Int16Array;
    if ('speak' in p) {
      c = await speak(p.speak, p.voice, p.wpm, p.pitch, cacheDir);
      speech.push([at, at + c.length]);
    } else if ('recorded' in p) {
      c = p.recorded;
      speech.push([at, at + c.length]);
    } else if ('silenceMs' in p) {
      c = new Int16Array(ms(p.silenceMs));
    } else {
      c = beepTone(p.beepHz, p.beepMs);
      beep = { start: at, end: at + c.length, hz: p.beepHz };
    }
    chunks.push(c);
    at += c.length;
  }
  const pcm = concat(...chunks);
  return { pcm, speech, ...(beep ? { beep } : {}) };
}

/** The labelled set: `count` answers, half human, half machine, seeded. */
export async function amdCorpus(options: { seed?: number; count?: number; cacheDir?: string } = {}): Promise<AmdSample[]> {
  const rand = prng(options.seed ?? 20_26);
  const count = options.count ?? 120;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const between = (a: number, b: number) => Math.round(a + rand() * (b - a));
  const out: AmdSample[] = [];
  for (let i = 0; i < count; i++) {
    const label: AmdLabel = i % 2 === 0 ? 'human' : 'machine';
    const voice = pick(VOICES);
    const wpm = between(140, 190);
    const pitch = between(35, 65);
    const snrDb = pick(SNRS_DB);
    const lead = { silenceMs: between(200, 1000) };
    let text: string;
    let parts: Parameters<typeof composeAnswer>[0];
    if (label === 'human') {
      text = pick(HUMAN_TEXTS);
      const twice = rand() < 0.2;
      parts = twice
        ? [lead, { speak: 'Hello?', voice, wpm, pitch }, { silenceMs: between(1200, 2000) }, { speak: 'Hello?', voice, wpm, pitch }, { silenceMs: 4000 }]
        : [lead, { speak: text, voice, wpm, pitch }, { silenceMs: 5000 }];
      if (twice) text = 'Hello? Hello?';
    } else {
      text = pick(MACHINE_TEXTS);
      const withBeep = rand() < 2 / 3;
      parts = [lead, { speak: text, voice, wpm, pitch }];
      if (withBeep) parts.push({ silenceMs: between(150, 600) }, { beepHz: rand() < 0.5 ? 1000 : 1400, beepMs: between(300, 600) });
      parts.push({ silenceMs: 3000 });
    }
    const clean = await composeAnswer(parts, options.cacheDir);
    const level = rms(clean.pcm);
    const pcm = g711(addNoise(clean.pcm, level, snrDb, rand));
    out.push({ id: `${label}-${i}`, label, text, pcm, speech: clean.speech, ...(clean.beep ? { beep: clean.beep } : {}), voice: `${voice} ${wpm}wpm p${pitch}`, snrDb, source: 'espeak-ng' });
  }
  return out;
}
