/**
 * Stream grants (table `stream_grants`, migration 11; docs/telco.md "The stream's one-time
 * token"): what the carrier's voice webhook, or an outbound carrier dial, granted the media stream
 * that the carrier opens next, on whichever node sharing the store it reaches.
 *
 * A grant is found by the SHA-256 of its token (the token itself is never stored) and redeemed
 * once in the whole cluster by one conditional UPDATE. An outbound dial's grant also holds the
 * call record's id, the session's connect token sealed with the store's secret box, whether the
 * carrier said the call was answered, and once its stream started, that it did: the dial's state
 * as every node sees it. Expiry is on the issuing node's clock (ISO-8601, as sessions'
 * token_expires_at): the caller passes its `now`.
 */
import type { SecretBox } from './secret-box.ts';
import type { SqlClient } from './sql-client.ts';

/** What a stream may do once its token is redeemed. */
export interface StoredStreamGrant {
  orgId: string;
  agentId: string;
  numberId: string;
  /** The carrier's CallSid ('' for an outbound dial until the carrier named the call). */
  callSid: string;
  accountSid: string;
  from: string;
  to: string;
  /** An outbound dial: its call record, and the session's connect token (in clear here, sealed at rest). */
  outbound?: { callId: string; sessionToken: string };
}

/** What the store knows of an outbound dial (its record and its grant). */
export interface DialState {
  /** The record has ended (on any node). */
  ended: boolean;
  /** Its stream started somewhere, or its record was answered: no longer ringing. */
  streaming: boolean;
  /** The carrier said it was answered (the in-progress callback, on any node). */
  answered: boolean;
}

interface GrantRow {
  org_id: string;
  agent_id: string;
  number_id: string;
  call_sid: string;
  account_sid: string;
  from_number: string;
  to_number: string;
  call_id: string | null;
  session_token_enc: string | null;
}

interface DialRow {
  id: string;
  ended: number;
  streaming: number;
  answered: number;
}

const SELECT_DIAL = `SELECT c.id, c.org_id, c.carrier_call_id,
    CASE WHEN c.ended_at IS NOT NULL THEN 1 ELSE 0 END AS ended,
    CASE WHEN c.started_at IS NOT NULL OR c.status <> 'started' OR g.stream_started = 1 THEN 1 ELSE 0 END AS streaming,
    coalesce(g.answered, 0) AS answered
  FROM calls c LEFT JOIN stream_grants g ON g.call_id = c.id`;

const dialState = (r: DialRow): DialState => ({ ended: Number(r.ended) === 1, streaming: Number(r.streaming) === 1, answered: Number(r.answered) === 1 });

const GRANT_COLUMNS = 'org_id, agent_id, number_id, call_sid, account_sid, from_number, to_number, call_id, session_token_enc';

export class StreamGrantRepo {
  constructor(
    private readonly db: SqlClient,
    private readonly box: SecretBox,
  ) {}

  async insert(tokenHash: string, g: StoredStreamGrant, expiresAt: string, createdAt: string): Promise<void> {
    await this.#insert('', tokenHash, g, expiresAt, createdAt);
  }

  /**
   * Inserts a grant unless one has this token hash already (an inbound call's token is derived
   * from its CallSid: the same webhook again, on any node). True when this call inserted it.
   */
  async insertOnce(tokenHash: string, g: StoredStreamGrant, expiresAt: string, createdAt: string): Promise<boolean> {
    return (await this.#insert(' ON CONFLICT (token_hash) DO NOTHING', tokenHash, g, expiresAt, createdAt)) === 1;
  }

  async #insert(onConflict: string, tokenHash: string, g: StoredStreamGrant, expiresAt: string, createdAt: string): Promise<number> {
    const r = await this.db.run(
      `INSERT INTO stream_grants (token_hash, ${GRANT_COLUMNS}, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)${onConflict}`,
      [tokenHash, g.orgId, g.agentId, g.numberId, g.callSid, g.accountSid, g.from, g.to, g.outbound?.callId ?? null, g.outbound ? this.box.seal(g.outbound.sessionToken) : null, expiresAt, createdAt],
    );
    return r.changes;
  }

  /**
   * A keyed digest only nodes holding the store's secret key can compute (SecretBox.digest): an
   * inbound call's stream token is derived from its CallSid with it, so every node issues the
   * same one for the same call.
   */
  keyedDigest(purpose: string, data: string): Buffer {
    return this.box.digest(purpose, data);
  }

  /**
   * What the store knows of an inbound call before its webhook is answered: `pending` when its
   * grant (`tokenHash`) waits for its stream, `used` when that grant was redeemed or expired, or
   * a call record carries the CallSid (its stream started, on any node, maybe long ago: the grant
   * is swept, the record stays), undefined when neither.
   */
  async inboundCallState(tokenHash: string, callSid: string, now: string): Promise<'pending' | 'used' | undefined> {
    const r = await this.db.get<{ grant_state: string | null; has_call: number }>(
      `SELECT (SELECT CASE WHEN redeemed_at IS NULL AND expires_at > ? THEN 'pending' ELSE 'used' END FROM stream_grants WHERE token_hash = ?) AS grant_state,
         CASE WHEN EXISTS (SELECT 1 FROM calls WHERE carrier_call_id = ?) THEN 1 ELSE 0 END AS has_call`,
      [now, tokenHash, callSid],
    );
    if (r === undefined) return undefined;
    if (Number(r.has_call) === 1 || r.grant_state === 'used') return 'used';
    return r.grant_state === 'pending' ? 'pending' : undefined;
  }

