/**
 * Migration 3: call rows stored in the old shape (schema version 2) come out in the new one with
 * every value kept, transcripts included, and the same as the TypeScript mappings would write
 * them (src/domain/call.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/sqlite-driver.ts';
import { migrate, type Db } from '../../src/store/db.ts';
import { SqliteClient } from '../../src/store/sqlite-client.ts';
import { MIGRATIONS } from '../../src/store/migrations.ts';
import { CallRepo } from '../../src/store/calls.ts';
import { endStatusOf, outcomeOf, transcriptFromRuntime, type RuntimeTranscriptLine } from '../../src/domain/call.ts';

const ORG = '0a000000-0000-4000-8000-000000000001';
const OTHER_ORG = '0a000000-0000-4000-8000-000000000002';
const AGENT = '0b000000-0000-4000-8000-000000000001';
const VERSION = '0c000000-0000-4000-8000-000000000001';
const TRUNK = '0d000000-0000-4000-8000-000000000001';
const id = (n: number) => `0e000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

const TRANSCRIPT: RuntimeTranscriptLine[] = [
  { role: 'agent', text: 'Hello! How can I help?', at: '2026-01-01T10:00:01.000Z', turn_id: 'turn-1' },
  { role: 'user', text: 'Book a table for two, "by the window"', at: '2026-01-01T10:00:04.000Z' },
  { role: 'tool', text: 'book_table: {"ok":true,"time":"19:00"}', at: '2026-01-01T10:00:05.000Z' },
  { role: 'agent', text: 'Done, a table for', at: '2026-01-01T10:00:06.000Z', turn_id: 'turn-2', interrupted: true },
  { role: 'user', text: 'Thanks ✓ 日本', at: '2026-01-01T10:00:07.000Z' },
  { role: 'tool', text: 'hangup', at: '2026-01-01T10:00:08.000Z' },
];

/** Old rows: [name, direction, status, end_reason, answered, ended]. Every old status is here. */
const OLD: Array<[string, 'inbound' | 'outbound' | 'web', string, string | null, boolean, boolean]> = [
  ['pending web', 'web', 'pending', null, false, false],
  ['running inbound', 'inbound', 'in_progress', null, true, false],
  ['completed inbound', 'inbound', 'completed', 'client_closed', true, true],
  ['completed transfer', 'inbound', 'completed', 'transfer', true, true],
  ['completed hangup', 'outbound', 'completed', 'agent_hangup', true, true],
  ['completed timeout', 'web', 'completed', 'timeout', true, true],
  ['completed silence', 'web', 'completed', 'silence_timeout', true, true],
  ['failed error', 'web', 'failed', 'error', true, true],
  ['busy', 'outbound', 'busy', 'busy (486)', false, true],
  ['no answer', 'outbound', 'no_answer', 'no_answer (480)', false, true],
  ['auth failed', 'outbound', 'failed', 'auth_failed (403)', false, true],
  ['unreachable', 'outbound', 'failed', 'unreachable', false, true],
  ['expired', 'web', 'expired', 'token_expired', false, true],
  ['upstream bye', 'inbound', 'completed', 'caller side ended: remote_bye', true, true],
];

