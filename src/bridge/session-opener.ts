/**
 * Where a bridged call's voice session comes from. The bridge only needs a session id (for its
 * logs and the call record) and a URL to open with a WebSocket; how the session was created is
 * this interface's business:
 * - LocalSessionOpener: this daemon's own store and token signer, and its own /v1/connection
 *   (the default: one process, no network hop but loopback);
 * - an upstream opener (bridge.upstream_url): another server speaking the same public API.
 */
import type { Store } from '../store/index.ts';
import { issueSession, type IssueSessionInput } from '../session/issue.ts';
import type { SessionTokens } from '../session/tokens.ts';

export type OpenSessionInput = Omit<IssueSessionInput, 'transport' | 'chat' | 'chatId'>;

export interface OpenedSession {
  sessionId: string;
  /** ws(s)://.../v1/connection?token=... */
  connectUrl: string;
  /** The session's connect token (the URL's): another node may attach the session with it (connectUrl). */
  token: string;
}

export interface SessionOpener {
  /**
   * Whether this daemon's session server keeps the call record (answered, ended, transcript).
   * False for an upstream server: then the bridge marks the phone call answered and ended itself.
   */
  readonly recordsCalls: boolean;
  /** @throws when no session can be opened (the call is then refused or the dial fails). */
  open(input: OpenSessionInput): Promise<OpenedSession>;
  /**
   * The URL this node connects a session opened elsewhere with (an outbound carrier dial placed
   * by another node whose stream reached this one): this opener's server and the token.
   */
  connectUrl(token: string): string;
}

/** Sessions of this daemon: the record in our store, the token signed here, our own socket. */
export class LocalSessionOpener implements SessionOpener {
  readonly recordsCalls = true;

  constructor(
    private readonly store: Store,
    private readonly tokens: SessionTokens,
    /** http(s) base URL of this daemon (known once it listens). */
    private readonly baseUrl: () => string,
  ) {}

  async open(input: OpenSessionInput): Promise<OpenedSession> {
    const { sessionId, token } = await issueSession(this.store, this.tokens, input);
    return { sessionId, connectUrl: this.connectUrl(token), token };
  }

  connectUrl(token: string): string {
    return connectionUrl(this.baseUrl(), token);
  }
}

/** The voice socket URL of a server's base URL and a session token. */
export function connectionUrl(baseUrl: string, token: string): string {
  return `${baseUrl.replace(/\/+$/, '').replace(/^http/, 'ws')}/v1/connection?token=${encodeURIComponent(token)}`;
}
