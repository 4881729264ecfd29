/**
 * A POST whose response body is read as a stream of Buffers, over node:http / node:https with
 * keep-alive agents, for the providers called once per agent reply (TTS).
 *
 * Why not fetch: fetch (undici) plus its web-stream body cost 530 us of CPU per 77 kB speech
 * response on this machine against 115 us here (docs/benchmarks.md, bench/bridge: undici and
 * web streams were 16 % of the voice server's busy time at 200 calls, one TTS request per
 * reply). The voice server is what a phone call's agent audio waits on; its CPU is the ceiling.
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

export interface HttpPostResponse {
  status: number;
  /** A header's value (lower-case name), '' when absent. */
  header(name: string): string;
  /** The body as it arrives. Leaving the loop early (break, throw) closes the connection. */
  body: AsyncIterable<Buffer>;
  /** The whole body as text. */
  text(): Promise<string>;
  /** Drops the body unread (closes the connection). */
  discard(): void;
}

// Keep-alive: one TCP (and TLS) connection serves many replies in a row, as fetch's pool did.
const httpAgent = new HttpAgent({ keepAlive: true });
const httpsAgent = new HttpsAgent({ keepAlive: true });

/**
 * POSTs `body` and resolves when the response headers arrive.
 * @throws the connection's error (refused, reset, DNS...) or an AbortError when `signal` aborts
 *   first; after the headers, an abort or a broken connection makes `body` throw.
 */
export function httpPost(url: URL, headers: Record<string, string>, body: string, signal: AbortSignal): Promise<HttpPostResponse> {
  return new Promise((resolve, reject) => {
    signal.throwIfAborted();
    const https = url.protocol === 'https:';
    const payload = Buffer.from(body);
    const req = (https ? httpsRequest : httpRequest)(url, {
      method: 'POST',
      agent: https ? httpsAgent : httpAgent,
      headers: { ...headers, 'content-length': String(payload.length) },
      signal,
    });
    req.once('error', reject);
    req.once('response', (res: IncomingMessage) => {
      // From here on, errors surface through the body's iteration.
      req.off('error', reject);
      req.on('error', () => {});
      resolve({
        status: res.statusCode ?? 0,
        header: (name) => {
          const v = res.headers[name];
          return Array.isArray(v) ? v.join(', ') : (v ?? '');
        },
        body: res,
        text: async () => {
          const parts: Buffer[] = [];
          for await (const chunk of res) parts.push(chunk as Buffer);
          return Buffer.concat(parts).toString('utf8');
        },
        discard: () => res.destroy(),
      });
    });
    req.end(payload);
  });
}
