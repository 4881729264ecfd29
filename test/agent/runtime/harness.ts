/**
 * The harness of the runtime's stages: each stage is built alone on virtual time
 * (test/helpers/virtual-time.ts) with fakes for its vendors, fed inputs, and the events it emits
 * are recorded with the virtual time they came out at. A conversation of seconds runs in
 * milliseconds, and every deadline (stop_secs, the final-transcript grace, a tool's timeout,
 * silence_timeout_secs, default_timeout) is checked to the millisecond.
 */
import type { Agent } from '../../../src/domain/agent.ts';
import { createLogger, type Logger } from '../../../src/log.ts';
import type { ChatMessage, LlmDelta, SttHandlers, SttProvider, TtsProvider, TtsRequest } from '../../../src/agent/providers/types.ts';
import type { ModelStream } from '../../../src/agent/runtime/index.ts';
import { VirtualTime } from '../../helpers/virtual-time.ts';
import { frames } from '../vad/signals.ts';

/** Records what a stage emits, each event with the virtual time it came out at. */
export class EventLog<E extends { type: string }> {
  readonly list: Array<E & { at: number }> = [];
  constructor(private readonly time: VirtualTime) {}
  /** The stage's `emit`. */
  readonly emit = (event: E): void => {
    this.list.push({ ...event, at: this.time.now() });
  };
  types(): string[] {
    return this.list.map((e) => e.type);
  }
  of<T extends E['type']>(type: T): Array<Extract<E, { type: T }> & { at: number }> {
    return this.list.filter((e) => e.type === type) as Array<Extract<E, { type: T }> & { at: number }>;
  }
}

