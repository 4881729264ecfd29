/**
 * The part of AMD's labelled set (bench/amd.ts, docs/machine-detection.md) made from real
 * recordings: Debian's alsa-utils ships eight clips of one man's voice naming speaker positions
 * ("Front left", "Rear center", ... /usr/share/sounds/alsa/*.wav, 48 kHz mono, about 1.2 s of
 * speech each with a short pause between the two words; Noise.wav is not speech and is left out).
 * Not phone answers, but real speech: breath, a room, natural pitch and timing.
 *
 *   human:   lead-in silence, one clip (a short answer of about 1.2 s), then silence.
 *   machine: lead-in silence, a "greeting" of 3 to 5 different clips joined with 100-400 ms gaps
 *            (4.2-7.4 s of speech, one VAD turn as a greeting's phrases are), then a beep (2 in 3) or none.
 *
 * Each clip is taken to 8 kHz, trimmed, scaled by -6..+3 dB; the answer gets white noise at 30,
 * 20 or 10 dB SNR and goes through G.711 mu-law, as the espeak-ng answers do
 * (bench/lib/amd-corpus.ts). Deterministic: a seeded PRNG over fixed files. Absent (undefined)
 * when alsa-utils is not installed.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { addNoise, type AmdLabel, type AmdSample, type AnswerPart, composeAnswer, g711, prng, rms, toCorpusRate, trimSilence } from './amd-corpus.ts';

export const ALSA_SOUNDS_DIR = '/usr/share/sounds/alsa';

/** The clips that are speech (Noise.wav is pink noise). */
const NOT_SPEECH = new Set(['Noise.wav']);

interface Clip {
  /** What is said, from the file name ("Front_Left.wav" -> "Front left"). */
  text: string;
  pcm: Int16Array;
}

/** PCM16 mono samples and rate from a RIFF WAVE file (chunks walked: the header is not assumed to be 44 bytes). */
export function readWav(buf: Buffer): { rate: number; pcm: Int16Array } {
  if (buf.toString('ascii', 0, 4) !== 'RIFF' || buf.toString('ascii', 8, 12) !== 'WAVE') throw new Error('not a RIFF WAVE file');
  let rate = 0;
  for (let at = 12; at + 8 <= buf.length; ) {
    const id = buf.toString('ascii', at, at + 4);
    const size = buf.readUInt32LE(at + 4);
    const body = at + 8;
    if (id === 'fmt ') {
      const format = buf.readUInt16LE(body);
      const channels = buf.readUInt16LE(body + 2);
      rate = buf.readUInt32LE(body + 4);
      const bits = buf.readUInt16LE(body + 14);
      if (format !== 1 || bits !== 16 || channels !== 1) throw new Error(`only PCM16 mono is read (format ${format}, ${bits} bits, ${channels} channels)`);
    } else if (id === 'data') {
      if (rate === 0) throw new Error('data before fmt');
      const end = Math.min(buf.length, body + size);
      return { rate, pcm: new Int16Array(buf.buffer.slice(buf.byteOffset + body, buf.byteOffset + end - ((end - body) % 2))) };
    }
    at = body + size + (size % 2);
  }
  throw new Error('no data chunk');
}

/** The speech clips of alsa-utils at 8 kHz, trimmed; undefined when the directory is absent. */
export async function alsaClips(dir = ALSA_SOUNDS_DIR): Promise<Clip[] | undefined> {
  if (!existsSync(dir)) return undefined;
  const files = readdirSync(dir).filter((f) => f.endsWith('.wav') && !NOT_SPEECH.has(f)).sort();
  if (files.length === 0) return undefined;
  const clips: Clip[] = [];
  for (const f of files) {
    const { rate, pcm } = readWav(readFileSync(join(dir, f)));
    const text = f.replace(/\.wav$/, '').replace(/_/g, ' ').toLowerCase().replace(/^./, (c) => c.toUpperCase());
    clips.push({ text, pcm: trimSilence(await toCorpusRate(pcm, rate)) });
  }
  return clips;
}

const SNRS_DB = [30, 20, 10];

function scaled(pcm: Int16Array, db: number): Int16Array {
  const g = 10 ** (db / 20);
  return pcm.map((x) => Math.max(-32768, Math.min(32767, Math.round(x * g))));
}

/** `count` answers from real recordings, half human, half machine, seeded; undefined without alsa-utils. */
export async function realAmdCorpus(options: { seed?: number; count?: number; dir?: string } = {}): Promise<AmdSample[] | undefined> {
  const clips = await alsaClips(options.dir);
  if (clips === undefined) return undefined;
  const rand = prng((options.seed ?? 20_26) ^ 0x5eed);
  const count = options.count ?? 60;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const between = (a: number, b: number) => Math.round(a + rand() * (b - a));
  const out: AmdSample[] = [];
  for (let i = 0; i < count; i++) {
    const label: AmdLabel = i % 2 === 0 ? 'human' : 'machine';
    const gainDb = between(-6, 3);
    const snrDb = pick(SNRS_DB);
    const parts: AnswerPart[] = [{ silenceMs: between(200, 1000) }];
    let said: Clip[];
    if (label === 'human') {
      said = [pick(clips)];
      parts.push({ recorded: scaled(said[0]!.pcm, gainDb) }, { silenceMs: 5000 });
    } else {
      // 3-5 different clips: a shuffled prefix of the set.
      const order = clips.map((c) => ({ c, k: rand() })).sort((a, b) => a.k - b.k).map((x) => x.c);
      said = order.slice(0, between(3, 5));
      said.forEach((c, n) => {
        if (n > 0) parts.push({ silenceMs: between(100, 400) });
        parts.push({ recorded: scaled(c.pcm, gainDb) });
      });
      if (rand() < 2 / 3) parts.push({ silenceMs: between(150, 600) }, { beepHz: rand() < 0.5 ? 1000 : 1400, beepMs: between(300, 600) });
      parts.push({ silenceMs: 3000 });
    }
    const clean = await composeAnswer(parts);
    const pcm = g711(addNoise(clean.pcm, rms(clean.pcm), snrDb, rand));
    const text = said.map((c) => c.text).join('. ');
    out.push({ id: `real-${label}-${i}`, label, text, pcm, speech: clean.speech, ...(clean.beep ? { beep: clean.beep } : {}), voice: `alsa-utils ${gainDb >= 0 ? '+' : ''}${gainDb} dB`, snrDb, source: 'alsa-utils' });
  }
  return out;
}
