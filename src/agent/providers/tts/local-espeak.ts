/**
 * The zero-configuration voice: eSpeak-NG (GPL-3.0) compiled to WASM by
 * @echogarden/espeak-ng-emscripten. Robotic, but needs no vendor, no key and no network, so a
 * fresh install can hold a phone conversation.
 *
 * The package exposes espeak-ng's emscripten glue: an `eSpeakNGWorker` whose `synthesize()` runs
 * espeak in AUDIO_OUTPUT_SYNCHRONOUS mode and calls back with each ~100 ms buffer of 22050 Hz
 * PCM16. That call is synchronous, and measured on the 2-core build machine (Node 20, other
 * test suites running) it is slow until V8 has tiered up the WASM: a 10-word sentence ("Hello,
 * thank you for calling. How can I help you today?", 3.4 s of audio) takes 250-500 ms for the
 * first few calls and 20-60 ms afterwards (60-150x real time), the first audio of a sentence
 * arriving after 3-20 ms; loading the module (24 MB of voice data) plus warm-up takes 0.3 s idle,
 * up to 1.4 s under load. Run on the main thread, those stalls would hit every
 * call's 20 ms RTP pacing, so the engine lives in one worker thread per process (still
 * in-process): it posts each buffer as espeak produces it, so the first audio arrives before
 * the sentence is finished, and an abort reaches into a running synthesis through a shared flag
 * that the callback reads (returning true stops espeak).
 *
 * The worker's source is a string run from a data: URL: a separate .ts file would need a
 * TypeScript loader inside the worker, and a .js file would be left out of the tsc build.
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { createResampler, initResamplers } from '../../../media/resampler.ts';
import { TtsError } from '../../errors.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from '../types.ts';
import { applyGain, volumeGain } from './pcm.ts';

/** eSpeak-NG's output rate, for every voice. */
export const ESPEAK_SAMPLE_RATE = 22_050;
/** eSpeak's default speaking rate in words per minute: TtsRequest.speed 1.0. */
export const ESPEAK_DEFAULT_WPM = 175;
/** eSpeak's limits of the rate (the binding passes anything through; espeak would clamp). */
export const ESPEAK_MIN_WPM = 80;
export const ESPEAK_MAX_WPM = 450;
/** What `multi`, `en` and any unknown language speak: the US English voice. */
const FALLBACK_VOICE = 'en-us';

/** The npm package's entry, as a URL the worker can import. */
export const ESPEAK_MODULE_URL = pathToFileURL(createRequire(import.meta.url).resolve('@echogarden/espeak-ng-emscripten')).href;

// Plain JS, run as an ES module in the worker. Messages out: ready | failed | audio | done | error.
// The "Ready." synthesis pays part of the JIT warm-up at load instead of on a caller's turn.
const WORKER_SOURCE = `
import { parentPort, workerData } from 'node:worker_threads';
const abortedJob = new Int32Array(workerData.abortBuffer);
let espeak;
try {
  const mod = await (await import(workerData.moduleUrl)).default();
  espeak = new mod.eSpeakNGWorker();
  espeak.set_voice('', ${JSON.stringify(FALLBACK_VOICE)});
  espeak.synthesize('Ready.', () => false);
  parentPort.postMessage({ type: 'ready', rate: espeak.get_samplerate() });
} catch (err) {
  parentPort.postMessage({ type: 'failed', message: String(err && err.message || err) });
}
parentPort.on('message', (job) => {
  try {
    if (!job.voices.some((v) => espeak.set_voice('', v) === 0)) throw new Error('no voice among ' + job.voices.join(', '));
    espeak.set_rate(job.rate);
    espeak.synthesize(job.text, (samples) => {
      if (Atomics.load(abortedJob, 0) === job.id) return true;
      if (samples.length > 0) parentPort.postMessage({ type: 'audio', id: job.id, samples }, [samples.buffer]);
      return false;
    });
    parentPort.postMessage({ type: 'done', id: job.id });
  } catch (err) {
    parentPort.postMessage({ type: 'error', id: job.id, message: String(err && err.message || err) });
  }
});
`;

type WorkerMessage =
  | { type: 'ready'; rate: number }
  | { type: 'failed'; message: string }
  | { type: 'audio'; id: number; samples: Int16Array }
  | { type: 'done'; id: number }
  | { type: 'error'; id: number; message: string };

