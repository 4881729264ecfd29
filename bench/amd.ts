/**
 * bench/amd: answering-machine detection (src/agent/machine-detector.ts) on the labelled set of
 * bench/lib/amd-corpus.ts (espeak-ng answers, phone band, G.711, white noise at 30/20/10 dB SNR,
 * machines with and without a beep) and, when alsa-utils is installed, of
 * bench/lib/amd-real-corpus.ts (answers made from its recordings of a real voice, the same
 * phone band and noise); each source is scored on its own, and the run says which it used. Each answer is played frame by frame (20 ms at 8 kHz)
 * through the runtime's energy VAD (the agent defaults: start 0.2 s, stop 0.8 s) into the
 * detector, on the answer's own clock (0 = answered). Three detectors in the same run:
 *
 *   cadence     the VAD's turn edges alone (the baseline);
 *   +beep       and the tone detector;
 *   +beep+text  and a simulated recognizer: the answer's words revealed in proportion to the
 *               time spoken, 300 ms behind (an ideal streaming STT; no recognizer runs offline here).
 *
 * Printed: the confusion matrix (truth human/machine x decided human/machine/unknown), accuracy
 * (unknown counts as wrong), decision time median and p95 (ms from the answer), beep hits.
 * RESULT lines: each detector's accuracy and p95 decision time, against the cadence baseline
 * (amd_... for espeak-ng, amd_real_... for the recordings).
 *
 *   npm run bench -- amd [--count 120] [--real-count 60] [--seed 2026]
 */
import { pathToFileURL } from 'node:url';
import { EnergyVad } from '../src/agent/providers/vad/energy.ts';
import { MachineDetector, type MachineDecision } from '../src/agent/machine-detector.ts';
import { createNoiseSuppressor, loadRnnoise } from '../src/agent/providers/noise/index.ts';
import { createResampler, initResamplers } from '../src/media/resampler.ts';
import { amdCorpus, CORPUS_RATE, type AmdSample } from './lib/amd-corpus.ts';
import { ALSA_SOUNDS_DIR, realAmdCorpus } from './lib/amd-real-corpus.ts';
import { printFigures, table, type Figure } from './lib/result.ts';

const STT_LAG_MS = 300;
const RUNTIME_RATE = 24_000;

interface Variant {
  name: string;
  beep: boolean;
  transcript: boolean;
  /** RNNoise (level 50) in front of the VAD, at the runtime's 24 kHz, as an agent with noise_cancel_settings enabled has it. */
  rnnoise?: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'cadence', beep: false, transcript: false },
  { name: '+beep', beep: true, transcript: false },
  { name: '+beep+text', beep: true, transcript: true },
  { name: '+beep+rnnoise', beep: true, transcript: false, rnnoise: true },
];

/** The answer at the runtime's 24 kHz (what the session gets from the bridge). */
function upsample(pcm: Int16Array): Int16Array {
  const r = createResampler(CORPUS_RATE, RUNTIME_RATE);
  const out = r.process(pcm).slice();
  r.close();
  return out;
}

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const eq = process.argv.find((a) => a.startsWith(`--${name}=`));
  const v = eq ? eq.split('=')[1] : i >= 0 ? process.argv[i + 1] : undefined;
  return v === undefined ? fallback : Number(v);
}

