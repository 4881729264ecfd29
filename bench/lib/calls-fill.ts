/**
 * Fills a callbridge data directory with N call records for bench/calls, through the daemon's
 * own store code (openStore: migrations, triggers, indexes), then exits. Run as a child process:
 *
 *   node --import tsx bench/lib/calls-fill.ts <data dir> <calls> <result.json>
 *
 * Writes <result.json> (FillResult: the API key of the organization the bench measures, its
 * agent ids and one of its party numbers, the time span, how the rows split), then prints FILLED.
 * (A file, not stdout: child output is kept with API keys redacted.)
 *
 * The mix: 4 organizations holding 50 / 30 / 15 / 5 % of the calls (the bench reads the first),
 * 10 agents each (skewed: the first agent takes a quarter of its organization's calls), over one
 * year in time order with jitter; 70 % phone calls through SIP (60 % of them inbound), 30 % web
 * sessions; party numbers random E.164, web callers `user-<n>`, and a rare kind of web caller,
 * `guest#<n>`, 1 in 20,000 calls (at least 3), all in the measured organization, spread evenly over
 * the year (what a rare 1-2 character search finds: `#`, `gu`); the newest 0.1 % (at least 20)
 * still running,
 * the rest ended as the mappings of src/domain/call.ts end them (reasons: client_closed 55 %,
 * agent_hangup 25 %, transfer 8 %, timeout 5 %, silence_timeout 5 %, error 2 %; outbound dials
 * busy, no_answer or auth_failed 10 %); 10 % tagged (1-2 of 5 tags); a short transcript (3
 * entries) per answered call. One transaction of prepared statements on the raw SQLite handle
 * (store.sqlite): each row is inserted whole
 * (its values from src/domain/call.ts), and the triggers write the trigram index, the counters
 * and the 1-2 character counters and postings (migrations 3, 10, 12) as they do in production.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { openStore } from '../../src/store/index.ts';
import { settingsForCreate } from '../../src/domain/agent.ts';
import { agentDefaults } from '../../src/api/routes/agents.ts';
import { loadConfig } from '../../src/config.ts';
import { endStatusOf, failedDialEnd, outcomeOf, partyNumber, sourceOf, transcriptFromRuntime, type CallDirection } from '../../src/domain/call.ts';
import { prng } from '../../test/helpers/prng.ts';

export const TAGS = ['vip', 'callback', 'sales', 'support', 'complaint'];
const ORG_SHARES = [0.5, 0.3, 0.15, 0.05];
const AGENTS_PER_ORG = 10;
const SPAN_MS = 365 * 24 * 3600 * 1000;
const START_MS = Date.UTC(2025, 0, 1);

export interface FillResult {
  key: string;
  orgId: string;
  agentIds: string[];
  /** A party number of a call of the measured organization. */
  samplePartyNumber: string;
  total: number;
  orgCalls: number;
  firstAt: string;
  lastAt: string;
  seconds: number;
}

