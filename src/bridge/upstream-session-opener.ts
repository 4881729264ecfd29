/**
 * Voice sessions on another server (bridge.upstream_url): the bridge then is a client of that
 * server's PUBLIC API only, like any web client, which is what proves the voice protocol is the
 * whole contract between the phone side and the voice side (docs/bridge.md):
 *
 *   POST {upstream}/v1/session-token   Authorization: Bearer {bridge.upstream_api_key}
 *        { agent_id, caller_id, first_message?, prompt?, variables? }      -> { token }
 *   WebSocket {upstream as ws(s)}/v1/connection?token={token}              (the bridge opens it)
 *
 * What is stored where:
 * - upstream: the session and its record, a *web* session (the public API cannot set direction,
 *   trunk or the number called): caller_id = the caller's number, the conversation, its end
 *   reason, transcript and summary, under the upstream organization of the API key.
 * - here: the PHONE CALL record (this daemon's GET /v1/calls), with the upstream session's id as
 *   its id so the two can be joined: direction, trunk, from, to, agent, started_at, and whatever
 *   the SIP side adds (recording, a failed dial's busy / no_answer). No session row is stored
 *   here: this daemon's /v1/connection can never accept the session (its token is the
 *   upstream's), and the upstream's transcript is not copied.
 * - agents: the routed agent's id is used upstream as is; deployments keep agents in sync (same
 *   ids on both servers). The version is not sent: the upstream runs its active version.
 *
 * Errors: an HTTP error from the upstream (401 wrong key, 404 agent unknown there, ...) throws a
 * 502 DomainError naming the status and the upstream's `error`; unreachable or slower than
 * bridge.upstream_timeout_ms throws a 503 DomainError. The bridge then refuses the call with 503
 * (inbound) or the dial request fails with that status. The API key never appears in errors.
 */
import { badGateway, DomainError, unavailable } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import type { Store } from '../store/index.ts';
import { connectionUrl, type OpenedSession, type OpenSessionInput, type SessionOpener } from './session-opener.ts';

export interface UpstreamSessionOpenerOptions {
  /** http(s) base URL of the upstream voice server (bridge.upstream_url). */
  baseUrl: string;
  /** Bearer key of an organization there (bridge.upstream_api_key). */
  apiKey: string;
  /** Time limit of the session-token request, ms (default 5000). */
  timeoutMs?: number;
  /** Where the phone-call record is kept (this daemon's store). */
  store: Store;
  logger?: Logger;
  /** Injectable for tests. */
  fetch?: typeof fetch;
}

/** The body of POST /v1/session-token that the public API accepts (no direction, no trunk). */
interface SessionTokenRequest {
  agent_id: string;
  caller_id: string;
  first_message?: string;
  prompt?: string;
  variables?: Array<{ key: string; value: string }>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The `sub` claim of a JWT (the session id of a callbridge-compatible server), read WITHOUT
 * verifying the signature: the token is the upstream's, signed with its secret; we only need to
 * know which session it names. undefined when the token is not a JWT with a uuid `sub`.
 */
export function tokenSubject(token: string): string | undefined {
  const parts = token.split('.');
  if (parts.length !== 3) return undefined;
  try {
    const payload = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')) as { sub?: unknown };
    return typeof payload.sub === 'string' && UUID.test(payload.sub) ? payload.sub : undefined;
  } catch {
    return undefined;
  }
}

export class UpstreamSessionOpener implements SessionOpener {
  /** The upstream keeps the conversation; this daemon's phone-call record is the bridge's. */
  readonly recordsCalls = false;
  readonly #o: UpstreamSessionOpenerOptions;
  readonly #endpoint: string;
  readonly #base: string;

  constructor(options: UpstreamSessionOpenerOptions) {
    const u = new URL(options.baseUrl);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new RangeError(`bridge.upstream_url must be http(s), got ${u.protocol}`);
    if (options.apiKey === '') throw new RangeError('bridge.upstream_api_key is required with bridge.upstream_url');
    this.#o = options;
    this.#base = options.baseUrl.replace(/\/+$/, '');
    this.#endpoint = `${this.#base}/v1/session-token`;
  }