/** Plays one answer into a detector (all of it: the beep may come after the decision); returns its decision and when it heard a beep. */
export function detect(s: AmdSample, v: Variant): MachineDecision & { beepAtMs?: number } {
  const rate = v.rnnoise ? RUNTIME_RATE : CORPUS_RATE;
  const pcm = v.rnnoise ? upsample(s.pcm) : s.pcm;
  const FRAME = rate / 50;
  const noise = v.rnnoise ? createNoiseSuppressor({ enabled: true, level: 50 }) : undefined;
  const vad = new EnergyVad({ startSecs: 0.2, stopSecs: 0.8, sampleRate: rate });
  let decision: MachineDecision | undefined;
  const d = new MachineDetector({ sampleRate: rate, vadStartMs: 200, vadStopMs: 800, beep: v.beep, transcript: v.transcript, onDecision: (x) => (decision = x) }, 0);
  const words = s.text.split(/\s+/);
  const first = s.speech[0]![0];
  const last = s.speech[s.speech.length - 1]![1];
  let revealed = 0;
  let beepAtMs: number | undefined;
  for (let at = 0; at + FRAME <= pcm.length; at += FRAME) {
    const frame = pcm.subarray(at, at + FRAME);
    const now = ((at + FRAME) / rate) * 1000;
    const ev = vad.process(noise ? noise.process(frame) : frame);
    if (ev === 'speech_started') d.speechStarted(now);
    else if (ev === 'speech_stopped') d.speechStopped(now);
    if (v.transcript) {
      const spokenMs = now - STT_LAG_MS - (first / CORPUS_RATE) * 1000;
      const share = Math.max(0, Math.min(1, spokenMs / (((last - first) / CORPUS_RATE) * 1000)));
      const n = Math.floor(words.length * share);
      if (n > revealed) {
        revealed = n;
        d.transcript(words.slice(0, n).join(' '), now);
      }
    }
    d.audio(frame, now);
    if (d.beep) beepAtMs ??= now;
  }
  noise?.close();
  // The answers are longer than the cap: undecided here would be a detector bug.
  if (decision === undefined) throw new Error(`${s.id}: no decision by the end of its ${s.pcm.length / CORPUS_RATE} s`);
  return beepAtMs === undefined ? decision : { ...decision, beepAtMs };
}

function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return Number.NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

interface Score {
  variant: Variant;
  matrix: Record<'human' | 'machine', Record<'human' | 'machine' | 'unknown', number>>;
  accuracy: number;
  times: number[];
  machineTimes: number[];
  humanTimes: number[];
  beepHits: number;
  falseBeeps: number;
  /** ms from the beep's end to the detector's report of it (leave_message speaks then). */
  beepLagMs: number[];
  bySnr: Map<number, { right: number; n: number }>;
  by: Record<string, number>;
}

function score(corpus: AmdSample[], v: Variant): Score {
  const matrix = { human: { human: 0, machine: 0, unknown: 0 }, machine: { human: 0, machine: 0, unknown: 0 } };
  const s: Score = { variant: v, matrix, accuracy: 0, times: [], machineTimes: [], humanTimes: [], beepHits: 0, falseBeeps: 0, beepLagMs: [], bySnr: new Map(), by: {} };
  for (const sample of corpus) {
    const d = detect(sample, v);
    matrix[sample.label][d.result]++;
    s.times.push(d.decidedAfterMs);
    (sample.label === 'machine' ? s.machineTimes : s.humanTimes).push(d.decidedAfterMs);
    if (d.beepAtMs !== undefined && sample.beep) {
      s.beepHits++;
      s.beepLagMs.push(d.beepAtMs - (sample.beep.start / CORPUS_RATE) * 1000);
    } else if (d.beepAtMs !== undefined) s.falseBeeps++;
    const snr = s.bySnr.get(sample.snrDb) ?? { right: 0, n: 0 };
    snr.n++;
    if (d.result === sample.label) snr.right++;
    s.bySnr.set(sample.snrDb, snr);
    s.by[d.by] = (s.by[d.by] ?? 0) + 1;
  }
  s.accuracy = (matrix.human.human + matrix.machine.machine) / corpus.length;
  return s;
}

