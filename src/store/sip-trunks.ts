/**
 * SIP trunks of an organization. Reads through the API are scoped by org_id (another org's trunk
 * is "not found"); the lookups SIP needs (by digest username, credentials) are not, since an
 * incoming request names no organization.
 *
 * Passwords are sealed with the SecretBox (AES-256-GCM) into the *_password_enc columns. No method
 * returns them except credentials(), which exists for the SIP layer only.
 */
import { randomBytes } from 'node:crypto';
import type { SqlClient, SqlValue } from './sql-client.ts';
import type { SecretBox } from './secret-box.ts';
import type { CallerIdTransform, InboundAuthType, MediaEncryption, Pbx, RegistrationStatus, SipTrunk, SipTrunkSettings } from '../domain/sip-trunk.ts';

interface SipTrunkRow {
  id: string;
  org_id: string;
  pbx: Pbx;
  name: string;
  inbound_auth_type: InboundAuthType;
  inbound_host: string;
  inbound_acl: string;
  inbound_sip_username: string | null;
  inbound_sip_password_enc: string | null;
  outbound_host: string;
  outbound_sip_username: string;
  outbound_sip_password_enc: string | null;
  register: number;
  remain_in_dialog: number;
  caller_id_transforms: string;
  media_encryption: MediaEncryption;
  header_variables: string;
  inbound_registration_status: RegistrationStatus;
  outbound_registration_status: RegistrationStatus;
  outbound_registration_error: string;
  outbound_registration_expires_at: number | null;
  created_at: string;
  updated_at: string;
}

/** A trunk as the store holds it: the resource plus ownership and whether each password is set. */
export interface StoredSipTrunk extends SipTrunk {
  org_id: string;
  has_inbound_sip_password: boolean;
  has_outbound_sip_password: boolean;
}

/** A trunk with register: true, as the registration client needs it (password decrypted: SIP only). */
export interface RegisteringSipTrunk {
  id: string;
  pbx: Pbx;
  outbound_host: string;
  outbound_sip_username: string;
  outbound_sip_password: string;
  /** The user part of callbridge's Contact in this trunk's REGISTERs. */
  outbound_contact_user: string;
}

/** What the registration client last reported for a trunk. */
export interface OutboundRegistrationReport {
  status: RegistrationStatus;
  error: string;
  /** ms since the epoch; null before the first success. */
  expiresAt: number | null;
}

/** Decrypted credentials, for the SIP layer (digest challenge checks and REGISTER/INVITE auth). */
export interface SipTrunkCredentials {
  inbound?: { username: string; password: string };
  outbound?: { username: string; password: string };
}

/**
 * Settings as a write takes them: the fields of ours added later (migration 6) may be left out
 * and then get their defaults, like the rows that existed before them.
 */
export type SipTrunkWrite = Omit<SipTrunkSettings, 'media_encryption' | 'header_variables'> &
  Partial<Pick<SipTrunkSettings, 'media_encryption' | 'header_variables'>>;

/** A password change: a string sets it, null clears it, undefined keeps the stored one. */
export interface PasswordChange {
  inbound_sip_password?: string | null;
  outbound_sip_password?: string | null;
}

const COLUMNS =
  'id, org_id, pbx, name, inbound_auth_type, inbound_host, inbound_acl, inbound_sip_username, inbound_sip_password_enc, ' +
  'outbound_host, outbound_sip_username, outbound_sip_password_enc, register, remain_in_dialog, caller_id_transforms, ' +
  'media_encryption, header_variables, inbound_registration_status, outbound_registration_status, outbound_registration_error, outbound_registration_expires_at, created_at, updated_at';

function fromRow(r: SipTrunkRow): StoredSipTrunk {
  return {
    id: r.id,
    org_id: r.org_id,
    pbx: r.pbx,
    name: r.name,
    inbound_auth_type: r.inbound_auth_type,
    inbound_host: r.inbound_host,
    inbound_acl: JSON.parse(r.inbound_acl) as string[],
    inbound_sip_username: r.inbound_sip_username ?? '',
    outbound_host: r.outbound_host,
    outbound_sip_username: r.outbound_sip_username,
    register: r.register === 1,
    remain_in_dialog: r.remain_in_dialog === 1,
    caller_id_transforms: JSON.parse(r.caller_id_transforms) as CallerIdTransform[],
    media_encryption: r.media_encryption,
    header_variables: JSON.parse(r.header_variables) as string[],
    inbound_registration_status: r.inbound_registration_status,
    outbound_registration_status: r.outbound_registration_status,
    outbound_registration_error: r.outbound_registration_error,
    outbound_registration_expires_at: r.outbound_registration_expires_at === null ? null : new Date(r.outbound_registration_expires_at).toISOString(),
    created_at: r.created_at,
    updated_at: r.updated_at,
    has_inbound_sip_password: r.inbound_sip_password_enc !== null,
    has_outbound_sip_password: r.outbound_sip_password_enc !== null,
  };
}