/** The 22050 Hz buffers of one job, consumed by one synthesize() call. */
class Job {
  readonly buffers: Int16Array[] = [];
  ended = false;
  failure: TtsError | undefined;
  private wake: (() => void) | undefined;
  constructor(
    readonly id: number,
    readonly message: { id: number; text: string; voices: string[]; rate: number },
  ) {}
  notify(): void {
    this.wake?.();
    this.wake = undefined;
  }
  next(): Promise<void> {
    return new Promise((resolve) => (this.wake = resolve));
  }
}

/** One worker running espeak; jobs run one at a time, in order. */
class EspeakEngine {
  static starts = 0;
  readonly ready: Promise<void>;
  private readonly worker: Worker;
  private readonly abortedJob = new Int32Array(new SharedArrayBuffer(4));
  private readonly queue: Job[] = [];
  private current: Job | undefined;
  private nextId = 1;
  private dead: TtsError | undefined;

  constructor(moduleUrl: string, onDeath: () => void) {
    EspeakEngine.starts++;
    this.worker = new Worker(new URL(`data:text/javascript,${encodeURIComponent(WORKER_SOURCE)}`), {
      workerData: { moduleUrl, abortBuffer: this.abortedJob.buffer },
    });
    const die = (cause: unknown): void => {
      if (this.dead !== undefined) return;
      this.dead = new TtsError('LOCAL_ENGINE_FAILED', 'eSpeak-NG (WASM) failed', { cause });
      for (const job of [...(this.current ? [this.current] : []), ...this.queue]) this.finish(job, this.dead);
      this.queue.length = 0;
      this.current = undefined;
      void this.worker.terminate();
      onDeath();
    };
    this.ready = new Promise<void>((resolve, reject) => {
      this.worker.on('message', (msg: WorkerMessage) => {
        if (msg.type === 'ready') {
          if (msg.rate === ESPEAK_SAMPLE_RATE) return resolve();
          die(new Error(`eSpeak-NG reports ${msg.rate} Hz, expected ${ESPEAK_SAMPLE_RATE}`));
        } else if (msg.type === 'failed') {
          die(new Error(msg.message));
        } else {
          this.onJobMessage(msg);
        }
        if (this.dead !== undefined) reject(this.dead);
      });
      this.worker.on('error', (err) => {
        die(err);
        reject(this.dead);
      });
      this.worker.on('exit', (code) => {
        die(new Error(`espeak worker exited (${code})`));
        reject(this.dead);
      });
    });
    this.ready.catch(() => {}); // observed by whoever awaits it; never unhandled
    // An idle voice must not keep the process (or a test run) alive, a busy one must (someone
    // awaits it): ref'd until ready, then only while a job runs (see pump()).
    void this.ready.then(() => this.pump(), () => {});
  }

  submit(text: string, voices: string[], rate: number): Job {
    const id = this.nextId++;
    const job = new Job(id, { id, text, voices, rate });
    if (this.dead !== undefined) this.finish(job, this.dead);
    else this.queue.push(job);
    this.pump();
    return job;
  }

  /** Stops a job: skipped when queued; when running, espeak stops at its next buffer. */
  cancel(job: Job): void {
    if (job.ended) return;
    const at = this.queue.indexOf(job);
    if (at >= 0) this.queue.splice(at, 1);
    else if (this.current === job) Atomics.store(this.abortedJob, 0, job.id);
    job.ended = true;
  }

  private pump(): void {
    if (this.current !== undefined || this.dead !== undefined) return;
    const job = this.queue.shift();
    if (job === undefined) {
      this.worker.unref();
      return;
    }
    this.worker.ref();
    this.current = job;
    this.worker.postMessage(job.message);
  }

  private onJobMessage(msg: Exclude<WorkerMessage, { type: 'ready' | 'failed' }>): void {
    const job = this.current;
    if (job === undefined || job.id !== msg.id) return;
    if (msg.type === 'audio') {
      if (!job.ended) job.buffers.push(msg.samples);
      job.notify();
      return;
    }
    this.current = undefined;
    this.finish(job, msg.type === 'error' ? new TtsError('LOCAL_ENGINE_FAILED', `eSpeak-NG synthesis failed: ${msg.message}`) : undefined);
    this.pump();
  }

  private finish(job: Job, failure: TtsError | undefined): void {
    if (!job.ended && failure !== undefined) job.failure = failure;
    job.ended = true;
    job.notify();
  }
}