/** The confusion matrix, decision times and beeps of each detector on one source's answers. */
function report(corpus: AmdSample[], scores: Score[]): void {
  const beeps = corpus.filter((c) => c.beep).length;
  const rows = [['detector', 'truth', 'human', 'machine', 'unknown', 'accuracy', 'median ms', 'p95 ms']];
  for (const s of scores) {
    for (const truth of ['human', 'machine'] as const) {
      const m = s.matrix[truth];
      const t = truth === 'human' ? s.humanTimes : s.machineTimes;
      rows.push([s.variant.name, truth, String(m.human), String(m.machine), String(m.unknown), truth === 'human' ? s.accuracy.toFixed(3) : '', String(quantile(t, 0.5)), String(quantile(t, 0.95))]);
    }
  }
  process.stdout.write(`${table(rows)}\n\n`);
  for (const s of scores) {
    const snrs = [...s.bySnr.entries()].sort((a, b) => b[0] - a[0]).map(([db, x]) => `${db} dB ${(x.right / x.n).toFixed(2)}`);
    process.stdout.write(`${s.variant.name}: decided by ${Object.entries(s.by).map(([k, n]) => `${k} ${n}`).join(', ')}; all answers median ${quantile(s.times, 0.5)} ms, p95 ${quantile(s.times, 0.95)} ms; accuracy by SNR: ${snrs.join(', ')}\n`);
    if (s.variant.beep) process.stdout.write(`  beeps heard ${s.beepHits}/${beeps} (reported a median ${quantile(s.beepLagMs, 0.5)} ms, p95 ${quantile(s.beepLagMs, 0.95)} ms after the beep began), false beeps ${s.falseBeeps}/${corpus.length - beeps}\n`);
  }
}

/** RESULT figures of one source; `prefix` keeps the espeak-ng names as they were (amd_...) and puts real ones under amd_real_... */
function figuresOf(scores: Score[], prefix: string): Figure[] {
  const base = scores[0]!;
  const figures: Figure[] = [];
  for (const s of scores) {
    const name = ['cadence', ...s.variant.name.split('+').filter(Boolean)].filter((x, i, a) => a.indexOf(x) === i).join('_');
    figures.push({ name: `${prefix}_accuracy_${name}`, value: s.accuracy, unit: 'share', baseline: base.accuracy, note: `${s.variant.name} vs cadence alone` });
    figures.push({ name: `${prefix}_decision_p95_${name}`, value: quantile(s.times, 0.95), unit: 'ms', baseline: quantile(base.times, 0.95), note: `${s.variant.name} vs cadence alone` });
    figures.push({ name: `${prefix}_machine_decision_median_${name}`, value: quantile(s.machineTimes, 0.5), unit: 'ms', baseline: quantile(base.machineTimes, 0.5), note: 'machines only' });
  }
  return figures;
}

function describeSet(corpus: AmdSample[]): string {
  const humans = corpus.filter((c) => c.label === 'human').length;
  const beeps = corpus.filter((c) => c.beep).length;
  return `${corpus.length} answers (${humans} human, ${corpus.length - humans} machine, ${beeps} with a beep)`;
}

export async function run(): Promise<void> {
  const count = arg('count', 120);
  const realCount = arg('real-count', 60);
  const seed = arg('seed', 2026);
  const synthetic = await amdCorpus({ count, seed });
  const real = await realAmdCorpus({ count: realCount, seed });
  await initResamplers();
  await loadRnnoise();
  process.stdout.write(`sources, seed ${seed}:\n  espeak-ng (synthetic voices): ${describeSet(synthetic)}\n`);
  process.stdout.write(
    real === undefined
      ? `  alsa-utils real recordings: ABSENT (${ALSA_SOUNDS_DIR} not found; apt-get install alsa-utils to add them): espeak-ng only\n\n`
      : `  alsa-utils real recordings (${ALSA_SOUNDS_DIR}, one voice): ${describeSet(real)}\n\n`,
  );
  const sources: Array<{ name: string; prefix: string; corpus: AmdSample[] }> = [{ name: 'espeak-ng', prefix: 'amd', corpus: synthetic }];
  if (real !== undefined) sources.push({ name: 'alsa-utils (real recordings)', prefix: 'amd_real', corpus: real });
  const figures: Figure[] = [];
  for (const source of sources) {
    process.stdout.write(`== ${source.name}: ${describeSet(source.corpus)}\n`);
    const scores = VARIANTS.map((v) => score(source.corpus, v));
    report(source.corpus, scores);
    process.stdout.write('\n');
    figures.push(...figuresOf(scores, source.prefix));
  }
  printFigures(real === undefined ? 'answering-machine detection (espeak-ng only: alsa-utils absent)' : 'answering-machine detection (espeak-ng and alsa-utils recordings)', figures);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await run();
  process.exit(0);
}
