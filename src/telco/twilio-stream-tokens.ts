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
   * The stream token of an inbound call: derived from its AccountSid and CallSid with the store's
   * secret key (base64url, 43 characters, like a random one), so that the carrier's webhook for
   * one call, however often it comes and to whichever node, is answered with the same token, and
   * the store's primary key on the token's hash keeps one grant per call. Nobody without the key
   * can compute it.
   */
  callToken(accountSid: string, callSid: string): string {
    return this.#repo.keyedDigest('stream-token', `${accountSid}\n${callSid}`).toString('base64url');
  }

  /**
   * Whether an inbound call had a webhook answered already: `pending` (its token is waiting for
   * its stream: answer the same again), `used` (its stream started, or its token expired: no
   * second call for this CallSid), undefined (a new call).
   */
  async callState(accountSid: string, callSid: string): Promise<'pending' | 'used' | undefined> {
    return this.#repo.inboundCallState(hashOf(this.callToken(accountSid, callSid)), callSid, new Date(this.#now()).toISOString());
  }

  /**
   * The token of an inbound call's grant (callToken), stored unless the call has one already:
   * two webhooks of one call at once, on two nodes, store one grant and answer the same token.
   */
  async issueForCall(grant: StreamGrant): Promise<string> {
    const token = this.callToken(grant.accountSid, grant.callSid);
    const now = this.#now();
    await this.#repo.insertOnce(hashOf(token), grant, new Date(now + this.#ttlMs).toISOString(), new Date(now).toISOString());
    return token;
  }

  /** Whether a token (one that would not redeem) already started a stream of this CallSid. */
  async startedFor(token: unknown, callSid: string): Promise<boolean> {
    if (typeof token !== 'string' || token.length !== 43) return false;
    return this.#repo.streamStarted(hashOf(token), callSid);
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
