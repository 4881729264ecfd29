/**
 * bench/resampler-compare: the two resampler candidates of src/media/resampler.ts side by side,
 * for every rate pair the media engine uses (8k, 16k, 48k <-> 24k):
 *
 *   - cost: microseconds per 20 ms frame (median of BENCH_ROUNDS rounds of 1,000 frames each,
 *     after a 2,000-frame warm-up, candidates interleaved round by round so drift hits all alike);
 *   - quality: passband gain spread (ripple) over the band, the worst image (upsampling) or alias
 *     (downsampling) re the input tone, measured as in test/media/resampler.test.ts;
 *   - delay: the algorithmic delay in ms.
 *
 * Candidates: the polyphase FIR ('fir'), speex WASM SIMD at qualities 3, 4, 5 and the non-SIMD
 * build at the default quality. "Meets the bar" = ripple <= 0.5 dB, |gain| <= 0.5 dB and images
 * / aliases <= -60 dB on every pair. The decision rule: of those meeting the bar, the
 * one cheapest on the telephone path (8k->24k + 24k->8k together) is the default.
 *
 * RESULT lines: per pair, the default's us/frame with the FIR as baseline and the FIR's with the
 * default as baseline; the telephone round trip (both directions) likewise; its image rejection.
 * Then the codecs' per-frame cost: the G.711 lookup tables against alawmulaw's own functions
 * (the baseline they replace), and Opus encode + decode against G.711 encode + decode.
 * Run: `npm run bench -- resampler-compare` (or `npx tsx bench/resampler-compare.ts`).
 */
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import {
  createResampler,
  DEFAULT_RESAMPLER_IMPL,
  DEFAULT_SPEEX_QUALITY,
  initResamplers,
  type ResamplerOptions,
} from '../src/media/resampler.ts';
import type { Resampler } from '../src/media/types.ts';
import { createPcmu } from '../src/media/g711.ts';
import { OpusCodec } from '../src/media/opus.ts';
import alawmulaw from 'alawmulaw';
import { speechLike, toneThrough, tone } from '../test/media/signal-analysis.ts';
import { formatValue, printFigures, table, type Figure } from './lib/result.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 9);
const FRAMES_PER_ROUND = 1000;

interface Candidate {
  name: string;
  options: ResamplerOptions;
}

const CANDIDATES: Candidate[] = [
  { name: 'fir', options: { impl: 'fir' } },
  { name: 'speex-q3', options: { impl: 'speex', quality: 3 } },
  { name: 'speex-q4', options: { impl: 'speex', quality: 4 } },
  { name: 'speex-q5', options: { impl: 'speex', quality: 5 } },
  { name: `speex-q${DEFAULT_SPEEX_QUALITY}-nosimd`, options: { impl: 'speex', quality: DEFAULT_SPEEX_QUALITY, variant: 'plain' } },
];
const DEFAULT_NAME = DEFAULT_RESAMPLER_IMPL === 'fir' ? 'fir' : `speex-q${DEFAULT_SPEEX_QUALITY}`;

interface Pair {
  from: number;
  to: number;
  /** Tones that must pass flat. */
  pass: number[];
  /** For upsampling: the image frequencies of a passband tone inside the output band. */
  images: (f: number) => number[];
  /** For downsampling: out-of-band tones whose aliases must be rejected. */
  reject: number[];
}

const PAIRS: Pair[] = [
  { from: 8000, to: 24000, pass: [300, 1000, 2000, 3000, 3400], images: (f) => [8000 - f, 8000 + f], reject: [] },
  { from: 24000, to: 8000, pass: [300, 1000, 2000, 3000, 3400], images: () => [], reject: [4600, 5000, 6000] },
  { from: 16000, to: 24000, pass: [300, 1000, 4000, 6800], images: (f) => [16000 - f], reject: [] },
  { from: 24000, to: 16000, pass: [300, 1000, 4000, 6800], images: () => [], reject: [9200, 10000, 11500] },
  { from: 48000, to: 24000, pass: [300, 1000, 5000, 10000], images: () => [], reject: [13800, 16000, 20000] },
  { from: 24000, to: 48000, pass: [300, 1000, 5000, 10000], images: (f) => [24000 - f], reject: [] },
];

const pairName = (p: Pair) => `${p.from / 1000}k_${p.to / 1000}k`;

interface Quality {
  rippleDb: number;
  worstGainDb: number;
  /** Worst image or alias re the tone, dB (-Infinity: nothing above 1 LSB). */
  rejectionDb: number;
  delayMs: number;
  meetsBar: boolean;
}

