/**
 * Endpoint URLs and refusal messages shared by the vendor adapters. A base_url is configured as
 * the vendor's origin (`https://api.cartesia.ai`), optionally with a path prefix (a proxy); the
 * adapter appends the vendor's documented path.
 */
import { TtsError } from '../../errors.ts';

/**
 * `base` + `path`, with the scheme turned into ws(s) when `websocket` (http and ws stay plain,
 * https and wss stay secure). The base's query is dropped: keys never travel in URLs here.
 * @throws TypeError when `base` is not a URL.
 */
export function endpointUrl(base: string, path: string, websocket: boolean): URL {
  const url = new URL(base);
  const plain = url.protocol === 'http:' || url.protocol === 'ws:';
  url.protocol = websocket ? (plain ? 'ws:' : 'wss:') : plain ? 'http:' : 'https:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${path}`;
  url.search = '';
  url.hash = '';
  return url;
}

/**
 * The error of an HTTP refusal (a WebSocket upgrade or a POST answered with a non-2xx status);
 * 401 and 403 say that the key was refused, which is what they mean at these vendors.
 */
export function refusalError(name: string, what: string, status: number): TtsError {
  const hint = status === 401 || status === 403 ? ': the API key was rejected (check api_key)' : '';
  return new TtsError('VENDOR_HTTP_STATUS', `${name}: ${what} refused with HTTP ${status}${hint}`, { status });
}
