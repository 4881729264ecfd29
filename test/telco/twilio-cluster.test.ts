/**
 * The carrier path behind a shared load balancer (docs/telco.md "Several nodes"): two daemons on
 * one PostgreSQL database, one public URL (a balancer on loopback, test/helpers/http-balancer.ts)
 * that sends the voice webhook to node 1 and status callbacks and media streams to node 2, and
 * the fake carrier (test/helpers/fake-carrier.ts, fake-twilio.ts) speaking Twilio's formats.
 *
 *   - inbound: the webhook answered by node 1, the stream opened on node 2 is bridged there once
 *     (the agent's first message heard); the same token replayed on node 1 is refused 4401
 *   - outbound: a dial placed through node 1's REST, its callbacks (ringing, answered) and its
 *     stream on node 2: bridged on node 2, the record completes normally; node 1 (bridge.max_calls
 *     1) stops counting the dial once node 2 took it; a busy dial's callback on node 2 ends its
 *     record busy at once, and node 1's watchdog later neither overwrites it nor calls the carrier
 */
import type { IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCall, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { startHttpBalancer, type HttpBalancer } from '../helpers/http-balancer.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { FakeStream, incomingCallParams, levelDbfs, postVoiceWebhook, sid, type ReceivedFrame } from './fake-twilio.ts';

const ACCOUNT = sid('AC');
const AUTH_TOKEN = 'twilio-auth-token-' + sid('');
const NUMBER = '+15550404001';
const CALLER = '+15559990404';
const CALLEE = '+15557770401';
const BUSY_CALLEE = '+15557770402';
const FIRST_MESSAGE = 'Hello from the cluster.';
const LOUD_DBFS = -45;
const VOICE_PATH = '/v1/telco/twilio/voice';
const STREAM_PATH = '/v1/telco/twilio/stream';
const STATUS_PATH = '/v1/telco/twilio/status';
/** Node 1's watchdog: the ring timeout (1 s) + this slack after the dial. */
const WATCHDOG_SLACK_MS = 500;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const loud = (f: ReceivedFrame) => levelDbfs(f.pcm) > LOUD_DBFS;

async function until<T>(what: string, f: () => T | undefined | false | Promise<T | undefined | false>, ms = 10_000): Promise<T> {
  for (const end = Date.now() + ms; ; await sleep(25)) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
  }
}

const pg = postgresAvailability();