/** Engines by module URL: one per process for the real package (tests may load another URL). */
const engines = new Map<string, EspeakEngine>();

/**
 * The espeak language tags to try for an agent language, best first: the tag itself, its
 * primary subtag, then US English (better an accent than silence on a live call).
 */
export function espeakVoicesFor(language: string): string[] {
  const tag = language.trim().toLowerCase().replace(/_/g, '-');
  if (tag === '' || tag === 'multi' || tag === 'en') return [FALLBACK_VOICE];
  return [...new Set([tag, tag.split('-')[0]!, FALLBACK_VOICE])];
}

/** TtsRequest.speed (1.0 = default) to espeak words per minute, within espeak's limits. */
export function espeakRateFor(speed: number | undefined): number {
  const factor = speed !== undefined && Number.isFinite(speed) && speed > 0 ? speed : 1;
  return Math.min(ESPEAK_MAX_WPM, Math.max(ESPEAK_MIN_WPM, Math.round(ESPEAK_DEFAULT_WPM * factor)));
}

export interface LocalEspeakOptions {
  /** Provider name (the config slot); default 'local'. */
  name?: string;
  /** The Emscripten module to load; default the npm package (tests point at a broken one). */
  moduleUrl?: string;
}

export class LocalEspeakProvider implements TtsProvider {
  /** How many engines (worker threads) have been started in this process. */
  static get engineStarts(): number {
    return EspeakEngine.starts;
  }

  readonly name: string;
  private readonly moduleUrl: string;

  constructor(options: LocalEspeakOptions = {}) {
    this.name = options.name ?? 'local';
    this.moduleUrl = options.moduleUrl ?? ESPEAK_MODULE_URL;
  }

  /**
   * Starts the engine now (idempotent, shared by concurrent callers); call at start-up to keep
   * the load off the first call. A failed engine is dropped, so a later call starts a new one.
   * @throws TtsError LOCAL_ENGINE_FAILED
   */
  async warmUp(): Promise<void> {
    await this.engine();
  }

  private async engine(): Promise<EspeakEngine> {
    const url = this.moduleUrl;
    let engine = engines.get(url);
    if (engine === undefined) {
      const created = new EspeakEngine(url, () => {
        if (engines.get(url) === created) engines.delete(url);
      });
      engines.set(url, created);
      engine = created;
    }
    try {
      await Promise.all([engine.ready, initResamplers()]);
    } catch (err) {
      if (err instanceof TtsError) throw err;
      throw new TtsError('LOCAL_ENGINE_FAILED', 'resampler for eSpeak-NG failed to load', { cause: err });
    }
    return engine;
  }

  /** @throws TtsError LOCAL_ENGINE_FAILED when the WASM cannot be loaded or fails while running. */
  async *synthesize(request: TtsRequest): AsyncIterable<Int16Array> {
    const { signal } = request;
    if (signal.aborted || request.text.trim() === '') return;
    const engine = await this.engine();
    if (signal.aborted) return;
    const job = engine.submit(request.text, espeakVoicesFor(request.language), espeakRateFor(request.speed));
    const onAbort = (): void => {
      engine.cancel(job);
      job.notify();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    const gain = volumeGain(request.volume);
    const resampler = createResampler(ESPEAK_SAMPLE_RATE, RUNTIME_SAMPLE_RATE);
    // process() returns a view it reuses: copy before yielding.
    const convert = (samples: Int16Array): Int16Array => applyGain(resampler.process(samples).slice(), gain);
    try {
      for (;;) {
        if (signal.aborted) return;
        const buffer = job.buffers.shift();
        if (buffer !== undefined) {
          const out = convert(buffer);
          if (out.length > 0) yield out;
          continue;
        }
        if (job.failure !== undefined) throw job.failure;
        if (job.ended) break;
        await job.next();
      }
      // Flush the resampler's delay line: the last few ms of speech are still inside it.
      const tail = convert(new Int16Array(Math.ceil((resampler.delaySamples * ESPEAK_SAMPLE_RATE) / RUNTIME_SAMPLE_RATE) + 1));
      if (tail.length > 0 && !signal.aborted) yield tail;
    } finally {
      signal.removeEventListener('abort', onAbort);
      engine.cancel(job); // no-op when it ended; stops espeak when the consumer stopped early
      resampler.close();
    }
  }
}
