/**
 * The post-call analysis on real phone calls: SIPp calls an ACL trunk's number and hangs up after
 * 3 s; the agent's model is local/echo, whose analysis answer is deterministic (docs/agent-runtime.md).
 * With summarize_calls on, the record gains the summary and the structured fields after the call
 * ended; off, it gains none; with a model that cannot be reached (llm and fallback_llm on a closed
 * port), the failure is logged and the record is otherwise complete. Every record has the call's
 * times and reason in the service's names.
 */
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectCallTimes } from '../helpers/call-times.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { delay, untilAsync } from '../helpers/until.ts';
import { runSipp, sippAvailable } from '../interop/sipp.ts';

const CALLER = '+15559997101';
const FIELDS = [
  { name: 'outcome', description: 'what the caller got', choices: ['booking', 'cancellation'] },
  { name: 'sentiment', choices: ['angry', 'calm'] },
];

/** A TCP port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe.skipIf(sippAvailable().skip)('post-call analysis on SIPp calls', () => {
  let d: TestDaemon;
  let trunkId: string;
  let n = 0;
  const logLines: string[] = [];
  beforeAll(async () => {
    const down = await closedPort();
    d = await startTestDaemon(
      {
        rtp: { address: '127.0.0.1' },
        llm: { providers: [{ name: 'local', type: 'echo', models: ['echo'] }, { name: 'down', type: 'openai', base_url: `http://127.0.0.1:${down}/v1`, api_key: 'sk-test', models: ['m'] }] },
      },
      undefined,
      {},
      logLines,
    );
    trunkId = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
  });
  afterAll(async () => {
    await d?.close();
  });

  /** An agent on a number of its own; one SIPp call to it (3 s, then BYE); the ended record. */
  async function call(agent: Record<string, unknown>): Promise<any> {
    const number = `+1555000710${++n}`;
    const a = (await d.api('POST', '/v1/agents', { name: `analysis ${n}`, first_message: 'Hello, this is the booking desk.', ...agent })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: a.id, alternate_number: number })).status).toBe(201);
    const r = await runSipp({ scenario: 'inbound-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: number, keys: { caller: CALLER }, durationMs: 3000 });
    expect(r.code, r.describe()).toBe(0);
    let rec: any;
    await untilAsync(async () => {
      rec = (await d.api('GET', `/v1/calls?agent_ids=${a.id}`)).body.calls[0];
      return rec?.ended_at !== undefined;
    }, 'the ended call record');
    return rec;
  }

  /** The times and the reason every ended, answered phone call has. */
  function expectComplete(rec: any): void {
    expect(rec).toMatchObject({ status: 'ended', direction: 'inbound', source: 'sip', sip_trunk_id: trunkId, from: CALLER });
    expectCallTimes(rec);
    expect(rec.duration_seconds).toBeGreaterThanOrEqual(3);
    expect(rec.transcript.entries[0]).toMatchObject({ role: 'assistant', message: 'Hello, this is the booking desk.' });
  }

  it('on: after the call ended the record gains the summary and the fields (a choice said, or null)', async () => {
    const rec = await call({ summarize_calls: true, analysis_fields: FIELDS });
    expectComplete(rec);
    expect(rec).toMatchObject({ termination_reason: 'client_closed', outcome: 'ended_by_user' });
    let analysed: any;
    await untilAsync(async () => {
      analysed = (await d.api('GET', `/v1/calls/${rec.id}`)).body;
      return analysed.analyzed_at !== undefined;
    }, 'the analysis');
    expect(analysed.summary).toMatch(/^Summary: agent: Hello, this is the booking desk\./);
    expect(analysed.extracted_variables).toEqual([
      { name: 'outcome', type: 'extracted', description: 'what the caller got', dataType: 'string', value: 'booking' },
      { name: 'sentiment', type: 'extracted', dataType: 'string', value: null },
    ]);
    expect(Date.parse(analysed.analyzed_at)).toBeGreaterThanOrEqual(Date.parse(analysed.ended_at));
    // The list shows it too.
    const listed = (await d.api('GET', `/v1/calls?agent_ids=${rec.agent_id}`)).body.calls[0];
    expect(listed).toMatchObject({ summary: analysed.summary, extracted_variables: analysed.extracted_variables, analyzed_at: analysed.analyzed_at });
    expect(logLines.some((l) => l.includes('"post-call analysis done"') && l.includes(rec.id))).toBe(true);
  });

  it('off: the record gains none, even with analysis_fields named', async () => {
    const rec = await call({ summarize_calls: false, analysis_fields: FIELDS });
    expectComplete(rec);
    // local/echo answers within milliseconds: a second later an analysis would be there.
    await delay(1000);
    const after = (await d.api('GET', `/v1/calls/${rec.id}`)).body;
    expect(after.summary).toBeUndefined();
    expect(after.analyzed_at).toBeUndefined();
    expect(after.extracted_variables).toEqual([]);
    expect(logLines.some((l) => l.includes('post-call analysis') && l.includes(rec.id))).toBe(false);
  });

  it('a model that cannot be reached: the failure is logged, the record is complete and has no analysis', async () => {
    const rec = await call({ llm: 'down/m', fallback_llm: 'down/m', summarize_calls: true, analysis_fields: FIELDS });
    expectComplete(rec);
    let failed: Record<string, unknown> | undefined;
    await untilAsync(() => {
      failed = logLines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'post-call analysis failed: the call record keeps no analysis' && l.sessionId === rec.id);
      return failed !== undefined;
    }, 'the failure logged');
    expect(failed!.level).toBe(40);
    const after = (await d.api('GET', `/v1/calls/${rec.id}`)).body;
    expect(after).toMatchObject({ status: 'ended', termination_reason: rec.termination_reason, ended_at: rec.ended_at, extracted_variables: [] });
    expect(after.summary).toBeUndefined();
    expect(after.analyzed_at).toBeUndefined();
    // Never the model's key in the log.
    expect(logLines.some((l) => l.includes('sk-test'))).toBe(false);
  });
});
