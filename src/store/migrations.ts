/**
 * Versioned schema migrations, applied in order inside one transaction each. Never edit a
 * migration that has shipped: add the next one.
 */
import { CALL_TURN_TIMELINES_SQL } from './turn-timelines.ts';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Migration 11's SQL: the same text in both dialects (src/store/postgres/migrations.ts uses it too). */
export const STREAM_GRANTS_SQL = `
      CREATE TABLE stream_grants (
        token_hash TEXT PRIMARY KEY,
        org_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        number_id TEXT NOT NULL,
        call_sid TEXT NOT NULL,
        account_sid TEXT NOT NULL,
        from_number TEXT NOT NULL,
        to_number TEXT NOT NULL,
        call_id TEXT,
        session_token_enc TEXT,
        answered INTEGER NOT NULL DEFAULT 0 CHECK (answered IN (0, 1)),
        redeemed_at TEXT,
        stream_started INTEGER NOT NULL DEFAULT 0 CHECK (stream_started IN (0, 1)),
        expires_at TEXT NOT NULL,
        created_at TEXT NOT NULL,
        CHECK ((call_id IS NULL) = (session_token_enc IS NULL))
      );
      CREATE UNIQUE INDEX stream_grants_call ON stream_grants (call_id);
      CREATE INDEX stream_grants_expires ON stream_grants (expires_at);
    `;

/**
 * Migration 16's SQL: the same text in both dialects (src/store/postgres/migrations.ts uses it
 * too). docs/webhooks.md: an organization's webhook endpoints (the secret sealed with the store's
 * secret box, like trunk passwords; events a JSON array of event types) and the outbox, one row
 * per event and endpoint, written in the transaction of the change that caused the event. A row
 * stays until it is delivered or given up (status), and a while after for GET .../deliveries.
 * Times the deliverer compares (event_ms: when the event happened, next_attempt_at, lease_until)
 * are epoch milliseconds on the database's clock; the others ISO-8601 text. order_key + seq order an endpoint's events of one call:
 * seq n + 1 is not sent before n is delivered or given up.
 */
export const WEBHOOKS_SQL = `
      CREATE TABLE webhook_endpoints (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        url TEXT NOT NULL,
        events TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        secret_enc TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
      );
      CREATE INDEX webhook_endpoints_org ON webhook_endpoints (org_id, created_at, id);
      CREATE TABLE webhook_deliveries (
        id TEXT PRIMARY KEY,
        event_id TEXT NOT NULL,
        endpoint_id TEXT NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
        org_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        order_key TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        event_ms BIGINT NOT NULL,
        lease_owner TEXT,
        lease_until BIGINT,
        last_status_code INTEGER,
        last_error TEXT,
        created_at TEXT NOT NULL,
        finished_at TEXT,
        UNIQUE (endpoint_id, order_key, seq)
      );
      -- finished_at is set exactly when status leaves pending: the partial indexes say it without
      -- a string literal (which each dialect would print its own way).
      CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE finished_at IS NULL;
      CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at);
      CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at) WHERE finished_at IS NOT NULL;
    `;

/**
 * Migration 19's SQL, the same text in both dialects (src/store/postgres/migrations.ts uses it
 * too): outbound lists, their contacts, runs, and each run's copy of its contacts with their
 * state (docs/outbound.md). Times the dialers of several nodes compare (next_attempt_at,
 * lease_until, next_dial_at) are epoch milliseconds on the database's clock. A call placed by a
 * run names it and the contact (the service's Call fields outbound_list_run_id and
 * outbound_contact_id), and GET /v1/calls filters by either.
 */
export const OUTBOUND_SQL = `
      CREATE TABLE outbound_lists (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        sip_trunk_id TEXT,
        from_number TEXT,
        caller_id TEXT,
        created_at TEXT NOT NULL
      );
      CREATE INDEX outbound_lists_org ON outbound_lists (org_id, created_at, id);
      CREATE TABLE outbound_contacts (
        id TEXT PRIMARY KEY,
        list_id TEXT NOT NULL REFERENCES outbound_lists(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        phone_number TEXT NOT NULL,
        variables TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (list_id, phone_number)
      );
      CREATE INDEX outbound_contacts_list ON outbound_contacts (list_id, seq, id);
      CREATE TABLE outbound_runs (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL,
        list_id TEXT NOT NULL REFERENCES outbound_lists(id) ON DELETE CASCADE,
        status TEXT NOT NULL CHECK (status IN ('scheduled', 'running', 'paused', 'completed', 'canceled')),
        settings TEXT NOT NULL,
        next_dial_at BIGINT NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        finished_at TEXT
      );
      CREATE INDEX outbound_runs_list ON outbound_runs (list_id, created_at, id);
      CREATE INDEX outbound_runs_open ON outbound_runs (finished_at, status);
      CREATE TABLE outbound_run_contacts (
        run_id TEXT NOT NULL REFERENCES outbound_runs(id) ON DELETE CASCADE,
        contact_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        phone_number TEXT NOT NULL,
        variables TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'dialing', 'calling', 'completed', 'failed', 'canceled')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_until BIGINT,
        call_id TEXT,
        last_outcome TEXT,
        PRIMARY KEY (run_id, contact_id)
      );
      CREATE INDEX outbound_run_contacts_due ON outbound_run_contacts (run_id, state, next_attempt_at, seq);
      CREATE INDEX outbound_run_contacts_state ON outbound_run_contacts (state, run_id);
      ALTER TABLE calls ADD COLUMN outbound_list_run_id TEXT;
      ALTER TABLE calls ADD COLUMN outbound_contact_id TEXT;
      CREATE INDEX calls_org_outbound_run ON calls (org_id, outbound_list_run_id, created_at, id);
      CREATE INDEX calls_org_outbound_contact ON calls (org_id, outbound_contact_id, created_at, id);
    `;

