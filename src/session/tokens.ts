/**
 * Session tokens (DESIGN.md): JWT HS256 signed with security.token_secret or a secret generated
 * once into <data_dir>/token-secret. The claims name the session record in the store; the record
 * holds everything else (caller, variables, overrides). A token lives 10 minutes and opens one
 * connection (the record's connected_at, see SessionRepo.claim).
 *
 * Also the LiveKit access token of `transport: "webrtc"` (LiveKit's documented format: HS256 with
 * the API secret, iss = API key, sub = participant identity, a `video` grant).
 */
import { randomBytes } from 'node:crypto';
import { SignJWT, jwtVerify, errors } from 'jose';
import type { Config } from '../config.ts';
import { loadOrCreateSecret } from '../store/data-dir-secrets.ts';

/** Seconds a session token may wait before it opens its connection. */
export const SESSION_TOKEN_TTL_SECS = 600;
/** Seconds a LiveKit room token is valid to join (LiveKit checks it at join only). */
export const WEBRTC_TOKEN_TTL_SECS = 600;
export const TOKEN_SECRET_FILE = 'token-secret';

export type SessionScope = 'voice' | 'chat';

export interface SessionClaims {
  /** The session (and call record) id. */
  sub: string;
  org: string;
  agent: string;
  version: string | null;
  scopes: SessionScope[];
  jti: string;
  iat: number;
  exp: number;
}

export type TokenFailure = 'expired' | 'bad_signature' | 'malformed';
export type VerifyResult = { ok: true; claims: SessionClaims } | { ok: false; reason: TokenFailure };

export interface IssuedToken {
  token: string;
  claims: SessionClaims;
  /** ISO 8601 of `exp`. */
  expiresAt: string;
}

/** The configured token secret, or the one generated once into the data directory. */
export function loadTokenSecret(config: Pick<Config, 'data_dir' | 'security'>): Uint8Array {
  return loadOrCreateSecret(config.data_dir, TOKEN_SECRET_FILE, config.security.token_secret);
}

const isString = (v: unknown): v is string => typeof v === 'string' && v.length > 0;

export class SessionTokens {
  readonly #secret: Uint8Array;
  readonly #now: () => number;

  /** @param now milliseconds clock, injectable for tests */
  constructor(secret: Uint8Array, now: () => number = Date.now) {
    this.#secret = secret;
    this.#now = now;
  }

  /** Signs a token for a session. `iat` may be given (tests sign tokens that are already old). */
  async sign(s: { sessionId: string; orgId: string; agentId: string; versionId: string | null; chat?: boolean; iat?: number; jti?: string }): Promise<IssuedToken> {
    const iat = s.iat ?? Math.floor(this.#now() / 1000);
    const claims: SessionClaims = {
      sub: s.sessionId,
      org: s.orgId,
      agent: s.agentId,
      version: s.versionId,
      scopes: s.chat ? ['voice', 'chat'] : ['voice'],
      jti: s.jti ?? randomBytes(16).toString('base64url'),
      iat,
      exp: iat + SESSION_TOKEN_TTL_SECS,
    };
    const token = await new SignJWT({ org: claims.org, agent: claims.agent, version: claims.version, scopes: claims.scopes })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(claims.sub)
      .setJti(claims.jti)
      .setIssuedAt(claims.iat)
      .setExpirationTime(claims.exp)
      .sign(this.#secret);
    return { token, claims, expiresAt: new Date(claims.exp * 1000).toISOString() };
  }

  /** The claims of a valid token, or why it is not valid. Never throws. */
  async verify(token: string): Promise<VerifyResult> {
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, this.#secret, { algorithms: ['HS256'], currentDate: new Date(this.#now()) }));
    } catch (err) {
      if (err instanceof errors.JWTExpired) return { ok: false, reason: 'expired' };
      if (err instanceof errors.JWSSignatureVerificationFailed) return { ok: false, reason: 'bad_signature' };
      return { ok: false, reason: 'malformed' };
    }
    const { sub, org, agent, version, scopes, jti, iat, exp } = payload;
    if (
      !isString(sub) ||
      !isString(org) ||
      !isString(agent) ||
      !(version === null || isString(version)) ||
      !Array.isArray(scopes) ||
      !scopes.every((x) => x === 'voice' || x === 'chat') ||
      !isString(jti) ||
      typeof iat !== 'number' ||
      typeof exp !== 'number'
    ) {
      return { ok: false, reason: 'malformed' };
    }
    return { ok: true, claims: { sub, org, agent, version, scopes: scopes as SessionScope[], jti, iat, exp } };
  }
}

/**
 * A LiveKit access token that lets `identity` join `room`, publish and subscribe.
 * https://docs.livekit.io/home/get-started/authentication/ (token structure, video grant).
 */
export async function signWebrtcToken(o: { apiKey: string; apiSecret: string; identity: string; room: string; now?: number }): Promise<string> {
  const now = Math.floor((o.now ?? Date.now()) / 1000);
  return new SignJWT({ video: { room: o.room, roomJoin: true, canPublish: true, canSubscribe: true } })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(o.apiKey)
    .setSubject(o.identity)
    .setNotBefore(now)
    .setIssuedAt(now)
    .setExpirationTime(now + WEBRTC_TOKEN_TTL_SECS)
    .sign(new TextEncoder().encode(o.apiSecret));
}
