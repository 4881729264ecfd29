/**
 * A caller whose PBX goes quiet is still answered. SIPp (inbound-acl-then-quiet.xml) calls an ACL
 * trunk's number, streams 2.8 s of recorded speech (test/fixtures/audio/caller-hello.wav) as PCMU
 * RTP once, and then sends no packet at all until its BYE: silence suppression without comfort
 * noise, which PBXs and carriers do. The gap must be silence for turn detection: the caller's turn
 * ends, the local STT transcribes it and the agent (local/echo) answers, all in the call record.
 * Before, the inbound path handed out nothing for a gap and the VAD waited for silent frames that
 * never came: the record held only the first message.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { untilAsync } from '../helpers/until.ts';
import { runSipp, sippAvailable } from '../interop/sipp.ts';

const NUMBER = '+15550007301';
const CALLER = '+15559997301';
const SPEECH = fileURLToPath(new URL('../fixtures/audio/caller-hello.wav', import.meta.url));

// Media on the main thread (the default) and on two media worker threads (rtp.media_threads).
describe.skipIf(sippAvailable().skip).each([0, 2])('a gap in the caller RTP is silence, rtp.media_threads %i', (mediaThreads) => {
  let d: TestDaemon;
  let agentId: string;
  beforeAll(async () => {
    d = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: mediaThreads } });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Quiet PBX', first_message: 'Hi.', vad_settings: { start_secs: 0.2, stop_secs: 0.5, silence_timeout_secs: 30 } })).body.id;
    const trunkId = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
  });

  it('speech and then no RTP: the turn ends and the agent answers', async () => {
    const remote = `127.0.0.1:${d.daemon.sip!.port}`;
    // 2.8 s of speech, then 4.2 s without a packet before the BYE.
    const r = await runSipp({ scenario: 'inbound-acl-then-quiet', remote, service: NUMBER, keys: { caller: CALLER }, audio: SPEECH, durationMs: 7000 });
    expect(r.code, r.describe()).toBe(0);
    let rec: any;
    await untilAsync(async () => {
      const list = await d.api('GET', `/v1/calls?agent_ids=${agentId}`);
      rec = list.body.calls.find((c: any) => c.from === CALLER && c.ended_at);
      return rec !== undefined;
    }, 'the ended call record');
    const entries = rec.transcript.entries.map((e: any) => ({ role: e.role, message: e.message }));
    const said = entries.findIndex((e: any) => e.role === 'user');
    expect(said, JSON.stringify(entries)).toBeGreaterThan(0);
    // local STT transcribes an utterance as its length; the recording is 2.8 s of speech.
    expect(entries[said].message, JSON.stringify(entries)).toMatch(/^\(speech, [23]\.\d seconds\)$/);
    expect(entries.slice(said + 1).some((e: any) => e.role === 'assistant' && e.message.startsWith('You said')), JSON.stringify(entries)).toBe(true);
  });
});