/**
 * Migration 12's statements on one row of calls in a trigger: its postings written (`new`), or
 * removed (`old`). SQLite's triggers cannot share a statement (nor use WITH): the insert and the
 * update trigger both write the new row's, the delete and the update trigger both remove the old
 * row's. The positions 0 .. length - 1 of the number come from json_each, as in migration 10.
 */
const positions = (row: 'new' | 'old') => `json_each('[' || substr(replace(hex(zeroblob(length(${row}.party_number))), '00', ',0'), 2) || ']')`;
const postShortGrams = (row: 'new') => `INSERT INTO call_short_grams (org_id, gram, created_at, call_id)
          SELECT DISTINCT ${row}.org_id, g.gram, ${row}.created_at, ${row}.id FROM (SELECT substr(${row}.party_number, p.key + 1, w.value) AS gram
            FROM ${positions(row)} p, json_each('[1,2]') w
            WHERE p.key + w.value <= length(${row}.party_number)) g
          WHERE g.gram GLOB '*[^0-9+]*';`;
const unpostShortGrams = (row: 'old') => `DELETE FROM call_short_grams WHERE org_id = ${row}.org_id AND created_at = ${row}.created_at AND call_id = ${row}.id AND gram IN (
          SELECT substr(${row}.party_number, p.key + 1, w.value)
          FROM ${positions(row)} p, json_each('[1,2]') w
          WHERE p.key + w.value <= length(${row}.party_number));`;

/** Migration 15 in both dialects: a repeated voice webhook finds its call by CallSid. */
export const CALLS_CARRIER_CALL_SQL = `
  CREATE INDEX calls_carrier_call ON calls (carrier_call_id) WHERE carrier_call_id IS NOT NULL;
`;

/**
 * Migration 14's SQL, the same text in both dialects (src/store/postgres/migrations.ts uses it
 * too): an assignment carries its trunk's organization, and `alternate_number` is unique within
 * an organization instead of across all of them. A global UNIQUE let one organization reserve a
 * number ahead of another and told it, through the 409, that the number existed elsewhere; which
 * organization an ACL call for a number claimed twice belongs to is decided at routing
 * (docs/sip-trunks.md "Overlapping ACLs"). SQLite cannot drop a column's UNIQUE in place, so the
 * table is rebuilt (nothing references it); org_id is copied from the trunk, whose organization
 * never changes. The indexes on alternate_number, number and telco_numbers.phone_number serve
 * routing's questions across organizations: who else claims this number, who imported it.
 */
export const ASSIGNMENTS_PER_ORG_SQL = `
      CREATE TABLE sip_trunk_assignments_per_org (
        id TEXT PRIMARY KEY,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        sip_trunk_id TEXT NOT NULL REFERENCES sip_trunks(id) ON DELETE CASCADE,
        agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        number TEXT,                     -- digest routing: unique within the trunk
        alternate_number TEXT,           -- ACL routing: unique within the organization
        created_at TEXT NOT NULL,
        UNIQUE (sip_trunk_id, number),
        UNIQUE (org_id, alternate_number)
      );
      INSERT INTO sip_trunk_assignments_per_org (id, org_id, sip_trunk_id, agent_id, number, alternate_number, created_at)
        SELECT a.id, t.org_id, a.sip_trunk_id, a.agent_id, a.number, a.alternate_number, a.created_at
        FROM sip_trunk_assignments a JOIN sip_trunks t ON t.id = a.sip_trunk_id;
      DROP TABLE sip_trunk_assignments;
      ALTER TABLE sip_trunk_assignments_per_org RENAME TO sip_trunk_assignments;
      CREATE INDEX sip_trunk_assignments_agent ON sip_trunk_assignments (agent_id);
      CREATE INDEX sip_trunk_assignments_alternate ON sip_trunk_assignments (alternate_number);
      CREATE INDEX sip_trunk_assignments_number ON sip_trunk_assignments (number);
      CREATE INDEX telco_numbers_phone ON telco_numbers (phone_number);
    `;

/**
 * Migration 21's SQL, the same text in both dialects (src/store/postgres/migrations.ts uses it
 * too): an API key gets a name (what it is for, shown in GET /v1/api-keys and the console) and
 * when it was last used (written at most once a minute per key and node, docs/api-keys.md); the
 * index serves an organization's list of keys and the count of its active ones.
 */
