/**
 * Imported carrier numbers of an organization. Every query is scoped by org_id: another org's
 * number is "not found". The carrier auth_token is sealed (AES-256-GCM, secret-box.ts) on the
 * way in and opened only by credentials(), for the outbound call that needs it; no other read
 * selects the sealed column, so it cannot leak into an API response by accident.
 */
import type { SqlClient } from './sql-client.ts';
import type { SecretBox } from './secret-box.ts';
import { DomainError } from '../domain/errors.ts';

/** The API's Telco number resource; also the row as read (without org and secret). */
export interface TelcoNumber {
  id: string;
  phone_number: string;
  phone_sid: string;
  label: string;
  account_sid: string;
  created_at: string;
  updated_at: string;
}

export interface NewTelcoNumber {
  id: string;
  org_id: string;
  phone_number: string;
  phone_sid: string;
  label: string;
  account_sid: string;
  /** Plain text; sealed before it reaches the database. */
  auth_token: string;
  created_at: string;
  /** The number's webhook before callbridge set it; absent when callbridge did not set it. */
  previous_webhook?: NumberWebhook | undefined;
}

/** The voice webhook fields of a carrier number, in the IncomingPhoneNumber resource's JSON names. */
export interface NumberWebhook {
  voice_url: string;
  voice_method: string;
  status_callback: string;
  status_callback_method: string;
}

/** What a REST call to the carrier on behalf of this number needs. */
export interface CarrierCredentials {
  account_sid: string;
  auth_token: string;
}

const COLUMNS = 'id, phone_number, phone_sid, label, account_sid, created_at, updated_at';

export class TelcoNumberRepo {
  readonly #db: SqlClient;
  readonly #box: SecretBox;

  constructor(db: SqlClient, box: SecretBox) {
    this.#db = db;
    this.#box = box;
  }

