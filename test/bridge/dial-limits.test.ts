/**
 * bridge.max_calls_per_org on outbound dials through a SIP trunk: while the organization's one
 * call rings, a second dial is refused 429; when the far end answers 486 Busy Here the dial
 * fails, its call slot goes back, and the next dial is placed. The far end is a bare UDP socket
 * that holds each INVITE until the test answers it.
 */
import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A far end that keeps the INVITEs it gets and answers one final status when told. */
class HoldingUas {
  readonly invites: Array<{ text: string; from: RemoteInfo }> = [];
  private constructor(readonly socket: Socket) {
    socket.on('message', (buf, from) => {
      const text = buf.toString('utf8');
      if (text.startsWith('INVITE ')) this.invites.push({ text, from });
    });
  }

  static async start(): Promise<HoldingUas> {
    const socket = createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
    return new HoldingUas(socket);
  }

  get port(): number {
    return this.socket.address().port;
  }

  /** Answers the i-th INVITE with a final status (its Via, From, To + tag, Call-ID and CSeq copied). */
  answer(i: number, status: number, reason: string): void {
    const { text, from } = this.invites[i]!;
    const head = text.split('\r\n\r\n')[0]!.split('\r\n');
    const copy = (name: string) => head.filter((l) => l.toLowerCase().startsWith(`${name.toLowerCase()}:`));
    const lines = [`SIP/2.0 ${status} ${reason}`, ...copy('Via'), ...copy('From'), ...copy('To').map((l) => `${l};tag=uas${i}`), ...copy('Call-ID'), ...copy('CSeq'), 'Content-Length: 0', '', ''];
    this.socket.send(lines.join('\r\n'), from.port, from.address);
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }
}

describe('bridge.max_calls_per_org on outbound SIP dials', () => {
  let d: TestDaemon;
  let uas: HoldingUas;
  let agentId = '';
  let trunkId = '';
  beforeAll(async () => {
    uas = await HoldingUas.start();
    d = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: 0 }, bridge: { max_calls_per_org: 1 } });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Caller' })).body.id;
    const trunk = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'T', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.0/8'], outbound_host: `127.0.0.1:${uas.port}` });
    expect(trunk.status, trunk.text).toBe(201);
    trunkId = trunk.body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, alternate_number: '4000' })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
    await uas?.close();
  });

  const dial = (to: string) => d.api('POST', `/v1/agents/${agentId}/dial?number=${encodeURIComponent(to)}&sip_trunk_id=${trunkId}&caller_id=%2B15550000000`);

  async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
    const end = Date.now() + 5000;
    while (!(await check())) {
      if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
      await delay(20);
    }
  }

  it('a second dial while the first rings is 429; the first answered busy gives its slot back and the next dial is placed', async () => {
    const first = await dial('+15551230001');
    expect(first.status, first.text).toBe(200);
    await until('the first INVITE arrives', () => uas.invites.length === 1);
    expect(await d.daemon.bridge.slotsHeld()).toBe(1);

    const second = await dial('+15551230002');
    expect(second.status, second.text).toBe(429);
    expect(second.body.error).toBe('too many calls in progress for this organization: try again later');

    uas.answer(0, 486, 'Busy Here');
    await until('the busy dial gives its slot back', async () => (await d.daemon.bridge.slotsHeld()) === 0);
    const third = await dial('+15551230003');
    expect(third.status, third.text).toBe(200);
    await until('the third INVITE arrives', () => uas.invites.length >= 2);
    uas.answer(uas.invites.length - 1, 486, 'Busy Here');
    await until('its slot goes back too', async () => (await d.daemon.bridge.slotsHeld()) === 0);
  });
});
