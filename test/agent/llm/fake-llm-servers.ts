/**
 * Fake OpenAI and Anthropic servers on 127.0.0.1 (OS-chosen port) that speak the vendors' real
 * streaming wire formats, for tests of the adapters and, later, of the runtime.
 *
 * Each request takes the next scripted reply (or the default reply when the script is empty).
 * A reply is an HTTP status plus a list of steps written one by one, each its own chunk:
 * SSE frames (strings), pauses (`{ delayMs }`), gates (`{ waitFor: promise }`, e.g. to hold
 * the stream open until the test has seen the first delta), and `{ destroy: true }` (break
 * the connection). Every request is recorded: method, path, headers, JSON body, and a promise
 * that resolves when its socket closes (to prove an abort reached the wire).
 *
 *   const server = await startFakeLlmServer('openai');
 *   server.enqueue({ steps: openAiSse.text(['Hel', 'lo']) });
 *   new OpenAiChatProvider({ name: 'openai', baseUrl: server.baseUrl, apiKey: 'sk-test' });
 */
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type FakeStep = string | { delayMs: number } | { waitFor: Promise<unknown> } | { destroy: true };

export interface FakeReply {
  /** Default 200. With another status, `errorBody` is sent as JSON (or as text when a string). */
  status?: number;
  errorBody?: unknown;
  /** Wait before sending the response headers (a slow first token). */
  delayMs?: number;
  /** Written in order after the headers, each SSE frame as its own chunk. */
  steps?: FakeStep[];
  /** Keep the response open after the last step (a stalled stream). Default false. */
  hang?: boolean;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: any;
  /** Resolves when the request's TCP connection closes. */
  socketClosed: Promise<void>;
}

export type FakeKind = 'openai' | 'anthropic';

export interface FakeLlmServer {
  kind: FakeKind;
  /** What to configure as base_url: `http://127.0.0.1:<port>/v1` (openai) or `http://127.0.0.1:<port>` (anthropic). */
  baseUrl: string;
  requests: RecordedRequest[];
  enqueue(...replies: FakeReply[]): void;
  /** The reply when the script is empty (initially: a short text answer). */
  setDefault(reply: FakeReply): void;
  close(): Promise<void>;
}

/** The path each vendor's adapter must POST to. */
const PATHS: Record<FakeKind, string> = { openai: '/v1/chat/completions', anthropic: '/v1/messages' };

export async function startFakeLlmServer(kind: FakeKind): Promise<FakeLlmServer> {
  const script: FakeReply[] = [];
  let fallbackReply: FakeReply = { steps: kind === 'openai' ? openAiSse.text(['ok']) : anthropicSse.text(['ok']) };
  const requests: RecordedRequest[] = [];

  const server: Server = createServer((req, res) => {
    const socketClosed = new Promise<void>((resolve) => req.socket.once('close', () => resolve()));
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // keep the raw text: a test may assert on it
      }
      requests.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body, socketClosed });
      if (req.method !== 'POST' || req.url !== PATHS[kind]) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `no route ${req.method} ${req.url}` } }));
        return;
      }
      void play(res, script.shift() ?? fallbackReply).catch(() => res.destroy());
    });
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    kind,
    baseUrl: kind === 'openai' ? `http://127.0.0.1:${port}/v1` : `http://127.0.0.1:${port}`,
    requests,
    enqueue: (...replies) => void script.push(...replies),
    setDefault: (reply) => void (fallbackReply = reply),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections(); // hanging streams would keep close() waiting forever
        server.close(() => resolve());
      }),
  };
}

async function play(res: ServerResponse, reply: FakeReply): Promise<void> {
  if (reply.delayMs) await sleep(reply.delayMs);
  if (res.destroyed) return;
  const status = reply.status ?? 200;
  if (status !== 200) {
    const isText = typeof reply.errorBody === 'string';
    res.writeHead(status, { 'content-type': isText ? 'text/html' : 'application/json' });
    res.end(isText ? (reply.errorBody as string) : JSON.stringify(reply.errorBody ?? {}));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  res.flushHeaders();
  for (const step of reply.steps ?? []) {
    if (res.destroyed) return;
    if (typeof step === 'string') res.write(step);
    else if ('delayMs' in step) await sleep(step.delayMs);
    else if ('waitFor' in step) await step.waitFor;
    else {
      res.socket?.destroy();
      return;
    }
  }
  if (!reply.hang) res.end();
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A promise and its resolve function: a gate for `{ waitFor }`. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

// --- OpenAI chat.completion.chunk frames -------------------------------------------------------

export const openAiSse = {
  /** One `data:` frame of a chunk with one choice. */
  chunk(delta: Record<string, unknown>, finishReason: string | null = null): string {
    return `data: ${JSON.stringify({
      id: 'chatcmpl-fake',
      object: 'chat.completion.chunk',
      created: 1700000000,
      model: 'fake-model',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    })}\n\n`;
  },
  done: 'data: [DONE]\n\n',
  /** A whole text answer: role chunk, one chunk per piece, finish_reason stop, [DONE]. */
  text(pieces: string[]): string[] {
    return [
      openAiSse.chunk({ role: 'assistant', content: '' }),
      ...pieces.map((p) => openAiSse.chunk({ content: p })),
      openAiSse.chunk({}, 'stop'),
      openAiSse.done,
    ];
  },
  /** The first piece of tool call `index` (id, name, empty arguments), as OpenAI sends it. */
  toolStart(index: number, id: string, name: string): string {
    return openAiSse.chunk({ tool_calls: [{ index, id, type: 'function', function: { name, arguments: '' } }] });
  },
  /** A piece of the arguments of tool call `index`. */
  toolArgs(index: number, piece: string): string {
    return openAiSse.chunk({ tool_calls: [{ index, function: { arguments: piece } }] });
  },
};

// --- Anthropic Messages stream events ----------------------------------------------------------

export const anthropicSse = {
  event(type: string, data: Record<string, unknown> = {}): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  },
  messageStart(): string {
    return anthropicSse.event('message_start', {
      message: {
        id: 'msg_fake',
        type: 'message',
        role: 'assistant',
        content: [],
        model: 'fake-model',
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 10, output_tokens: 1 },
      },
    });
  },
  /** A text block: start, one text_delta per piece, stop. */
  textBlock(index: number, pieces: string[]): string[] {
    return [
      anthropicSse.event('content_block_start', { index, content_block: { type: 'text', text: '' } }),
      ...pieces.map((text) => anthropicSse.event('content_block_delta', { index, delta: { type: 'text_delta', text } })),
      anthropicSse.event('content_block_stop', { index }),
    ];
  },
  /** A tool_use block: start, one input_json_delta per piece, stop. */
  toolUseBlock(index: number, id: string, name: string, jsonPieces: string[]): string[] {
    return [
      anthropicSse.event('content_block_start', { index, content_block: { type: 'tool_use', id, name, input: {} } }),
      ...jsonPieces.map((partial_json) =>
        anthropicSse.event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json } }),
      ),
      anthropicSse.event('content_block_stop', { index }),
    ];
  },
  end(stopReason = 'end_turn'): string[] {
    return [
      anthropicSse.event('message_delta', { delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: 5 } }),
      anthropicSse.event('message_stop'),
    ];
  },
  error(type: string, message: string): string {
    return anthropicSse.event('error', { error: { type, message } });
  },
  /** A whole text answer, with a ping as the real API sends one. */
  text(pieces: string[]): string[] {
    return [anthropicSse.messageStart(), anthropicSse.event('ping'), ...anthropicSse.textBlock(0, pieces), ...anthropicSse.end()];
  },
};
