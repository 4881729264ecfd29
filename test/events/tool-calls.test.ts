/**
 * The tool.call sender: the body and signature a real receiver on loopback verifies with the
 * `standardwebhooks` library, and how an answer becomes the tool output or an error result
 * (error status, silent or refused endpoint, a destination the policy refuses, no endpoint).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.ts';
import { createToolCallSender, toolOutputOf, type ToolWebhookCall } from '../../src/events/tool-calls.ts';
import type { ToolCallTargets } from '../../src/events/targets.ts';
import { startToolReceiver, type ToolReceiver } from '../helpers/tool-receiver.ts';

describe('toolOutputOf (the answer of a tool endpoint)', () => {
  it('a 2xx JSON object with a string output gives that string', () => {
    expect(toolOutputOf({ status: 200, body: '{"output":"shipped"}' })).toEqual({ ok: true, output: 'shipped' });
    expect(toolOutputOf({ status: 201, body: '{"output":"","extra":1}' })).toEqual({ ok: true, output: '' });
  });
  it('any other 2xx body is the output as it is', () => {
    expect(toolOutputOf({ status: 200, body: 'plain text' })).toEqual({ ok: true, output: 'plain text' });
    expect(toolOutputOf({ status: 200, body: '{"output":42}' })).toEqual({ ok: true, output: '{"output":42}' });
    expect(toolOutputOf({ status: 200, body: '["a"]' })).toEqual({ ok: true, output: '["a"]' });
    expect(toolOutputOf({ status: 200, body: 'null' })).toEqual({ ok: true, output: 'null' });
    expect(toolOutputOf({ status: 204, body: '' })).toEqual({ ok: true, output: '' });
  });
  it('a non-2xx status is an error, whatever the body', () => {
    expect(toolOutputOf({ status: 500, body: '{"output":"x"}' })).toEqual({ ok: false, error: 'the tool endpoint answered HTTP 500' });
    expect(toolOutputOf({ status: 302, body: '' })).toEqual({ ok: false, error: 'the tool endpoint answered HTTP 302' });
  });
});

describe('createToolCallSender against a real receiver', () => {
  let rx: ToolReceiver;
  const call: ToolWebhookCall = { orgId: 'org-1', callId: 'call-1', agentId: 'agent-1', toolCallId: 'tc-1', name: 'lookup_order', arguments: { order_id: '42', region: 'eu' } };
  const targets = (url: () => string, secret: () => string): ToolCallTargets & { asked: Array<[string, string | undefined]> } => {
    const asked: Array<[string, string | undefined]> = [];
    return { asked, forToolCall: (orgId, webhookId) => (asked.push([orgId, webhookId]), Promise.resolve(orgId === 'org-1' ? { id: 'wh-1', url: url(), secret: secret() } : undefined)) };
  };
  const sender = (o: { allowPrivate?: boolean; timeoutMs?: number; url?: string } = {}) => {
    const t = targets(() => o.url ?? rx.url, () => rx.secret);
    return { t, send: createToolCallSender({ targets: t, policy: { allowPrivate: o.allowPrivate ?? true }, timeoutMs: o.timeoutMs ?? 2000, log: createLogger('silent'), now: () => new Date('2026-01-02T03:04:05.000Z') }) };
  };
  beforeAll(async () => {
    rx = await startToolReceiver();
  });
  afterAll(async () => {
    await rx.close();
  });

  it('posts a signed tool.call the library verifies; the answer is the output', async () => {
    rx.answer = () => ({ status: 200, body: '{"output":"shipped on Monday"}' });
    const { t, send } = sender();
    expect(await send({ ...call, webhookId: 'wh-1' })).toEqual({ ok: true, output: 'shipped on Monday' });
    expect(t.asked).toEqual([['org-1', 'wh-1']]);
    expect(rx.rejected).toBe(0);
    const got = rx.received.at(-1)!;
    expect(got.payload).toEqual({
      type: 'tool.call',
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      created_at: '2026-01-02T03:04:05.000Z',
      data: { call_id: 'call-1', agent_id: 'agent-1', tool_call_id: 'tc-1', name: 'lookup_order', arguments: { order_id: '42', region: 'eu' } },
    });
    expect(got.headers['webhook-id']).toBe(got.payload.id);
  });

  it('an error status, a silent endpoint (at the timeout) and a refused connection are error results', async () => {
    rx.answer = () => ({ status: 503, body: 'busy' });
    expect(await sender().send(call)).toEqual({ ok: false, error: 'the tool endpoint answered HTTP 503' });
    rx.answer = () => 'silent';
    const t0 = Date.now();
    expect(await sender({ timeoutMs: 300 }).send(call)).toEqual({ ok: false, error: 'the tool endpoint did not answer in time' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
    const down = await startToolReceiver();
    const url = down.url;
    await down.close();
    expect(await sender({ url }).send(call)).toEqual({ ok: false, error: 'the tool endpoint could not be reached (ECONNREFUSED)' });
  });

  it('a loopback endpoint is refused by the default policy, before any request', async () => {
    const n = rx.received.length;
    expect(await sender({ allowPrivate: false }).send(call)).toEqual({ ok: false, error: "the tool endpoint's address is not allowed" });
    expect(rx.received.length).toBe(n);
  });

  it('no endpoint for the organization, or a repository that fails: an error result, no throw', async () => {
    expect(await sender().send({ ...call, orgId: 'org-2' })).toEqual({ ok: false, error: 'no webhook endpoint answers tool calls' });
    expect(await sender().send({ ...call, orgId: 'org-2', webhookId: 'wh-9' })).toEqual({ ok: false, error: 'no webhook endpoint wh-9 answers tool calls' });
    const broken = createToolCallSender({ targets: { forToolCall: () => Promise.reject(new Error('db down')) }, policy: { allowPrivate: true }, timeoutMs: 1000, log: createLogger('silent') });
    expect(await broken(call)).toEqual({ ok: false, error: 'the tool endpoint could not be looked up' });
  });
});
