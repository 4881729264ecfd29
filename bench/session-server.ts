/**
 * The daemon of `bench/session`, as its own process so that the load generator's CPU is not
 * counted: `startDaemon` exactly as main.ts composes it (store, REST API, /v1/connection, the
 * agent runtime built from the configuration by runtimeDepsFromConfig: local STT, local/echo
 * LLM, energy VAD), with one change: every voice provider is the real OpenAI-compatible TTS
 * adapter (`OpenAiSpeechProvider`) pointed at the bench's fake speech server, which answers at
 * once. The adapter is injected through runtimeDepsFromConfig's overrides rather than through
 * `tts.providers`, so the bench does not depend on that setting's shape. Agent turn timelines are
 * recorded, observed and stored as main.ts does for its own runtime (docs/latency.md).
 *
 * Run as its own process: `node --import tsx bench/session-server.ts`.
 *   BENCH_SESSION_DATA_DIR  data directory (required; the initial API key is written there)
 *   BENCH_SESSION_TTS_URL   base URL of the fake speech server, e.g. http://127.0.0.1:1234/v1
 *   BENCH_SESSION_VENDOR_TTS  optional: `tts.providers` entries (JSON) of vendor adapter types
 *     (cartesia, hume, minimax, fish) pointed at the bench's fake vendors; those voice providers
 *     use them, built by createTtsProviders as the daemon builds them, the others the fake above
 *   BENCH_SESSION_MAIN_REALTIME, BENCH_SESSION_LEAD_MS, BENCH_SESSION_CHUNK_MS  optional: the main
 *     thread's SCHED_RR priority, the runtime's pacing lead and chunk (diagnostics)
 * HTTP on 127.0.0.1 with an OS-chosen port, SIP off, log level warn. Prints `LISTENING <url>`
 * once it listens; SIGUSR2: prints `LOOPDELAY {...}`, the event loop's delay since the last
 * SIGUSR2 (the one addition to the daemon: a 5 ms histogram timer) and `ttsFirst`, the TTS
 * requests' wait for their first audio since then (p50/p99/max ms, n); SIGTERM or
 * SIGINT: drain (1 s) and exit.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startDaemon } from '../src/main.ts';
import { createTtsProviders, type TtsProviderConfig } from '../src/agent/providers/tts/index.ts';
import { OpenAiSpeechProvider } from '../src/agent/providers/tts/openai.ts';
import type { TtsProvider } from '../src/agent/providers/types.ts';

const dataDir = process.env.BENCH_SESSION_DATA_DIR;
const ttsUrl = process.env.BENCH_SESSION_TTS_URL;
if (!dataDir || !ttsUrl) throw new Error('BENCH_SESSION_DATA_DIR and BENCH_SESSION_TTS_URL are required');

const vendorEntries = JSON.parse(process.env.BENCH_SESSION_VENDOR_TTS ?? '[]') as Array<TtsProviderConfig & { voice_provider: string }>;
// The agents' voices must pass the voice catalog: the fake speech server's tone voices are listed
// as local voices (provider_1 is not in tts.providers, so the catalog takes it for the local
// voice), and the vendor slots are configured so the catalog serves them (their voice lists are
// not fetchable from the fakes, so their voice ids go unchecked).
const toneVoice = (id: string) => ({ id, name: id, languages: ['en'] });
const config = loadConfig(
  {
    data_dir: dataDir,
    http: { host: '127.0.0.1', port: 0 },
    sip: { enabled: false, host: '127.0.0.1', port: 0 },
    // BENCH_SESSION_MAIN_REALTIME: the sessions' thread under SCHED_RR (rtp.main_thread_realtime).
    ...(process.env.BENCH_SESSION_MAIN_REALTIME ? { rtp: { main_thread_realtime: Number(process.env.BENCH_SESSION_MAIN_REALTIME) } } : {}),
    log_level: 'warn',
    drain: { deadline_secs: 1 },
    voices: { catalog: ['tone-100', 'tone-500', 'tone-800', 'tone-200-wait-300'].map(toneVoice), first_fetch_wait_ms: 1000 },
    agent_defaults: { voice_id: 'tone-100' },
    ...(vendorEntries.length > 0 ? { tts: { providers: vendorEntries } } : {}),
  },
  {},
);
const logger = createLogger('warn');
const speech = new OpenAiSpeechProvider({ baseUrl: ttsUrl, name: 'provider_1' });
// Each synthesis's wait for its first audio (ms), for SIGUSR2's report: the fake TTS answers at
// once, so a long wait here is the machine keeping the fake or this process off a CPU, and the
// agent's audio can run dry behind it.
let ttsFirstMs: number[] = [];
const tts: TtsProvider = {
  name: speech.name,
  async *synthesize(request) {
    const t0 = performance.now();
    let first = true;
    for await (const pcm of speech.synthesize(request)) {
      if (first) {
        first = false;
        if (ttsFirstMs.length < 100_000) ttsFirstMs.push(performance.now() - t0);
      }
      yield pcm;
    }
  },
};
const vendors = createTtsProviders(Object.fromEntries(vendorEntries.map(({ voice_provider, ...entry }) => [voice_provider, entry])));
const vendorSlots = new Set(vendorEntries.map((e) => e.voice_provider));
const leadMs = process.env.BENCH_SESSION_LEAD_MS ? Number(process.env.BENCH_SESSION_LEAD_MS) : undefined;
const chunkMs = process.env.BENCH_SESSION_CHUNK_MS ? Number(process.env.BENCH_SESSION_CHUNK_MS) : undefined;
// Overrides of the runtime main.ts builds (not a factory of our own): the turn timelines' observers
// and, with OTEL_EXPORTER_OTLP_ENDPOINT set (BENCH_SESSION_OTLP=1), the traces are composed as in
// the daemon.
const runtimeOverrides = { tts: (provider: string) => (vendorSlots.has(provider) ? vendors.get(provider) : tts), ...(leadMs !== undefined ? { leadMs } : {}), ...(chunkMs !== undefined ? { chunkMs } : {}) };
const daemon = await startDaemon(config, logger, () => {}, { runtimeOverrides });
process.stdout.write(`LISTENING ${daemon.url}\n`);

// The event loop's delay (how late a 5 ms timer fires), for the bench's step table: SIGUSR2 prints
// `LOOPDELAY {"p50","p99","max","ttsFirst"}` (ms) for the time since the previous SIGUSR2 and starts over.
const loop = monitorEventLoopDelay({ resolution: 5 });
loop.enable();
process.on('SIGUSR2', () => {
  const ms = (ns: number) => Number((ns / 1e6).toFixed(2));
  const first = ttsFirstMs.sort((a, b) => a - b);
  const at = (q: number) => Number((first[Math.min(first.length - 1, Math.floor(q * first.length))] ?? 0).toFixed(2));
  const ttsFirst = { n: first.length, p50: at(0.5), p99: at(0.99), max: at(1) };
  process.stdout.write(`LOOPDELAY ${JSON.stringify({ p50: ms(loop.percentile(50)), p99: ms(loop.percentile(99)), max: ms(loop.max), ttsFirst })}\n`);
  loop.reset();
  ttsFirstMs = [];
});

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  daemon.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
