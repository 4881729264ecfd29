/**
 * The schema migrations of src/store/migrations.ts in PostgreSQL's dialect: the same versions and
 * names, each leaving the same tables, columns (names, nullability, defaults, checks), keys,
 * foreign keys and indexes as its SQLite twin (test/store/postgres-schema.test.ts compares the
 * two). Never edit a migration that has shipped: add the next one here and in migrations.ts.
 *
 * Types are chosen so that a row reads the same from both databases (docs/store-postgres.md):
 * TEXT stays TEXT (timestamps ISO-8601, JSON documents), INTEGER stays INTEGER (booleans 0/1),
 * except milliseconds since the epoch and counters, which outgrow PostgreSQL's 32-bit INTEGER
 * (SQLite's is 64-bit): those are BIGINT, read back as numbers (types.ts).
 *
 * What differs, and why:
 * - SQLite's data-rewriting steps (migration 3's reshaping of old call rows and transcripts,
 *   migration 5's contact users for existing trunks) are absent: the PostgreSQL backend is newer
 *   than them, so a PostgreSQL database never held rows in the old shapes. Only their schema
 *   changes are here (and migration 3's filling of the counters, which is right on any data).
 * - The call search: SQLite keeps party_number in an FTS5 trigram index (call_search and
 *   call_search_fts, filled by triggers); PostgreSQL indexes calls.party_number itself with
 *   pg_trgm (GIN), which serves `party_number LIKE '%...%'` directly. No call_search table.
 * - The call counters (call_counts) are kept by plpgsql trigger functions doing what SQLite's
 *   triggers do.
 * - The 1-2 character search counters (call_gram_counts, migration 10): SQLite's triggers list a
 *   string's substrings with json_each (a trigger may not use WITH); PostgreSQL's with a SQL
 *   function, call_grams(), over generate_series. The postings of the rare ones (call_short_grams,
 *   migration 12) test "a character outside [0-9+]" with GLOB there, a regular expression here.
 * - SQLite's WITHOUT ROWID is a storage choice PostgreSQL does not have (its tables are heaps).
 */
import { API_KEY_NAMES_SQL, ASSIGNMENTS_PER_ORG_SQL, CALL_ANALYSIS_SQL, CALL_SIP_DETAILS_SQL, CALLS_CARRIER_CALL_SQL, MACHINE_DETECTION_SQL, OUTBOUND_CONTACT_TIMEZONE_SQL, OUTBOUND_SQL, STREAM_GRANTS_SQL, WEBHOOKS_SQL, type Migration } from '../migrations.ts';
import { CALL_TURN_TIMELINES_SQL } from '../turn-timelines.ts';

