/**
 * One JSON request to a vendor's voice-list API. Errors name the vendor, the path and the status,
 * never the URL's query or the request headers (the key travels in a header only).
 */
export class VoiceListError extends Error {
  override readonly name = 'VoiceListError';
  constructor(message: string, readonly status?: number) {
    super(message);
  }
}

export async function requestJson(vendor: string, url: URL, init: { method?: 'GET' | 'POST'; headers: Record<string, string>; body?: unknown; signal: AbortSignal }): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: init.method ?? 'GET',
      headers: { accept: 'application/json', ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}), ...init.headers },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal: init.signal,
    });
  } catch (err) {
    const why = init.signal.aborted ? 'timed out' : (err as Error).message;
    throw new VoiceListError(`${vendor}: ${url.pathname} unreachable (${why})`);
  }
  const text = await res.text().catch(() => '');
  if (!res.ok) {
    const hint = res.status === 401 || res.status === 403 ? ': the API key was rejected (check api_key)' : '';
    throw new VoiceListError(`${vendor}: ${url.pathname} answered HTTP ${res.status}${hint}`, res.status);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new VoiceListError(`${vendor}: ${url.pathname} answered something that is not JSON`);
  }
}

/** The vendor's path under a configured base_url (ws(s) turned into http(s); query and userinfo dropped). */
export function httpUrl(base: string, path: string): URL {
  const url = new URL(base);
  url.protocol = url.protocol === 'ws:' || url.protocol === 'http:' ? 'http:' : 'https:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${path}`;
  url.search = '';
  url.hash = '';
  // Credentials in a base_url's userinfo would end up in fetch's error messages (and so the log).
  url.username = '';
  url.password = '';
  return url;
}

export const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
export const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
/** `{ a: x, b: undefined }` -> `{ a: x }`, so optional fields are absent rather than undefined. */
export function compact<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}
