/**
 * What every fake vendor of this folder is, around its own protocol: a loopback server (a
 * WebSocket upgrade behind the vendor's auth check, or plain HTTP), the knobs the tests turn
 * (key, tone, pacing, the next generation's fault) and the stream of one generation: the tone
 * for the text, cut into chunks paced like a real vendor's, with the fault injected on its chunk.
 */
import type { IncomingHttpHeaders, Server } from 'node:http';
import { WebSocketServer, type WebSocket } from 'ws';
import { audioChunks, createServer, listen, REALISTIC, sleep, toneBytes, type Pacing } from './common.ts';

/** How the next generation fails after `afterChunks` chunks: the vendor's error or a dropped connection. */
export interface Fault {
  afterChunks: number;
  kind: 'error' | 'drop';
}

export interface VendorFake {
  /** `http://127.0.0.1:<port>`: the base_url to configure. */
  url: string;
  /** The key the fake accepts. */
  key: string;
  /** The tone's frequency (each fake has its own, so a test knows whose audio it heard). */
  hz: number;
  /** The tone's length per character of text, in samples at 24 kHz. */
  samplesPerChar: number;
  pacing: Pacing;
  /** The next generation fails after this many chunks, by the vendor's error or a dropped connection. */
  fault: Fault | undefined;
  /** Called as each sentence's text arrives (bench/session times the vendor from there). */
  onText?: (text: string) => void;
  close(): Promise<void>;
}

/** A fake's knobs at their defaults (realistic pacing, no fault), not listening yet. */
export function vendorFake(key: string, hz: number): VendorFake {
  return { url: '', key, hz, samplesPerChar: 240, pacing: { ...REALISTIC }, fault: undefined, close: async () => {} };
}

/** Puts the knobs a test turns back to their defaults (realistic pacing, no fault). */
export function resetFake(fake: VendorFake): void {
  fake.pacing = { ...REALISTIC };
  fake.fault = undefined;
}

export interface WebSocketEndpoint {
  /** The vendor's documented path; any other is refused 404 with `notFound` as the JSON body ('' for none). */
  path: string;
  notFound: string;
  /** The vendor's check of the upgrade request: a status and JSON body to refuse it with, or undefined. */
  refusal?(headers: IncomingHttpHeaders): [status: number, body: string] | undefined;
  /** Speaks the vendor's protocol on an accepted socket. */
  serve(ws: WebSocket, headers: IncomingHttpHeaders): void;
}

/** Listens for WebSocket upgrades at `endpoint`; sets the fake's url and close. */
export async function listenWebSocket(fake: VendorFake, endpoint: WebSocketEndpoint): Promise<void> {
  const wss = new WebSocketServer({ noServer: true });
  const server: Server = createServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket, head) => {
    const refuse = ([status, body]: [number, string]): void => {
      const type = body === '' ? '' : 'content-type: application/json\r\n';
      socket.end(`HTTP/1.1 ${status} Refused\r\n${type}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    };
    if (new URL(req.url ?? '/', 'http://x').pathname !== endpoint.path) return refuse([404, endpoint.notFound]);
    const refusal = endpoint.refusal?.(req.headers);
    if (refusal !== undefined) return refuse(refusal);
    wss.handleUpgrade(req, socket, head, (ws) => endpoint.serve(ws, req.headers));
  });
  await listenOn(fake, server, () => {
    for (const c of wss.clients) c.terminate();
    wss.close();
  });
}

/** Listens with an HTTP vendor's `server`; sets the fake's url and close. */
export async function listenHttp(fake: VendorFake, server: Server): Promise<void> {
  await listenOn(fake, server, () => server.closeAllConnections());
}

async function listenOn(fake: VendorFake, server: Server, dropClients: () => void): Promise<void> {
  fake.close = async () => {
    dropClients();
    await new Promise<void>((r) => server.close(() => r()));
  };
  fake.url = `http://127.0.0.1:${await listen(server)}`;
}

/** PCM16 LE bytes of the fake's tone for `text`: samplesPerChar per character at 24 kHz, scaled to `rate`. */
export function toneFor(fake: VendorFake, text: string, rate: number): Buffer {
  const samples = Math.round((text.trim().length * fake.samplesPerChar * rate) / 24000);
  return toneBytes(samples, fake.hz, rate);
}

/** `bytes` cut into chunks of the fake's pacing.chunkMs of audio. */
export function chunksOf(fake: VendorFake, bytes: Buffer, rate: number): Buffer[] {
  return audioChunks(bytes, rate, fake.pacing.chunkMs);
}

/** One generation's side of the connection, for streamChunks. */
export interface GenerationSink {
  /** The client went away or cancelled: stop sending. */
  gone(): boolean;
  send(chunk: Buffer, index: number): void;
  /** Fails the generation as `kind` says (the vendor's error message, or a dropped connection). */
  inject(kind: Fault['kind']): void;
}

/**
 * Sends one generation's chunks paced as `fake.pacing` says: the first after firstChunkMs, then
 * one every gapMs. The fake's fault, if set, is taken (it hits this generation only) and replaces
 * the chunk it names by `sink.inject`.
 * @returns true when every chunk was sent; false when the client went or the fault struck.
 */
export async function streamChunks(fake: VendorFake, chunks: Buffer[], sink: GenerationSink): Promise<boolean> {
  await sleep(fake.pacing.firstChunkMs);
  const fault = fake.fault;
  fake.fault = undefined;
  for (let i = 0; i < chunks.length; i++) {
    if (sink.gone()) return false;
    if (fault !== undefined && i === fault.afterChunks) {
      sink.inject(fault.kind);
      return false;
    }
    if (i > 0) await sleep(fake.pacing.gapMs);
    if (sink.gone()) return false;
    sink.send(chunks[i]!, i);
  }
  return true;
}