/** The API view: the resource's fields only, so nothing stored by accident can leak. */
export function toSipTrunkResource(t: StoredSipTrunk): SipTrunk {
  return {
    id: t.id,
    pbx: t.pbx,
    name: t.name,
    inbound_auth_type: t.inbound_auth_type,
    inbound_host: t.inbound_host,
    inbound_acl: t.inbound_acl,
    inbound_sip_username: t.inbound_sip_username,
    outbound_host: t.outbound_host,
    outbound_sip_username: t.outbound_sip_username,
    register: t.register,
    remain_in_dialog: t.remain_in_dialog,
    caller_id_transforms: t.caller_id_transforms,
    media_encryption: t.media_encryption,
    header_variables: t.header_variables,
    inbound_registration_status: t.inbound_registration_status,
    outbound_registration_status: t.outbound_registration_status,
    outbound_registration_error: t.outbound_registration_error,
    outbound_registration_expires_at: t.outbound_registration_expires_at,
    created_at: t.created_at,
    updated_at: t.updated_at,
  };
}

/** Columns written from settings: JSON for lists, 0/1 for booleans, NULL for "no username". */
function settingsParams(s: SipTrunkWrite) {
  return {
    pbx: s.pbx,
    name: s.name,
    inbound_auth_type: s.inbound_auth_type,
    inbound_host: s.inbound_host,
    inbound_acl: JSON.stringify(s.inbound_acl),
    // NULL, not "": the column is UNIQUE and any number of trunks may have no username.
    inbound_sip_username: s.inbound_sip_username || null,
    outbound_host: s.outbound_host,
    outbound_sip_username: s.outbound_sip_username,
    register: s.register ? 1 : 0,
    remain_in_dialog: s.remain_in_dialog ? 1 : 0,
    caller_id_transforms: JSON.stringify(s.caller_id_transforms),
    media_encryption: s.media_encryption ?? 'none',
    header_variables: JSON.stringify(s.header_variables ?? []),
  };
}

export class SipTrunkRepo {
  constructor(
    private readonly db: SqlClient,
    private readonly box: SecretBox,
  ) {}

  /** The organization's trunk, its registration statuses as of now (withLiveStatus). */
  async get(orgId: string, id: string): Promise<StoredSipTrunk | undefined> {
    const row = await this.db.get<SipTrunkRow>(`SELECT ${COLUMNS} FROM sip_trunks WHERE id = ? AND org_id = ?`, [id, orgId]);
    return row && this.#withLiveStatus(fromRow(row));
  }

