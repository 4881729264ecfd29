/**
 * Two daemons on one PostgreSQL store split one outbound run: both dial (each claims due contacts
 * under a lease on the database), no contact is dialled twice, and the run's max_concurrent holds
 * across both nodes (sampled from the call records). The callees are a SIPp UAS.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { untilAsync } from '../helpers/until.ts';
import { sippAvailable, type SippProcess } from '../interop/sipp.ts';
import { agentOnTrunk, answered, attemptsByNumber, createList, getRun, OUTBOUND_TEST_CONFIG, runCalls, startCallees, startRun } from './harness.ts';

const pg = postgresAvailability();

describe.skipIf(pg.skip || sippAvailable().skip)(`an outbound run on two daemons sharing PostgreSQL${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => {
  let server: PostgresServer | undefined;
  let callees: SippProcess | undefined;
  const daemons: TestDaemon[] = [];
  afterAll(async () => {
    callees?.kill();
    for (const d of daemons) await d.close().catch(() => {});
    await server?.stop();
  });

  it('both nodes dial, no contact twice, never more than max_concurrent calls up across both', async () => {
    server = await startPostgres();
    const url = await server.createDatabase('outbound_nodes');
    callees = await startCallees(600);
    const overrides = {
      ...OUTBOUND_TEST_CONFIG,
      store: { url, pool_size: 4 },
      security: { encryption_key: Buffer.alloc(32, 0x5a).toString('base64'), token_secret: Buffer.alloc(32, 0x6b).toString('base64') },
    };
    const logs: [string[], string[]] = [[], []];
    const a = await startTestDaemon(overrides, undefined, {}, logs[0]);
    daemons.push(a);
    const b = await startTestDaemon(overrides, join(mkdtempSync(join(tmpdir(), 'callbridge-dialer-b-')), 'data'), {}, logs[1]);
    daemons.push(b);
    const { agentId, trunkId } = await agentOnTrunk(a, callees.localPort);
    const numbers = Array.from({ length: 16 }, (_, i) => answered(400 + i));
    const listId = await createList(a, agentId, trunkId, numbers);
    const runId = await startRun(a, listId, { max_concurrent: 4, retry: { max_attempts: 2, backoff_secs: 0, on: ['failed'] } });

    let maxUp = 0;
    await untilAsync(async () => {
      maxUp = Math.max(maxUp, (await runCalls(a, runId)).filter((c) => c.ended_at === undefined).length);
      return (await getRun(a, listId, runId)).status === 'completed';
    }, 'the run to complete', 60_000);
    expect(maxUp).toBeLessThanOrEqual(4);

    const calls = await runCalls(a, runId);
    const attempts = attemptsByNumber(calls);
    for (const n of numbers) expect(attempts.get(n), n).toBe(1);
    expect(calls).toHaveLength(numbers.length);
    expect(calls.every((c) => c.end_status === 'completed')).toBe(true);
    // Both nodes placed calls of the run (each logs the calls it placed).
    const placed = logs.map((lines) => lines.filter((l) => l.includes('"outbound call placed"')).length);
    expect(placed[0]! + placed[1]!).toBe(numbers.length);
    expect(placed[0], `node a placed ${placed[0]}, node b ${placed[1]}`).toBeGreaterThan(0);
    expect(placed[1], `node a placed ${placed[0]}, node b ${placed[1]}`).toBeGreaterThan(0);
  });
});