/** A logger whose lines the test can read. */
export function testLogger(): { log: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const log = createLogger('debug', { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { log, lines };
}

/** Feeds caller audio in 20 ms frames, moving virtual time 20 ms per frame (settling promises). */
export async function feedAudio(time: VirtualTime, pcm: Int16Array, sink: (frame: Int16Array) => void): Promise<void> {
  for (const frame of frames(pcm)) {
    sink(frame);
    await time.run(20);
  }
}

/**
 * A TTS that speaks every word as `msPerWord` of audio, one chunk per word (every sample of a
 * piece = its number in `requests`, from 1), and remembers each request and its signal. A piece
 * containing `failOn` fails before its first chunk.
 */
export function wordTts(msPerWord = 200, failOn?: string): { tts: TtsProvider; requests: TtsRequest[] } {
  const requests: TtsRequest[] = [];
  const tts: TtsProvider = {
    name: 'words',
    async *synthesize(req) {
      requests.push(req);
      const value = requests.length;
      if (failOn !== undefined && req.text.includes(failOn)) throw new Error(`cannot say ${req.text}`);
      for (const _word of req.text.split(/\s+/)) {
        if (req.signal.aborted) return;
        yield new Int16Array((24 * msPerWord) | 0).fill(value);
      }
    },
  };
  return { tts, requests };
}

/**
 * A TTS whose every piece the test releases by hand: `chunk(text)` lets one 40 ms chunk of the
 * piece out (every sample = the piece's number), `end(text)` / `fail(text)` ends it.
 */
export function manualTts(chunkSamples = 960) {
  const started: string[] = [];
  const signals = new Map<string, AbortSignal>();
  const steps = new Map<string, Array<'chunk' | 'end' | 'fail'>>();
  const waiters = new Map<string, () => void>();
  const step = (text: string, s: 'chunk' | 'end' | 'fail') => {
    steps.set(text, [...(steps.get(text) ?? []), s]);
    waiters.get(text)?.();
  };
  const tts: TtsProvider = {
    name: 'manual',
    async *synthesize(req: TtsRequest) {
      started.push(req.text);
      signals.set(req.text, req.signal);
      const value = Number(req.text.match(/\d+/)?.[0] ?? 0);
      for (;;) {
        const next = steps.get(req.text)?.shift();
        if (next === undefined) {
          await new Promise<void>((resolve, reject) => {
            waiters.set(req.text, resolve);
            req.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
          });
          continue;
        }
        if (next === 'end') return;
        if (next === 'fail') throw new Error(`tts failed on ${req.text}`);
        yield new Int16Array(chunkSamples).fill(value);
      }
    },
  };
  return { tts, started, signals, chunk: (t: string) => step(t, 'chunk'), end: (t: string) => step(t, 'end'), fail: (t: string) => step(t, 'fail') };
}

/**
 * One model call's script: the deltas it streams, an error it throws (after streaming nothing),
 * or 'hang': it streams nothing until its signal is aborted, then throws an AbortError.
 */
export type ModelStep = LlmDelta[] | Error | 'hang';

/** A model that plays `steps` in order, one per call, and records what each call was given. */
export function scriptedModel(steps: ModelStep[]): { model: ModelStream; calls: Array<{ messages: ChatMessage[]; tools: string[]; signal: AbortSignal }> } {
  const calls: Array<{ messages: ChatMessage[]; tools: string[]; signal: AbortSignal }> = [];
  const model: ModelStream = (messages, tools, signal) => {
    calls.push({ messages: structuredClone(messages), tools: tools.map((t) => t.name), signal });
    const step = steps.shift();
    return (async function* () {
      if (step === undefined) throw new Error('the script has no more model calls');
      if (step instanceof Error) throw step;
      if (step === 'hang') {
        await new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')), { once: true }));
        return;
      }
      for (const delta of step) yield delta;
    })();
  };
  return { model, calls };
}

export const text = (t: string): LlmDelta => ({ type: 'text', text: t });
export const toolCall = (id: string, name: string, args: Record<string, unknown> = {}): LlmDelta => ({ type: 'tool_call', call: { id, name, arguments: JSON.stringify(args) } });

/**
 * A recognizer the test drives: it records the runtime's calls, and answers each speechEnded()
 * with the final transcript `finalText` returns (on a microtask, like every real provider), or
 * with nothing when that is undefined.
 */
export function fakeStt(finalText: () => string | undefined = () => undefined) {
  const calls: string[] = [];
  let frames = 0;
  let handlers: SttHandlers | undefined;
  const provider: SttProvider = {
    name: 'fake',
    open(_options, h) {
      handlers = h;
      return {
        write: () => void frames++,
        speechStarted: () => void calls.push('speechStarted'),
        speechEnded: () => {
          calls.push('speechEnded');
          const t = finalText();
          if (t !== undefined) queueMicrotask(() => handlers!.onTranscript({ text: t, isFinal: true }));
        },
        close: () => void calls.push('close'),
      };
    },
  };
  return {
    provider,
    calls,
    frames: () => frames,
    transcript: (t: string, isFinal = true) => handlers!.onTranscript({ text: t, isFinal }),
    fail: (err: Error) => handlers!.onError(err),
  };
}

/** An agent as stored, with the defaults of a new agent (DESIGN.md) unless overridden. */
export function agentFixture(over: Partial<Agent> = {}): Agent {
  return {
    id: '00000000-0000-4000-8000-000000000001',
    name: 'stage test agent',
    status: 'active',
    phone_number_id: '',
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:00.000Z',
    llm: 'test/scripted',
    fallback_llm: 'test/scripted',
    prompt: 'Be brief.',
    first_message: 'Hello there. How can I help?',
    first_message_interruption_time: 0,
    default_language: 'en',
    summarize_calls: false,
    analysis_fields: [],
    noise_cancel_settings: { enabled: false, level: 50 },
    vad_settings: { start_secs: 0.2, stop_secs: 0.8, silence_timeout_secs: 10 },
    enable_first_message_outbound: true,
    voice_settings: { id: 'voice', provider: 'provider_1' },
    timeout_settings: { default_timeout: 1800, timeout_action: 'end_call', silence_counter: 2, silence_timeout_action: 'end_call' },
    keyterms: [],
    ...over,
  };
}
