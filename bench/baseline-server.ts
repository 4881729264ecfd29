/**
 * The baseline of `bench/api`: a bare Fastify server (no logger, no hooks, no schema, no
 * store) with one route, `GET /v1/agents/:id`, returning a constant JSON object of the size of an
 * agent. It is what the same machine, Node and Fastify can do when the daemon's work (auth,
 * SQLite, validation, serialization by schema, logging, metrics) is taken away.
 *
 * Run as its own process: `node --import tsx bench/baseline-server.ts`.
 *   BENCH_BASELINE_HOST  address to bind (default 127.0.0.1)
 *   BENCH_BASELINE_PORT  port (default 0: chosen by the OS)
 *   BENCH_BASELINE_BODY  the JSON to return (default: an agent with default settings)
 * Prints `LISTENING <port>` on stdout once it listens; stops on SIGTERM or SIGINT.
 */
import Fastify from 'fastify';

const DEFAULT_BODY = {
  id: '00000000-0000-4000-8000-000000000000',
  phone_number_id: '',
  name: 'bench',
  llm: 'local/echo',
  fallback_llm: 'local/echo',
  status: 'active',
  prompt: 'You are a helpful voice assistant. Keep answers short.',
  first_message: 'Hello! How can I help you today?',
  first_message_interruption_time: 0,
  default_language: 'en',
  summarize_calls: false,
  created_at: '2026-01-01T00:00:00.000Z',
  updated_at: '2026-01-01T00:00:00.000Z',
  noise_cancel_settings: { enabled: false, level: 50 },
  vad_settings: { start_secs: 0.2, stop_secs: 0.8, silence_timeout_secs: 10 },
  enable_first_message_outbound: true,
  voice_settings: { id: 'local-en-1', provider: 'provider_1' },
  timeout_settings: { default_timeout: 1800, timeout_action: 'end_call', silence_counter: 2, silence_timeout_action: 'end_call' },
  keyterms: [],
};

const body: unknown = process.env.BENCH_BASELINE_BODY ? JSON.parse(process.env.BENCH_BASELINE_BODY) : DEFAULT_BODY;
const host = process.env.BENCH_BASELINE_HOST ?? '127.0.0.1';
const port = Number(process.env.BENCH_BASELINE_PORT ?? 0);

const app = Fastify({ logger: false });
app.get('/v1/agents/:id', async () => body);

await app.listen({ host, port });
const addr = app.server.address();
process.stdout.write(`LISTENING ${typeof addr === 'object' && addr ? addr.port : port}\n`);

const stop = () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
