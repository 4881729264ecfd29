/**
 * Outbound runs and their contacts' states (tables outbound_runs, outbound_run_contacts, migration
 * 19; docs/outbound.md). The dialer of every node sharing the store works the same rows:
 *
 * - claim(): in one transaction (PostgreSQL: behind an advisory lock on the run, SQLite: the
 *   transaction is the lock), a run's leases run out (claimed, never placed: back to pending),
 *   its calls up are counted against max_concurrent, the pacing gate (next_dial_at) is read and
 *   moved, and due contacts are leased to the node (state dialing). Two nodes never hold one
 *   contact, and never put more than max_concurrent calls of a run up together.
 * - placed() / release() / failedToPlace(): the lease holder's answer, only while it holds it.
 * - settle(): a contact whose call has ended is settled from its call record by whichever node
 *   sees it first (a conditional update: one of them wins).
 *
 * Times compared here are epoch ms on the database's clock (dbNowMs), as the webhook outbox's.
 */
import { dbNowMs } from './db-clock.ts';
import { slotLockKey } from './call-slots.ts';
import type { SqlClient } from './sql-client.ts';
import type { ContactState, ContactVariables, RunSettings, RunStatus } from '../domain/outbound.ts';
import type { CallStatus, EndStatus } from '../domain/call.ts';

export interface OutboundRun {
  id: string;
  org_id: string;
  list_id: string;
  status: RunStatus;
  settings: RunSettings;
  created_at: string;
  updated_at: string;
  finished_at: string | null;
  /** How many of its contacts are in each state. */
  counts: Record<ContactState, number>;
}

/** An open run as the dialer needs it: its settings and its list's route. */
export interface OpenRun {
  id: string;
  org_id: string;
  status: 'scheduled' | 'running';
  settings: RunSettings;
  agent_id: string;
  sip_trunk_id: string | null;
  from_number: string | null;
  caller_id: string | null;
}

/** A contact leased to this node for one attempt. */
export interface ClaimedContact {
  run_id: string;
  contact_id: string;
  phone_number: string;
  variables: ContactVariables;
  attempts: number;
}

/** A contact whose call has ended (or was cut by a restart), to settle. */
export interface EndedAttempt {
  run_id: string;
  contact_id: string;
  call_id: string;
  attempts: number;
  run_status: RunStatus;
  settings: RunSettings;
  status: CallStatus;
  end_status: EndStatus | null;
  started_at: string | null;
  termination_reason: string | null;
}

interface RunRow {
  id: string;
  org_id: string;
  list_id: string;
  status: RunStatus;
  settings: string;
  created_at: string;
  updated_at: string;
  finished_at: string | null;
}

const RUN_COLUMNS = 'id, org_id, list_id, status, settings, created_at, updated_at, finished_at';
const emptyCounts = (): Record<ContactState, number> => ({ pending: 0, dialing: 0, calling: 0, completed: 0, failed: 0, canceled: 0 });
/** The contact states of a run that still need work. */
const OPEN_STATES = "('pending', 'dialing', 'calling')";

/** The claim's filter on contact time zones (null: contacts without one); none when `zones` is undefined, never empty otherwise. */
function zoneCondition(zones: ReadonlyArray<string | null> | undefined): { sql: string; args: string[] } {
  if (zones === undefined) return { sql: '', args: [] };
  const named = zones.filter((z): z is string => z !== null);
  const terms = [...(named.length > 0 ? [`timezone IN (${named.map(() => '?').join(', ')})`] : []), ...(zones.includes(null) ? ['timezone IS NULL'] : [])];
  return { sql: `AND (${terms.join(' OR ')})`, args: named };
}

export class OutboundRunRepo {
  constructor(
    private readonly db: SqlClient,
    private readonly nodeId: string | null = null,
  ) {}