  async list(orgId: string, limit: number, offset: number): Promise<StoredSipTrunk[]> {
    const rows = await this.db.all<SipTrunkRow>(`SELECT ${COLUMNS} FROM sip_trunks WHERE org_id = ? ORDER BY created_at, id LIMIT ? OFFSET ?`, [orgId, limit, offset]);
    const out: StoredSipTrunk[] = [];
    for (const r of rows) out.push(await this.#withLiveStatus(fromRow(r)));
    return out;
  }

  /** Every trunk that is to register with its carrier, in any organization, password decrypted (SIP only). */
  async registeringTrunks(): Promise<RegisteringSipTrunk[]> {
    const rows = await this.db.all<{ id: string; pbx: Pbx; outbound_host: string; outbound_sip_username: string; outbound_sip_password_enc: string; outbound_contact_user: string }>(
      "SELECT id, pbx, outbound_host, outbound_sip_username, outbound_sip_password_enc, outbound_contact_user FROM sip_trunks WHERE register = 1 AND outbound_host != '' " +
        "AND outbound_sip_username != '' AND outbound_sip_password_enc IS NOT NULL AND outbound_contact_user IS NOT NULL ORDER BY created_at, id",
    );
    return rows.map((r) => ({
      id: r.id,
      pbx: r.pbx,
      outbound_host: r.outbound_host,
      outbound_sip_username: r.outbound_sip_username,
      outbound_sip_password: this.box.open(r.outbound_sip_password_enc),
      outbound_contact_user: r.outbound_contact_user,
    }));
  }

  /** The registering trunk whose Contact user this is (an INVITE the carrier sent to our registered Contact). */
  async byOutboundContactUser(user: string): Promise<StoredSipTrunk | undefined> {
    const row = await this.db.get<SipTrunkRow>(`SELECT ${COLUMNS} FROM sip_trunks WHERE outbound_contact_user = ? AND register = 1`, [user]);
    return row && fromRow(row);
  }

  /** What the registration client observed; read back through withLiveStatus. */
  async setOutboundRegistration(id: string, report: OutboundRegistrationReport): Promise<void> {
    await this.db.run('UPDATE sip_trunks SET outbound_registration_status = ?, outbound_registration_error = ?, outbound_registration_expires_at = ? WHERE id = ?', [
      report.status,
      report.error,
      report.expiresAt,
      id,
    ]);
  }

  /**
   * The trunk whose digest username this is, in any organization: SIP picks the trunk by it, and
   * the API checks it before a write to answer 409 instead of a constraint error.
   */
  async byInboundUsername(username: string): Promise<StoredSipTrunk | undefined> {
    const row = await this.db.get<SipTrunkRow>(`SELECT ${COLUMNS} FROM sip_trunks WHERE inbound_sip_username = ?`, [username]);
    return row && fromRow(row);
  }

  /**
   * Every trunk of every organization with this inbound auth type: SIP matches an INVITE's
   * source address against the ACL trunks, since the request names no organization.
   */
  async listByInboundAuth(type: InboundAuthType): Promise<StoredSipTrunk[]> {
    return (await this.db.all<SipTrunkRow>(`SELECT ${COLUMNS} FROM sip_trunks WHERE inbound_auth_type = ? ORDER BY created_at, id`, [type])).map(fromRow);
  }

  /** Every trunk with an outbound host, in any organization (OPTIONS pings). */
  async listWithOutboundHost(): Promise<StoredSipTrunk[]> {
    return (await this.db.all<SipTrunkRow>(`SELECT ${COLUMNS} FROM sip_trunks WHERE outbound_host != '' ORDER BY created_at, id`)).map(fromRow);
  }

  /** @throws the database's UNIQUE error when inbound_sip_username is taken (isUniqueViolation). */
  async insert(t: { id: string; org_id: string; settings: SipTrunkWrite; passwords: PasswordChange; created_at: string }): Promise<void> {
    const p = settingsParams(t.settings);
    const values: SqlValue[] = [
      t.id,
      t.org_id,
      p.pbx,
      p.name,
      p.inbound_auth_type,
      p.inbound_host,
      p.inbound_acl,
      p.inbound_sip_username,
      this.#seal(t.passwords.inbound_sip_password),
      p.outbound_host,
      p.outbound_sip_username,
      this.#seal(t.passwords.outbound_sip_password),
      p.register,
      p.remain_in_dialog,
      p.caller_id_transforms,
      p.media_encryption,
      p.header_variables,
      t.created_at,
      t.created_at,
      // The user part of our Contact in this trunk's REGISTERs: random, so it names no organization.
      'cb' + randomBytes(8).toString('hex'),
    ];
    await this.db.run(
      `INSERT INTO sip_trunks (${COLUMNS}, outbound_contact_user) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ` +
        "'not_registered', 'not_registered', '', NULL, ?, ?, ?)",
      values,
    );
  }

  /** Writes the merged settings; passwords change only when the change names them. */
  async update(t: { id: string; org_id: string; settings: SipTrunkWrite; passwords: PasswordChange; updated_at: string; outboundChanged?: boolean }): Promise<void> {
    const { inbound_sip_password: inbound, outbound_sip_password: outbound } = t.passwords;
    const p = settingsParams(t.settings);
    const outboundChanged = t.outboundChanged === true ? 1 : 0;
    await this.db.run(
      'UPDATE sip_trunks SET pbx = ?, name = ?, inbound_auth_type = ?, inbound_host = ?, inbound_acl = ?, inbound_sip_username = ?, ' +
        // keep = 1 leaves the sealed password as it is; otherwise the new one replaces it (NULL clears).
        'inbound_sip_password_enc = CASE WHEN ? = 1 THEN inbound_sip_password_enc ELSE ? END, ' +
        'outbound_host = ?, outbound_sip_username = ?, ' +
        'outbound_sip_password_enc = CASE WHEN ? = 1 THEN outbound_sip_password_enc ELSE ? END, ' +
        'register = ?, remain_in_dialog = ?, caller_id_transforms = ?, media_encryption = ?, header_variables = ?, ' +
        // What the registration client reported is about the old host or credentials: it starts over.
        "outbound_registration_status = CASE WHEN ? = 1 THEN 'not_registered' ELSE outbound_registration_status END, " +
        "outbound_registration_error = CASE WHEN ? = 1 THEN '' ELSE outbound_registration_error END, " +
        'outbound_registration_expires_at = CASE WHEN ? = 1 THEN NULL ELSE outbound_registration_expires_at END, ' +
        'updated_at = ? WHERE id = ? AND org_id = ?',
      [
        p.pbx,
        p.name,
        p.inbound_auth_type,
        p.inbound_host,
        p.inbound_acl,
        p.inbound_sip_username,
        inbound === undefined ? 1 : 0,
        this.#seal(inbound),
        p.outbound_host,
        p.outbound_sip_username,
        outbound === undefined ? 1 : 0,
        this.#seal(outbound),
        p.register,
        p.remain_in_dialog,
        p.caller_id_transforms,
        p.media_encryption,
        p.header_variables,
        outboundChanged,
        outboundChanged,
        outboundChanged,
        t.updated_at,
        t.id,
        t.org_id,
      ],
    );
  }

  /** Deletes the trunk; its assignments go with it (ON DELETE CASCADE). */
  async delete(orgId: string, id: string): Promise<boolean> {
    return (await this.db.run('DELETE FROM sip_trunks WHERE id = ? AND org_id = ?', [id, orgId])).changes > 0;
  }

  /** Decrypted credentials of a trunk, for the SIP layer only: never for an API response or a log. */
  async credentials(id: string): Promise<SipTrunkCredentials | undefined> {
    const row = await this.db.get<{ inbound_sip_username: string | null; inbound_sip_password_enc: string | null; outbound_sip_username: string; outbound_sip_password_enc: string | null }>(
      'SELECT inbound_sip_username, inbound_sip_password_enc, outbound_sip_username, outbound_sip_password_enc FROM sip_trunks WHERE id = ?',
      [id],
    );
    if (!row) return undefined;
    const out: SipTrunkCredentials = {};
    if (row.inbound_sip_username && row.inbound_sip_password_enc) {
      out.inbound = { username: row.inbound_sip_username, password: this.box.open(row.inbound_sip_password_enc) };
    }
    if (row.outbound_sip_username && row.outbound_sip_password_enc) {
      out.outbound = { username: row.outbound_sip_username, password: this.box.open(row.outbound_sip_password_enc) };
    }
    return out;
  }

  /** Registration state as SIP observes it; an undefined side is left unchanged. */
  async setRegistrationStatus(id: string, status: { inbound?: RegistrationStatus; outbound?: RegistrationStatus }): Promise<void> {
    await this.db.run(
      'UPDATE sip_trunks SET inbound_registration_status = COALESCE(?, inbound_registration_status), outbound_registration_status = COALESCE(?, outbound_registration_status) WHERE id = ?',
      [status.inbound ?? null, status.outbound ?? null, id],
    );
  }

  /**
   * inbound_registration_status is computed, not kept: `registered` while the PBX holds an
   * unexpired REGISTER binding, else `auth_failed` when the stored outcome of its last REGISTER
   * attempt says so, else `not_registered`. Bindings expire without anything writing the trunk,
   * so only a read at the moment can be right. A failed attempt does not hide live bindings: an
   * unauthenticated sender who knows the username must not make a working trunk look broken.
   */
  async #withLiveInboundStatus(t: StoredSipTrunk, now: number): Promise<StoredSipTrunk> {
    const live = (await this.db.get('SELECT 1 AS live FROM sip_registrations WHERE trunk_id = ? AND expires_at > ? LIMIT 1', [t.id, now])) !== undefined;
    const status: RegistrationStatus = live ? 'registered' : t.inbound_registration_status === 'auth_failed' ? 'auth_failed' : 'not_registered';
    return status === t.inbound_registration_status ? t : { ...t, inbound_registration_status: status };
  }

