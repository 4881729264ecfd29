/**
 * One POST of a JSON body to a webhook endpoint: to the address destination.ts checked (pinned
 * through the request's `lookup`, so the connection goes where the check looked), with a deadline
 * on the whole exchange, redirects not followed (a 3xx is an answer like any other non-2xx), and
 * the answer's body read up to a bound. node:http rather than fetch: fetch offers no way to pin
 * the address without a second HTTP client library.
 */
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { DestinationError, parseWebhookUrl, resolveDestination, type DestinationPolicy } from './destination.ts';

export interface PostOptions {
  policy: DestinationPolicy;
  /** Deadline of the whole attempt (resolve, connect, send, answer), ms. */
  timeoutMs: number;
  /** The answer's body is read up to this many bytes (the rest is dropped). Default 64 KiB. */
  maxResponseBytes?: number;
  /** Extra headers (the signature's). */
  headers?: Record<string, string>;
}

export interface PostAnswer {
  status: number;
  body: string;
}

/** Why an attempt got no answer: the endpoint's fault, the network's, or the policy's. */
export type PostFailure = 'destination' | 'timeout' | 'network';

export class PostError extends Error {
  override readonly name = 'PostError';
  constructor(
    readonly kind: PostFailure,
    message: string,
  ) {
    super(message);
  }
}

/** POSTs `body` (JSON) to `rawUrl`. @throws PostError (no answer); any HTTP status is an answer. */
export async function postJson(rawUrl: string, body: string, o: PostOptions): Promise<PostAnswer> {
  const deadline = AbortSignal.timeout(o.timeoutMs);
  let target: { address: string; family: 4 | 6 };
  let url: URL;
  try {
    url = parseWebhookUrl(rawUrl);
    target = await resolveDestination(url, o.policy);
  } catch (err) {
    if (err instanceof DestinationError) throw new PostError('destination', err.message);
    throw err;
  }
  if (deadline.aborted) throw new PostError('timeout', `no answer within ${o.timeoutMs} ms`);
  const pinned: LookupFunction = (_host, options, callback) => {
    if ((options as { all?: boolean }).all) (callback as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [{ address: target.address, family: target.family }]);
    else callback(null, target.address, target.family);
  };
  const max = o.maxResponseBytes ?? 64 * 1024;
  const client = url.protocol === 'https:' ? https : http;
  return new Promise<PostAnswer>((resolve, reject) => {
    const req = client.request(
      url,
      {
        method: 'POST',
        lookup: pinned,
        signal: deadline,
        headers: { 'content-type': 'application/json', 'user-agent': 'callbridge-webhooks', 'content-length': Buffer.byteLength(body), ...o.headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          if (size >= max) return;
          chunks.push(c.subarray(0, max - size));
          size += Math.min(c.length, max - size);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', (err) => reject(classify(err, o.timeoutMs)));
      },
    );
    req.on('error', (err) => reject(classify(err, o.timeoutMs)));
    req.end(body);
  });
}

function classify(err: Error, timeoutMs: number): PostError {
  if (err.name === 'AbortError' || err.name === 'TimeoutError') return new PostError('timeout', `no answer within ${timeoutMs} ms`);
  const code = (err as NodeJS.ErrnoException).code;
  return new PostError('network', code ?? err.message);
}
