/**
 * OPTIONS pings through the daemon (sip.options_ping_secs): a trunk whose outbound host answers
 * is up, one whose host refuses TCP connections goes down after two rounds, both visible in
 * /metrics as callbridge_sip_trunk_up.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { SipTransportLayer } from '../../src/sip/transport/index.ts';
import { TransactionLayer } from '../../src/sip/transaction/index.ts';
import { createResponse } from '../../src/sip/message/index.ts';
import { createServer } from 'node:net';

let d: TestDaemon;
let peer: SipTransportLayer;
let layer: TransactionLayer;
let optionsSeen = 0;

async function closedTcpPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

async function metricFor(trunkId: string): Promise<string | undefined> {
  const text = await (await fetch(`${d.url}/metrics`)).text();
  return new RegExp(`^callbridge_sip_trunk_up\\{trunk_id="${trunkId}"\\} (\\d)$`, 'm').exec(text)?.[1];
}

async function waitFor(pred: () => Promise<boolean>, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return pred();
}

describe('trunk OPTIONS pings', () => {
  beforeAll(async () => {
    peer = new SipTransportLayer({ listen: [{ protocol: 'udp', address: '127.0.0.1', port: 0 }] });
    await peer.start();
    layer = new TransactionLayer({ transport: peer });
    layer.on('request', (tx, inbound) => {
      if (inbound.message.method === 'OPTIONS') optionsSeen++;
      tx.respond(createResponse(inbound.message, 200, undefined, { toTag: 'peer' }));
    });
    d = await startTestDaemon({ sip: { options_ping_secs: 1 } });
  });
  afterAll(async () => {
    await d?.close();
    layer?.close();
    await peer?.close();
  });

  it('marks an answering host up and a refusing one down, in /metrics', async () => {
    const upPort = peer.endpoints[0]!.port;
    const downPort = await closedTcpPort();
    const up = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', inbound_auth_type: 'none', outbound_host: `127.0.0.1:${upPort}` })).body;
    const down = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', inbound_auth_type: 'none', outbound_host: `127.0.0.1:${downPort};transport=tcp` })).body;
    expect(await waitFor(async () => (await metricFor(up.id)) === '1', 5000)).toBe(true);
    expect(await waitFor(async () => (await metricFor(down.id)) === '0', 6000)).toBe(true);
    expect(optionsSeen).toBeGreaterThan(0);
    expect(d.daemon.sip!.health!.status(up.id)).toBe(true);
    expect(d.daemon.sip!.health!.status(down.id)).toBe(false);
  });
});