  /** Whether this token's grant, for this CallSid, already started a stream (on any node). */
  async streamStarted(tokenHash: string, callSid: string): Promise<boolean> {
    return (await this.db.get('SELECT 1 AS one FROM stream_grants WHERE token_hash = ? AND call_sid = ? AND stream_started = 1', [tokenHash, callSid])) !== undefined;
  }

  /**
   * The grant of a token not redeemed and not expired at `now`, marked redeemed by this one
   * statement: of any number of redeems at once, on any nodes, one gets it. `callSid`: the call
   * the stream says it is; when it is the grant's, the stream counts as started (DialState).
   * @throws when the sealed connect token does not open (the key changed).
   */
  async redeem(tokenHash: string, now: string, callSid: string | null): Promise<StoredStreamGrant | undefined> {
    const r = await this.db.get<GrantRow>(
      `UPDATE stream_grants SET redeemed_at = ?, stream_started = CASE WHEN call_sid = ? THEN 1 ELSE 0 END
       WHERE token_hash = ? AND redeemed_at IS NULL AND expires_at > ?
       RETURNING ${GRANT_COLUMNS}`,
      [now, callSid, tokenHash, now],
    );
    if (r === undefined) return undefined;
    const grant: StoredStreamGrant = { orgId: r.org_id, agentId: r.agent_id, numberId: r.number_id, callSid: r.call_sid, accountSid: r.account_sid, from: r.from_number, to: r.to_number };
    if (r.call_id !== null && r.session_token_enc !== null) grant.outbound = { callId: r.call_id, sessionToken: this.box.open(r.session_token_enc) };
    return grant;
  }

  /** Names an outbound dial's call once the carrier did (only while unnamed and not redeemed). */
  async bindCall(callId: string, callSid: string): Promise<boolean> {
    return (await this.db.run("UPDATE stream_grants SET call_sid = ? WHERE call_id = ? AND call_sid = '' AND redeemed_at IS NULL", [callSid, callId])).changes === 1;
  }

  /** Spends an outbound dial's grant that will not be used; a stream that started keeps its row. */
  async revokeCall(callId: string): Promise<void> {
    await this.db.run('DELETE FROM stream_grants WHERE call_id = ? AND stream_started = 0', [callId]);
  }

  /** The carrier said the dial was answered: whichever node gives it up then completes it, not cancels it. */
  async markAnswered(callId: string): Promise<void> {
    await this.db.run('UPDATE stream_grants SET answered = 1 WHERE call_id = ?', [callId]);
  }

  /** The store's view of outbound dials, by call id (ids without a record are absent). */
  async dialStates(callIds: readonly string[]): Promise<Map<string, DialState>> {
    const out = new Map<string, DialState>();
    if (callIds.length === 0) return out;
    const rows = await this.db.all<DialRow>(`${SELECT_DIAL} WHERE c.id IN (${callIds.map(() => '?').join(', ')})`, [...callIds]);
    for (const r of rows) out.set(r.id, dialState(r));
    return out;
  }

  /**
   * An outbound carrier dial's record as a status callback of `accountSid` may touch it: outbound,
   * source twilio, and from a number its organization imported under that account (one
   * account's signed callbacks never reach another's calls). `callSid`: the record's carrier
   * call id, null until the placing node stored it.
   */
  async carrierDial(callId: string, accountSid: string): Promise<(DialState & { orgId: string; callSid: string | null }) | undefined> {
    const r = await this.db.get<DialRow & { org_id: string; carrier_call_id: string | null }>(
      `${SELECT_DIAL} WHERE c.id = ? AND c.direction = 'outbound' AND c.source = 'twilio'
         AND EXISTS (SELECT 1 FROM telco_numbers n WHERE n.org_id = c.org_id AND n.account_sid = ? AND n.phone_number = c.from_number)`,
      [callId, accountSid],
    );
    return r && { ...dialState(r), orgId: r.org_id, callSid: r.carrier_call_id };
  }

  /** Grants neither redeemed nor expired at `now` (tests, metrics). */
  async pending(now: string): Promise<number> {
    return Number((await this.db.get<{ n: number }>('SELECT count(*) AS n FROM stream_grants WHERE redeemed_at IS NULL AND expires_at > ?', [now]))?.n ?? 0);
  }

  /** Deletes the grants that expired before `before`. Returns how many. */
  async sweep(before: string): Promise<number> {
    return (await this.db.run('DELETE FROM stream_grants WHERE expires_at < ?', [before])).changes;
  }
}
