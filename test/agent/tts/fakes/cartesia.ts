/**
 * A fake Cartesia TTS WebSocket on 127.0.0.1, speaking the protocol of Cartesia's API reference
 * (`/tts/websocket`, contexts, continuations, manual flushes, cancel):
 *
 * - the upgrade needs `X-API-Key` (the expected key) and `Cartesia-Version`: 401 / 400 otherwise;
 * - generation requests are JSON text frames with context_id, model_id, transcript, voice
 *   {mode: id, id}, output_format {container: raw, encoding: pcm_s16le, sample_rate} and
 *   `continue`; transcripts of a context are joined and spoken when a `flush: true` or a
 *   `continue: false` message comes, each flush answered by `flush_done` with its flush_id, the
 *   end of the context by `done`;
 * - audio is `{type: chunk, data: <base64 PCM16 LE>, done: false, status_code: 206, step_time,
 *   context_id, flush_id}`: a tone of `hz`, `samplesPerChar` samples per character at the
 *   requested rate, in chunks of `pacing.chunkMs`, the first after `pacing.firstChunkMs`;
 * - `{context_id, cancel: true}` stops the context's generation;
 * - a context expires `contextExpiryMs` (Cartesia's documented 1 s) after its last output once
 *   nothing is left to generate, and a finished one (`continue: false`) once its `done` is sent;
 *   a later message to it is answered `{type: error, done: true, title, message, status_code:
 *   400, context_id}` (the docs: sending on an expired context "is not supported"; the exact
 *   words of the real service are not documented, these are the fake's);
 * - a malformed request is answered `{type: error, done: true, error, status_code: 400}`;
 * - `fault` makes the next generation fail after some chunks: an error message or a dropped socket.
 *
 * Everything received is recorded for the tests.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { WebSocket } from 'ws';
import { chunksOf, listenWebSocket, streamChunks, toneFor, vendorFake, type VendorFake } from './vendor-fake.ts';

export interface CartesiaConnection {
  headers: IncomingHttpHeaders;
  messages: Record<string, unknown>[];
  /** Context ids the client cancelled. */
  cancelled: string[];
  closed: boolean;
}

export interface FakeCartesia extends VendorFake {
  /** The next generation's audio ends on half a sample (one stray byte). */
  halfSample: boolean;
  /** How long an idle context outlives its last output (Cartesia: 1 s). */
  contextExpiryMs: number;
  connections: CartesiaConnection[];
}

interface Context {
  text: string;
  flushId: number;
  /** Generations of this context run one after another. */
  chain: Promise<void>;
  cancelled: boolean;
  /** Generations queued or running. */
  pending: number;
  /** Fires contextExpiryMs after the last output while nothing is pending. */
  expiry: NodeJS.Timeout | undefined;
}

/** Cartesia's contexts guide: a context expires 1 second after its last audio output. */
export const CARTESIA_CONTEXT_EXPIRY_MS = 1000;

