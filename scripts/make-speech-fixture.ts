/**
 * Writes test/fixtures/audio/caller-hello.wav: a caller's utterance for the call bridge's
 * end-to-end tests (test/interop/bridge-e2e.test.ts), spoken by our own embedded
 * eSpeak-NG voice (LocalEspeakProvider, 24 kHz), resampled to 8 kHz with the speex resampler
 * (src/media/resampler.ts) and stored as a PCM16 mono 8 kHz WAV: what a phone line carries.
 *
 *   npx tsx scripts/make-speech-fixture.ts [out.wav]
 *
 * About 3 s of speech, ~50 kB. eSpeak adds a little pitch randomness, so re-running gives a
 * file that differs in its bytes but not in its length (+-1 frame) or level; the tests measure
 * energy and duration, never bytes.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LocalEspeakProvider } from '../src/agent/providers/tts/local-espeak.ts';
import { createResampler, initResamplers } from '../src/media/resampler.ts';
import { wavHeader } from '../src/media/wav.ts';

const CALLER_TEXT = 'Hello, I would like to know your opening hours please.';
const OUT_RATE = 8000;
const IN_RATE = 24_000;

/** A canonical 44-byte-header WAV of PCM16 mono. */
function pcm16Wav(pcm: Int16Array, rate: number): Buffer {
  const data = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  return Buffer.concat([wavHeader(rate, 1, data.length), data]);
}

async function main(): Promise<void> {
  const out = process.argv[2] ?? fileURLToPath(new URL('../test/fixtures/audio/caller-hello.wav', import.meta.url));
  await initResamplers();
  const tts = new LocalEspeakProvider();
  const chunks: Int16Array[] = [];
  for await (const chunk of tts.synthesize({ text: CALLER_TEXT, voiceId: 'local', language: 'en', signal: new AbortController().signal })) chunks.push(chunk);
  const total = chunks.reduce((n, c) => n + c.length, 0);
  const pcm24 = new Int16Array(total);
  let at = 0;
  for (const c of chunks) {
    pcm24.set(c, at);
    at += c.length;
  }
  const resampler = createResampler(IN_RATE, OUT_RATE);
  // process() returns a view it reuses: copy. Then flush the delay line with a little silence.
  const body = resampler.process(pcm24).slice();
  const tail = resampler.process(new Int16Array(Math.ceil((resampler.delaySamples * IN_RATE) / OUT_RATE) + 3)).slice();
  resampler.close();
  const pcm8 = new Int16Array(body.length + tail.length);
  pcm8.set(body, 0);
  pcm8.set(tail, body.length);
  writeFileSync(out, pcm16Wav(pcm8, OUT_RATE));
  let peak = 0;
  let sum = 0;
  for (const x of pcm8) {
    peak = Math.max(peak, Math.abs(x));
    sum += x * x;
  }
  const rmsDb = 10 * Math.log10(sum / Math.max(1, pcm8.length) / 32768 ** 2);
  process.stdout.write(`${out}: ${(pcm8.length / OUT_RATE).toFixed(2)} s at ${OUT_RATE} Hz, peak ${peak}, RMS ${rmsDb.toFixed(1)} dBFS\n`);
}

await main();
// The espeak worker is unref'd when idle; exit explicitly anyway so a stray handle cannot hang CI.
process.exit(0);