describe.skipIf(pg.skip)(`the carrier path behind one load balancer: two nodes on one PostgreSQL${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => {
  let server: PostgresServer | undefined;
  let carrier: FakeCarrier;
  let lb: HttpBalancer;
  let n1: TestDaemon;
  let n2: TestDaemon;
  let agentId = '';

  beforeAll(async () => {
    await new LocalEspeakProvider().warmUp();
    server = await startPostgres();
    const url = await server.createDatabase('carrier_cluster');
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, NUMBER);
    carrier.callee(BUSY_CALLEE, 'busy');
    // The voice webhook reaches node 1, everything else of the carrier (callbacks, streams) node 2.
    lb = await startHttpBalancer((req: IncomingMessage) => ((req.url ?? '').startsWith(VOICE_PATH) ? n1.url : n2.url));
    const common = {
      store: { url, pool_size: 4 },
      security: { encryption_key: Buffer.alloc(32, 0x31).toString('base64'), token_secret: Buffer.alloc(32, 0x32).toString('base64') },
      http: { host: '127.0.0.1', port: 0, public_url: lb.url },
      telco: { api_base_url: carrier.url, timeout_ms: 2000 },
      sip: { ring_timeout_secs: 1 },
    };
    n1 = await startTestDaemon({ ...common, bridge: { max_calls: 1 } }, undefined, { carrier: { watchdogSlackMs: WATCHDOG_SLACK_MS } });
    n2 = await startTestDaemon(common);
    const imported = await n1.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
    expect(imported.status, imported.text).toBe(201);
    const agent = await n1.api('POST', '/v1/agents', { name: 'Cluster desk', first_message: FIRST_MESSAGE, vad_settings: { start_secs: 0.1, stop_secs: 0.4, silence_timeout_secs: 30 }, phone_number_id: imported.body.id });
    expect(agent.status, agent.text).toBe(201);
    agentId = agent.body.id;
  });

  afterAll(async () => {
    await n2?.close();
    await n1?.close();
    await lb?.close();
    await carrier?.close();
    await server?.stop();
  });

  const wsUrl = (base: string) => base.replace(/^http/, 'ws') + STREAM_PATH;

  /** The records of a CallSid (read through node 1's API; both nodes share them). */
  async function records(callSid: string): Promise<any[]> {
    const list = await n1.api('GET', '/v1/calls?source=twilio&page_size=100');
    expect(list.status, list.text).toBe(200);
    return (list.body.calls as any[]).filter((c) => c.carrier_call_id === callSid);
  }
  const ended = (callSid: string) => until(`the ended record of ${callSid}`, async () => (await records(callSid)).find((r) => r.ended_at));

  it('inbound: the webhook on node 1, the stream on node 2 is bridged there once; the token replayed on node 1 is refused', async () => {
    const callSid = sid('CA');
    const params = incomingCallParams({ accountSid: ACCOUNT, callSid, from: CALLER, to: NUMBER });
    const hook = await postVoiceWebhook(lb.url + VOICE_PATH, params, AUTH_TOKEN);
    expect(hook.status, hook.text).toBe(200);
    expect(lb.forwarded.at(-1)).toEqual({ path: VOICE_PATH, to: n1.url });
    expect(hook.stream?.url).toBe(wsUrl(lb.url));
    const stream = await FakeStream.open(hook.stream!.url);
    expect(lb.forwarded.at(-1)).toEqual({ path: STREAM_PATH, to: n2.url });
    stream.start({ accountSid: ACCOUNT, callSid, customParameters: hook.stream!.parameters });
    await stream.waitFor(() => stream.frames.some(loud), 15_000, "the agent's first message");
    expect(stream.frames.every((f) => f.bytes === 160)).toBe(true);
    expect(n2.daemon.bridge.active).toBe(1);
    expect(n1.daemon.bridge.active).toBe(0);

    // The carrier (or anyone who saw the TwiML) opening the same token on node 1: refused.
    const replay = await FakeStream.open(wsUrl(n1.url));
    replay.start({ accountSid: ACCOUNT, callSid, customParameters: hook.stream!.parameters });
    await replay.closed;
    expect(replay.closeCode).toBe(4401);
    expect(n1.daemon.bridge.active).toBe(0);
    expect(stream.closeCode).toBeUndefined();

    // A stream carries no silence: the message is over when the agent's frames stop coming.
    await stream.waitFor(() => performance.now() - stream.frames.at(-1)!.at > 700, 15_000, 'the first message to finish');
    stream.stop(ACCOUNT, callSid);
    const rec = await ended(callSid);
    expect(await records(callSid)).toHaveLength(1);
    expect(rec).toMatchObject({ direction: 'inbound', source: 'twilio', from: CALLER, to: NUMBER, end_status: 'completed' });
    expect(rec.transcript.entries.find((e: any) => e.role === 'assistant')?.message).toBe(FIRST_MESSAGE);
  });

  it('outbound: placed on node 1, its callbacks and stream on node 2: bridged there, completed; node 1 lets it go; a busy callback on node 2 ends the other dial busy, and node 1 leaves it be', async () => {
    const dial = (to: string) => n1.api('POST', `/v1/agents/${agentId}/dial?number=${encodeURIComponent(to)}`);
    const before = carrier.calls.length;
    const r = await dial(CALLEE);
    expect(r.status, r.text).toBe(200);
    const call: FakeCall = await until('the Calls.json request', () => carrier.calls[before]);
    expect(call.params.StatusCallback).toMatch(new RegExp(`^${lb.url}${STATUS_PATH}\\?call=`));
    // Node 1 holds the ringing dial against its bridge.max_calls (1).
    expect((await dial(BUSY_CALLEE)).status).toBe(429);

    const stream = await until('the media stream', () => call.stream);
    await stream.waitFor(() => stream.frames.some(loud), 15_000, "the agent's first message");
    expect(call.callbacks.map((c) => c.status)).toEqual(['initiated', 'ringing', 'in-progress']);
    expect(call.callbacks.every((c) => c.answer === 204)).toBe(true);
    expect(lb.forwarded.filter((f) => f.path.startsWith(STATUS_PATH) || f.path === STREAM_PATH).every((f) => f.to === n2.url)).toBe(true);
    expect(n2.daemon.bridge.active).toBe(1);
    expect(n1.daemon.bridge.active).toBe(0);

    // The dial is node 2's call now: node 1 has room again within seconds, while it still streams.
    const dialledAt = Date.now();
    const busyDial = await until('node 1 to stop counting the dial node 2 took', async () => ((await dial(BUSY_CALLEE)).status === 200 ? true : undefined), 6000);
    expect(busyDial).toBe(true);
    expect(stream.closeCode).toBeUndefined();
    const busy: FakeCall = await until('the busy Calls.json request', () => carrier.calls.find((c) => c.to === BUSY_CALLEE));
    // Its busy callback reaches node 2, which ends the record at once, as one node would.
    const busyRec = await until('the busy record', async () => (await records(busy.sid)).find((x) => x.ended_at), 3000);
    expect(busyRec).toMatchObject({ status: 'ended', end_status: 'busy', termination_reason: 'busy (486)', source: 'twilio', direction: 'outbound' });
    expect(busy.callbacks.map((c) => c.status)).toEqual(['initiated', 'busy']);
    // Node 1's watchdog (ring timeout + slack) comes and goes: no carrier request, no record write.
    await sleep(Math.max(0, dialledAt + 1000 + WATCHDOG_SLACK_MS + 1500 - Date.now()));
    expect(carrier.requests.filter((q) => q.path.includes(`/Calls/${busy.sid}`))).toEqual([]);
    expect(busy.updates).toEqual([]);
    expect((await records(busy.sid))[0]).toEqual(busyRec);

    // The answered call goes on on node 2 until the callee hangs up: it completes normally.
    call.hangup();
    const rec = await ended(call.sid);
    expect(rec).toMatchObject({ source: 'twilio', direction: 'outbound', from: NUMBER, to: CALLEE, status: 'ended', end_status: 'completed', carrier_call_id: call.sid });
    expect(rec.started_at).toBeDefined();
    expect(rec.transcript.entries.find((e: any) => e.role === 'assistant')?.message).toBe(FIRST_MESSAGE);
    await call.done;
    expect(call.updates).toEqual([]);
    expect(await records(call.sid)).toHaveLength(1);
  });
});
