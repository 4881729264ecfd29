/**
 * The console's one way to the REST API: `api(path, init?)` sends the operator's API key as
 * `Authorization: Bearer`, parses the JSON answer and throws an Error carrying the server's
 * `error` text. The key lives in sessionStorage only (gone with the tab): never in a URL, a
 * cookie or a log.
 *
 * Stable for every page (the admin pages use it too):
 *   api(path, init?) -> Promise<any>     JSON body, or null for 204
 *   apiBlob(path)    -> Promise<Blob>    a binary answer (a recording)
 *   ApiError         .status (HTTP status, 0 when the network failed)
 */
const KEY_NAME = 'callbridge.console.apiKey';

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_NAME);
}

export function setApiKey(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function clearApiKey() {
  sessionStorage.removeItem(KEY_NAME);
}

/** Listeners told when the API answered 401 (the key was revoked): the shell signs out. */
const unauthorizedListeners = new Set();
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

async function request(path, init = {}) {
  const headers = new Headers(init.headers);
  const key = init.key ?? apiKey();
  if (key) headers.set('authorization', `Bearer ${key}`);
  let body = init.body;
  if (body !== undefined && typeof body !== 'string' && !(body instanceof Blob)) {
    body = JSON.stringify(body);
    headers.set('content-type', 'application/json');
  }
  let res;
  try {
    res = await fetch(path, { ...init, headers, body, credentials: 'omit' });
  } catch (err) {
    throw new ApiError(`the daemon did not answer (${err.message})`, 0);
  }
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try {
      const parsed = await res.json();
      if (parsed && typeof parsed.error === 'string') message = parsed.error;
    } catch {
      // Not JSON: the status line says it.
    }
    if (res.status === 401 && init.key === undefined) for (const l of unauthorizedListeners) l();
    throw new ApiError(message, res.status);
  }
  return res;
}

/** A JSON request; `init.body` may be an object (sent as JSON). `init.key` overrides the stored key. */
export async function api(path, init = {}) {
  const res = await request(path, init);
  if (res.status === 204) return null;
  const text = await res.text();
  return text === '' ? null : JSON.parse(text);
}

/** A binary answer, e.g. a call's recording, for a blob: URL. */
export async function apiBlob(path, init = {}) {
  const res = await request(path, init);
  return res.blob();
}