export const POSTGRES_MIGRATIONS: Migration[] = [
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
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
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
        auth_token_enc TEXT NOT NULL,
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
        settings TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
      );
      CREATE INDEX agents_org ON agents (org_id, created_at, id);
      CREATE UNIQUE INDEX agents_phone_number ON agents (phone_number_id) WHERE phone_number_id IS NOT NULL;
      CREATE TABLE agent_drafts (
        agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
        nodes TEXT NOT NULL,
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
        inbound_acl TEXT NOT NULL,
        inbound_sip_username TEXT UNIQUE,
        inbound_sip_password_enc TEXT,
        outbound_host TEXT NOT NULL,
        outbound_sip_username TEXT NOT NULL,
        outbound_sip_password_enc TEXT,
        register INTEGER NOT NULL,
        remain_in_dialog INTEGER NOT NULL,
        caller_id_transforms TEXT NOT NULL,
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
        number TEXT,
        alternate_number TEXT UNIQUE,
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
      CREATE TABLE sessions (
        id TEXT PRIMARY KEY REFERENCES calls(id) ON DELETE CASCADE,
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        agent_id TEXT NOT NULL,
        version_id TEXT,
        caller_id TEXT NOT NULL,
        transport TEXT NOT NULL CHECK (transport IN ('websocket', 'webrtc')),
        chat_id TEXT,
        first_message TEXT,
        prompt TEXT,
        variables TEXT NOT NULL,
        scopes TEXT NOT NULL,
        token_jti TEXT NOT NULL,
        token_expires_at TEXT NOT NULL,
        connected_at TEXT,
        created_at TEXT NOT NULL
      );
      CREATE INDEX sessions_unconnected ON sessions (token_expires_at) WHERE connected_at IS NULL;
    `,
  },
  {
    version: 3,
    name: 'call records in the shape of the service document',
    sql: `
      ALTER TABLE calls ADD COLUMN source TEXT NOT NULL DEFAULT 'sip';
      ALTER TABLE calls ADD COLUMN outbound INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE calls ADD COLUMN party_number TEXT NOT NULL DEFAULT '';
      ALTER TABLE calls ADD COLUMN end_status TEXT;
      ALTER TABLE calls ADD COLUMN outcome TEXT;
      ALTER TABLE calls ADD COLUMN graph_version_id TEXT;

      -- SQLite's migration 3 rewrites old call rows and their transcripts here. A PostgreSQL
      -- database has no calls at this version (the backend came after it): nothing to rewrite.

      DROP INDEX calls_org_started;
      ALTER TABLE calls DROP COLUMN started_at;
      ALTER TABLE calls RENAME COLUMN answered_at TO started_at;
      ALTER TABLE calls RENAME COLUMN end_reason TO termination_reason;

      CREATE INDEX calls_org_created ON calls (org_id, created_at, id, party_number);
      CREATE INDEX calls_org_agent ON calls (org_id, agent_id, created_at, id, status, source, outbound, outcome);
      CREATE INDEX calls_org_status ON calls (org_id, status, created_at, id);
      CREATE INDEX calls_org_source ON calls (org_id, source, created_at, id);
      CREATE INDEX calls_org_outbound ON calls (org_id, outbound, created_at, id);
      CREATE INDEX calls_org_outcome ON calls (org_id, outcome, created_at, id) WHERE outcome IS NOT NULL;

      CREATE TABLE call_tags (
        call_id TEXT NOT NULL REFERENCES calls(id) ON DELETE CASCADE,
        org_id TEXT NOT NULL,
        tag TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (call_id, tag)
      );
      CREATE INDEX call_tags_org_tag ON call_tags (org_id, tag, created_at, call_id);

      -- search: a trigram index of party_number (pg_trgm, trusted: a database owner may create it).
      -- It serves party_number LIKE '%<at least 3 characters>%', case-sensitive like SQLite's
      -- trigram tokenizer with case_sensitive 1.
      CREATE EXTENSION IF NOT EXISTS pg_trgm;
      CREATE INDEX calls_party_number_trgm ON calls USING gin (party_number gin_trgm_ops);

      -- Totals kept by triggers (see SQLite's migration 3): per organization, all its calls (dim
      -- 'all') and its calls per status, source, outbound (0/1), outcome ('' = none) and agent
      -- ('' = none). A call insert updates its organization's rows, so concurrent inserts of one
      -- organization's calls queue on those rows until each commits.
      CREATE TABLE call_counts (
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        dim TEXT NOT NULL,
        val TEXT NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (org_id, dim, val)
      );
      INSERT INTO call_counts (org_id, dim, val, n)
        SELECT org_id, 'all', '', count(*) FROM calls GROUP BY org_id
        UNION ALL SELECT org_id, 'status', status, count(*) FROM calls GROUP BY org_id, status
        UNION ALL SELECT org_id, 'source', source, count(*) FROM calls GROUP BY org_id, source
        UNION ALL SELECT org_id, 'outbound', outbound::text, count(*) FROM calls GROUP BY org_id, outbound
        UNION ALL SELECT org_id, 'outcome', coalesce(outcome, ''), count(*) FROM calls GROUP BY org_id, coalesce(outcome, '')
        UNION ALL SELECT org_id, 'agent', coalesce(agent_id, ''), count(*) FROM calls GROUP BY org_id, coalesce(agent_id, '');

      CREATE FUNCTION calls_count_ai() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO call_counts (org_id, dim, val, n) VALUES
          (NEW.org_id, 'all', '', 1),
          (NEW.org_id, 'status', NEW.status, 1),
          (NEW.org_id, 'source', NEW.source, 1),
          (NEW.org_id, 'outbound', NEW.outbound::text, 1),
          (NEW.org_id, 'outcome', coalesce(NEW.outcome, ''), 1),
          (NEW.org_id, 'agent', coalesce(NEW.agent_id, ''), 1)
        ON CONFLICT (org_id, dim, val) DO UPDATE SET n = call_counts.n + 1;
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER calls_count_ai AFTER INSERT ON calls FOR EACH ROW EXECUTE FUNCTION calls_count_ai();

      CREATE FUNCTION calls_count_ad() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        UPDATE call_counts SET n = n - 1 WHERE org_id = OLD.org_id AND (
          dim = 'all'
          OR (dim = 'status' AND val = OLD.status)
          OR (dim = 'source' AND val = OLD.source)
          OR (dim = 'outbound' AND val = OLD.outbound::text)
          OR (dim = 'outcome' AND val = coalesce(OLD.outcome, ''))
          OR (dim = 'agent' AND val = coalesce(OLD.agent_id, '')));
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER calls_count_ad AFTER DELETE ON calls FOR EACH ROW EXECUTE FUNCTION calls_count_ad();

      -- A call moves between values: answered, ended, its agent deleted (SET NULL, which fires
      -- row triggers in PostgreSQL as in SQLite).
      CREATE FUNCTION calls_count_au() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        UPDATE call_counts SET n = n - 1 WHERE org_id = OLD.org_id AND (
          (dim = 'status' AND val = OLD.status AND OLD.status IS DISTINCT FROM NEW.status)
          OR (dim = 'source' AND val = OLD.source AND OLD.source IS DISTINCT FROM NEW.source)
          OR (dim = 'outbound' AND val = OLD.outbound::text AND OLD.outbound IS DISTINCT FROM NEW.outbound)
          OR (dim = 'outcome' AND val = coalesce(OLD.outcome, '') AND OLD.outcome IS DISTINCT FROM NEW.outcome)
          OR (dim = 'agent' AND val = coalesce(OLD.agent_id, '') AND OLD.agent_id IS DISTINCT FROM NEW.agent_id));
        INSERT INTO call_counts (org_id, dim, val, n)
          SELECT NEW.org_id, moved.dim, moved.val, 1 FROM (VALUES
            ('status', NEW.status, OLD.status IS DISTINCT FROM NEW.status),
            ('source', NEW.source, OLD.source IS DISTINCT FROM NEW.source),
            ('outbound', NEW.outbound::text, OLD.outbound IS DISTINCT FROM NEW.outbound),
            ('outcome', coalesce(NEW.outcome, ''), OLD.outcome IS DISTINCT FROM NEW.outcome),
            ('agent', coalesce(NEW.agent_id, ''), OLD.agent_id IS DISTINCT FROM NEW.agent_id)
          ) AS moved (dim, val, changed)
          WHERE moved.changed
        ON CONFLICT (org_id, dim, val) DO UPDATE SET n = call_counts.n + 1;
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER calls_count_au AFTER UPDATE OF status, source, outbound, outcome, agent_id ON calls
        FOR EACH ROW EXECUTE FUNCTION calls_count_au();
    `,
  },
  {
    version: 4,
    name: 'SIP registrations of PBXs on digest trunks',
    sql: `
      CREATE TABLE sip_registrations (
        trunk_id TEXT NOT NULL REFERENCES sip_trunks(id) ON DELETE CASCADE,
        contact TEXT NOT NULL,
        expires_at BIGINT NOT NULL,      -- ms since the epoch: beyond a 32-bit INTEGER
        call_id TEXT NOT NULL,
        cseq INTEGER NOT NULL,           -- RFC 3261 8.1.1.5: below 2^31
        transport TEXT NOT NULL CHECK (transport IN ('udp', 'tcp', 'tls')),
        source_address TEXT NOT NULL,
        source_port INTEGER NOT NULL,
        connection_id TEXT,
        updated_at BIGINT NOT NULL,      -- ms since the epoch
        PRIMARY KEY (trunk_id, contact)
      );
      CREATE INDEX sip_registrations_expiry ON sip_registrations (expires_at);
    `,
  },
  {
    version: 5,
    name: 'callbridge registering with carriers (register: true)',
    sql: `
      ALTER TABLE sip_trunks ADD COLUMN outbound_contact_user TEXT;
      -- SQLite gives existing trunks a contact user here; a PostgreSQL database has no trunks at
      -- this version (the backend came after it), and new trunks get theirs from the repository.
      CREATE UNIQUE INDEX sip_trunks_outbound_contact_user ON sip_trunks (outbound_contact_user);
      ALTER TABLE sip_trunks ADD COLUMN outbound_registration_error TEXT NOT NULL DEFAULT '';
      ALTER TABLE sip_trunks ADD COLUMN outbound_registration_expires_at BIGINT; -- ms since the epoch
    `,
  },
  {
    version: 6,
    name: 'SIP trunks: media_encryption and header_variables',
    sql: `
      ALTER TABLE sip_trunks ADD COLUMN media_encryption TEXT NOT NULL DEFAULT 'none'
        CHECK (media_encryption IN ('none', 'allow', 'require'));
      ALTER TABLE sip_trunks ADD COLUMN header_variables TEXT NOT NULL DEFAULT '[]';
    `,
  },
  {
    version: 7,
    name: 'calls: the carrier call id',
    sql: `
      ALTER TABLE calls ADD COLUMN carrier_call_id TEXT;
    `,
  },
  {
    version: 8,
    name: 'telco numbers: the voice webhook they had before import',
    sql: `
      ALTER TABLE telco_numbers ADD COLUMN previous_webhook TEXT;
    `,
  },
  {
    version: 9,
    name: 'cluster: node leases, the node of each call, call slots',
    sql: `
      CREATE TABLE cluster_nodes (
        node_id TEXT PRIMARY KEY,
        started_at BIGINT NOT NULL,      -- ms since the epoch, the database's clock
        heartbeat_at BIGINT NOT NULL,    -- ms since the epoch, the database's clock
        http_url TEXT NOT NULL DEFAULT '',
        sip_address TEXT NOT NULL DEFAULT ''
      );
      ALTER TABLE calls ADD COLUMN node_id TEXT;
      CREATE INDEX calls_node_open ON calls (node_id) WHERE ended_at IS NULL;
      CREATE TABLE call_slots (
        id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        org_id TEXT NOT NULL,
        trunk_id TEXT,
        acquired_at BIGINT NOT NULL      -- ms since the epoch, the database's clock
      );
      CREATE INDEX call_slots_org ON call_slots (org_id);
      CREATE INDEX call_slots_trunk ON call_slots (trunk_id);
      CREATE INDEX call_slots_node ON call_slots (node_id);
    `,
  },
  {
    version: 10,
    name: 'calls: counters of 1-2 character substrings of party_number',
    // SQLite's migration 10: pg_trgm has the same 3-character floor as FTS5's trigrams.
    sql: `
      CREATE TABLE call_gram_counts (
        org_id TEXT NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
        gram TEXT NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (org_id, gram)
      );
      -- The distinct substrings of 1 and 2 characters of a string, sorted: the triggers lock the
      -- counters' rows in this one order, so two transactions writing calls cannot deadlock on them.
      CREATE FUNCTION call_grams(p TEXT) RETURNS SETOF TEXT LANGUAGE sql IMMUTABLE AS $fn$
        SELECT DISTINCT substr(p, i, w) AS gram
        FROM generate_series(1, length(p)) AS i, (VALUES (1), (2)) AS width (w)
        WHERE i + w - 1 <= length(p)
        ORDER BY 1
      $fn$;
      INSERT INTO call_gram_counts (org_id, gram, n)
        SELECT c.org_id, g.gram, count(*) FROM calls c CROSS JOIN LATERAL call_grams(c.party_number) AS g (gram) GROUP BY 1, 2;

      -- +1 (a call added) or -1 (removed) on each gram of party, the rows in gram order. A removal
      -- only updates: when an organization is deleted its counters go before its calls, and a
      -- row written back for it would break the foreign key.
      CREATE FUNCTION call_grams_count(org TEXT, party TEXT, delta INTEGER) RETURNS void LANGUAGE plpgsql AS $fn$
      BEGIN
        IF delta > 0 THEN
          INSERT INTO call_gram_counts (org_id, gram, n)
            SELECT org, g.gram, delta FROM call_grams(party) AS g (gram) ORDER BY g.gram
          ON CONFLICT (org_id, gram) DO UPDATE SET n = call_gram_counts.n + excluded.n;
        ELSE
          UPDATE call_gram_counts SET n = n + delta WHERE org_id = org AND gram IN (SELECT call_grams(party));
        END IF;
      END
      $fn$;
      CREATE FUNCTION calls_grams_ai() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM call_grams_count(NEW.org_id, NEW.party_number, 1);
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER calls_grams_ai AFTER INSERT ON calls FOR EACH ROW EXECUTE FUNCTION calls_grams_ai();
      CREATE FUNCTION calls_grams_ad() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM call_grams_count(OLD.org_id, OLD.party_number, -1);
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER calls_grams_ad AFTER DELETE ON calls FOR EACH ROW EXECUTE FUNCTION calls_grams_ad();
      CREATE FUNCTION calls_grams_au() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM call_grams_count(OLD.org_id, OLD.party_number, -1);
        PERFORM call_grams_count(NEW.org_id, NEW.party_number, 1);
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER calls_grams_au AFTER UPDATE OF party_number ON calls
        FOR EACH ROW WHEN (OLD.party_number IS DISTINCT FROM NEW.party_number) EXECUTE FUNCTION calls_grams_au();
    `,
  },
  {
    version: 11,
    name: 'stream grants: the carrier media streams\' one-time tokens',
    // SQLite's migration 11: the same statements (TEXT and INTEGER columns only).
    sql: STREAM_GRANTS_SQL,
  },
  {
    version: 12,
    name: 'calls: postings of the rare 1-2 character substrings of party_number',
    // SQLite's migration 12, its triggers as plpgsql functions; the grams from call_grams()
    // (migration 10), a character outside [0-9+] tested with a regular expression.
    sql: `
      CREATE TABLE call_short_grams (
        org_id TEXT NOT NULL,
        gram TEXT NOT NULL,
        created_at TEXT NOT NULL,
        call_id TEXT NOT NULL,
        PRIMARY KEY (org_id, gram, created_at, call_id)
      );
      INSERT INTO call_short_grams (org_id, gram, created_at, call_id)
        SELECT c.org_id, g.gram, c.created_at, c.id FROM calls c CROSS JOIN LATERAL call_grams(c.party_number) AS g (gram)
        WHERE c.party_number ~ '[^0-9+]' AND g.gram ~ '[^0-9+]';

      -- One function for the three triggers: the old row's postings go (delete, update), the new
      -- row's come (insert, update).
      CREATE FUNCTION calls_short_grams() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        IF TG_OP <> 'INSERT' THEN
          DELETE FROM call_short_grams WHERE org_id = OLD.org_id AND created_at = OLD.created_at AND call_id = OLD.id
            AND gram IN (SELECT call_grams(OLD.party_number));
        END IF;
        IF TG_OP <> 'DELETE' THEN
          INSERT INTO call_short_grams (org_id, gram, created_at, call_id)
            SELECT NEW.org_id, g.gram, NEW.created_at, NEW.id FROM call_grams(NEW.party_number) AS g (gram) WHERE g.gram ~ '[^0-9+]';
        END IF;
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER calls_short_grams_ai AFTER INSERT ON calls
        FOR EACH ROW WHEN (NEW.party_number ~ '[^0-9+]') EXECUTE FUNCTION calls_short_grams();
      CREATE TRIGGER calls_short_grams_ad AFTER DELETE ON calls
        FOR EACH ROW WHEN (OLD.party_number ~ '[^0-9+]') EXECUTE FUNCTION calls_short_grams();
      CREATE TRIGGER calls_short_grams_au AFTER UPDATE OF party_number, org_id, created_at ON calls
        FOR EACH ROW WHEN ((OLD.party_number, OLD.org_id, OLD.created_at) IS DISTINCT FROM (NEW.party_number, NEW.org_id, NEW.created_at)
          AND (OLD.party_number ~ '[^0-9+]' OR NEW.party_number ~ '[^0-9+]')) EXECUTE FUNCTION calls_short_grams();
    `,
  },
  {
    version: 13,
    name: 'calls: the filter indexes carry party_number',
    // SQLite's migration 13: the same indexes (index-only scans for a search with another filter).
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
    // SQLite's migration 14: the same statements (the rebuilt table keeps its constraint names
    // from the CREATE, which no code reads: conflicts are told apart by their columns).
    sql: ASSIGNMENTS_PER_ORG_SQL,
  },
  {
    version: 15,
    name: 'calls: carrier_call_id index',
    // SQLite's migration 15: the same index (a repeated voice webhook found by its CallSid).
    sql: CALLS_CARRIER_CALL_SQL,
  },
  {
    version: 16,
    name: 'webhook endpoints and their outbox',
    // SQLite's migration 16: the same statements (BIGINT epoch milliseconds, partial indexes).
    sql: WEBHOOKS_SQL,
  },
  {
    version: 17,
    name: 'calls: post-call analysis',
    // SQLite's migration 17: the same statements.
    sql: CALL_ANALYSIS_SQL,
  },
  {
    version: 18,
    name: 'calls: agent turn timelines',
    // SQLite's migration 18: the same statements.
    sql: CALL_TURN_TIMELINES_SQL,
  },
  {
    version: 19,
    name: 'outbound lists, contacts and runs; calls name their run and contact',
    // SQLite's migration 19: the same statements (BIGINT epoch milliseconds on the database's clock).
    sql: OUTBOUND_SQL,
  },
  {
    version: 20,
    name: 'answering-machine detection: the dial\'s setting and the call\'s outcome',
    // SQLite's migration 20: the same statements.
    sql: MACHINE_DETECTION_SQL,
  },
  {
    version: 21,
    name: 'api keys: name, last use',
    // SQLite's migration 21: the same statements.
    sql: API_KEY_NAMES_SQL,
  },
  {
    version: 22,
    name: 'calls: SIP Call-ID and final response',
    // SQLite's migration 22: the same statements.
    sql: CALL_SIP_DETAILS_SQL,
  },
  {
    version: 23,
    name: 'outbound contacts: their own time zone',
    // SQLite's migration 23: the same statements.
    sql: OUTBOUND_CONTACT_TIMEZONE_SQL,
  },
];
