/**
 * Voice session records (table `sessions`, keyed by the call record id). A session is created
 * with its call row by POST /v1/session-token, opened once by /v1/connection (claim), and ends
 * through the call row (CallRepo.end).
 */
import type { SqlClient } from './sql-client.ts';
import { callEndedEvents, CallRepo, type CallDirection } from './calls.ts';
import type { CallSource } from '../domain/call.ts';
import type { MachineDetectionConfig } from '../domain/dial.ts';

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
  /** An outbound dial's answering-machine detection (migration 20); null: off. */
  machine_detection: MachineDetectionConfig | null;
  scopes: string[];
  token_jti: string;
  token_expires_at: string;
  connected_at: string | null;
  created_at: string;
}

export interface NewSession extends Omit<SessionRecord, 'connected_at' | 'machine_detection'> {
  machine_detection?: MachineDetectionConfig | null;
  /** `to` of the call row: the number called, or the agent's name for a web session. */
  call_to: string;
  /** web for a WebSocket client (the default); the bridge will open inbound/outbound ones. */
  direction?: CallDirection;
  sip_trunk_id?: string | null;
  /** The call row's source (default: from the direction) and the carrier's call id. */
  source?: CallSource;
  carrier_call_id?: string | null;
}

interface SessionRow extends Omit<SessionRecord, 'variables' | 'scopes' | 'machine_detection'> {
  variables: string;
  machine_detection: string | null;
  scopes: string;
}

const fromRow = (r: SessionRow): SessionRecord => ({
  ...r,
  variables: JSON.parse(r.variables) as SessionRecord['variables'],
  machine_detection: r.machine_detection === null ? null : (JSON.parse(r.machine_detection) as MachineDetectionConfig),
  scopes: JSON.parse(r.scopes) as string[],
});

export class SessionRepo {
  /** nodeId: this node (cluster.node_id), stamped on the call rows of the sessions it creates and opens. */
  constructor(
    private readonly db: SqlClient,
    private readonly nodeId: string | null = null,
  ) {}

  /** Stores the session and its call row (status started) in one transaction. */
  async create(s: NewSession): Promise<SessionRecord> {
    const { source, carrier_call_id } = s;
    const direction = s.direction ?? 'web';
    const sipTrunkId = s.sip_trunk_id ?? null;
    await this.db.transaction(async (tx) => {
      await new CallRepo(tx, this.nodeId).insert({
        id: s.id,
        org_id: s.org_id,
        agent_id: s.agent_id,
        graph_version_id: s.version_id,
        sip_trunk_id: sipTrunkId,
        direction,
        from: s.caller_id,
        to: s.call_to,
        created_at: s.created_at,
        ...(source !== undefined ? { source } : {}),
        carrier_call_id: carrier_call_id ?? null,
      });
      await tx.run(
        `INSERT INTO sessions (id, org_id, agent_id, version_id, caller_id, transport, chat_id, first_message, prompt, variables, scopes, token_jti, token_expires_at, created_at, machine_detection)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          s.id,
          s.org_id,
          s.agent_id,
          s.version_id,
          s.caller_id,
          s.transport,
          s.chat_id,
          s.first_message,
          s.prompt,
          JSON.stringify(s.variables),
          JSON.stringify(s.scopes),
          s.token_jti,
          s.token_expires_at,
          s.created_at,
          s.machine_detection ? JSON.stringify(s.machine_detection) : null,
        ],
      );
    });
    return (await this.get(s.id)) as SessionRecord;
  }

  async get(id: string): Promise<SessionRecord | undefined> {
    const r = await this.db.get<SessionRow>('SELECT * FROM sessions WHERE id = ?', [id]);
    return r && fromRow(r);
  }

  /**
   * Marks the session connected if it is still unconnected, the token is the one issued for it
   * and it has not expired. Returns true for exactly one caller per session.
   */
  async claim(id: string, jti: string, now: string): Promise<boolean> {
    // The one statement that decides which connection owns the session: the database runs it
    // atomically, so of two connections racing with the same token exactly one changes the row.
    const claimed = await this.db.transaction(async (tx) => {
      const r = await tx.run('UPDATE sessions SET connected_at = ? WHERE id = ? AND connected_at IS NULL AND token_jti = ? AND token_expires_at > ?', [now, id, jti, now]);
      // The call now runs on this node (a token issued on one node may be opened on another):
      // if this node dies, the survivors' sweep ends it (docs/store-postgres.md "Several nodes").
      if (r.changes === 1 && this.nodeId !== null) await tx.run('UPDATE calls SET node_id = ? WHERE id = ?', [this.nodeId, id]);
      return r.changes === 1;
    });
    return claimed;
  }

  /**
   * At start: sessions still in progress were cut when the previous run stopped without ending
   * them (a crash); their call rows end with reason error. Returns how many.
   *
   * Whose rows: on SQLite every such row (one node owns the file). On PostgreSQL only this
   * node's own (node_id = this node's, its previous run): the other in-progress rows are other
   * nodes' live calls, and a dead node's are ended by the lease sweep (cluster-nodes.ts). Rows
   * without a node (written before nodes were recorded, or by a node without a node id) are
   * left alone there for the same reason: they may be a not-yet-upgraded node's live calls.
   */
  async endAbandoned(now: string): Promise<number> {
    const ownRowsOnly = this.db.dialect === 'postgres';
    if (ownRowsOnly && this.nodeId === null) return 0;
    return this.db.transaction(async (tx) => {
      const ended = await tx.all<{ id: string; org_id: string }>(
        `UPDATE calls SET status = 'ended', end_status = 'failed', ended_at = ?, termination_reason = 'error'
         WHERE ended_at IS NULL AND status = 'in_progress' AND id IN (SELECT id FROM sessions WHERE connected_at IS NOT NULL)${ownRowsOnly ? ' AND node_id = ?' : ''}
         RETURNING id, org_id`,
        ownRowsOnly ? [now, this.nodeId] : [now],
      );
      await callEndedEvents(tx, ended);
      return ended.length;
    });
  }

  /** Call rows of sessions whose token expired unused end (end_status expired). Returns how many. */
  async expireUnused(now: string): Promise<number> {
    // docs/calls.md: a token never used ends its call as ended / expired, reason token_expired.
    return this.db.transaction(async (tx) => {
      const ended = await tx.all<{ id: string; org_id: string }>(
        `UPDATE calls SET status = 'ended', end_status = 'expired', ended_at = (SELECT token_expires_at FROM sessions s WHERE s.id = calls.id), termination_reason = 'token_expired'
         WHERE status = 'started' AND ended_at IS NULL AND id IN (SELECT id FROM sessions WHERE connected_at IS NULL AND token_expires_at <= ?)
         RETURNING id, org_id`,
        [now],
      );
      await callEndedEvents(tx, ended);
      return ended.length;
    });
  }
}