  /** @throws DomainError 502 (the upstream answered an error) or 503 (unreachable, timeout, bad answer). */
  async open(input: OpenSessionInput): Promise<OpenedSession> {
    const body: SessionTokenRequest = { agent_id: input.agentId, caller_id: input.callerId };
    if (input.firstMessage != null) body.first_message = input.firstMessage;
    if (input.prompt != null) body.prompt = input.prompt;
    if (input.variables !== undefined && input.variables.length > 0) body.variables = input.variables;
    const timeoutMs = this.#o.timeoutMs ?? 5000;
    const doFetch = this.#o.fetch ?? fetch;
    let res: Response;
    let text: string;
    try {
      res = await doFetch(this.#endpoint, {
        method: 'POST',
        headers: { authorization: `Bearer ${this.#o.apiKey}`, 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
      text = await res.text();
    } catch (err) {
      const timedOut = err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError');
      const why = timedOut ? `no answer within ${timeoutMs} ms` : `unreachable (${describeCause(err)})`;
      throw new DomainError('unavailable', 'UPSTREAM_UNAVAILABLE', `upstream voice server ${this.#base}: ${why}`, { cause: err });
    }
    if (!res.ok) {
      let detail = '';
      try {
        const e = JSON.parse(text) as { error?: unknown };
        if (typeof e.error === 'string') detail = `: ${e.error.slice(0, 300)}`;
      } catch {
        // not JSON (a proxy's HTML page): the status says enough
      }
      const hint = res.status === 401 ? ' (bridge.upstream_api_key is not a valid key there)' : res.status === 404 ? ` (agent ${input.agentId} is not an active agent there: agents must be kept in sync by id)` : '';
      throw badGateway(`upstream voice server refused the session: HTTP ${res.status}${detail}${hint}`, 'UPSTREAM_REFUSED');
    }
    let token: unknown;
    try {
      token = (JSON.parse(text) as { token?: unknown }).token;
    } catch {
      token = undefined;
    }
    if (typeof token !== 'string' || token === '') throw unavailable(`upstream voice server ${this.#base}: session-token answer without a token`, 'UPSTREAM_BAD_ANSWER');
    const sessionId = tokenSubject(token);
    if (sessionId === undefined) throw unavailable(`upstream voice server ${this.#base}: its token names no session (no uuid sub claim)`, 'UPSTREAM_BAD_ANSWER');
    await this.#recordPhoneCall(sessionId, input);
    this.#o.logger?.debug({ sessionId, upstream: this.#base }, 'voice session opened upstream');
    return { sessionId, connectUrl: this.connectUrl(token), token };
  }

  connectUrl(token: string): string {
    return connectionUrl(this.#base, token);
  }

  /**
   * The phone call's record here (the conversation's record is upstream): same id as the
   * upstream session. Status started until the bridge marks it; see docs/bridge.md. No
   * graph_version_id: the upstream runs its own active version.
   */
  async #recordPhoneCall(sessionId: string, input: OpenSessionInput): Promise<void> {
    try {
      await this.#o.store.calls.insert({
        id: sessionId,
        org_id: input.orgId,
        agent_id: input.agentId,
        sip_trunk_id: input.sipTrunkId ?? null,
        direction: input.direction === 'outbound' ? 'outbound' : 'inbound',
        from: input.callerId,
        to: input.callTo,
        created_at: new Date().toISOString(),
        ...(input.source !== undefined ? { source: input.source } : {}),
        carrier_call_id: input.carrierCallId ?? null,
      });
    } catch (err) {
      // Only a second upstream (or a replayed id) could collide: the call goes on, unrecorded here.
      this.#o.logger?.warn({ err, sessionId }, 'could not store the phone-call record of an upstream session');
    }
  }
}

/** A fetch failure's reason without the request (undici hides it in `cause`). */
function describeCause(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } } | undefined)?.cause;
  if (cause && typeof cause.code === 'string') return cause.code;
  if (cause && typeof cause.message === 'string') return cause.message;
  return err instanceof Error ? err.message : String(err);
}