function measureQuality(c: Candidate, p: Pair): Quality {
  const make = () => createResampler(p.from, p.to, c.options);
  const gains: number[] = [];
  let rejection = -Infinity;
  for (const f of p.pass) {
    const r = toneThrough(make, f, p.images(f));
    gains.push(r.gainDb);
    for (const img of r.probesDb) rejection = Math.max(rejection, img - r.gainDb);
  }
  for (const f of p.reject) rejection = Math.max(rejection, toneThrough(make, f).gainDb);
  const probe = make();
  const delayMs = (probe.delaySamples / p.to) * 1000;
  probe.close();
  const rippleDb = Math.max(...gains) - Math.min(...gains);
  const worstGainDb = gains.reduce((w, g) => (Math.abs(g) > Math.abs(w) ? g : w), 0);
  return { rippleDb, worstGainDb, rejectionDb: rejection, delayMs, meetsBar: rippleDb <= 0.5 && Math.abs(worstGainDb) <= 0.5 && rejection <= -60 };
}

/** us per 20 ms frame of each candidate on one pair: medians over interleaved rounds. */
function measureCost(p: Pair): Map<string, number> {
  const frame = tone(1000, p.from, 0.02, 10000);
  for (let i = 0; i < frame.length; i++) frame[i] = frame[i]! + ((i * 7919) % 200) - 100; // some broadband content
  const resamplers = new Map<string, Resampler>(CANDIDATES.map((c) => [c.name, createResampler(p.from, p.to, c.options)]));
  const samples = new Map<string, number[]>(CANDIDATES.map((c) => [c.name, []]));
  for (const r of resamplers.values()) for (let i = 0; i < 2000; i++) r.process(frame);
  let sink = 0;
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, r] of resamplers) {
      const t0 = performance.now();
      for (let i = 0; i < FRAMES_PER_ROUND; i++) sink += r.process(frame)[0]!;
      samples.get(name)!.push(((performance.now() - t0) * 1000) / FRAMES_PER_ROUND);
    }
  }
  for (const r of resamplers.values()) r.close();
  if (!Number.isFinite(sink)) throw new Error('unreachable: keeps the work observable');
  const medians = new Map<string, number>();
  for (const [name, s] of samples) {
    s.sort((a, b) => a - b);
    const m = s[Math.floor(s.length / 2)]!;
    if (!(m > 0)) throw new Error(`invalid timing for ${name} ${pairName(p)}: ${m}`);
    medians.set(name, m);
  }
  return medians;
}

/** Median us per call of fn over interleaved rounds (after a warm-up). */
function timeEach(fns: Record<string, () => number>, calls = FRAMES_PER_ROUND): Record<string, number> {
  const names = Object.keys(fns);
  const samples: Record<string, number[]> = Object.fromEntries(names.map((n) => [n, []]));
  let sink = 0;
  for (const n of names) for (let i = 0; i < 2000; i++) sink += fns[n]!();
  for (let round = 0; round < ROUNDS; round++) {
    for (const n of names) {
      const fn = fns[n]!;
      const t0 = performance.now();
      for (let i = 0; i < calls; i++) sink += fn();
      samples[n]!.push(((performance.now() - t0) * 1000) / calls);
    }
  }
  if (!Number.isFinite(sink)) throw new Error('unreachable: keeps the work observable');
  return Object.fromEntries(names.map((n) => [n, samples[n]!.sort((a, b) => a - b)[Math.floor(ROUNDS / 2)]!]));
}

function codecFigures(): Figure[] {
  const pcmu = createPcmu();
  const pcm8 = speechLike(0.02, -20, 3);
  const codes = new Uint8Array(160);
  const decoded = new Int16Array(160);
  pcmu.encode(pcm8, codes);
  const opus = new OpusCodec();
  const pcm48 = tone(440, 48000, 0.02, 8000);
  const packet = new Uint8Array(1500);
  const pcmOut = new Int16Array(960);
  const t = timeEach({
    tableDecode: () => pcmu.decode(codes, decoded),
    libDecode: () => alawmulaw.mulaw.decode(codes).length,
    tableEncode: () => pcmu.encode(pcm8, codes),
    libEncode: () => alawmulaw.mulaw.encode(pcm8).length,
    opus: () => opus.decode(packet.subarray(0, opus.encode(pcm48, packet)), pcmOut),
  });
  opus.close();
  const g711Both = t.tableDecode! + t.tableEncode!;
  return [
    { name: 'g711_pcmu_decode_us', value: t.tableDecode!, unit: 'us', baseline: t.libDecode!, note: '160-sample frame, lookup table into a caller buffer; baseline alawmulaw.decode' },
    { name: 'g711_pcmu_encode_us', value: t.tableEncode!, unit: 'us', baseline: t.libEncode!, note: '160-sample frame, 64 KiB table; baseline alawmulaw.encode' },
    { name: 'opus_encode_decode_us', value: t.opus!, unit: 'us', baseline: g711Both, note: '960-sample frame, 32 kbit/s VOIP voice, complexity 5, encode + decode; baseline PCMU encode + decode' },
  ];
}