  /**
   * outbound_registration_status is what the registration client last reported, checked when
   * read: `register: false` is `not_registered` whatever was stored (the client may not have
   * caught up with a PATCH yet), `register: true` with nothing reported yet is `pending` (the
   * client picks a new or changed trunk up within seconds), and `registered` past the granted expiry is `failed` (nothing
   * refreshed it: the daemon stopped, or its refresh went unanswered).
   */
  #withLiveOutboundStatus(t: StoredSipTrunk, now: number): StoredSipTrunk {
    if (!t.register) return { ...t, outbound_registration_status: 'not_registered', outbound_registration_error: '', outbound_registration_expires_at: null };
    if (t.outbound_registration_status === 'not_registered') return { ...t, outbound_registration_status: 'pending' };
    const expiresAt = t.outbound_registration_expires_at === null ? undefined : Date.parse(t.outbound_registration_expires_at);
    if (t.outbound_registration_status === 'registered' && expiresAt !== undefined && expiresAt <= now) {
      return { ...t, outbound_registration_status: 'failed', outbound_registration_error: 'the registration expired without a refresh' };
    }
    return t;
  }

  async #withLiveStatus(t: StoredSipTrunk): Promise<StoredSipTrunk> {
    const now = Date.now();
    return this.#withLiveOutboundStatus(await this.#withLiveInboundStatus(t, now), now);
  }

  #seal(password: string | null | undefined): string | null {
    return password ? this.box.seal(password) : null;
  }
}
