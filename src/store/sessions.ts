/**
 * Voice session records (table `sessions`, keyed by the call record id). A session is created
 * with its call row by POST /v1/session-token, opened once by /v1/connection (claim), and ends
 * through the call row (CallRepo.end).
 */
import type { Db } from './db.ts';
import type { CallDirection, CallRepo } from './calls.ts';
import type { CallSource } from '../domain/call.ts';

export type SessionTransport = 'websocket' | 'webrtc';

export interface SessionRecord {
  id: string;
  org_id: string;
  agent_id: string;
  version_id: string | null;
  caller_id: string;
  transport: SessionTransport;
  chat_id: string | null;
  first_message: string | null;
  prompt: string | null;
  variables: Array<{ key: string; value: string }>;
  scopes: string[];
  token_jti: string;
  token_expires_at: string;
  connected_at: string | null;
  created_at: string;
}

export interface NewSession extends Omit<SessionRecord, 'connected_at'> {
  /** `to` of the call row: the number called, or the agent's name for a web session. */
  call_to: string;
  /** web for a WebSocket client (the default); the bridge will open inbound/outbound ones. */
  direction?: CallDirection;
  sip_trunk_id?: string | null;
  /** The call row's source (default: from the direction) and the carrier's call id. */
  source?: CallSource;
  carrier_call_id?: string | null;
}

interface SessionRow extends Omit<SessionRecord, 'variables' | 'scopes'> {
  variables: string;
  scopes: string;
}

const fromRow = (r: SessionRow): SessionRecord => ({
  ...r,
  variables: JSON.parse(r.variables) as SessionRecord['variables'],
  scopes: JSON.parse(r.scopes) as string[],
});

export class SessionRepo {
  readonly #insert;
  readonly #get;
  readonly #claim;
  readonly #expire;
  readonly #endAbandoned;

  constructor(
    private readonly db: Db,
    private readonly calls: CallRepo,
  ) {
    this.#insert = db.prepare(
      `INSERT INTO sessions (id, org_id, agent_id, version_id, caller_id, transport, chat_id, first_message, prompt, variables, scopes, token_jti, token_expires_at, created_at)
       VALUES (@id, @org_id, @agent_id, @version_id, @caller_id, @transport, @chat_id, @first_message, @prompt, @variables, @scopes, @token_jti, @token_expires_at, @created_at)`,
    );
    this.#get = db.prepare('SELECT * FROM sessions WHERE id = ?');
    // The one statement that decides which connection owns the session: SQLite runs it
    // atomically, so of two connections racing with the same token exactly one changes the row.
    this.#claim = db.prepare('UPDATE sessions SET connected_at = @now WHERE id = @id AND connected_at IS NULL AND token_jti = @jti AND token_expires_at > @now');
    // docs/calls.md: a token never used ends its call as ended / expired, reason token_expired.
    this.#expire = db.prepare(
      `UPDATE calls SET status = 'ended', end_status = 'expired', ended_at = (SELECT token_expires_at FROM sessions s WHERE s.id = calls.id), termination_reason = 'token_expired'
       WHERE status = 'started' AND ended_at IS NULL AND id IN (SELECT id FROM sessions WHERE connected_at IS NULL AND token_expires_at <= ?)`,
    );
    this.#endAbandoned = db.prepare(
      `UPDATE calls SET status = 'ended', end_status = 'failed', ended_at = ?, termination_reason = 'error'
       WHERE ended_at IS NULL AND status = 'in_progress' AND id IN (SELECT id FROM sessions WHERE connected_at IS NOT NULL)`,
    );
  }

  /** Stores the session and its call row (status started) in one transaction. */
  create(s: NewSession): SessionRecord {
    const { source, carrier_call_id, ...session } = s;
    const row = {
      ...session,
      direction: s.direction ?? 'web',
      sip_trunk_id: s.sip_trunk_id ?? null,
      variables: JSON.stringify(s.variables),
      scopes: JSON.stringify(s.scopes),
    };
    this.db.transaction(() => {
      this.calls.insert({
        id: s.id,
        org_id: s.org_id,
        agent_id: s.agent_id,
        graph_version_id: s.version_id,
        sip_trunk_id: row.sip_trunk_id,
        direction: row.direction,
        from: s.caller_id,
        to: s.call_to,
        created_at: s.created_at,
        ...(source !== undefined ? { source } : {}),
        carrier_call_id: carrier_call_id ?? null,
      });
      this.#insert.run(row);
    })();
    return this.get(s.id) as SessionRecord;
  }

  get(id: string): SessionRecord | undefined {
    const r = this.#get.get(id) as SessionRow | undefined;
    return r && fromRow(r);
  }

  /**
   * Marks the session connected if it is still unconnected, the token is the one issued for it
   * and it has not expired. Returns true for exactly one caller per session.
   */
  claim(id: string, jti: string, now: string): boolean {
    return this.#claim.run({ id, jti, now }).changes === 1;
  }

  /**
   * At start: sessions still in progress were cut when the previous run stopped without ending
   * them (a crash); their call rows end with reason error. Returns how many.
   */
  endAbandoned(now: string): number {
    return this.#endAbandoned.run(now).changes;
  }

  /** Call rows of sessions whose token expired unused end (end_status expired). Returns how many. */
  expireUnused(now: string): number {
    return this.#expire.run(now).changes;
  }
}