  /** A new run (scheduled) with a copy of every contact its list has now. */
  async create(r: { id: string; org_id: string; list_id: string; settings: RunSettings; created_at: string }): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.run(`INSERT INTO outbound_runs (id, org_id, list_id, status, settings, created_at, updated_at) VALUES (?, ?, ?, 'scheduled', ?, ?, ?)`, [
        r.id,
        r.org_id,
        r.list_id,
        JSON.stringify(r.settings),
        r.created_at,
        r.created_at,
      ]);
      await tx.run('INSERT INTO outbound_run_contacts (run_id, contact_id, seq, phone_number, variables, timezone) SELECT ?, id, seq, phone_number, variables, timezone FROM outbound_contacts WHERE list_id = ?', [r.id, r.list_id]);
    });
  }

  async get(orgId: string, listId: string, id: string): Promise<OutboundRun | undefined> {
    const row = await this.db.get<RunRow>(`SELECT ${RUN_COLUMNS} FROM outbound_runs WHERE id = ? AND list_id = ? AND org_id = ?`, [id, listId, orgId]);
    if (!row) return undefined;
    const counts = emptyCounts();
    for (const c of await this.db.all<{ state: ContactState; n: number | string }>('SELECT state, count(*) AS n FROM outbound_run_contacts WHERE run_id = ? GROUP BY state', [id])) counts[c.state] = Number(c.n);
    return { ...row, settings: JSON.parse(row.settings) as RunSettings, counts };
  }

  async listOf(orgId: string, listId: string, limit: number, offset: number): Promise<string[]> {
    return (await this.db.all<{ id: string }>('SELECT id FROM outbound_runs WHERE list_id = ? AND org_id = ? ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?', [listId, orgId, limit, offset])).map((r) => r.id);
  }

  /** A run's contacts with their state (a page, in list order). */
  async contacts(runId: string, limit: number, offset: number): Promise<Array<{ contact_id: string; phone_number: string; timezone: string | null; state: ContactState; attempts: number; last_outcome: string | null; call_id: string | null }>> {
    return this.db.all('SELECT contact_id, phone_number, timezone, state, attempts, last_outcome, call_id FROM outbound_run_contacts WHERE run_id = ? ORDER BY seq, contact_id LIMIT ? OFFSET ?', [runId, limit, offset]);
  }

  /**
   * pause: scheduled or running -> paused. resume: paused -> scheduled (the dialer moves it on to
   * running inside its window). cancel: any open run -> canceled, its pending contacts canceled
   * (calls already up go on, and are settled as they end). False when the run is not in a state
   * the action applies to.
   */
  async transition(orgId: string, listId: string, id: string, action: 'pause' | 'resume' | 'cancel', at: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      const where = 'WHERE id = ? AND list_id = ? AND org_id = ?';
      const args = [id, listId, orgId];
      if (action === 'pause') return (await tx.run(`UPDATE outbound_runs SET status = 'paused', updated_at = ? ${where} AND status IN ('scheduled', 'running')`, [at, ...args])).changes === 1;
      if (action === 'resume') return (await tx.run(`UPDATE outbound_runs SET status = 'scheduled', updated_at = ? ${where} AND status = 'paused'`, [at, ...args])).changes === 1;
      const r = await tx.run(`UPDATE outbound_runs SET status = 'canceled', updated_at = ?, finished_at = ? ${where} AND finished_at IS NULL`, [at, at, ...args]);
      if (r.changes === 0) return false;
      await tx.run("UPDATE outbound_run_contacts SET state = 'canceled', lease_owner = NULL, lease_until = NULL WHERE run_id = ? AND state = 'pending'", [id]);
      return true;
    });
  }

  /** The runs the dialer works: scheduled or running, with their list's route. */
  async open(): Promise<OpenRun[]> {
    const rows = await this.db.all<Omit<OpenRun, 'settings'> & { settings: string }>(
      `SELECT r.id, r.org_id, r.status, r.settings, l.agent_id, l.sip_trunk_id, l.from_number, l.caller_id
       FROM outbound_runs r JOIN outbound_lists l ON l.id = r.list_id
       WHERE r.finished_at IS NULL AND r.status IN ('scheduled', 'running') ORDER BY r.created_at, r.id`,
    );
    return rows.map((r) => ({ ...r, settings: JSON.parse(r.settings) as RunSettings }));
  }

  /** scheduled <-> running as the run's window opens and closes (never out of paused or a finished run). */
  async setWaiting(id: string, status: 'scheduled' | 'running', at: string): Promise<void> {
    await this.db.run(`UPDATE outbound_runs SET status = ?, updated_at = ? WHERE id = ? AND finished_at IS NULL AND status IN ('scheduled', 'running') AND status <> ?`, [status, at, id, status]);
  }

  /**
   * The distinct time zones of the run's pending contacts (null: contacts without one, which
   * follow the window's), for the dialer to tell which are inside the window now.
   */
  async pendingZones(runId: string): Promise<Array<string | null>> {
    return (await this.db.all<{ timezone: string | null }>("SELECT DISTINCT timezone FROM outbound_run_contacts WHERE run_id = ? AND state = 'pending'", [runId])).map((r) => r.timezone);
  }

  /**
   * Leases up to `limit` due contacts of a running run to `owner` for `leaseMs`, never more than
   * fit under max_concurrent with the run's contacts already dialing or calling; with
   * calls_per_minute one contact at most, and only once the pacing gate has opened (it then moves
   * 60000 / calls_per_minute ms on). First, leases that ran out return their contacts to pending:
   * a node that died after claiming never placed them (its attempt is not counted).
   * `zones`, when given, are the contact time zones whose window is open now (null: contacts
   * without one): only contacts in those are taken (none at all for an empty list).
   */
  async claim(runId: string, owner: string, leaseMs: number, limit: number, zones?: ReadonlyArray<string | null>): Promise<ClaimedContact[]> {
    return this.db.transaction(async (tx) => {
      if (tx.dialect === 'postgres') await tx.get('SELECT pg_advisory_xact_lock(CAST(? AS BIGINT))', [slotLockKey('org', `outbound-run:${runId}`)]);
      const now = dbNowMs(tx);
      const run = await tx.get<{ status: RunStatus; settings: string; open: number }>(`SELECT status, settings, CASE WHEN next_dial_at <= ${now} THEN 1 ELSE 0 END AS open FROM outbound_runs WHERE id = ?`, [runId]);
      if (run === undefined || run.status !== 'running') return [];
      await tx.run(`UPDATE outbound_run_contacts SET state = 'pending', lease_owner = NULL, lease_until = NULL WHERE run_id = ? AND state = 'dialing' AND lease_until <= ${now}`, [runId]);
      const settings = JSON.parse(run.settings) as RunSettings;
      const up = Number((await tx.get<{ n: number | string }>("SELECT count(*) AS n FROM outbound_run_contacts WHERE run_id = ? AND state IN ('dialing', 'calling')", [runId]))?.n ?? 0);
      const paced = settings.calls_per_minute !== undefined;
      if (paced && Number(run.open) !== 1) return [];
      const room = Math.min(limit, settings.max_concurrent - up, paced ? 1 : Infinity);
      if (room <= 0 || zones?.length === 0) return [];
      const inZones = zoneCondition(zones);
      const rows = await tx.all<{ contact_id: string; phone_number: string; variables: string; attempts: number }>(
        `UPDATE outbound_run_contacts SET state = 'dialing', lease_owner = ?, lease_until = ${now} + ?
         WHERE run_id = ? AND contact_id IN (
           SELECT contact_id FROM outbound_run_contacts WHERE run_id = ? AND state = 'pending' AND next_attempt_at <= ${now} ${inZones.sql} ORDER BY next_attempt_at, seq LIMIT ?
         ) AND state = 'pending'
         RETURNING contact_id, phone_number, variables, attempts`,
        [owner, leaseMs, runId, runId, ...inZones.args, room],
      );
      if (paced && rows.length > 0) await tx.run(`UPDATE outbound_runs SET next_dial_at = ${now} + ? WHERE id = ?`, [Math.round(60_000 / settings.calls_per_minute!), runId]);
      return rows.map((r) => ({ run_id: runId, contact_id: r.contact_id, phone_number: r.phone_number, variables: JSON.parse(r.variables) as ContactVariables, attempts: Number(r.attempts) }));
    });
  }

  /**
   * The leased contact's call was placed: calling, one attempt more, and the call record names
   * the run and the contact, in one transaction. False when the lease was lost meanwhile (the
   * record is still marked: the call is up).
   */
  async placed(runId: string, contactId: string, owner: string, callId: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      await tx.run('UPDATE calls SET outbound_list_run_id = ?, outbound_contact_id = ? WHERE id = ?', [runId, contactId, callId]);
      const r = await tx.run(
        "UPDATE outbound_run_contacts SET state = 'calling', call_id = ?, attempts = attempts + 1, lease_owner = NULL, lease_until = NULL WHERE run_id = ? AND contact_id = ? AND state = 'dialing' AND lease_owner = ?",
        [callId, runId, contactId, owner],
      );
      return r.changes === 1;
    });
  }

  /** The dial was refused for now (a call slot, draining): pending again after delayMs, the attempt not counted. */
  async release(runId: string, contactId: string, owner: string, delayMs: number): Promise<void> {
    const now = dbNowMs(this.db);
    await this.db.run(
      `UPDATE outbound_run_contacts SET state = 'pending', next_attempt_at = ${now} + ?, lease_owner = NULL, lease_until = NULL WHERE run_id = ? AND contact_id = ? AND state = 'dialing' AND lease_owner = ?`,
      [delayMs, runId, contactId, owner],
    );
  }

  /** The dial failed outright (an attempt, outcome failed): the next state as decided by the caller. */
  async failedToPlace(runId: string, contactId: string, owner: string, next: { state: ContactState; delayMs?: number }): Promise<void> {
    const now = dbNowMs(this.db);
    await this.db.run(
      `UPDATE outbound_run_contacts SET state = ?, attempts = attempts + 1, last_outcome = 'failed', next_attempt_at = ${now} + ?, lease_owner = NULL, lease_until = NULL
       WHERE run_id = ? AND contact_id = ? AND state = 'dialing' AND lease_owner = ?`,
      [next.state, next.delayMs ?? 0, runId, contactId, owner],
    );
  }

  /**
   * Contacts whose call has ended, and those whose unanswered call this node's previous run left
   * ringing when it stopped (status started, this node's, created before `since`): nobody will
   * end those before their session token expires, and the call is gone.
   */
  async endedAttempts(since: string, limit: number): Promise<EndedAttempt[]> {
    const rows = await this.db.all<Omit<EndedAttempt, 'settings'> & { settings: string }>(
      `SELECT rc.run_id, rc.contact_id, rc.call_id, rc.attempts, r.status AS run_status, r.settings, c.status, c.end_status, c.started_at, c.termination_reason
       FROM outbound_run_contacts rc JOIN calls c ON c.id = rc.call_id JOIN outbound_runs r ON r.id = rc.run_id
       WHERE rc.state = 'calling' AND (c.ended_at IS NOT NULL OR c.status = 'auth_failed' OR (c.status = 'started' AND c.node_id = ? AND c.created_at < ?))
       LIMIT ?`,
      [this.nodeId ?? '', since, limit],
    );
    return rows.map((r) => ({ ...r, attempts: Number(r.attempts), settings: JSON.parse(r.settings) as RunSettings }));
  }

  /** Settles one attempt (only while the contact is still calling with that call: one node wins). */
  async settle(a: Pick<EndedAttempt, 'run_id' | 'contact_id' | 'call_id'>, outcome: string, next: { state: ContactState; delayMs?: number }): Promise<boolean> {
    const now = dbNowMs(this.db);
    const r = await this.db.run(
      `UPDATE outbound_run_contacts SET state = ?, last_outcome = ?, next_attempt_at = ${now} + ? WHERE run_id = ? AND contact_id = ? AND state = 'calling' AND call_id = ?`,
      [next.state, outcome, next.delayMs ?? 0, a.run_id, a.contact_id, a.call_id],
    );
    return r.changes === 1;
  }

  /** A run with no contact left to call is completed. Returns whether it was just now. */
  async finishIfDone(runId: string, at: string): Promise<boolean> {
    const r = await this.db.run(
      `UPDATE outbound_runs SET status = 'completed', updated_at = ?, finished_at = ? WHERE id = ? AND finished_at IS NULL AND status IN ('scheduled', 'running')
       AND NOT EXISTS (SELECT 1 FROM outbound_run_contacts WHERE run_id = ? AND state IN ${OPEN_STATES})`,
      [at, at, runId, runId],
    );
    return r.changes === 1;
  }
}
