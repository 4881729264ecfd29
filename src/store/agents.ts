/** Agents of an organization. Every query is scoped by org_id: another org's agent is "not found". */
import type { Db } from './db.ts';
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
 * by id; every write through this repository drops the entry, and the cache is filled only
 * outside transactions so an uncommitted (possibly rolled back) row is never cached. Cached
 * agents are frozen: treat what get() returns as read-only.
 */
export class AgentRepo {
  readonly #cache = new Map<string, StoredAgent>();
  readonly #db: Db;
  readonly #get;
  readonly #list;
  readonly #insert;
  readonly #update;
  readonly #delete;
  readonly #setActiveVersion;
  readonly #byPhoneNumber;

  constructor(db: Db) {
    this.#db = db;
    this.#get = db.prepare(`SELECT ${COLUMNS} FROM agents WHERE id = ? AND org_id = ?`);
    this.#list = db.prepare(`SELECT ${COLUMNS} FROM agents WHERE org_id = ? ORDER BY created_at, id LIMIT ? OFFSET ?`);
    this.#insert = db.prepare(
      `INSERT INTO agents (${COLUMNS}) VALUES (@id, @org_id, @name, @status, @phone_number_id, NULL, @settings, @created_at, @created_at)`,
    );
    this.#update = db.prepare(
      'UPDATE agents SET name = @name, status = @status, phone_number_id = @phone_number_id, settings = @settings, updated_at = @updated_at WHERE id = @id AND org_id = @org_id',
    );
    this.#delete = db.prepare('DELETE FROM agents WHERE id = ? AND org_id = ?');
    this.#setActiveVersion = db.prepare('UPDATE agents SET active_version_id = ?, updated_at = ? WHERE id = ?');
    this.#byPhoneNumber = db.prepare('SELECT id FROM agents WHERE phone_number_id = ?');
  }

  /** Id of the agent that holds an imported number (at most one: a unique index says so). */
  holderOfPhoneNumber(phoneNumberId: string): string | undefined {
    return (this.#byPhoneNumber.get(phoneNumberId) as { id: string } | undefined)?.id;
  }

  get(orgId: string, id: string): StoredAgent | undefined {
    const cached = this.#cache.get(id);
    if (cached) return cached.org_id === orgId ? cached : undefined;
    const row = this.#get.get(id, orgId) as AgentRow | undefined;
    if (!row) return undefined;
    const agent = deepFreeze(fromRow(row));
    if (!this.#db.inTransaction) {
      if (this.#cache.size >= CACHE_MAX) this.#cache.clear();
      this.#cache.set(id, agent);
    }
    return agent;
  }

  list(orgId: string, limit: number, offset: number): StoredAgent[] {
    return (this.#list.all(orgId, limit, offset) as AgentRow[]).map(fromRow);
  }

  insert(a: NewAgent): void {
    this.#insert.run({ ...a, settings: JSON.stringify(a.settings) });
  }

  update(a: { id: string; org_id: string; name: string; status: AgentStatus; phone_number_id: string | null; settings: AgentSettings; updated_at: string }): void {
    this.#cache.delete(a.id);
    this.#update.run({ ...a, settings: JSON.stringify(a.settings) });
  }

  delete(orgId: string, id: string): boolean {
    this.#cache.delete(id);
    return this.#delete.run(id, orgId).changes > 0;
  }

  setActiveVersion(agentId: string, versionId: string | null, at: string): void {
    this.#cache.delete(agentId);
    this.#setActiveVersion.run(versionId, at, agentId);
  }

  /** Drops every cached agent (after changes made outside this repository, e.g. cascades). */
  forgetAll(): void {
    this.#cache.clear();
  }
}
