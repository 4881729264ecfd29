/**
 * Outbound runs against real callees (SIPp as UAS on loopback, test/outbound/harness.ts): a run
 * of 12 contacts never has more than max_concurrent calls up (sampled from the call records
 * while it runs), busy and unanswered contacts are retried after the backoff up to
 * max_attempts, a contact busy twice then answered is called exactly 3 times, a completed call
 * is never repeated, and each call record names its run and contact (GET /v1/calls filters by
 * both). Then pause, resume and cancel; a run's window read in each contact's own time zone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { delay, untilAsync } from '../helpers/until.ts';
import { sippAvailable, type SippProcess } from '../interop/sipp.ts';
import { agentOnTrunk, answered, attemptsByNumber, busy, busyTwiceThenAnswered, createList, getRun, noAnswer, OUTBOUND_TEST_CONFIG, runCalls, startCallees, startRun, untilRunStatus } from './harness.ts';

const sipp = sippAvailable();

describe.skipIf(sipp.skip)('outbound runs against SIPp callees', () => {
  let d: TestDaemon;
  let callees: SippProcess;
  let agentId: string;
  let trunkId: string;
  beforeAll(async () => {
    callees = await startCallees();
    d = await startTestDaemon(OUTBOUND_TEST_CONFIG);
    ({ agentId, trunkId } = await agentOnTrunk(d, callees.localPort));
  });
  afterAll(async () => {
    callees?.kill();
    await d?.close();
  });

  it('12 contacts, max_concurrent 3: never more than 3 calls up; retries as configured; calls name their run and contact', async () => {
    const numbers = [busy(1), busy(2), noAnswer(1), busyTwiceThenAnswered(1), ...Array.from({ length: 8 }, (_, i) => answered(i + 1))];
    const listId = await createList(d, agentId, trunkId, numbers);
    const runId = await startRun(d, listId, { max_concurrent: 3, retry: { max_attempts: 3, backoff_secs: 1, on: ['busy', 'no_answer'] } });
    // Sample the calls up (records not ended) until the run completes.
    let maxUp = 0;
    let samples = 0;
    let run: any;
    await untilAsync(async () => {
      const up = (await runCalls(d, runId)).filter((c) => c.ended_at === undefined).length;
      maxUp = Math.max(maxUp, up);
      samples++;
      run = await getRun(d, listId, runId);
      return run.status === 'completed';
    }, 'the run to complete', 60_000);
    expect(maxUp).toBeGreaterThanOrEqual(2); // it did dial in parallel
    expect(maxUp, `max calls up over ${samples} samples`).toBeLessThanOrEqual(3);

    const calls = await runCalls(d, runId);
    const attempts = attemptsByNumber(calls);
    expect(attempts.get(busy(1))).toBe(3);
    expect(attempts.get(busy(2))).toBe(3);
    expect(attempts.get(noAnswer(1))).toBe(3);
    expect(attempts.get(busyTwiceThenAnswered(1))).toBe(3);
    for (let i = 1; i <= 8; i++) expect(attempts.get(answered(i)), answered(i)).toBe(1);
    expect(calls.length).toBe(20);
    expect(run.counts).toMatchObject({ completed: 9, failed: 3, pending: 0, dialing: 0, calling: 0 });

    const contacts = (await d.api('GET', `/v1/outbound-lists/${listId}/runs/${runId}/contacts`)).body as any[];
    const byNumber = new Map(contacts.map((c) => [c.phone_number, c]));
    expect(byNumber.get(busy(1))).toMatchObject({ state: 'failed', attempts: 3, last_outcome: 'busy' });
    expect(byNumber.get(noAnswer(1))).toMatchObject({ state: 'failed', attempts: 3, last_outcome: 'no_answer' });
    expect(byNumber.get(busyTwiceThenAnswered(1))).toMatchObject({ state: 'completed', attempts: 3, last_outcome: 'completed' });
    // Each record names its run and contact; the contact filter finds exactly its calls.
    const retried = byNumber.get(busyTwiceThenAnswered(1));
    for (const c of calls) expect(c).toMatchObject({ outbound: true, outbound_list_run_id: runId, direction: 'outbound', from: '+15550001111' });
    const ofContact = await d.api('GET', `/v1/calls?outbound_contact_id=${retried.contact_id}`);
    expect(ofContact.body.calls.map((c: any) => c.end_status).sort()).toEqual(['busy', 'busy', 'completed']);
    expect(ofContact.body.calls.every((c: any) => c.outbound_contact_id === retried.contact_id && c.to === busyTwiceThenAnswered(1))).toBe(true);
    // Each SIP dial stores its INVITE's Call-ID (one per attempt) and the final response received:
    // 486 Busy Here from the busy callee, 487 after our CANCEL at the ring timeout, 200 answered.
    const finals = (n: string) => calls.filter((c) => c.to === n).map((c) => `${c.sip?.final_status} ${c.sip?.final_reason}`);
    expect(finals(busy(1))).toEqual(['486 Busy Here', '486 Busy Here', '486 Busy Here']);
    expect(finals(noAnswer(1))).toEqual(['487 Request Terminated', '487 Request Terminated', '487 Request Terminated']);
    expect(finals(answered(1))).toEqual(['200 OK']);
    expect(new Set(calls.map((c) => c.sip?.call_id)).size).toBe(calls.length);
    const busyCall = calls.find((c) => c.to === busy(2))!;
    expect((await d.api('GET', `/v1/calls/${busyCall.id}`)).body.sip).toEqual({ call_id: expect.any(String), final_status: 486, final_reason: 'Busy Here' });
    // The first busy attempt and the retry are at least backoff_secs apart.
    const times = ofContact.body.calls.map((c: any) => Date.parse(c.created_at)).sort();
    expect(times[1] - times[0]).toBeGreaterThanOrEqual(1000);
  });

  it('pause stops new calls, resume goes on, cancel ends the run with its pending contacts canceled', async () => {
    const numbers = Array.from({ length: 6 }, (_, i) => answered(100 + i));
    const listId = await createList(d, agentId, trunkId, numbers);
    const runId = await startRun(d, listId, { max_concurrent: 1, retry: { max_attempts: 1, backoff_secs: 0, on: [] } });
    await untilAsync(async () => (await runCalls(d, runId)).length >= 1, 'a first call');
    const paused = await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/pause`);
    expect(paused.status, paused.text).toBe(200);
    expect(paused.body.status).toBe('paused');
    expect((await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/pause`)).status).toBe(409);
    // The call up when paused ends; no new one starts while paused.
    await untilAsync(async () => (await runCalls(d, runId)).every((c) => c.ended_at !== undefined), 'the call up to end');
    const whilePaused = (await runCalls(d, runId)).length;
    await delay(1500);
    expect((await runCalls(d, runId)).length).toBe(whilePaused);
    expect((await getRun(d, listId, runId)).status).toBe('paused');

    expect((await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/resume`)).status).toBe(200);
    await untilAsync(async () => (await runCalls(d, runId)).length > whilePaused, 'a call after resume');
    const canceled = await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/cancel`);
    expect(canceled.status, canceled.text).toBe(200);
    expect(canceled.body).toMatchObject({ status: 'canceled' });
    expect(typeof canceled.body.finished_at).toBe('string');
    await untilAsync(async () => (await getRun(d, listId, runId)).counts.calling === 0, 'the last call settled');
    const final = await getRun(d, listId, runId);
    const called = (await runCalls(d, runId)).length;
    expect(final.counts.canceled).toBeGreaterThan(0);
    expect(final.counts.completed + final.counts.canceled).toBe(6);
    await delay(500);
    expect((await runCalls(d, runId)).length).toBe(called);
    expect((await d.api('POST', `/v1/outbound-lists/${listId}/runs/${runId}/resume`)).status).toBe(409);
    // A finished run lets the list have a new one.
    expect((await d.api('POST', `/v1/outbound-lists/${listId}/runs`, { max_concurrent: 1, retry: { max_attempts: 1, backoff_secs: 0, on: [] }, window: { timezone: 'UTC', days: ['mon'], start: '00:00', end: '00:01' } })).status).toBe(201);
  });

  it('a run outside its window stays scheduled and places no call', async () => {
    const listId = await createList(d, agentId, trunkId, [answered(200)]);
    // A window of one minute, twelve hours from now: now is never inside it.
    const at = new Date(Date.now() + 12 * 3600_000);
    const hhmm = (t: Date) => `${String(t.getUTCHours()).padStart(2, '0')}:${String(t.getUTCMinutes()).padStart(2, '0')}`;
    const runId = await startRun(d, listId, { max_concurrent: 1, retry: { max_attempts: 1, backoff_secs: 0, on: [] }, window: { timezone: 'UTC', days: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], start: hhmm(at), end: hhmm(new Date(at.getTime() + 60_000)) } });
    await delay(1000);
    const run = await getRun(d, listId, runId);
    expect(run.status).toBe('scheduled');
    expect(run.counts.pending).toBe(1);
    expect(await runCalls(d, runId)).toEqual([]);
  });

  it("the window applies in each contact's zone: only the contact whose zone is inside it now is called", async () => {
    // A UTC window from 11 to 13 hours ahead: closed in UTC now, open in UTC+12 (Etc/GMT-12).
    const hhmm = (ms: number) => new Date(Date.now() + ms).toISOString().slice(11, 16);
    const contacts = [{ phone_number: answered(201), timezone: 'Etc/GMT-12' }, { phone_number: answered(202) }];
    const list = await d.api('POST', '/v1/outbound-lists', { name: 'zones', agent_id: agentId, sip_trunk_id: trunkId, contacts });
    expect(list.status, list.text).toBe(201);
    const listId = list.body.id;
    const runId = await startRun(d, listId, { max_concurrent: 2, retry: { max_attempts: 1, backoff_secs: 0, on: [] }, window: { timezone: 'UTC', days: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], start: hhmm(11 * 3600_000), end: hhmm(13 * 3600_000) } });
    // Once the UTC+12 contact is done, the only zone left pending (the window's) is closed: scheduled.
    await untilAsync(async () => (await getRun(d, listId, runId)).counts.completed >= 1, 'the UTC+12 contact completed', 20_000);
    const run = await untilRunStatus(d, listId, runId, 'scheduled', 5000);
    expect(run.counts).toMatchObject({ completed: 1, pending: 1, dialing: 0, calling: 0 });
    expect((await runCalls(d, runId)).map((c) => c.to)).toEqual([answered(201)]);
  });
});

describe.skipIf(sipp.skip)('an outbound run under a call slot limit', () => {
  let d: TestDaemon;
  let callees: SippProcess;
  afterAll(async () => {
    callees?.kill();
    await d?.close();
  });

  it('bridge.max_calls_per_trunk 1 holds a run of max_concurrent 3 to one call at a time; the refused dials are retried, not counted as attempts', async () => {
    callees = await startCallees(400);
    d = await startTestDaemon({ ...OUTBOUND_TEST_CONFIG, bridge: { max_calls_per_trunk: 1 } });
    const { agentId, trunkId } = await agentOnTrunk(d, callees.localPort);
    const numbers = Array.from({ length: 4 }, (_, i) => answered(500 + i));
    const listId = await createList(d, agentId, trunkId, numbers);
    // max_attempts 1: a refusal counted as an attempt would leave its contact failed.
    const runId = await startRun(d, listId, { max_concurrent: 3, retry: { max_attempts: 1, backoff_secs: 0, on: ['failed'] } });
    let maxUp = 0;
    let run: any;
    await untilAsync(async () => {
      maxUp = Math.max(maxUp, (await runCalls(d, runId)).filter((c) => c.ended_at === undefined).length);
      return (run = await getRun(d, listId, runId)).status === 'completed';
    }, 'the run to complete', 30_000);
    expect(maxUp).toBe(1);
    expect(run.counts).toMatchObject({ completed: 4, failed: 0 });
    const attempts = attemptsByNumber(await runCalls(d, runId));
    for (const n of numbers) expect(attempts.get(n), n).toBe(1);
  });
});
