/**
 * The agent's tools on a phone call: the bridge does not answer tool_call, so a flow tool is
 * POSTed (signed tool.call) to the organization's endpoint subscribed to tool.call (made with
 * POST /v1/webhooks), here a real receiver on loopback that verifies every request with the
 * `standardwebhooks` library and the secret the API returned. SIPp places each call, the test's
 * RTP peer is the caller's media, a fake streaming STT scripts what the caller "says"
 * ("tool lookup_order order_id=42": local/echo calls the tool, then speaks its result), and the
 * call record's transcript shows the tool call, its output and the agent's answer.
 *
 * Cases: the receiver answers (its output reaches the model; no wait phrase); it is down (an
 * error result well within the timeout); it is silent (the error at session.tool_timeout_secs);
 * no endpoint (an error at once); it takes 1.5 s (the node's wait_message is spoken once).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startToolReceiver, type ToolReceiver } from '../helpers/tool-receiver.ts';
import { startFakeListenServer, type FakeListenServer } from '../agent/stt/fake-stt-servers.ts';
import { placeBridgeCall } from '../interop/bridge-harness.ts';
import { sippAvailable } from '../interop/sipp.ts';
import { speechLike } from '../helpers/speech-like.ts';

const NUMBER = '+15550007201';
const TOOL_TIMEOUT_SECS = 3;
const WAIT_PHRASE = 'One moment while I look that up.';
const TOOL_NODE = {
  id: 'lookup',
  type: 'tool',
  name: 'lookup_order',
  description: 'Find an order',
  parameters: [
    { name: 'order_id', type: 'string', required: true },
    { name: 'region', type: 'string', value: 'eu' },
  ],
  wait_message: WAIT_PHRASE,
};

interface Entry {
  type: string;
  role?: string;
  message?: string;
  toolCall?: { callId: string; toolName: string; arguments: string; output?: string; startedAt: string; endedAt?: string };
  toolCallOutput?: string;
}

describe.skipIf(sippAvailable().skip)('tool calls of a phone call go to the webhook endpoint', () => {
  let d: TestDaemon;
  let stt: FakeListenServer;
  let rx: ToolReceiver;
  let agentId: string;
  /** The organization's endpoint subscribed to tool.call. */
  let endpointId = '';
  let callerSeq = 0;
  async function subscribe(url: string): Promise<void> {
    const r = await d.api('POST', '/v1/webhooks', { url, events: ['tool.call'] });
    expect(r.status, r.text).toBe(201);
    endpointId = r.body.id;
    rx.secret = r.body.secret;
  }

  beforeAll(async () => {
    stt = await startFakeListenServer();
    rx = await startToolReceiver();
    d = await startTestDaemon({
      rtp: { address: '127.0.0.1' },
      stt: { provider: 'stream', base_url: stt.baseUrl, api_key: 'k', model: 'nova-3' },
      session: { tool_timeout_secs: TOOL_TIMEOUT_SECS },
      webhooks: { allow_private_destinations: true },
    });
    await subscribe(rx.url);
    agentId = (await d.api('POST', '/v1/agents', { name: 'Orders', first_message: 'Hi.', vad_settings: { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 30 } })).body.id;
    expect((await d.api('PUT', `/v1/agents/${agentId}/draft`, { nodes: [TOOL_NODE] })).status).toBeLessThan(300);
    const v = await d.api('POST', `/v1/agents/${agentId}/versions`, { tag: 'v1' });
    expect((await d.api('POST', `/v1/agents/${agentId}/versions/${v.body.id}/publish`)).status).toBe(200);
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
    await stt?.close();
    await rx?.close();
  });

  /** One call: the caller asks for order 42 after the first message; the transcript once the call has ended. */
  async function callAndAsk(hangupAfterMs: number): Promise<{ entries: Entry[]; callId: string }> {
    const caller = `+1555999${String(7200 + ++callerSeq).padStart(4, '0')}`;
    const call = await placeBridgeCall({ scenario: 'bridge-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, caller, hangupAfterMs });
    try {
      await call.peer.waitFor(() => call.peer.spurts().length >= 1, 8000, 'the first message');
      stt.finalizeTranscript = 'tool lookup_order order_id=42';
      await call.peer.play(speechLike(0.8));
      await call.proc.result;
      for (const end = Date.now() + 5000; ; await new Promise((r) => setTimeout(r, 50))) {
        const rec = ((await d.api('GET', `/v1/calls?outbound=false&agent_ids=${agentId}`)).body.calls as any[]).find((c) => c.from === caller);
        if (rec?.ended_at) return { entries: rec.transcript.entries, callId: rec.id };
        if (Date.now() > end) throw new Error('the call record never ended');
      }
    } finally {
      await call.cleanup();
    }
  }

  const toolEntries = (entries: Entry[]) => ({ call: entries.find((e) => e.type === 'tool_call')!, output: entries.find((e) => e.type === 'tool_call_output')! });
  const agentSaid = (entries: Entry[]) => entries.filter((e) => e.type === 'message' && e.role === 'assistant').map((e) => e.message ?? '');
  const waitedMs = (e: Entry) => Date.parse(e.toolCall!.endedAt!) - Date.parse(e.toolCall!.startedAt);

  it("the receiver's output reaches the model, and the transcript records the call and its output; no wait phrase when it answers at once", async () => {
    const before = rx.received.length;
    rx.answer = () => ({ status: 200, body: '{"output":"shipped on Monday"}' });
    const { entries, callId } = await callAndAsk(9000);
    expect(rx.rejected).toBe(0);
    const got = rx.received.slice(before);
    expect(got).toHaveLength(1);
    expect(got[0]!.payload).toMatchObject({ type: 'tool.call', data: { call_id: callId, agent_id: agentId, name: 'lookup_order', arguments: { order_id: '42', region: 'eu' } } });
    const { call, output } = toolEntries(entries);
    expect(call).toMatchObject({ type: 'tool_call', toolCall: { callId: got[0]!.payload.data.tool_call_id, toolName: 'lookup_order', arguments: '{"order_id":"42","region":"eu"}' } });
    expect(call.role).toBeUndefined();
    expect(output).toMatchObject({ type: 'tool_call_output', toolCallOutput: 'shipped on Monday', toolCall: { toolName: 'lookup_order', output: 'shipped on Monday' } });
    expect(agentSaid(entries)).toContain('The lookup_order tool returned: shipped on Monday.');
    expect(agentSaid(entries).join(' ')).not.toContain(WAIT_PHRASE);
  });

  it('a receiver that is down gives the model an error well within the timeout, and the agent answers', async () => {
    const down = await startToolReceiver();
    await down.close();
    expect((await d.api('PATCH', `/v1/webhooks/${endpointId}`, { url: down.url })).status).toBe(200);
    try {
      const { entries } = await callAndAsk(9000);
      const { output } = toolEntries(entries);
      expect(output.toolCallOutput).toBe('Error: the tool lookup_order failed: the tool endpoint could not be reached (ECONNREFUSED).');
      expect(waitedMs(output)).toBeLessThan(1000);
      expect(agentSaid(entries)).toContain(`The lookup_order tool returned: ${output.toolCallOutput}.`);
    } finally {
      expect((await d.api('PATCH', `/v1/webhooks/${endpointId}`, { url: rx.url })).status).toBe(200);
    }
  });

  it('a silent receiver gives the model an error at session.tool_timeout_secs, and the call goes on', async () => {
    rx.answer = () => 'silent';
    // The error is long to say: the call lasts until the agent has said all of it.
    const { entries } = await callAndAsk(15_000);
    const { output } = toolEntries(entries);
    expect(output.toolCallOutput).toBe('Error: the tool lookup_order failed: the tool endpoint did not answer in time.');
    expect(waitedMs(output)).toBeGreaterThanOrEqual(TOOL_TIMEOUT_SECS * 1000 - 50);
    // The wait was longer than a second: the wait phrase, then the answer with the error.
    expect(agentSaid(entries)).toContain(`${WAIT_PHRASE} The lookup_order tool returned: ${output.toolCallOutput}.`);
  });

  it('no endpoint at all: an error result at once', async () => {
    expect((await d.api('DELETE', `/v1/webhooks/${endpointId}`)).status).toBe(204);
    const before = rx.received.length;
    try {
      const { entries } = await callAndAsk(9000);
      const { output } = toolEntries(entries);
      expect(output.toolCallOutput).toBe('Error: the tool lookup_order failed: no webhook endpoint answers tool calls.');
      expect(waitedMs(output)).toBeLessThan(1000);
      expect(rx.received.length).toBe(before);
      expect(agentSaid(entries)).toContain(`The lookup_order tool returned: ${output.toolCallOutput}.`);
    } finally {
      await subscribe(rx.url);
    }
  });

  it("a receiver taking 1.5 s: the tool's wait phrase is spoken once, then the answer", async () => {
    rx.answer = () => ({ status: 200, body: '{"output":"found"}', delayMs: 1500 });
    const { entries } = await callAndAsk(10_000);
    expect(toolEntries(entries).output.toolCallOutput).toBe('found');
    const said = agentSaid(entries).join(' ');
    expect(said.split(WAIT_PHRASE)).toHaveLength(2);
    expect(agentSaid(entries)).toContain(`${WAIT_PHRASE} The lookup_order tool returned: found.`);
  });
});