describe('migration 3: calls in the shape of the service document', () => {
  let dir: string;
  let db: Db;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'calls-migration-'));
    db = new Database(join(dir, 'db.sqlite'));
    db.pragma('foreign_keys = ON');
    await migrate(new SqliteClient(db), MIGRATIONS.filter((m) => m.version <= 2));
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Writes the rows as callbridge before migration 3 did. */
  function seedVersion2(): void {
    const now = '2026-01-01T00:00:00.000Z';
    db.prepare('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?), (?, ?, ?)').run(ORG, 'o', now, OTHER_ORG, 'p', now);
    db.prepare("INSERT INTO agents (id, org_id, name, status, settings, created_at, updated_at) VALUES (?, ?, 'A', 'active', '{}', ?, ?)").run(AGENT, ORG, now, now);
    db.prepare(
      `INSERT INTO sip_trunks (id, org_id, pbx, name, inbound_auth_type, inbound_host, inbound_acl, outbound_host, outbound_sip_username, register, remain_in_dialog, caller_id_transforms, inbound_registration_status, outbound_registration_status, created_at, updated_at)
       VALUES (?, ?, 'generic', 't', 'acl', '', '[]', 'pbx.example', '', 0, 0, '[]', 'not_registered', 'not_registered', ?, ?)`,
    ).run(TRUNK, ORG, now, now);
    const insert = db.prepare(
      `INSERT INTO calls (id, org_id, agent_id, sip_trunk_id, direction, status, from_number, to_number, started_at, answered_at, ended_at, end_reason, transcript, summary, recording_path, created_at)
       VALUES (@id, @org, @agent, @trunk, @direction, @status, @from, @to, @started, @answered, @ended, @reason, @transcript, @summary, @recording, @started)`,
    );
    const session = db.prepare(
      `INSERT INTO sessions (id, org_id, agent_id, version_id, caller_id, transport, variables, scopes, token_jti, token_expires_at, connected_at, created_at)
       VALUES (?, ?, ?, ?, ?, 'websocket', '[]', '["voice"]', 'jti', ?, ?, ?)`,
    );
    OLD.forEach(([, direction, status, reason, answered, ended], i) => {
      const started = `2026-01-01T10:${String(i).padStart(2, '0')}:00.000Z`;
      insert.run({
        id: id(i),
        org: ORG,
        agent: AGENT,
        trunk: direction === 'web' ? null : TRUNK,
        direction,
        status,
        from: direction === 'web' ? 'api-client' : `+1555000${String(i).padStart(4, '0')}`,
        to: direction === 'web' ? 'Agent A' : `+1555999${String(i).padStart(4, '0')}`,
        started,
        answered: answered ? started.replace(':00.000Z', ':02.000Z') : null,
        ended: ended ? started.replace(':00.000Z', ':59.000Z') : null,
        reason,
        transcript: i === 2 ? JSON.stringify(TRANSCRIPT) : '[]',
        summary: i === 2 ? 'The caller booked a table.' : null,
        recording: i === 2 ? '/data/recordings/x.wav' : null,
      });
      if (direction === 'web' || i === 2) session.run(id(i), ORG, AGENT, i === 2 ? VERSION : null, 'api-client', '2026-01-01T11:00:00.000Z', answered ? started : null, started);
    });
    insert.run({ id: id(99), org: OTHER_ORG, agent: null, trunk: null, direction: 'inbound', status: 'completed', from: '+15550000099', to: '+1', started: '2026-01-02T00:00:00.000Z', answered: null, ended: '2026-01-02T00:01:00.000Z', reason: 'client_closed', transcript: '[]', summary: null, recording: null });
  }

  it('keeps every value, in the new names and enums', async () => {
    seedVersion2();
    await migrate(new SqliteClient(db), MIGRATIONS);
    const calls = new CallRepo(new SqliteClient(db));
    const byName = Object.fromEntries(await Promise.all(OLD.map(async ([name], i) => [name, (await calls.get(ORG, id(i)))!] as const)));

    for (const [name, direction, status, reason, answered, ended] of OLD) {
      const r = byName[name]!;
      const i = OLD.findIndex(([n]) => n === name);
      const started = `2026-01-01T10:${String(i).padStart(2, '0')}:00.000Z`;
      expect(r.direction, name).toBe(direction);
      expect(r.created_at, name).toBe(started);
      expect(r.started_at, name).toBe(answered ? started.replace(':00.000Z', ':02.000Z') : null);
      expect(r.ended_at, name).toBe(ended ? started.replace(':00.000Z', ':59.000Z') : null);
      expect(r.termination_reason, name).toBe(reason);
      expect(r.source, name).toBe(direction === 'web' ? 'api' : 'sip');
      expect(r.party_number, name).toBe(direction === 'outbound' ? r.to : r.from);
      expect(r.outcome, name).toBe(reason === null ? null : (outcomeOf(reason) ?? null));
      // The old detailed status survives as end_status; running calls map one to one.
      if (ended) {
        expect(r.end_status, name).toBe(status);
        expect(r.status, name).toBe(name === 'auth failed' ? 'auth_failed' : 'ended');
      } else {
        expect(r.end_status, name).toBeNull();
        expect(r.status, name).toBe(status === 'pending' ? 'started' : 'in_progress');
      }
      expect(r.sip_trunk_id, name).toBe(direction === 'web' ? null : TRUNK);
      expect(r.agent_id, name).toBe(AGENT);
    }
    expect(byName['completed inbound']).toMatchObject({ summary: 'The caller booked a table.', has_recording: true, graph_version_id: VERSION });
    expect(await calls.recordingPath(ORG, id(2))).toBe('/data/recordings/x.wav');
    expect(byName['pending web']!.graph_version_id).toBeNull();
    expect(byName['completed inbound']!.from).toBe('+15550000002');
    expect(byName['completed inbound']!.to).toBe('+15559990002');

    // The transcript, in SQL, comes out exactly as the runtime's writes do now.
    expect(byName['completed inbound']!.transcript).toEqual(transcriptFromRuntime(TRANSCRIPT));
    expect(byName['completed inbound']!.transcript.entries.map((e) => [e.role, e.type, e.interrupted])).toEqual([
      ['assistant', 'message', undefined],
      ['user', 'message', undefined],
      [undefined, 'tool_call', undefined],
      ['assistant', 'message', true],
      ['user', 'message', undefined],
      [undefined, 'tool_call', undefined],
    ]);
    expect(byName['busy']!.transcript).toEqual({ entries: [] });
    // The default end status of the code agrees with the migrated one.
    expect(endStatusOf('error')).toBe(byName['failed error']!.end_status);
  });

  it('fills the counters, the search index and the list indexes', async () => {
    seedVersion2();
    await migrate(new SqliteClient(db), MIGRATIONS);
    const calls = new CallRepo(new SqliteClient(db));
    expect(await calls.orgTotal(ORG)).toBe(OLD.length);
    expect(await calls.orgTotal(OTHER_ORG)).toBe(1);
    const all = await calls.list(ORG, {}, 100, 0);
    expect(all.total).toBe(OLD.length);
    expect(all.calls.map((c) => c.id)).toEqual(OLD.map((_, i) => id(i)).reverse());
    expect((await calls.list(ORG, { search: '9990002' }, 100, 0)).calls.map((c) => c.id)).toEqual([]); // the callee of an inbound call is not its party
    expect((await calls.list(ORG, { search: '0000002' }, 100, 0)).calls.map((c) => c.id)).toEqual([id(2)]);
    expect((await calls.list(ORG, { search: '9990008' }, 100, 0)).calls.map((c) => c.id)).toEqual([id(8)]);
    expect((await calls.list(ORG, { status: 'auth_failed' }, 100, 0)).calls.map((c) => c.id)).toEqual([id(10)]);
    expect((await calls.list(ORG, { outcome: 'ended_by_agent' }, 100, 0)).calls.map((c) => c.id)).toEqual([id(6), id(5), id(4)]);
    // New rows after the migration are counted and indexed by the triggers.
    await calls.insert({ id: id(50), org_id: ORG, agent_id: AGENT, sip_trunk_id: null, direction: 'web', from: 'caller-xyz', to: 'A', created_at: '2026-02-01T00:00:00.000Z' });
    expect(await calls.orgTotal(ORG)).toBe(OLD.length + 1);
    expect((await calls.list(ORG, { search: 'caller-x' }, 100, 0)).calls.map((c) => c.id)).toEqual([id(50)]);
    expect(db.pragma('foreign_key_check')).toEqual([]);
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    db.prepare("INSERT INTO call_search_fts (call_search_fts) VALUES ('integrity-check')").run();
  });

  it('migrates an empty database', async () => {
    await migrate(new SqliteClient(db), MIGRATIONS);
    expect(db.prepare('SELECT max(version) FROM schema_migrations').pluck().get()).toBe(Math.max(...MIGRATIONS.map((m) => m.version)));
    expect(db.prepare('SELECT name FROM pragma_table_info(?) ORDER BY cid').pluck().all('calls')).toEqual(
      expect.arrayContaining(['created_at', 'started_at', 'termination_reason', 'source', 'outbound', 'party_number', 'end_status', 'outcome', 'graph_version_id']),
    );
    expect(db.prepare('SELECT name FROM pragma_table_info(?)').pluck().all('calls')).not.toContain('answered_at');
  });
});
