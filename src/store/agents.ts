/** Agents of an organization. Every query is scoped by org_id: another org's agent is "not found". */
import type { SqlClient } from './sql-client.ts';
import type { Agent, AgentSettings, AgentStatus } from '../domain/agent.ts';

interface AgentRow {
  id: string;
  org_id: string;
  name: string;
  status: AgentStatus;
  phone_number_id: string | null;
  active_version_id: string | null;
  settings: string;
  created_at: string;
  updated_at: string;
}

export interface StoredAgent extends Agent {
  org_id: string;
  active_version_id: string | null;
}

const COLUMNS = 'id, org_id, name, status, phone_number_id, active_version_id, settings, created_at, updated_at';

function fromRow(r: AgentRow): StoredAgent {
  const settings = JSON.parse(r.settings) as AgentSettings;
  return {
    id: r.id,
    org_id: r.org_id,
    name: r.name,
    status: r.status,
    phone_number_id: r.phone_number_id ?? '',
    active_version_id: r.active_version_id,
    ...settings,
    // Agents stored before analysis_fields existed have none.
    analysis_fields: settings.analysis_fields ?? [],
    created_at: r.created_at,
    updated_at: r.updated_at,
  };
}

/** The API view of an agent: the Agent resource's fields, in the document's order. */
export function toAgentResource(a: StoredAgent): Agent {
  return {
    id: a.id,
    phone_number_id: a.phone_number_id,
    name: a.name,
    llm: a.llm,
    fallback_llm: a.fallback_llm,
    status: a.status,
    prompt: a.prompt,
    first_message: a.first_message,
    first_message_interruption_time: a.first_message_interruption_time,
    default_language: a.default_language,
    summarize_calls: a.summarize_calls,
    analysis_fields: a.analysis_fields,
    created_at: a.created_at,
    updated_at: a.updated_at,
    noise_cancel_settings: a.noise_cancel_settings,
    vad_settings: a.vad_settings,
    enable_first_message_outbound: a.enable_first_message_outbound,
    voice_settings: a.voice_settings,
    timeout_settings: a.timeout_settings,
    keyterms: a.keyterms,
  };
}

export interface NewAgent {
  id: string;
  org_id: string;
  name: string;
  status: AgentStatus;
  phone_number_id: string | null;
  settings: AgentSettings;
  created_at: string;
}

/** Freezes a cached agent deeply, so a caller that tries to change a shared object fails loudly. */
function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

const CACHE_MAX = 10_000;

/**
 * Agents are read on every API call about them and, later, on every inbound call; reading SQLite
 * and parsing the settings JSON was a sixth of an agent GET's CPU (bench/api). Reads are cached
 * by id; every write through this repository drops the entry. The cache is shared with the
 * repositories bound to a transaction (Store.tx), which never fill it, so an uncommitted
 * (possibly rolled back) row is never cached, and which drop what they wrote once more when the
 * transaction has ended (forgetWritten), in case a reader on another connection cached the old
 * row meanwhile. Cached agents are frozen: treat what get() returns as read-only. On PostgreSQL
 * nothing is cached (another node may write the row).
 */
export class AgentRepo {
  readonly #cache: Map<string, StoredAgent>;
  readonly #db: SqlClient;
  /** Set in a transaction's repository: reads do not fill the cache, writes are remembered. */
  readonly #written: Set<string> | undefined;

  constructor(db: SqlClient, shared?: { cache: Map<string, StoredAgent>; inTransaction: boolean }) {
    this.#db = db;
    this.#cache = shared?.cache ?? new Map();
    this.#written = shared?.inTransaction ? new Set() : undefined;
  }

  /** The cache this repository fills, for the repositories of a transaction to share. */
  get cache(): Map<string, StoredAgent> {
    return this.#cache;
  }

  /** Id of the agent that holds an imported number (at most one: a unique index says so). */
  async holderOfPhoneNumber(phoneNumberId: string): Promise<string | undefined> {
    return (await this.#db.get<{ id: string }>('SELECT id FROM agents WHERE phone_number_id = ?', [phoneNumberId]))?.id;
  }

  async get(orgId: string, id: string): Promise<StoredAgent | undefined> {
    const cached = this.#cache.get(id);
    if (cached) return cached.org_id === orgId ? cached : undefined;
    const row = await this.#db.get<AgentRow>(`SELECT ${COLUMNS} FROM agents WHERE id = ? AND org_id = ?`, [id, orgId]);
    if (!row) return undefined;
    const agent = deepFreeze(fromRow(row));
    // PostgreSQL may be shared by several nodes, and a write on another node would not drop this
    // node's entry: there every read goes to the database (docs/decisions.md).
    if (this.#written === undefined && this.#db.dialect === 'sqlite') {
      if (this.#cache.size >= CACHE_MAX) this.#cache.clear();
      this.#cache.set(id, agent);
    }
    return agent;
  }

  async list(orgId: string, limit: number, offset: number): Promise<StoredAgent[]> {
    return (await this.#db.all<AgentRow>(`SELECT ${COLUMNS} FROM agents WHERE org_id = ? ORDER BY created_at, id LIMIT ? OFFSET ?`, [orgId, limit, offset])).map(fromRow);
  }

  async insert(a: NewAgent): Promise<void> {
    await this.#db.run(`INSERT INTO agents (${COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?)`, [
      a.id,
      a.org_id,
      a.name,
      a.status,
      a.phone_number_id,
      JSON.stringify(a.settings),
      a.created_at,
      a.created_at,
    ]);
  }

  async update(a: { id: string; org_id: string; name: string; status: AgentStatus; phone_number_id: string | null; settings: AgentSettings; updated_at: string }): Promise<void> {
    this.#forget(a.id);
    await this.#db.run('UPDATE agents SET name = ?, status = ?, phone_number_id = ?, settings = ?, updated_at = ? WHERE id = ? AND org_id = ?', [
      a.name,
      a.status,
      a.phone_number_id,
      JSON.stringify(a.settings),
      a.updated_at,
      a.id,
      a.org_id,
    ]);
  }

  async delete(orgId: string, id: string): Promise<boolean> {
    this.#forget(id);
    return (await this.#db.run('DELETE FROM agents WHERE id = ? AND org_id = ?', [id, orgId])).changes > 0;
  }

  async setActiveVersion(agentId: string, versionId: string | null, at: string): Promise<void> {
    this.#forget(agentId);
    await this.#db.run('UPDATE agents SET active_version_id = ?, updated_at = ? WHERE id = ?', [versionId, at, agentId]);
  }

  /** Drops every cached agent (after changes made outside this repository, e.g. cascades). */
  forgetAll(): void {
    this.#cache.clear();
  }

  /** After the transaction this repository is bound to has ended: drops what it wrote from the cache. */
  forgetWritten(): void {
    for (const id of this.#written ?? []) this.#cache.delete(id);
  }

  #forget(id: string): void {
    this.#cache.delete(id);
    this.#written?.add(id);
  }
}
