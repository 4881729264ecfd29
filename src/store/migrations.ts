/**
 * Versioned schema migrations, applied in order inside one transaction each. Never edit a
 * migration that has shipped: add the next one.
 */
export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: 'initial schema',
    sql: `
      CREATE TABLE organizations (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        key_hash TEXT NOT NULL UNIQUE,   -- sha256 of the key; the key itself is never stored
        prefix TEXT NOT NULL,            -- first characters, to tell keys apart in logs and listings
        created_at TEXT NOT NULL,
        revoked_at TEXT
      );
      CREATE TABLE telco_numbers (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        phone_number TEXT NOT NULL,
        phone_sid TEXT NOT NULL,
        label TEXT NOT NULL,
        account_sid TEXT NOT NULL,
        auth_token_enc TEXT NOT NULL,    -- AES-256-GCM (store/secret-box.ts)
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (org_id, phone_number)
      );
      CREATE TABLE agents (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('active', 'inactive')),
        phone_number_id TEXT REFERENCES telco_numbers(id) ON DELETE SET NULL,
        active_version_id TEXT,
        settings TEXT NOT NULL,          -- JSON: every other field of the Agent resource
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
      );
      CREATE INDEX agents_org ON agents (org_id, created_at, id);
      -- an imported number routes to one agent, so it may be assigned to one agent only
      CREATE UNIQUE INDEX agents_phone_number ON agents (phone_number_id) WHERE phone_number_id IS NOT NULL;
      CREATE TABLE agent_drafts (
        agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
        nodes TEXT NOT NULL,             -- JSON array of flow nodes, kept as sent
        updated_at TEXT NOT NULL
      );
      CREATE TABLE agent_versions (
        id TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        nodes TEXT NOT NULL,
        created_at TEXT NOT NULL,
        published_at TEXT
      );
      CREATE INDEX agent_versions_agent ON agent_versions (agent_id, created_at, id);
      CREATE TABLE sip_trunks (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        pbx TEXT NOT NULL,
        name TEXT NOT NULL,
        inbound_auth_type TEXT NOT NULL CHECK (inbound_auth_type IN ('digest', 'acl', 'none')),
        inbound_host TEXT NOT NULL,
        inbound_acl TEXT NOT NULL,       -- JSON array of CIDRs
        inbound_sip_username TEXT UNIQUE, -- digest usernames choose the trunk, so they are global
        inbound_sip_password_enc TEXT,
        outbound_host TEXT NOT NULL,
        outbound_sip_username TEXT NOT NULL,
        outbound_sip_password_enc TEXT,
        register INTEGER NOT NULL,
        remain_in_dialog INTEGER NOT NULL,
        caller_id_transforms TEXT NOT NULL, -- JSON array
        inbound_registration_status TEXT NOT NULL,
        outbound_registration_status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
      );
      CREATE INDEX sip_trunks_org ON sip_trunks (org_id, created_at, id);
      CREATE TABLE sip_trunk_assignments (
        id TEXT PRIMARY KEY,
        sip_trunk_id TEXT NOT NULL REFERENCES sip_trunks(id) ON DELETE CASCADE,
        agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        number TEXT,                     -- digest routing: unique within the trunk
        alternate_number TEXT UNIQUE,    -- ACL routing: unique across all trunks
        created_at TEXT NOT NULL,
        UNIQUE (sip_trunk_id, number)
      );
      CREATE INDEX sip_trunk_assignments_agent ON sip_trunk_assignments (agent_id);
      CREATE TABLE calls (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        agent_id TEXT REFERENCES agents(id) ON DELETE SET NULL,
        sip_trunk_id TEXT REFERENCES sip_trunks(id) ON DELETE SET NULL,
        direction TEXT NOT NULL CHECK (direction IN ('inbound', 'outbound', 'web')),
        status TEXT NOT NULL,
        from_number TEXT NOT NULL,
        to_number TEXT NOT NULL,
        started_at TEXT NOT NULL,
        answered_at TEXT,
        ended_at TEXT,
        end_reason TEXT,
        transcript TEXT NOT NULL DEFAULT '[]',
        summary TEXT,
        recording_path TEXT,
        created_at TEXT NOT NULL
      );
      CREATE INDEX calls_org_started ON calls (org_id, started_at, id);
    `,
  },
  {
    version: 2,
    name: 'voice sessions',
    sql: `
      -- One voice session per call record: what POST /v1/session-token asked for, and the token
      -- that may open it. agent_id is kept as text (no foreign key) so a deleted agent leaves the
      -- history in place; the socket refuses to open a session whose agent is gone.
      CREATE TABLE sessions (
        id TEXT PRIMARY KEY REFERENCES calls(id) ON DELETE CASCADE,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        agent_id TEXT NOT NULL,
        version_id TEXT,                 -- null: the agent had no published version
        caller_id TEXT NOT NULL,
        transport TEXT NOT NULL CHECK (transport IN ('websocket', 'webrtc')),
        chat_id TEXT,
        first_message TEXT,              -- per-session overrides; null = the agent's own
        prompt TEXT,
        variables TEXT NOT NULL,         -- JSON array of { key, value }
        scopes TEXT NOT NULL,            -- JSON array, as in the token
        token_jti TEXT NOT NULL,
        token_expires_at TEXT NOT NULL,
        connected_at TEXT,               -- set once, by the one connection the token opens
        created_at TEXT NOT NULL
      );
      -- the sweep of tokens that expired unused
      CREATE INDEX sessions_unconnected ON sessions (token_expires_at) WHERE connected_at IS NULL;
    `,
  },
];