export async function run(): Promise<void> {
  await initResamplers({ plain: true });
  const write = (s: string) => process.stdout.write(s);
  write(`resampler comparison: ${ROUNDS} rounds x ${FRAMES_PER_ROUND} frames of 20 ms per candidate and pair, node ${process.version}\n`);

  const cost = new Map<string, Map<string, number>>(); // pair -> candidate -> us
  const quality = new Map<string, Map<string, Quality>>();
  const rows = [['pair', 'candidate', 'us/frame', 'ripple dB', 'worst gain dB', 'image/alias dB', 'delay ms', 'bar']];
  for (const p of PAIRS) {
    const costs = measureCost(p);
    const qualities = new Map<string, Quality>();
    for (const c of CANDIDATES) {
      const q = measureQuality(c, p);
      qualities.set(c.name, q);
      rows.push([
        pairName(p),
        c.name,
        formatValue(costs.get(c.name)!),
        q.rippleDb.toFixed(3),
        q.worstGainDb.toFixed(3),
        Number.isFinite(q.rejectionDb) ? q.rejectionDb.toFixed(1) : '<-96',
        q.delayMs.toFixed(2),
        q.meetsBar ? 'ok' : 'FAIL',
      ]);
    }
    cost.set(pairName(p), costs);
    quality.set(pairName(p), qualities);
  }
  write(`\n${table(rows)}\n`);

  // Decision: cheapest on the telephone path among candidates meeting the bar on every pair.
  const telephone = (name: string) => cost.get('8k_24k')!.get(name)! + cost.get('24k_8k')!.get(name)!;
  const eligible = CANDIDATES.filter((c) => [...quality.values()].every((q) => q.get(c.name)!.meetsBar)).map((c) => c.name);
  const best = eligible.sort((a, b) => telephone(a) - telephone(b))[0];
  write(`\nmeets the bar on every pair: ${eligible.join(', ') || 'none'}\n`);
  write(`cheapest of those on 8k->24k + 24k->8k: ${best ?? 'none'}; createResampler() default: ${DEFAULT_NAME}${best === DEFAULT_NAME ? '' : '  <-- differs: revisit src/media/resampler.ts'}\n`);

  const figures: Figure[] = [];
  for (const p of PAIRS) {
    const c = cost.get(pairName(p))!;
    figures.push({ name: `resample_${pairName(p)}_us`, value: c.get(DEFAULT_NAME)!, unit: 'us', baseline: c.get('fir')!, note: `${DEFAULT_NAME} per 20 ms frame; baseline fir` });
  }
  for (const p of PAIRS) {
    const c = cost.get(pairName(p))!;
    figures.push({ name: `resample_${pairName(p)}_fir_us`, value: c.get('fir')!, unit: 'us', baseline: c.get(DEFAULT_NAME)!, note: `fir per 20 ms frame; baseline ${DEFAULT_NAME}` });
  }
  figures.push({ name: 'resample_telephone_roundtrip_us', value: telephone(DEFAULT_NAME), unit: 'us', baseline: telephone('fir'), note: `8k->24k + 24k->8k, ${DEFAULT_NAME}; baseline fir` });
  const q = (pair: string, name: string) => quality.get(pair)!.get(name)!;
  const finiteDb = (v: number) => (Number.isFinite(v) ? v : -96); // below 1 LSB of int16
  figures.push({ name: 'resample_8k_24k_image_db', value: finiteDb(q('8k_24k', DEFAULT_NAME).rejectionDb), unit: 'dB', baseline: finiteDb(q('8k_24k', 'fir').rejectionDb), note: 'worst image re tone; baseline fir' });
  figures.push({ name: 'resample_24k_8k_alias_db', value: finiteDb(q('24k_8k', DEFAULT_NAME).rejectionDb), unit: 'dB', baseline: finiteDb(q('24k_8k', 'fir').rejectionDb), note: 'worst alias 4.6-6 kHz; -96 = below 1 LSB; baseline fir' });
  figures.push({ name: 'resample_8k_24k_delay_ms', value: q('8k_24k', DEFAULT_NAME).delayMs, unit: 'ms', baseline: q('8k_24k', 'fir').delayMs, note: 'algorithmic delay; baseline fir' });
  printFigures('resampler: chosen implementation against the polyphase FIR', figures, write);
  printFigures('codecs: per 20 ms frame', codecFigures(), write);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await run();
