/**
 * A fake Hume Octave TTS on 127.0.0.1: `POST /v0/tts/stream/json` as Hume's API reference and
 * its SDK integrations describe it,
 *
 * - `X-Hume-Api-Key` must be the expected key: 401 (an API-gateway fault body) otherwise;
 * - the body needs `utterances: [{text, voice?: {id} | {name, provider}, speed?}]`, `format:
 *   {type: pcm}` (this fake speaks pcm only), and a voice when `instant_mode` is on: 400 otherwise;
 * - the answer is 200 `application/json`, streamed: one JSON object per line, `{type: audio,
 *   request_id, generation_id, snippet_id, text, chunk_index, audio: <base64 PCM16 LE 48 kHz>,
 *   audio_format: pcm, is_last_chunk, utterance_index}`: a tone of `hz`, `samplesPerChar`
 *   samples (at 24 kHz, so twice that at 48) per character, `pacing.chunkMs` per line after
 *   `pacing.firstChunkMs`;
 * - `fault` makes the next answer fail after some chunks: an error line (`{type: error, error,
 *   message}`: Hume does not document one, this is the shape the adapter accepts) or a dropped
 *   connection.
 *
 * Records each request: headers, body, the client's TCP port (keep-alive reuse) and whether the
 * client went away before the end.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, Server, ServerResponse } from 'node:http';
import { createServer } from './common.ts';
import { chunksOf, listenHttp, streamChunks, toneFor, vendorFake, type VendorFake } from './vendor-fake.ts';

export interface HumeRequest {
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
  clientPort: number;
  /** The client closed the connection before the last chunk. */
  aborted: boolean;
  generationId: string;
}

export interface FakeHume extends VendorFake {
  requests: HumeRequest[];
}

const RATE = 48_000;

export async function startFakeHume(key: string): Promise<FakeHume> {
  const fake: FakeHume = { ...vendorFake(key, 600), requests: [] };
  const json = (res: ServerResponse, status: number, body: unknown): void => {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const server: Server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v0/tts/stream/json') return json(res, 404, { message: 'Not Found' });
      if (req.headers['x-hume-api-key'] !== fake.key) return json(res, 401, { fault: { faultstring: 'Invalid ApiKey', detail: { errorcode: 'oauth.v2.InvalidApiKey' } } });
      let body: Record<string, unknown>;
      try {
        body = JSON.parse(Buffer.concat(parts).toString('utf8')) as Record<string, unknown>;
      } catch {
        return json(res, 400, { message: 'invalid JSON' });
      }
      const utterances = body.utterances as Array<{ text?: unknown; voice?: unknown }> | undefined;
      if (!Array.isArray(utterances) || utterances.length === 0 || typeof utterances[0]!.text !== 'string') return json(res, 400, { message: 'utterances: at least one with text' });
      if ((body.format as { type?: unknown } | undefined)?.type !== 'pcm') return json(res, 400, { message: 'this fake speaks pcm only' });
      if (body.instant_mode === true && utterances[0]!.voice === undefined) return json(res, 400, { message: 'instant_mode requires a voice' });
      const record: HumeRequest = { headers: req.headers, body, clientPort: req.socket.remotePort ?? 0, aborted: false, generationId: randomUUID() };
      fake.requests.push(record);
      fake.onText?.(utterances[0]!.text as string);
      void stream(res, record, utterances[0]!.text as string);
    });
  });
  // The client going away mid-answer (barge-in) closes the response early.
  const stream = async (res: ServerResponse, record: HumeRequest, text: string): Promise<void> => {
    let done = false;
    res.on('close', () => {
      if (!done) record.aborted = true;
    });
    res.writeHead(200, { 'content-type': 'application/json' });
    const chunks = chunksOf(fake, toneFor(fake, text, RATE), RATE);
    const requestId = randomUUID();
    const sent = await streamChunks(fake, chunks, {
      gone: () => record.aborted || res.destroyed,
      send: (chunk, i) => {
        const line = {
          type: 'audio',
          request_id: requestId,
          generation_id: record.generationId,
          snippet_id: record.generationId,
          text,
          chunk_index: i,
          audio: chunk.toString('base64'),
          audio_format: 'pcm',
          is_last_chunk: i === chunks.length - 1,
          utterance_index: 0,
        };
        res.write(`${JSON.stringify(line)}\n`);
      },
      inject: (kind) => {
        done = true;
        if (kind === 'drop') res.socket?.destroy();
        else res.end(`${JSON.stringify({ type: 'error', error: 'Internal Server Error', message: 'generation failed' })}\n`);
      },
    });
    if (!sent) return;
    done = true;
    res.end();
  };

  await listenHttp(fake, server);
  return fake;
}