async function fill(dataDir: string, n: number): Promise<FillResult> {
  const t0 = Date.now();
  const store = await openStore(dataDir, '');
  const db = store.sqlite!;
  // A fill only: the page cache holds the indexes while they grow at random (uuid keys).
  db.pragma('cache_size = -3000000');
  db.pragma('synchronous = OFF');
  // Statement journals (every insert fires triggers) in memory, not a temp file write per page.
  db.pragma('temp_store = MEMORY');
  const rand = prng(n);
  const settings = settingsForCreate(agentDefaults(loadConfig({}, {})), {});
  const orgs: Array<{ id: string; key: string; agentIds: string[] }> = [];
  for (let i = 0; i < ORG_SHARES.length; i++) {
    const { org, key } = await store.organizations.createKey(i === 0 ? 'bench' : `neighbour-${i}`);
    const agentIds: string[] = [];
    for (let a = 0; a < AGENTS_PER_ORG; a++) {
      const id = randomUUID();
      await store.agents.insert({ id, org_id: org.id, name: `agent ${a}`, status: 'active', phone_number_id: null, settings, created_at: new Date(START_MS).toISOString() });
      agentIds.push(id);
    }
    orgs.push({ id: org.id, key, agentIds });
  }
  const insert = db.prepare(
    `INSERT INTO calls (id, org_id, agent_id, graph_version_id, sip_trunk_id, direction, source, outbound, status, end_status, from_number, to_number, party_number,
                        created_at, started_at, ended_at, termination_reason, outcome, transcript, summary)
     VALUES (@id, @org_id, @agent_id, NULL, NULL, @direction, @source, @outbound, @status, @end_status, @from, @to, @party, @created_at, @started_at, @ended_at, @reason, @outcome, @transcript, @summary)`,
  );
  const tag = db.prepare('INSERT OR IGNORE INTO call_tags (call_id, org_id, tag, created_at) VALUES (?, ?, ?, ?)');
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  const number = () => `+1${String(2_000_000_000 + Math.floor(rand() * 7_999_999_999))}`;
  const reasons: Array<[string, number]> = [['client_closed', 0.55], ['agent_hangup', 0.25], ['transfer', 0.08], ['timeout', 0.05], ['silence_timeout', 0.05], ['error', 0.02]];
  const reason = () => {
    let x = rand();
    for (const [r, p] of reasons) if ((x -= p) < 0) return r;
    return 'client_closed';
  };
  // At least 20, so that a small database has running calls too.
  const running = Math.max(20, Math.floor(n / 1000));
  // Every guestEvery-th call is a guest: a rare search matches at least 3 calls on any size.
  const guestEvery = Math.floor(n / Math.max(3, Math.floor(n / 20_000)));
  let orgCalls = 0;
  let samplePartyNumber = '';
  let firstAt = '';
  let lastAt = '';
  // The bulk load goes through better-sqlite3 directly (SQLite only): one synchronous
  // transaction of prepared statements, millions of rows without a promise each.
  db.transaction(() => {
    for (let i = 0; i < n; i++) {
      const x = rand();
      const guest = i % guestEvery === guestEvery - 1;
      const o = guest || x < 0.5 ? 0 : x < 0.8 ? 1 : x < 0.95 ? 2 : 3;
      const org = orgs[o]!;
      const agentId = rand() < 0.25 ? org.agentIds[0]! : pick(org.agentIds);
      const web = guest || rand() < 0.3;
      const direction: CallDirection = web ? 'web' : rand() < 0.6 ? 'inbound' : 'outbound';
      const from = guest ? `guest#${i}` : web ? `user-${Math.floor(rand() * 100_000)}` : number();
      const to = web ? 'agent' : number();
      const party = partyNumber(direction, from, to);
      const createdMs = START_MS + Math.floor((i / n) * SPAN_MS + rand() * 30_000);
      const created = new Date(createdMs).toISOString();
      const startedAt = new Date(createdMs + 2000).toISOString();
      const endedAt = new Date(createdMs + 2000 + Math.floor(rand() * 600_000)).toISOString();
      const row = {
        id: randomUUID(),
        org_id: org.id,
        agent_id: agentId,
        direction,
        source: sourceOf(direction),
        outbound: direction === 'outbound' ? 1 : 0,
        status: 'ended',
        end_status: null as string | null,
        from,
        to,
        party,
        created_at: created,
        started_at: startedAt as string | null,
        ended_at: endedAt as string | null,
        reason: null as string | null,
        outcome: null as string | null,
        transcript: '{"entries":[]}',
        summary: null as string | null,
      };
      if (i >= n - running) {
        // The newest calls are still ringing or talking.
        Object.assign(row, rand() < 0.3 ? { status: 'started', started_at: null, ended_at: null } : { status: 'in_progress', ended_at: null });
      } else if (direction === 'outbound' && rand() < 0.1) {
        const f = failedDialEnd(pick(['busy', 'no_answer', 'auth_failed']), 486);
        Object.assign(row, { status: f.status, end_status: f.end_status, reason: f.termination_reason, started_at: null });
      } else if (direction === 'web' && rand() < 0.03) {
        Object.assign(row, { end_status: 'expired', reason: 'token_expired', started_at: null });
      } else {
        const r = reason();
        const lines = [
          { role: 'agent', text: 'Hello! How can I help you today?', at: startedAt, turn_id: 't1' },
          { role: 'user', text: 'I would like to book an appointment.', at: startedAt },
          { role: 'agent', text: 'Of course, for which day?', at: startedAt, turn_id: 't2' },
        ];
        Object.assign(row, { end_status: endStatusOf(r), reason: r, outcome: outcomeOf(r) ?? null, transcript: JSON.stringify(transcriptFromRuntime(lines)), summary: rand() < 0.2 ? 'The caller booked an appointment.' : null });
      }
      insert.run(row);
      if (rand() < 0.1) {
        tag.run(row.id, org.id, pick(TAGS), created);
        if (rand() < 0.3) tag.run(row.id, org.id, pick(TAGS), created);
      }
      if (o === 0) {
        orgCalls++;
        if (!web && samplePartyNumber === '' && i > n / 3) samplePartyNumber = party;
        firstAt ||= created;
        lastAt = created;
      }
    }
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  await store.close();
  const main = orgs[0]!;
  return { key: main.key, orgId: main.id, agentIds: main.agentIds, samplePartyNumber, total: n, orgCalls, firstAt, lastAt, seconds: (Date.now() - t0) / 1000 };
}

// A script: bench/calls.ts runs it as a child (and imports only its types).
const [dir, count, out] = process.argv.slice(2);
if (!dir || !count || !out || !Number.isInteger(Number(count)) || Number(count) <= 0) {
  process.stderr.write('usage: node --import tsx bench/lib/calls-fill.ts <data dir> <calls> <result.json>\n');
  process.exit(2);
}
writeFileSync(out, JSON.stringify(await fill(dir, Number(count))), { mode: 0o600 });
process.stdout.write('FILLED\n');
