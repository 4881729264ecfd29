/**
 * One-time tokens of the media stream: the voice webhook (signed by the carrier) issues one per
 * call and puts it in the <Stream>'s parameters; the stream's `start` message must bring it back.
 * The stream WebSocket itself carries no signature we could check, so without the token anyone
 * who knows the URL could open a "call" to an organization's agent. A token is random (32
 * bytes), used once, and short-lived: the carrier opens the stream right after the webhook
 * answers.
 *
 * The grant is kept in the store (src/store/stream-grants.ts), under the token's SHA-256 only:
 * behind a load balancer the stream may reach another node than the webhook did, and it opens
 * there once in the whole cluster. An outbound dial's grant is addressed by its call id too
 * (bindCall, revoke), which any node learns from the dial's status callbacks.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { StoredStreamGrant, StreamGrantRepo } from '../store/stream-grants.ts';

/**
 * What the webhook decided for the call; the stream runs it. An outbound call callbridge placed
 * has its call record (the session) `callId` and the session's connect token (sealed at rest).
 */
export type StreamGrant = StoredStreamGrant;

export const DEFAULT_STREAM_TOKEN_TTL_MS = 30_000;
/**
 * How long a grant's row outlives its expiry before the sweep deletes it: an outbound dial's row
 * is its state for the placing node's watchdog (answered, stream started), which looks at it
 * when the token expires.
 */
export const STREAM_GRANT_KEEP_MS = 5 * 60_000;

const hashOf = (token: string) => createHash('sha256').update(token).digest('hex');

export class StreamTokens {
  readonly #repo: StreamGrantRepo;
  readonly #ttlMs: number;
  readonly #now: () => number;

  constructor(repo: StreamGrantRepo, options: { ttlMs?: number; now?: () => number } = {}) {
    this.#repo = repo;
    this.#ttlMs = options.ttlMs ?? DEFAULT_STREAM_TOKEN_TTL_MS;
    this.#now = options.now ?? Date.now;
  }

  /** A new token for the grant (base64url, 43 characters), stored before it is returned. */
  async issue(grant: StreamGrant, ttlMs = this.#ttlMs): Promise<string> {
    const token = randomBytes(32).toString('base64url');
    const now = this.#now();
    await this.#repo.insert(hashOf(token), grant, new Date(now + ttlMs).toISOString(), new Date(now).toISOString());
    return token;
  }

  /**
   * Binds an outbound call's token to the CallSid the carrier gave it: the token goes into the
   * call's TwiML before the carrier has named the call.
   */
  async bindCall(callId: string, callSid: string): Promise<void> {
    await this.#repo.bindCall(callId, callSid);
  }

  /** Spends an outbound call's token that will not be used (the call was never answered). */
  async revoke(callId: string): Promise<void> {
    await this.#repo.revokeCall(callId);
  }

  /**
   * The grant of a token, once in the whole cluster (one conditional UPDATE); an expired or
   * spent token has none. `callSid`: the call the stream says it is (an outbound dial's stream
   * counts as started when it is the grant's).
   */
  async redeem(token: unknown, callSid?: string): Promise<StreamGrant | undefined> {
    if (typeof token !== 'string' || token.length !== 43) return undefined;
    return this.#repo.redeem(hashOf(token), new Date(this.#now()).toISOString(), callSid ?? null);
  }

  /** Tokens issued and neither used nor expired (tests, metrics). */
  pending(): Promise<number> {
    return this.#repo.pending(new Date(this.#now()).toISOString());
  }

  /** Deletes grants expired for STREAM_GRANT_KEEP_MS (the session_token_sweep role runs it). */
  sweep(): Promise<number> {
    return this.#repo.sweep(new Date(this.#now() - STREAM_GRANT_KEEP_MS).toISOString());
  }
}
