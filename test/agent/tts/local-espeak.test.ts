/**
 * The eSpeak-NG voice, with the real WASM engine. eSpeak adds a little random pitch flutter, so
 * two syntheses of one text are not bit-identical: assertions are on duration and energy.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import espeakFactory from '@echogarden/espeak-ng-emscripten';
import { TtsError } from '../../../src/agent/errors.ts';
import { RUNTIME_SAMPLE_RATE } from '../../../src/agent/providers/types.ts';
import {
  ESPEAK_SAMPLE_RATE,
  espeakRateFor,
  espeakVoicesFor,
  ESPEAK_MODULE_URL,
  LocalEspeakProvider,
} from '../../../src/agent/providers/tts/local-espeak.ts';
import { collect, concat, rejection, request, rms } from './helpers.ts';

const SENTENCE = 'Hello, thank you for calling. How can I help you today?';
const seconds = (samples: Int16Array): number => samples.length / RUNTIME_SAMPLE_RATE;

describe('LocalEspeakProvider (real eSpeak-NG WASM)', () => {
  const tts = new LocalEspeakProvider();
  beforeAll(() => tts.warmUp());

  it('speaks a sentence: plausible duration, energy well above silence, an envelope like speech', async () => {
    const chunks = await collect(tts, request(SENTENCE));
    const audio = concat(chunks);
    expect(chunks.length).toBeGreaterThan(5); // streamed in espeak's ~100 ms buffers, not one blob
    expect(seconds(audio)).toBeGreaterThan(1.5);
    expect(seconds(audio)).toBeLessThan(6);
    expect(rms(audio)).toBeGreaterThan(500); // silence is 0; espeak speaks at several thousand
    // Speech has loud syllables and quiet gaps: 20 ms frame energies spread widely.
    const frames: number[] = [];
    for (let i = 0; i + 480 <= audio.length; i += 480) frames.push(rms(audio, i, i + 480));
    expect(Math.max(...frames)).toBeGreaterThan(20 * Math.max(1, Math.min(...frames)));
  });

  it('outputs 24 kHz: length matches what espeak itself renders at 22050 Hz, rescaled', async () => {
    const mod = await espeakFactory(); // a separate engine instance as the reference
    const worker = new mod.eSpeakNGWorker();
    worker.set_voice('', 'en-us');
    let native = 0;
    worker.synthesize(SENTENCE, (s) => {
      native += s.length;
      return false;
    });
    const ours = concat(await collect(tts, request(SENTENCE))).length;
    const expected = (native * RUNTIME_SAMPLE_RATE) / ESPEAK_SAMPLE_RATE;
    expect(Math.abs(ours - expected) / expected).toBeLessThan(0.03); // flutter varies length ~0.1%
  });

  it('different text gives different audio', async () => {
    const short = concat(await collect(tts, request('Yes.')));
    const long = concat(await collect(tts, request(SENTENCE)));
    expect(seconds(short)).toBeGreaterThan(0.1);
    expect(seconds(long)).toBeGreaterThan(2 * seconds(short));
  });

  it('speed 2 is shorter than speed 1; speed 0 means the default', async () => {
    const normal = seconds(concat(await collect(tts, request(SENTENCE, { speed: 1 }))));
    const fast = seconds(concat(await collect(tts, request(SENTENCE, { speed: 2 }))));
    const dflt = seconds(concat(await collect(tts, request(SENTENCE, { speed: 0 }))));
    expect(fast).toBeLessThan(0.75 * normal);
    expect(Math.abs(dflt - normal) / normal).toBeLessThan(0.05);
  });

  it('volume is a gain on the output', async () => {
    const full = rms(concat(await collect(tts, request(SENTENCE))));
    const half = rms(concat(await collect(tts, request(SENTENCE, { volume: 0.5 }))));
    expect(half / full).toBeGreaterThan(0.4);
    expect(half / full).toBeLessThan(0.6);
  });

  it('speaks the agent language: Spanish text in es differs from the English voice reading it', async () => {
    const text = 'Buenos días, gracias por llamar. ¿En qué puedo ayudarle hoy?';
    const es = seconds(concat(await collect(tts, request(text, { language: 'es' }))));
    const en = seconds(concat(await collect(tts, request(text, { language: 'en' }))));
    const multi = seconds(concat(await collect(tts, request(text, { language: 'multi' }))));
    expect(Math.abs(es - en) / en).toBeGreaterThan(0.03);
    expect(Math.abs(multi - en) / en).toBeLessThan(0.02);
  });

  it('stops at an abort between chunks, and yields nothing when aborted before', async () => {
    const full = (await collect(tts, request(SENTENCE))).length;
    const ac = new AbortController();
    let got = 0;
    for await (const _chunk of tts.synthesize(request(SENTENCE, { signal: ac.signal }))) {
      got++;
      if (got === 2) ac.abort();
    }
    expect(got).toBe(2);
    expect(full).toBeGreaterThan(4);
    const pre = new AbortController();
    pre.abort();
    expect(await collect(tts, request(SENTENCE, { signal: pre.signal }))).toEqual([]);
  });

  it('yields nothing for empty text', async () => {
    expect(await collect(tts, request('   '))).toEqual([]);
  });

  it('starts one engine for concurrent callers, and keeps serving after an abort', async () => {
    const own = new LocalEspeakProvider({ moduleUrl: `${ESPEAK_MODULE_URL}?instance=concurrency` });
    const before = LocalEspeakProvider.engineStarts;
    const ac = new AbortController();
    const first = (async () => {
      let n = 0;
      for await (const _c of own.synthesize(request(`${SENTENCE} ${SENTENCE} ${SENTENCE}`, { signal: ac.signal }))) {
        if (++n === 1) ac.abort();
      }
      return n;
    })();
    const [n, b, c] = await Promise.all([first, collect(own, request('Two.')), collect(own, request('Three.'))]);
    expect(LocalEspeakProvider.engineStarts).toBe(before + 1);
    expect(n).toBe(1);
    expect(b.length).toBeGreaterThan(0);
    expect(c.length).toBeGreaterThan(0);
  });

  it('a WASM module that fails to load is LOCAL_ENGINE_FAILED, and a later call starts afresh', async () => {
    const broken = new LocalEspeakProvider({
      moduleUrl: 'data:text/javascript,export default async () => { throw new Error("bad wasm magic") }',
    });
    const before = LocalEspeakProvider.engineStarts;
    const err = await rejection(collect(broken, request('Hello.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('LOCAL_ENGINE_FAILED');
    expect(String(err.cause?.message)).toContain('bad wasm magic');
    const again = await rejection(collect(broken, request('Hello.')));
    expect(again.code).toBe('LOCAL_ENGINE_FAILED');
    expect(LocalEspeakProvider.engineStarts).toBe(before + 2);
  });

  it('a missing module file is LOCAL_ENGINE_FAILED too', async () => {
    const missing = new LocalEspeakProvider({ moduleUrl: new URL('./no-such-espeak.js', ESPEAK_MODULE_URL).href });
    const err = await rejection(collect(missing, request('Hello.')));
    expect(err.code).toBe('LOCAL_ENGINE_FAILED');
  });
});

describe('espeak mappings', () => {
  it('maps languages to espeak voices with fallbacks', () => {
    expect(espeakVoicesFor('multi')).toEqual(['en-us']);
    expect(espeakVoicesFor('en')).toEqual(['en-us']);
    expect(espeakVoicesFor('es')).toEqual(['es', 'en-us']);
    expect(espeakVoicesFor('pt_BR')).toEqual(['pt-br', 'pt', 'en-us']);
  });

  it('maps speed to words per minute within espeak limits', () => {
    expect(espeakRateFor(undefined)).toBe(175);
    expect(espeakRateFor(0)).toBe(175);
    expect(espeakRateFor(1.2)).toBe(210);
    expect(espeakRateFor(10)).toBe(450);
    expect(espeakRateFor(0.1)).toBe(80);
  });
});
