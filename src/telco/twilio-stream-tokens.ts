/**
 * One-time tokens of the media stream: the voice webhook (signed by the carrier) issues one per
 * call and puts it in the <Stream>'s parameters; the stream's `start` message must bring it back.
 * The stream WebSocket itself carries no signature we could check, so without the token anyone
 * who knows the URL could open a "call" to an organization's agent. A token is random (32
 * bytes), used once, and short-lived: the carrier opens the stream right after the webhook
 * answers. Held in memory: a restart loses only calls that were being set up.
 */
import { randomBytes } from 'node:crypto';

/** What the webhook decided for the call; the stream runs it. */
export interface StreamGrant {
  orgId: string;
  agentId: string;
  numberId: string;
  callSid: string;
  accountSid: string;
  from: string;
  to: string;
  /** An outbound call callbridge placed: its call record (the session) is `callId`. */
  outbound?: { callId: string };
}

export const DEFAULT_STREAM_TOKEN_TTL_MS = 30_000;

export class StreamTokens {
  readonly #ttlMs: number;
  readonly #now: () => number;
  readonly #grants = new Map<string, { grant: StreamGrant; expiresAt: number }>();

  constructor(options: { ttlMs?: number; now?: () => number } = {}) {
    this.#ttlMs = options.ttlMs ?? DEFAULT_STREAM_TOKEN_TTL_MS;
    this.#now = options.now ?? Date.now;
  }

  /** A new token for the grant (base64url, 43 characters). */
  issue(grant: StreamGrant, ttlMs = this.#ttlMs): string {
    this.#sweep();
    const token = randomBytes(32).toString('base64url');
    this.#grants.set(token, { grant: { ...grant }, expiresAt: this.#now() + ttlMs });
    return token;
  }

  /**
   * Binds an outbound call's token to the CallSid the carrier gave it: the token goes into the
   * call's TwiML before the carrier has named the call.
   */
  bindCall(token: string, callSid: string): void {
    const entry = this.#grants.get(token);
    if (entry !== undefined) entry.grant.callSid = callSid;
  }

  /** Spends a token that will not be used (the call was never answered). */
  revoke(token: string): void {
    this.#grants.delete(token);
  }

  /** The grant of a token, once: the token is spent whether or not it was still valid. */
  redeem(token: unknown): StreamGrant | undefined {
    if (typeof token !== 'string' || token.length !== 43) return undefined;
    const entry = this.#grants.get(token);
    if (entry === undefined) return undefined;
    this.#grants.delete(token);
    return entry.expiresAt > this.#now() ? entry.grant : undefined;
  }

  /** Tokens issued and neither used nor expired (tests, metrics). */
  get pending(): number {
    this.#sweep();
    return this.#grants.size;
  }

  #sweep(): void {
    const now = this.#now();
    for (const [token, e] of this.#grants) if (e.expiresAt <= now) this.#grants.delete(token);
  }
}