  /**
   * Every organization's imports under one carrier account, auth_token opened: the carrier's
   * voice webhook names the account and the number, and only the tokens of the imports can tell
   * whether the signed request is the carrier's and which import it is for. Imports whose token
   * cannot be opened are left out (they cannot verify anything).
   */
  async importsOfAccount(accountSid: string): Promise<Array<{ id: string; org_id: string; phone_number: string; auth_token: string }>> {
    const rows = await this.#db.all<{ id: string; org_id: string; phone_number: string; auth_token_enc: string }>(
      'SELECT id, org_id, phone_number, auth_token_enc FROM telco_numbers WHERE account_sid = ? ORDER BY created_at, id',
      [accountSid],
    );
    return rows.flatMap(({ auth_token_enc, ...r }) => {
      try {
        return [{ ...r, auth_token: this.#box.open(auth_token_enc) }];
      } catch {
        return [];
      }
    });
  }

  get(orgId: string, id: string): Promise<TelcoNumber | undefined> {
    return this.#db.get<TelcoNumber>(`SELECT ${COLUMNS} FROM telco_numbers WHERE id = ? AND org_id = ?`, [id, orgId]);
  }

  /** The organization's import of an E.164 number (one at most: UNIQUE (org_id, phone_number)). */
  byPhoneNumber(orgId: string, phoneNumber: string): Promise<TelcoNumber | undefined> {
    return this.#db.get<TelcoNumber>(`SELECT ${COLUMNS} FROM telco_numbers WHERE org_id = ? AND phone_number = ?`, [orgId, phoneNumber]);
  }

  /**
   * The organizations that imported this E.164 number from their carrier (the carrier confirmed
   * each import's ownership). Inbound SIP routing gives such a number to none other.
   */
  async importingOrgs(phoneNumber: string): Promise<string[]> {
    return (await this.#db.all<{ org_id: string }>('SELECT DISTINCT org_id FROM telco_numbers WHERE phone_number = ?', [phoneNumber])).map((r) => r.org_id);
  }

  /** Whether an agent holds this number in an organization that has a digest trunk. */
  async digestRoutable(phoneNumber: string): Promise<boolean> {
    // A number an agent holds in an organization that has a digest trunk: SIP challenges an ACL
    // source for it instead of answering 404 (that trunk's credentials would route it).
    const row = await this.#db.get(
      "SELECT 1 AS found FROM telco_numbers n JOIN agents a ON a.phone_number_id = n.id JOIN sip_trunks t ON t.org_id = n.org_id AND t.inbound_auth_type = 'digest' WHERE n.phone_number = ? LIMIT 1",
      [phoneNumber],
    );
    return row !== undefined;
  }

  /** Every organization's imports, oldest first (operator tools: `callbridge telco set-voice-urls`). */
  listAll(): Promise<Array<TelcoNumber & { org_id: string }>> {
    return this.#db.all<TelcoNumber & { org_id: string }>(`SELECT org_id, ${COLUMNS} FROM telco_numbers ORDER BY created_at, id`);
  }

  /** Oldest import first. */
  list(orgId: string): Promise<TelcoNumber[]> {
    return this.#db.all<TelcoNumber>(`SELECT ${COLUMNS} FROM telco_numbers WHERE org_id = ? ORDER BY created_at, id`, [orgId]);
  }

  /** @throws the database's UNIQUE constraint error when the org already imported the number. */
  async insert(n: NewTelcoNumber): Promise<void> {
    await this.#db.run(
      `INSERT INTO telco_numbers (id, org_id, phone_number, phone_sid, label, account_sid, auth_token_enc, created_at, updated_at, previous_webhook)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        n.id,
        n.org_id,
        n.phone_number,
        n.phone_sid,
        n.label,
        n.account_sid,
        this.#box.seal(n.auth_token),
        n.created_at,
        n.created_at,
        n.previous_webhook ? JSON.stringify(n.previous_webhook) : null,
      ],
    );
  }

  /** The number's webhook before callbridge set it, or undefined when callbridge did not set it. */
  async previousWebhook(orgId: string, id: string): Promise<NumberWebhook | undefined> {
    const row = await this.#db.get<{ previous_webhook: string | null }>('SELECT previous_webhook FROM telco_numbers WHERE id = ? AND org_id = ?', [id, orgId]);
    return parseWebhook(row?.previous_webhook);
  }

  /**
   * The previous webhook another import of the same carrier number (phone_sid) stored, if any
   * (an import that finds the webhook already pointing at this daemon takes it over).
   */
  async previousWebhookOfSid(phoneSid: string, otherThan: string): Promise<NumberWebhook | undefined> {
    const row = await this.#db.get<{ previous_webhook: string | null }>(
      'SELECT previous_webhook FROM telco_numbers WHERE phone_sid = ? AND id <> ? AND previous_webhook IS NOT NULL ORDER BY created_at, id LIMIT 1',
      [phoneSid, otherThan],
    );
    return parseWebhook(row?.previous_webhook);
  }

  /** Records that callbridge set the number's webhook, and what was there before. */
  async setPreviousWebhook(orgId: string, id: string, webhook: NumberWebhook): Promise<void> {
    await this.#db.run('UPDATE telco_numbers SET previous_webhook = ? WHERE id = ? AND org_id = ?', [JSON.stringify(webhook), id, orgId]);
  }

  /** @returns false when the org has no such number. Agents holding it lose it (ON DELETE SET NULL). */
  async delete(orgId: string, id: string): Promise<boolean> {
    return (await this.#db.run('DELETE FROM telco_numbers WHERE id = ? AND org_id = ?', [id, orgId])).changes > 0;
  }

  /** @returns false when the org has no such number. */
  async relabel(orgId: string, id: string, label: string, at: string): Promise<boolean> {
    return (await this.#db.run('UPDATE telco_numbers SET label = ?, updated_at = ? WHERE id = ? AND org_id = ?', [label, at, id, orgId])).changes > 0;
  }

  /**
   * The carrier credentials of a number, auth_token decrypted.
   * @throws DomainError (internal) when the token cannot be opened, e.g. the encryption key changed.
   */
  async credentials(orgId: string, id: string): Promise<CarrierCredentials | undefined> {
    const row = await this.#db.get<{ account_sid: string; auth_token_enc: string }>('SELECT account_sid, auth_token_enc FROM telco_numbers WHERE id = ? AND org_id = ?', [id, orgId]);
    if (!row) return undefined;
    try {
      return { account_sid: row.account_sid, auth_token: this.#box.open(row.auth_token_enc) };
    } catch (err) {
      throw new DomainError(
        'internal',
        'TELCO_SECRET_UNREADABLE',
        `auth_token of telco number ${id} cannot be decrypted (was security.encryption_key changed?)`,
        { cause: err },
      );
    }
  }
}

function parseWebhook(text: string | null | undefined): NumberWebhook | undefined {
  if (text === null || text === undefined) return undefined;
  const v = JSON.parse(text) as Partial<NumberWebhook>;
  const str = (x: unknown) => (typeof x === 'string' ? x : '');
  return { voice_url: str(v.voice_url), voice_method: str(v.voice_method), status_callback: str(v.status_callback), status_callback_method: str(v.status_callback_method) };
}
