/**
 * recording.ready end to end: a daemon with bridge.recording on and http.public_url set takes a
 * call from SIPp (signaling) whose media is this process (test/interop/rtp-peer.ts). An endpoint
 * subscribed to recording.ready, made with POST /v1/webhooks, is a real receiver on loopback that
 * verifies each request with the npm library `standardwebhooks` and the secret the API returned,
 * and, on receipt, before it answers, fetches `data.recording_url` with the organization's API
 * key, as an integrator's server would. What it fetched is the whole WAV: a correct header whose
 * sizes match the bytes, as long as the call, byte for byte the file the daemon kept. One event,
 * one delivery.
 */
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { isByeFromCaller, isInvite200, placeBridgeCall, sipTime } from '../interop/bridge-harness.ts';
import { sippAvailable } from '../interop/sipp.ts';
import { parseWav } from './wav.ts';

const sipp = sippAvailable();
const CALLER = '+15559996100';
const NUMBER = '+15550006100';
const CALL_MS = 5000;

interface Fetched {
  status: number;
  contentType: string | null;
  contentLength: number;
  body: Buffer;
}

interface RecordingReceiver {
  url: string;
  secret: string;
  /** Verified events, in arrival order. */
  events: any[];
  /** What fetching each recording.ready's recording_url returned, by event id. */
  fetched: Map<string, Fetched>;
  rejected: number;
  close(): Promise<void>;
}

/** The integrator's server: verify, then fetch the recording with `apiKey` before answering 200. */
async function startRecordingReceiver(apiKey: () => string): Promise<RecordingReceiver> {
  const rx: RecordingReceiver = { url: '', secret: '', events: [], fetched: new Map(), rejected: 0, close: async () => undefined };
  const server: Server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
        let event: any;
        try {
          event = new Webhook(rx.secret).verify(Buffer.concat(chunks).toString('utf8'), headers);
        } catch {
          rx.rejected++;
          res.writeHead(401).end();
          return;
        }
        rx.events.push(event);
        if (event.type === 'recording.ready') {
          const r = await fetch(event.data.recording_url, { headers: { authorization: `Bearer ${apiKey()}` } });
          const body = Buffer.from(await r.arrayBuffer());
          rx.fetched.set(event.id, { status: r.status, contentType: r.headers.get('content-type'), contentLength: Number(r.headers.get('content-length')), body });
        }
        res.writeHead(200).end('ok');
      })();
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  rx.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/recordings`;
  rx.close = async () => {
    server.closeAllConnections();
    await new Promise<void>((done) => server.close(() => done()));
  };
  return rx;
}

/** A TCP port free on loopback now (the daemon's http.public_url must name its port before it starts). */
async function freePort(): Promise<number> {
  const s = createTcpServer();
  await new Promise<void>((done) => s.listen(0, '127.0.0.1', done));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((done) => s.close(() => done()));
  return port;
}

describe.skipIf(sipp.skip)(`recording.ready end to end (SIPp + RTP peer)${sipp.ok ? '' : `: skipped, ${sipp.reason}`}`, () => {
  let d: TestDaemon;
  let rx: RecordingReceiver;
  let publicUrl = '';
  let endpointId = '';

  beforeAll(async () => {
    await new LocalEspeakProvider().warmUp();
    rx = await startRecordingReceiver(() => d.key);
    const port = await freePort();
    publicUrl = `http://127.0.0.1:${port}`;
    d = await startTestDaemon({
      http: { host: '127.0.0.1', port, public_url: `${publicUrl}/` },
      rtp: { address: '127.0.0.1', media_timeout_secs: 10 },
      bridge: { recording: true },
      webhooks: { allow_private_destinations: true, poll_interval_ms: 200 },
    });
    const hook = await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['recording.ready'] });
    expect(hook.status, hook.text).toBe(201);
    endpointId = hook.body.id;
    rx.secret = hook.body.secret;
    const agentId = (await d.api('POST', '/v1/agents', { name: 'Recorded desk' })).body.id;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
    await rx?.close();
  });

  it('the subscribed receiver gets one signed recording.ready and, fetching its recording_url at once with the API key, the whole WAV', async () => {
    const call = await placeBridgeCall({ scenario: 'bridge-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, caller: CALLER, hangupAfterMs: CALL_MS, timeoutMs: CALL_MS + 15_000 });
    try {
      const r = await call.proc.result;
      expect(r.code, r.describe()).toBe(0);
      const callSeconds = (sipTime(r, isByeFromCaller)! - sipTime(r, isInvite200)!) / 1000;

      for (const deadline = Date.now() + 10_000; rx.fetched.size === 0 && Date.now() < deadline; ) await new Promise((done) => setTimeout(done, 50));
      expect(rx.rejected).toBe(0);
      const ready = rx.events.filter((e) => e.type === 'recording.ready');
      expect(ready, JSON.stringify(rx.events)).toHaveLength(1);
      const event = ready[0];
      const callId: string = event.data.call.id;
      expect(event.data.call).toMatchObject({ id: callId, from: CALLER, has_recording: true });
      expect(event.data.recording_url).toBe(`${publicUrl}/v1/calls/${callId}/recording`);

      const got = rx.fetched.get(event.id)!;
      expect(got.status).toBe(200);
      expect(got.contentType).toBe('audio/wav');
      expect(got.contentLength).toBe(got.body.length);
      const wav = parseWav(got.body);
      expect(wav).toMatchObject({ riff: 'RIFF', wave: 'WAVE', audioFormat: 1, channels: 2, sampleRate: 16_000, blockAlign: 4, bitsPerSample: 16, dataOffset: 44 });
      // The header's sizes were patched before the event: they match the bytes fetched.
      expect(wav.riffSize).toBe(got.body.length - 8);
      expect(wav.dataBytes).toBe(got.body.length - 44);
      const seconds = wav.dataBytes / (wav.sampleRate * wav.blockAlign);
      expect(Math.abs(seconds - callSeconds), `recording ${seconds.toFixed(2)} s, call ${callSeconds.toFixed(2)} s`).toBeLessThan(1);
      // Nothing was added after the event: what the receiver fetched is the file the daemon kept.
      expect(got.body.equals(readFileSync(join(d.dataDir, 'recordings', `${callId}.wav`)))).toBe(true);

      // One delivery, delivered (the receiver answered 200 after fetching).
      const deliveries = await d.api('GET', `/v1/webhooks/${endpointId}/deliveries`);
      expect(deliveries.status).toBe(200);
      const rows = deliveries.body as any[];
      expect(rows.map((x) => [x.event_type, x.call_id, x.event_id])).toEqual([['recording.ready', callId, event.id]]);
    } finally {
      await call.cleanup();
    }
  }, 60_000);
});