export const API_KEY_NAMES_SQL = `
      ALTER TABLE api_keys ADD COLUMN name TEXT NOT NULL DEFAULT '';
      ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;             -- null: never used
      CREATE INDEX api_keys_org ON api_keys (org_id, created_at, id);
    `;
/**
 * Migration 17's SQL, the same text in both dialects (src/store/postgres/migrations.ts uses it
 * too): the post-call analysis (docs/calls.md "Post-call analysis") keeps its structured fields
 * beside the summary, and when it was stored, which also makes it a once-per-call write.
 */
export const CALL_ANALYSIS_SQL = `
      ALTER TABLE calls ADD COLUMN extracted_variables TEXT NOT NULL DEFAULT '[]';  -- JSON array of the document's ContextVariable
      ALTER TABLE calls ADD COLUMN analyzed_at TEXT;                                -- null: not analysed (off, failed, or running)
    `;

/**
 * Migration 20's SQL: the same text in both dialects. docs/machine-detection.md: a session's
 * answering-machine detection as the dial asked for it (JSON `{ mode, message? }`; null: off),
 * and what it decided on the call (JSON `{ result, decided_after_ms, beep }`; null: it did not run).
 */
export const MACHINE_DETECTION_SQL = `
      ALTER TABLE sessions ADD COLUMN machine_detection TEXT;
      ALTER TABLE calls ADD COLUMN machine_detection TEXT;
    `;

/**
 * Migration 22's SQL: the same text in both dialects. docs/calls.md "SIP details": a SIP call's
 * Call-ID (at most SIP_CALL_ID_MAX characters, src/domain/call.ts) and the INVITE's final
 * response, sent (inbound) or received (outbound); null off SIP.
 */
export const CALL_SIP_DETAILS_SQL = `
      ALTER TABLE calls ADD COLUMN sip_call_id TEXT;
      ALTER TABLE calls ADD COLUMN sip_final_status INTEGER;
      ALTER TABLE calls ADD COLUMN sip_final_reason TEXT;
    `;

/**
 * Migration 23's SQL: the same text in both dialects. docs/outbound.md "Calling window": a
 * contact's own IANA time zone (null: the run window's), copied to the run's contacts, where the
 * dialer's claim filters on it; the index answers the dialer's per-pass "distinct zones of the
 * run's pending contacts" from the index alone.
 */