export async function startFakeCartesia(key: string): Promise<FakeCartesia> {
  const fake: FakeCartesia = { ...vendorFake(key, 400), halfSample: false, contextExpiryMs: CARTESIA_CONTEXT_EXPIRY_MS, connections: [] };

  function serve(ws: WebSocket, headers: IncomingHttpHeaders): void {
    const conn: CartesiaConnection = { headers, messages: [], cancelled: [], closed: false };
    fake.connections.push(conn);
    const contexts = new Map<string, Context>();
    /** Contexts that expired or finished: messages to them are refused. */
    const ended = new Set<string>();
    const send = (m: Record<string, unknown>): void => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(m));
    };
    const end = (id: string): void => {
      clearTimeout(contexts.get(id)?.expiry);
      contexts.delete(id);
      ended.add(id);
    };
    /** The context's last output is out and nothing is pending: it expires unless a message comes. */
    const armExpiry = (id: string, ctx: Context): void => {
      clearTimeout(ctx.expiry);
      if (ctx.pending > 0) return;
      ctx.expiry = setTimeout(() => end(id), fake.contextExpiryMs);
    };
    ws.on('close', () => {
      conn.closed = true;
      for (const ctx of contexts.values()) clearTimeout(ctx.expiry);
    });
    ws.on('message', (data) => {
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(data.toString()) as Record<string, unknown>;
      } catch {
        send({ type: 'error', done: true, error: 'Invalid JSON', status_code: 400 });
        return;
      }
      conn.messages.push(msg);
      const id = msg.context_id;
      if (typeof id !== 'string' || id === '') {
        send({ type: 'error', done: true, error: 'context_id is required', status_code: 400 });
        return;
      }
      if (msg.cancel === true) {
        conn.cancelled.push(id);
        const ctx = contexts.get(id);
        if (ctx !== undefined) ctx.cancelled = true;
        return;
      }
      const problem = invalid(msg);
      if (problem !== undefined) {
        send({ type: 'error', done: true, error: problem, status_code: 400, context_id: id });
        return;
      }
      if (ended.has(id)) {
        send({ type: 'error', done: true, title: 'Context expired', message: `Context ${id} has expired or finished; start a new context`, status_code: 400, context_id: id });
        return;
      }
      let ctx = contexts.get(id);
      if (ctx === undefined) {
        ctx = { text: '', flushId: 1, chain: Promise.resolve(), cancelled: false, pending: 0, expiry: undefined };
        contexts.set(id, ctx);
      }
      const c = ctx;
      clearTimeout(c.expiry);
      c.text += msg.transcript as string;
      if ((msg.transcript as string).trim() !== '') fake.onText?.(msg.transcript as string);
      const rate = (msg.output_format as { sample_rate: number }).sample_rate;
      const flush = msg.flush === true;
      const last = msg.continue !== true;
      if (!flush && !last) {
        armExpiry(id, c);
        return;
      }
      const text = c.text;
      c.text = '';
      const flushId = c.flushId;
      if (flush) c.flushId++;
      c.pending++;
      c.chain = c.chain.then(async () => {
        if (text.trim() !== '') await speak(text, rate, id, flushId, c);
        c.pending--;
        if (c.cancelled) return;
        if (flush) send({ type: 'flush_done', done: false, flush_done: true, flush_id: flushId, status_code: 206, context_id: id });
        if (last) {
          send({ type: 'done', done: true, status_code: 206, context_id: id });
          end(id);
        } else armExpiry(id, c);
      });
    });

    async function speak(text: string, rate: number, id: string, flushId: number, ctx: Context): Promise<void> {
      const bytes = toneFor(fake, text, rate);
      const chunks = chunksOf(fake, fake.halfSample ? Buffer.concat([bytes, Buffer.from([0x7f])]) : bytes, rate);
      fake.halfSample = false;
      await streamChunks(fake, chunks, {
        gone: () => ctx.cancelled || ws.readyState !== ws.OPEN,
        send: (chunk) => send({ type: 'chunk', data: chunk.toString('base64'), done: false, status_code: 206, step_time: fake.pacing.gapMs, context_id: id, flush_id: flushId }),
        inject: (kind) => {
          if (kind === 'drop') ws.terminate();
          else send({ type: 'error', done: true, error: 'Internal server error: generation failed', status_code: 500, context_id: id });
          ctx.cancelled = true;
        },
      });
    }
  }

  await listenWebSocket(fake, {
    path: '/tts/websocket',
    notFound: '{"error":"not found"}',
    refusal: (headers) => {
      if (headers['x-api-key'] !== fake.key) return [401, '{"error":"Invalid API key"}'];
      if (typeof headers['cartesia-version'] !== 'string') return [400, '{"error":"Cartesia-Version header is required"}'];
      return undefined;
    },
    serve,
  });
  return fake;
}

/** What the reference requires of a generation request (a flush or close repeats the fields). */
function invalid(msg: Record<string, unknown>): string | undefined {
  if (typeof msg.model_id !== 'string' || msg.model_id === '') return 'Invalid model: model_id is required';
  if (typeof msg.transcript !== 'string') return 'transcript is required';
  const voice = msg.voice as { mode?: unknown; id?: unknown } | undefined;
  if (voice?.mode !== 'id' || typeof voice.id !== 'string' || voice.id === '') return 'voice must be {mode: "id", id}';
  const format = msg.output_format as { container?: unknown; encoding?: unknown; sample_rate?: unknown } | undefined;
  if (format?.container !== 'raw' || format.encoding !== 'pcm_s16le') return 'this fake speaks raw pcm_s16le only';
  if (![8000, 16000, 22050, 24000, 44100, 48000].includes(format.sample_rate as number)) return 'unsupported sample_rate';
  return undefined;
}
