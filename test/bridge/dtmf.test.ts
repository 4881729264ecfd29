/**
 * DTMF across the bridge, both ways, on a real call: SIPp signals (bridge-acl.xml offers
 * telephone-event/8000 as PT 101), the test's RTP peer is the caller's media, the agent's STT is
 * a fake Deepgram-live server (test/agent/stt) so the test scripts what the caller "said".
 *
 *   agent -> caller: the caller says (scripted) "tool send_dtmf digits=42"; local/echo calls the
 *     send_dtmf tool; the bridge plays RFC 4733 events: the peer captures PT 101 packets whose
 *     event codes are 4 then 2, each ending with the E bit.
 *   caller -> agent: the call's own `dtmf` event (what RFC 4733 or SIP INFO reception fires:
 *     tested in test/sip) is raised on the live SipCall; the keys reach the agent through the
 *     `dtmf` extension message and local/echo answers "[The caller pressed 12#]".
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeListenServer, type FakeListenServer } from '../agent/stt/fake-stt-servers.ts';
import { placeBridgeCall } from '../interop/bridge-harness.ts';
import { sippAvailable } from '../interop/sipp.ts';
import { speechLike } from '../helpers/speech-like.ts';

const NUMBER = '+15550007101';
const CALLER = '+15559997101';

// Media on the main thread (the default) and on two media worker threads (rtp.media_threads).
describe.skipIf(sippAvailable().skip).each([0, 2])('DTMF through the bridge, rtp.media_threads %i', (mediaThreads) => {
  let d: TestDaemon;
  let stt: FakeListenServer;
  let agentId: string;
  beforeAll(async () => {
    stt = await startFakeListenServer();
    d = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: mediaThreads }, stt: { provider: 'stream', base_url: stt.baseUrl, api_key: 'k', model: 'nova-3' } });
    agentId = (await d.api('POST', '/v1/agents', { name: 'IVR caller', first_message: 'Hi.', vad_settings: { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 30 } })).body.id;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
    await stt?.close();
  });

  it('the agent presses keys as RFC 4733 events; the caller presses keys and the agent hears them', async () => {
    const call = await placeBridgeCall({ scenario: 'bridge-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, caller: CALLER, hangupAfterMs: 12_000 });
    try {
      // Agent -> caller: a scripted utterance makes local/echo call send_dtmf.
      await call.peer.waitFor(() => call.peer.spurts().length >= 1, 8000, 'the first message');
      stt.finalizeTranscript = 'tool send_dtmf digits=42';
      await call.peer.play(speechLike(0.8));
      // Each key ends with three E-bit packets (RFC 4733 2.5.1.4 redundancy): wait for two keys.
      await call.peer.waitFor(() => new Set(events(call.peer.captured).filter((e) => e.end).map((e) => e.event)).size >= 2, 8000, 'two RFC 4733 events with the E bit');
      const ended = events(call.peer.captured).filter((e) => e.end);
      expect([...new Set(ended.map((e) => e.event))]).toEqual([4, 2]);

      // Caller -> agent: the live call reports keys, as RFC 4733 or INFO reception does.
      const sipCall = d.daemon.sip!.ua.calls.find((c) => c.from === CALLER)!;
      expect(sipCall).toBeDefined();
      for (const k of ['1', '2', '#']) sipCall.emit('dtmf', k, 'rfc4733');
      const calls = async () => (await d.api('GET', `/v1/calls?outbound=false&agent_ids=${agentId}`)).body.calls as any[];
      // The caller hangs up (hangupAfterMs); the transcript is stored with the call's end.
      let transcript: Array<{ role?: string; message?: string; type: string }> = [];
      await call.proc.result;
      const end = Date.now() + 5000;
      for (;;) {
        const rec = (await calls())[0];
        if (rec?.ended_at) {
          transcript = rec.transcript.entries;
          break;
        }
        if (Date.now() > end) throw new Error('the call record never ended');
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(transcript).toContainEqual(expect.objectContaining({ type: 'tool_call', toolCall: expect.objectContaining({ toolName: 'send_dtmf', arguments: '{"digits":"42"}' }) }));
      expect(transcript).toContainEqual(expect.objectContaining({ type: 'tool_call_output', toolCallOutput: 'Sent 42.', toolCall: expect.objectContaining({ toolName: 'send_dtmf', output: 'Sent 42.' }) }));
      expect(transcript).toContainEqual(expect.objectContaining({ type: 'message', role: 'user', message: '[The caller pressed 12#]' }));
      expect(transcript).toContainEqual(expect.objectContaining({ type: 'message', role: 'assistant', message: 'You said: [The caller pressed 12#].' }));
    } finally {
      await call.cleanup();
    }
  });
});

/** RFC 4733 events (PT 101) in a capture: event code and the E (end) bit. */
function events(captured: readonly { payloadType: number; payload: Uint8Array }[]): Array<{ event: number; end: boolean }> {
  return captured.filter((p) => p.payloadType === 101 && p.payload.length >= 4).map((p) => ({ event: p.payload[0]!, end: (p.payload[1]! & 0x80) !== 0 }));
}