export const OUTBOUND_CONTACT_TIMEZONE_SQL = `
      ALTER TABLE outbound_contacts ADD COLUMN timezone TEXT;
      ALTER TABLE outbound_run_contacts ADD COLUMN timezone TEXT;
      CREATE INDEX outbound_run_contacts_zone ON outbound_run_contacts (run_id, state, timezone);
    `;

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
  {
    version: 3,
    name: 'call records in the shape of the service document',
    // docs/calls.md: the record, the mappings, the indexes. The same mappings in TypeScript are in
    // src/domain/call.ts; test/store/calls-migration.test.ts holds the two to the same results.
    sql: `
      -- New facts, each a column an index can serve.
      ALTER TABLE calls ADD COLUMN source TEXT NOT NULL DEFAULT 'sip';     -- sip | api | twilio | simulation
      ALTER TABLE calls ADD COLUMN outbound INTEGER NOT NULL DEFAULT 0;    -- 1 when direction = outbound
      ALTER TABLE calls ADD COLUMN party_number TEXT NOT NULL DEFAULT '';  -- the other party
      ALTER TABLE calls ADD COLUMN end_status TEXT;                        -- completed | failed | busy | no_answer | expired
      ALTER TABLE calls ADD COLUMN outcome TEXT;                           -- transferred | ended_by_agent | ended_by_user
      ALTER TABLE calls ADD COLUMN graph_version_id TEXT;                  -- the agent version the session ran

      UPDATE calls SET
        source = CASE direction WHEN 'web' THEN 'api' ELSE 'sip' END,
        outbound = (direction = 'outbound'),
        party_number = CASE direction WHEN 'outbound' THEN to_number ELSE from_number END,
        graph_version_id = (SELECT s.version_id FROM sessions s WHERE s.id = calls.id),
        -- the old detailed status of an ended call is kept as end_status
        end_status = CASE WHEN ended_at IS NULL THEN NULL ELSE status END,
        outcome = CASE end_reason
          WHEN 'transfer' THEN 'transferred'
          WHEN 'agent_hangup' THEN 'ended_by_agent'
          WHEN 'timeout' THEN 'ended_by_agent'
          WHEN 'silence_timeout' THEN 'ended_by_agent'
          WHEN 'client_closed' THEN 'ended_by_user'
          WHEN 'caller side ended: remote_bye' THEN 'ended_by_user'
          WHEN 'callee side ended: remote_bye' THEN 'ended_by_user'
        END,
        status = CASE
          WHEN ended_at IS NULL AND status = 'pending' THEN 'started'
          WHEN ended_at IS NULL THEN 'in_progress'
          WHEN end_reason = 'auth_failed' OR end_reason LIKE 'auth_failed (%' THEN 'auth_failed'
          ELSE 'ended'
        END;

      -- Transcripts: [{ role, text, at, turn_id, interrupted }] -> { entries: [...] } (the
      -- document's TranscriptEntry); json_patch('{}', ...) drops the members that are null.
      UPDATE calls SET transcript = CASE
        WHEN json_valid(transcript) AND json_type(transcript) = 'array' THEN (
          SELECT json_object('entries', json(json_group_array(json(e.entry) ORDER BY e.k)))
          FROM (
            SELECT j.key AS k, json_patch('{}', json_object(
              'index', j.key,
              'role', CASE json_extract(j.value, '$.role') WHEN 'agent' THEN 'assistant' WHEN 'tool' THEN NULL WHEN '' THEN NULL ELSE json_extract(j.value, '$.role') END,
              'message', json_extract(j.value, '$.text'),
              'type', CASE json_extract(j.value, '$.role') WHEN 'tool' THEN 'tool_call' ELSE 'message' END,
              'toolCall', CASE WHEN json_extract(j.value, '$.role') = 'tool' THEN json_object(
                'toolName', CASE WHEN instr(json_extract(j.value, '$.text'), ': ') > 0
                  THEN substr(json_extract(j.value, '$.text'), 1, instr(json_extract(j.value, '$.text'), ': ') - 1)
                  ELSE json_extract(j.value, '$.text') END,
                'output', CASE WHEN instr(json_extract(j.value, '$.text'), ': ') > 0
                  THEN substr(json_extract(j.value, '$.text'), instr(json_extract(j.value, '$.text'), ': ') + 2) END
              ) END,
              'createdAt', CASE WHEN json_type(j.value, '$.at') = 'text' THEN json_extract(j.value, '$.at') END,
              'turnId', CASE WHEN json_type(j.value, '$.turn_id') = 'text' THEN json_extract(j.value, '$.turn_id') END,
              'interrupted', CASE WHEN json_type(j.value, '$.interrupted') = 'true' THEN json('true') END
            )) AS entry
            FROM json_each(calls.transcript) j
          ) e
        )
        ELSE '{"entries":[]}'
      END;

      -- Names as the API shows them: created_at is the old started_at (the same instant, kept
      -- from started_at, which the old API showed and sorted by); started_at is the old
      -- answered_at; termination_reason the old end_reason.
      DROP INDEX calls_org_started;
      UPDATE calls SET created_at = started_at;
      ALTER TABLE calls DROP COLUMN started_at;
      ALTER TABLE calls RENAME COLUMN answered_at TO started_at;
      ALTER TABLE calls RENAME COLUMN end_reason TO termination_reason;

      -- One index per filter, each led by org_id and ending in (created_at, id), the list order,
      -- so a page is read in order and the total is counted on the index alone.
      CREATE INDEX calls_org_created ON calls (org_id, created_at, id, party_number);
      -- agent_ids is the usual dashboard filter: the other enum filters ride along so that their
      -- combinations with it are still counted on the index alone.
      CREATE INDEX calls_org_agent ON calls (org_id, agent_id, created_at, id, status, source, outbound, outcome);
      CREATE INDEX calls_org_status ON calls (org_id, status, created_at, id);
      CREATE INDEX calls_org_source ON calls (org_id, source, created_at, id);
      CREATE INDEX calls_org_outbound ON calls (org_id, outbound, created_at, id);
      CREATE INDEX calls_org_outcome ON calls (org_id, outcome, created_at, id) WHERE outcome IS NOT NULL;

      -- Tags: a row per (call, tag), with the call's org and created_at so the index serves the
      -- filter in list order.
      CREATE TABLE call_tags (
        call_id TEXT NOT NULL REFERENCES calls(id) ON DELETE CASCADE,
        org_id TEXT NOT NULL,
        tag TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (call_id, tag)
      ) WITHOUT ROWID;
      CREATE INDEX call_tags_org_tag ON call_tags (org_id, tag, created_at, call_id);

      -- search: a trigram index of party_number (FTS5). It is keyed by call_search.id, an
      -- INTEGER PRIMARY KEY, because the rowid of calls (a TEXT primary key) may change on VACUUM.
      CREATE TABLE call_search (
        id INTEGER PRIMARY KEY,
        call_id TEXT NOT NULL UNIQUE REFERENCES calls(id) ON DELETE CASCADE,
        party_number TEXT NOT NULL
      );
      CREATE VIRTUAL TABLE call_search_fts USING fts5(party_number, content = 'call_search', content_rowid = 'id', tokenize = 'trigram case_sensitive 1');
      CREATE TRIGGER call_search_ai AFTER INSERT ON call_search BEGIN
        INSERT INTO call_search_fts (rowid, party_number) VALUES (new.id, new.party_number);
      END;
      CREATE TRIGGER call_search_ad AFTER DELETE ON call_search BEGIN
        INSERT INTO call_search_fts (call_search_fts, rowid, party_number) VALUES ('delete', old.id, old.party_number);
      END;
      CREATE TRIGGER call_search_au AFTER UPDATE ON call_search BEGIN
        INSERT INTO call_search_fts (call_search_fts, rowid, party_number) VALUES ('delete', old.id, old.party_number);
        INSERT INTO call_search_fts (rowid, party_number) VALUES (new.id, new.party_number);
      END;
      INSERT INTO call_search (call_id, party_number) SELECT id, party_number FROM calls ORDER BY created_at, id;
      CREATE TRIGGER calls_search_ai AFTER INSERT ON calls BEGIN
        INSERT INTO call_search (call_id, party_number) VALUES (new.id, new.party_number);
      END;
      CREATE TRIGGER calls_search_au AFTER UPDATE OF party_number ON calls BEGIN
        UPDATE call_search SET party_number = new.party_number WHERE call_id = new.id;
      END;

      -- Totals kept by triggers, so that the total of a list filtered by nothing or by one of
      -- these alone is a lookup, not a count: per organization, all its calls (dim 'all') and
      -- its calls per status, source, outbound (0/1), outcome ('' = none) and agent ('' = none).
      CREATE TABLE call_counts (
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        dim TEXT NOT NULL,
        val TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (org_id, dim, val)
      ) WITHOUT ROWID;
      INSERT INTO call_counts (org_id, dim, val, n)
        SELECT org_id, 'all', '', count(*) FROM calls GROUP BY org_id
        UNION ALL SELECT org_id, 'status', status, count(*) FROM calls GROUP BY org_id, status
        UNION ALL SELECT org_id, 'source', source, count(*) FROM calls GROUP BY org_id, source
        UNION ALL SELECT org_id, 'outbound', outbound, count(*) FROM calls GROUP BY org_id, outbound
        UNION ALL SELECT org_id, 'outcome', coalesce(outcome, ''), count(*) FROM calls GROUP BY org_id, coalesce(outcome, '')
        UNION ALL SELECT org_id, 'agent', coalesce(agent_id, ''), count(*) FROM calls GROUP BY org_id, coalesce(agent_id, '');
      CREATE TRIGGER calls_count_ai AFTER INSERT ON calls BEGIN
        INSERT INTO call_counts (org_id, dim, val, n) VALUES
          (new.org_id, 'all', '', 1),
          (new.org_id, 'status', new.status, 1),
          (new.org_id, 'source', new.source, 1),
          (new.org_id, 'outbound', new.outbound, 1),
          (new.org_id, 'outcome', coalesce(new.outcome, ''), 1),
          (new.org_id, 'agent', coalesce(new.agent_id, ''), 1)
        ON CONFLICT (org_id, dim, val) DO UPDATE SET n = n + 1;
      END;
      CREATE TRIGGER calls_count_ad AFTER DELETE ON calls BEGIN
        UPDATE call_counts SET n = n - 1 WHERE org_id = old.org_id AND (
          dim = 'all'
          OR (dim = 'status' AND val = old.status)
          OR (dim = 'source' AND val = old.source)
          OR (dim = 'outbound' AND val = CAST(old.outbound AS TEXT))
          OR (dim = 'outcome' AND val = coalesce(old.outcome, ''))
          OR (dim = 'agent' AND val = coalesce(old.agent_id, '')));
      END;
      -- A call moves between values: answered, ended, its agent deleted (SET NULL).
      CREATE TRIGGER calls_count_au AFTER UPDATE OF status, source, outbound, outcome, agent_id ON calls BEGIN
        UPDATE call_counts SET n = n - 1 WHERE org_id = old.org_id AND (
          (dim = 'status' AND val = old.status AND old.status IS NOT new.status)
          OR (dim = 'source' AND val = old.source AND old.source IS NOT new.source)
          OR (dim = 'outbound' AND val = CAST(old.outbound AS TEXT) AND old.outbound IS NOT new.outbound)
          OR (dim = 'outcome' AND val = coalesce(old.outcome, '') AND old.outcome IS NOT new.outcome)
          OR (dim = 'agent' AND val = coalesce(old.agent_id, '') AND old.agent_id IS NOT new.agent_id));
        INSERT INTO call_counts (org_id, dim, val, n)
          SELECT new.org_id, d, v, 1 FROM (
            SELECT 'status' AS d, new.status AS v WHERE old.status IS NOT new.status
            UNION ALL SELECT 'source', new.source WHERE old.source IS NOT new.source
            UNION ALL SELECT 'outbound', new.outbound WHERE old.outbound IS NOT new.outbound
            UNION ALL SELECT 'outcome', coalesce(new.outcome, '') WHERE old.outcome IS NOT new.outcome
            UNION ALL SELECT 'agent', coalesce(new.agent_id, '') WHERE old.agent_id IS NOT new.agent_id
          ) WHERE true
          ON CONFLICT (org_id, dim, val) DO UPDATE SET n = n + 1;
      END;
    `,
  },
  {
    version: 4,
    name: 'SIP registrations of PBXs on digest trunks',
    // docs/sip-registrar.md: callbridge as the registrar of the PBX behind a digest trunk.
    sql: `
      -- One row per Contact a PBX registered for its trunk (RFC 3261 10.3). expires_at and
      -- updated_at are milliseconds since the epoch; rows past expires_at are ignored on read and
      -- swept. The flow it came over (transport, source address and port, the TCP/TLS connection)
      -- is where calls to the PBX go (RFC 5626 style), since the Contact may be behind NAT.
      CREATE TABLE sip_registrations (
        trunk_id TEXT NOT NULL REFERENCES sip_trunks(id) ON DELETE CASCADE,
        contact TEXT NOT NULL,           -- the Contact URI as our serializer writes it
        expires_at INTEGER NOT NULL,
        call_id TEXT NOT NULL,           -- Call-ID and CSeq of the REGISTER that wrote it (10.3 step 7)
        cseq INTEGER NOT NULL,
        transport TEXT NOT NULL CHECK (transport IN ('udp', 'tcp', 'tls')),
        source_address TEXT NOT NULL,
        source_port INTEGER NOT NULL,
        connection_id TEXT,              -- TCP/TLS: the connection of this daemon's run it came over
        updated_at INTEGER NOT NULL,     -- the last REGISTER that added or refreshed it
        PRIMARY KEY (trunk_id, contact)
      ) WITHOUT ROWID;
      CREATE INDEX sip_registrations_expiry ON sip_registrations (expires_at);
    `,
  },
  {
    version: 5,
    name: 'callbridge registering with carriers (register: true)',
    // docs/sip-registration-client.md: callbridge's own REGISTER to a trunk's outbound_host.
    sql: `
      -- The user part of our Contact in the trunk's REGISTERs: random, unique, and how an INVITE
      -- the carrier sends to that Contact finds its trunk. Existing trunks get one now.
      ALTER TABLE sip_trunks ADD COLUMN outbound_contact_user TEXT;
      UPDATE sip_trunks SET outbound_contact_user = 'cb' || lower(hex(randomblob(8)));
      CREATE UNIQUE INDEX sip_trunks_outbound_contact_user ON sip_trunks (outbound_contact_user);
      -- The last attempt's error ('' after a success) and when the granted binding runs out (ms
      -- since the epoch), as the registration client last reported them.
      ALTER TABLE sip_trunks ADD COLUMN outbound_registration_error TEXT NOT NULL DEFAULT '';
      ALTER TABLE sip_trunks ADD COLUMN outbound_registration_expires_at INTEGER;
    `,
  },
  {
    version: 6,
    name: 'SIP trunks: media_encryption and header_variables',
    // docs/sip-trunks.md: two fields of ours. Existing trunks get the defaults (plain RTP, no
    // header mapped), which is what they did before.
    sql: `
      ALTER TABLE sip_trunks ADD COLUMN media_encryption TEXT NOT NULL DEFAULT 'none'
        CHECK (media_encryption IN ('none', 'allow', 'require'));
      -- JSON array of header names, as validated by the domain (tokens, no credential headers).
      ALTER TABLE sip_trunks ADD COLUMN header_variables TEXT NOT NULL DEFAULT '[]';
    `,
  },
  {
    version: 7,
    name: 'calls: the carrier call id',
    // docs/telco.md: a call that came through the carrier's own voice path (source twilio) keeps
    // the carrier's CallSid, to join our record with the carrier's. Null for every other call.
    sql: `
      ALTER TABLE calls ADD COLUMN carrier_call_id TEXT;
    `,
  },
  {
    version: 8,
    name: 'telco numbers: the voice webhook they had before import',
    // docs/telco.md "Pointing the number at callbridge on import": JSON of the number's voice_url,
    // voice_method, status_callback, status_callback_method as the carrier had them before
    // callbridge pointed the number at itself; null when callbridge did not set the webhook (then
    // deleting the import writes nothing to the carrier).
    sql: `
      ALTER TABLE telco_numbers ADD COLUMN previous_webhook TEXT;
    `,
  },
  {
    version: 9,
    name: 'cluster: node leases, the node of each call, call slots',
    // docs/store-postgres.md "Several nodes": several nodes on one database. Times here are milliseconds since the
    // epoch read from the DATABASE's clock (the nodes' clocks may disagree).
    sql: `
      -- One row per running node: written at start, refreshed every cluster.heartbeat_secs,
      -- deleted at a clean stop, or by a survivor once heartbeat_at is older than
      -- cluster.node_timeout_secs. started_at tells a restarted node's lease from its old one.
      CREATE TABLE cluster_nodes (
        node_id TEXT PRIMARY KEY,
        started_at INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL,
        http_url TEXT NOT NULL DEFAULT '',
        sip_address TEXT NOT NULL DEFAULT ''
      );
      -- The node that runs the call (null: a row written before nodes were recorded).
      ALTER TABLE calls ADD COLUMN node_id TEXT;
      CREATE INDEX calls_node_open ON calls (node_id) WHERE ended_at IS NULL;
      -- A call counted against bridge.max_calls_per_trunk / max_calls_per_org, from admission
      -- to its end; deleted with it, by its node's restart or by the sweep of a dead node.
      CREATE TABLE call_slots (
        id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        org_id TEXT NOT NULL,
        trunk_id TEXT,
        acquired_at INTEGER NOT NULL
      );
      CREATE INDEX call_slots_org ON call_slots (org_id);
      CREATE INDEX call_slots_trunk ON call_slots (trunk_id);
      CREATE INDEX call_slots_node ON call_slots (node_id);
    `,
  },
  {
    version: 10,
    name: 'calls: counters of 1-2 character substrings of party_number',
    // docs/calls.md "Totals": the total of a 1-2 character search, which the trigram index cannot
    // serve (no trigram), is a lookup here, not a count over the organization's calls; a string
    // whose counter is 0 is answered without reading calls at all.
    sql: `
      -- Per organization and gram (each distinct substring of 1 or 2 characters of a call's
      -- party_number): how many calls have it, a call counted once per gram however often it
      -- has it. Rows that fall to 0 are kept, as in call_counts.
      CREATE TABLE call_gram_counts (
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        gram TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (org_id, gram)
      ) WITHOUT ROWID;
      -- A trigger may not use WITH, so the positions 0 .. length - 1 of a string come from
      -- json_each over '[0,0,...]', one element per character (hex(zeroblob(n)) is n times '00').
      -- substr() and length() count characters, as instr() matches them.
      INSERT INTO call_gram_counts (org_id, gram, n)
        SELECT org_id, gram, count(*) FROM (
          SELECT DISTINCT c.id, c.org_id, substr(c.party_number, p.key + 1, w.value) AS gram
          FROM calls c, json_each('[' || substr(replace(hex(zeroblob(length(c.party_number))), '00', ',0'), 2) || ']') p, json_each('[1,2]') w
          WHERE p.key + w.value <= length(c.party_number)
        ) GROUP BY org_id, gram;
      CREATE TRIGGER calls_grams_ai AFTER INSERT ON calls BEGIN
        INSERT INTO call_gram_counts (org_id, gram, n)
          SELECT DISTINCT new.org_id, substr(new.party_number, p.key + 1, w.value), 1
          FROM json_each('[' || substr(replace(hex(zeroblob(length(new.party_number))), '00', ',0'), 2) || ']') p, json_each('[1,2]') w
          WHERE p.key + w.value <= length(new.party_number)
          ON CONFLICT (org_id, gram) DO UPDATE SET n = n + 1;
      END;
      CREATE TRIGGER calls_grams_ad AFTER DELETE ON calls BEGIN
        UPDATE call_gram_counts SET n = n - 1 WHERE org_id = old.org_id AND gram IN (
          SELECT substr(old.party_number, p.key + 1, w.value)
          FROM json_each('[' || substr(replace(hex(zeroblob(length(old.party_number))), '00', ',0'), 2) || ']') p, json_each('[1,2]') w
          WHERE p.key + w.value <= length(old.party_number));
      END;
      CREATE TRIGGER calls_grams_au AFTER UPDATE OF party_number ON calls WHEN old.party_number IS NOT new.party_number BEGIN
        UPDATE call_gram_counts SET n = n - 1 WHERE org_id = old.org_id AND gram IN (
          SELECT substr(old.party_number, p.key + 1, w.value)
          FROM json_each('[' || substr(replace(hex(zeroblob(length(old.party_number))), '00', ',0'), 2) || ']') p, json_each('[1,2]') w
          WHERE p.key + w.value <= length(old.party_number));
        INSERT INTO call_gram_counts (org_id, gram, n)
          SELECT DISTINCT new.org_id, substr(new.party_number, p.key + 1, w.value), 1
          FROM json_each('[' || substr(replace(hex(zeroblob(length(new.party_number))), '00', ',0'), 2) || ']') p, json_each('[1,2]') w
          WHERE p.key + w.value <= length(new.party_number)
          ON CONFLICT (org_id, gram) DO UPDATE SET n = n + 1;
      END;
    `,
  },
  {
    version: 11,
    name: 'stream grants: the carrier media streams\' one-time tokens',
    // docs/telco.md "The stream's one-time token": what the voice webhook (or an outbound carrier
    // dial) granted a media stream, so that the stream may open on any node sharing the store.
    // The token is random and stored only as its SHA-256 (hex); expires_at is on the issuing
    // node's clock, as sessions.token_expires_at (ISO-8601). An outbound dial's row also carries
    // its call record (call_id), the session's connect token sealed with the store's secret box
    // (the node taking the stream attaches the session with it), whether the carrier said the
    // call was answered, and once redeemed whether its stream started (the dial is then no
    // longer ringing on any node). Rows are deleted by the session_token_sweep role a while
    // after they expire.
    sql: STREAM_GRANTS_SQL,
  },
  {
    version: 12,
    name: 'calls: postings of the rare 1-2 character substrings of party_number',
    // docs/calls.md "Rare 1-2 character strings": the page of a 1-2 character search for a string
    // that has a character other than a digit or '+' (a letter, '#', '*') is read in list order
    // from its postings, not found by reading the organization's created_at index up to its last
    // match.
    sql: `
      -- Per organization and gram: the calls whose party_number holds it, in list order. Only the
      -- grams (distinct substrings of 1 or 2 characters) with a character outside [0-9+]: an
      -- E.164 number writes no row, 'guest#12' writes the 12 of its grams with a letter or '#'.
      -- No foreign key: the rows go with their call (the delete trigger), as its counters do.
      CREATE TABLE call_short_grams (
        org_id TEXT NOT NULL,
        gram TEXT NOT NULL,
        created_at TEXT NOT NULL,
        call_id TEXT NOT NULL,
        PRIMARY KEY (org_id, gram, created_at, call_id)
      ) WITHOUT ROWID;
      -- The calls stored before: read from calls_org_created (it carries every column needed),
      -- the numbers of digits and '+' alone skipped before their grams are listed.
      INSERT INTO call_short_grams (org_id, gram, created_at, call_id)
        SELECT DISTINCT c.org_id, substr(c.party_number, p.key + 1, w.value), c.created_at, c.id
        FROM calls c INDEXED BY calls_org_created,
          json_each('[' || substr(replace(hex(zeroblob(length(c.party_number))), '00', ',0'), 2) || ']') p, json_each('[1,2]') w
        WHERE c.party_number GLOB '*[^0-9+]*' AND p.key + w.value <= length(c.party_number)
          AND substr(c.party_number, p.key + 1, w.value) GLOB '*[^0-9+]*';
      -- The triggers do nothing (the WHEN) for a number of digits and '+' alone.
      CREATE TRIGGER calls_short_grams_ai AFTER INSERT ON calls WHEN new.party_number GLOB '*[^0-9+]*' BEGIN
        ${postShortGrams('new')}
      END;
      CREATE TRIGGER calls_short_grams_ad AFTER DELETE ON calls WHEN old.party_number GLOB '*[^0-9+]*' BEGIN
        ${unpostShortGrams('old')}
      END;
      CREATE TRIGGER calls_short_grams_au AFTER UPDATE OF party_number, org_id, created_at ON calls
        WHEN (old.party_number IS NOT new.party_number OR old.org_id IS NOT new.org_id OR old.created_at IS NOT new.created_at)
          AND (old.party_number GLOB '*[^0-9+]*' OR new.party_number GLOB '*[^0-9+]*') BEGIN
        ${unpostShortGrams('old')}
        ${postShortGrams('new')}
      END;
    `,
  },
  {
    version: 13,
    name: 'calls: the filter indexes carry party_number',
    // docs/calls.md "Indexes": a search (1-2 digits, or a string not selective enough for the
    // trigram index) combined with another filter is counted on that filter's index; without
    // party_number in it, every entry cost a lookup of its calls row (search "12" with status
    // ended: ~450,000 lookups, ~340 ms at half a million calls). With it the count is read from
    // the index alone, as every other filter's is.
    sql: `
      DROP INDEX calls_org_agent;
      DROP INDEX calls_org_status;
      DROP INDEX calls_org_source;
      DROP INDEX calls_org_outbound;
      DROP INDEX calls_org_outcome;
      CREATE INDEX calls_org_agent ON calls (org_id, agent_id, created_at, id, status, source, outbound, outcome, party_number);
      CREATE INDEX calls_org_status ON calls (org_id, status, created_at, id, party_number);
      CREATE INDEX calls_org_source ON calls (org_id, source, created_at, id, party_number);
      CREATE INDEX calls_org_outbound ON calls (org_id, outbound, created_at, id, party_number);
      CREATE INDEX calls_org_outcome ON calls (org_id, outcome, created_at, id, party_number) WHERE outcome IS NOT NULL;
    `,
  },
  {
    version: 14,
    name: 'sip trunk assignments: alternate_number unique per organization',
    sql: ASSIGNMENTS_PER_ORG_SQL,
  },
  {
    version: 15,
    name: 'calls: carrier_call_id index',
    // The carrier's voice webhook looks a CallSid up before it answers (docs/telco.md "The voice
    // webhook": one CallSid is one call, however often the webhook comes); no scan of calls.
    sql: CALLS_CARRIER_CALL_SQL,
  },
  {
    version: 16,
    name: 'webhook endpoints and their outbox',
    // docs/webhooks.md: endpoints, and one delivery row per event and endpoint.
    sql: WEBHOOKS_SQL,
  },
  {
    version: 17,
    name: 'calls: post-call analysis',
    sql: CALL_ANALYSIS_SQL,
  },
  {
    version: 18,
    name: 'calls: agent turn timelines',
    // docs/latency.md: one row per agent turn, appended once its timeline is complete.
    sql: CALL_TURN_TIMELINES_SQL,
  },
  {
    version: 19,
    name: 'outbound lists, contacts and runs; calls name their run and contact',
    sql: OUTBOUND_SQL,
  },
  {
    version: 20,
    name: 'answering-machine detection: the dial\'s setting and the call\'s outcome',
    sql: MACHINE_DETECTION_SQL,
  },
  {
    version: 21,
    name: 'api keys: name, last use',
    sql: API_KEY_NAMES_SQL,
  },
  {
    version: 22,
    name: 'calls: SIP Call-ID and final response',
    sql: CALL_SIP_DETAILS_SQL,
  },
  {
    version: 23,
    name: 'outbound contacts: their own time zone',
    sql: OUTBOUND_CONTACT_TIMEZONE_SQL,
  },
];
