/**
 * Once-per-cluster work on two callbridge nodes sharing one PostgreSQL database (started by the
 * test): node 1 a real `callbridge start` child process (so it can be killed with SIGKILL), node
 * 2 an in-process daemon. One trunk with register: true points at a bare carrier registrar on
 * loopback.
 *
 *   both up                -> one node holds every role (callbridge_cluster_role 1 there, 0 on
 *                             the other); only that node REGISTERs
 *   kill -9 the holder     -> the other node takes the roles and REGISTERs within the poll
 *                             (cluster.singleton_poll_secs 1): it reads the trunks at once
 *   the dead node restarts -> it holds nothing and does not register
 *   the holder drains      -> no un-REGISTER (the carrier keeps a binding); the other node
 *                             takes over and REGISTERs
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { startCarrierRegistrar, type CarrierRegistrar, type ReceivedRegister } from '../helpers/raw-carrier-registrar.ts';
import { delay } from '../helpers/until.ts';
import { startCallbridgeNode, type CallbridgeNode } from './callbridge-node.ts';

const KEY = Buffer.alloc(32, 0x61).toString('base64');
const TOKEN_SECRET = Buffer.alloc(32, 0x62).toString('base64');
const USER = 'cluster-reg';
const PASSWORD = 'cluster-Reg-Secret-7f3a';
const POLL_SECS = 1;
/** The registration client compares the trunk list with what runs every 2 s. */
const RECONCILE_MS = 2000;
const pgAvailable = postgresAvailability();

/** The SIP port in a REGISTER's Contact: which node sent it (every node is on 127.0.0.1). */
function senderPort(r: ReceivedRegister): number {
  const m = /@127\.0\.0\.1:(\d+)/.exec(r.request.get('Contact') ?? '');
  if (!m) throw new Error(`REGISTER without a 127.0.0.1 Contact: ${r.request.get('Contact')}`);
  return Number(m[1]);
}

/** The value of callbridge_cluster_role for each role, from a /metrics text. */
function roleGauge(metrics: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of metrics.matchAll(/^callbridge_cluster_role\{role="([a-z_]+)"\} (\d)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}
const ALL_HELD = { carrier_registration: 1, sip_registration_sweep: 1, session_token_sweep: 1 };
const NONE_HELD = { carrier_registration: 0, sip_registration_sweep: 0, session_token_sweep: 0 };

describe.skipIf(pgAvailable.skip)(`once-per-cluster work on two nodes sharing PostgreSQL${pgAvailable.skip ? `: skipped, ${pgAvailable.reason}` : ''}`, () => {
  let server: PostgresServer;
  let url: string;
  let registrar: CarrierRegistrar;
  let node1: CallbridgeNode | undefined;
  let node2: TestDaemon | undefined;

  beforeAll(async () => {
    server = await startPostgres();
    url = await server.createDatabase('once_per_cluster');
    registrar = await startCarrierRegistrar({ user: USER, password: PASSWORD, grantSecs: 600 });
  });
  afterAll(async () => {
    await node2?.close().catch(() => {});
    await node1?.close().catch(() => {});
    await registrar?.close();
    await server?.stop();
  });

  const metricsOf = async (base: string): Promise<Record<string, number>> => roleGauge(await (await fetch(`${base}/metrics`)).text());
  /** The first REGISTER answered 200 from index `from` on. */
  const nextRegistered = (from: number, timeoutMs: number) => registrar.waitFor((r) => r.answered === 200 && r.expires !== 0, timeoutMs, from);

  it('one node registers; a killed holder is replaced, a restarted one stays idle, a draining one hands over without un-registering', async () => {
    node1 = await startCallbridgeNode({
      name: 'roles1',
      env: {
        CALLBRIDGE_STORE_URL: url,
        CALLBRIDGE_STORE_POOL_SIZE: '4',
        CALLBRIDGE_ENCRYPTION_KEY: KEY,
        CALLBRIDGE_TOKEN_SECRET: TOKEN_SECRET,
        CALLBRIDGE_CLUSTER_SINGLETON_POLL_SECS: String(POLL_SECS),
        CALLBRIDGE_SIP_TRANSPORTS: 'udp',
      },
    });
    const base1 = `http://127.0.0.1:${node1.httpPort}`;
    node2 = await startTestDaemon({
      store: { url, pool_size: 4 },
      security: { encryption_key: KEY, token_secret: TOKEN_SECRET },
      cluster: { singleton_poll_secs: POLL_SECS },
      sip: { transports: 'udp' },
    });
    const port2 = node2.daemon.sip!.port;
    // node1 started first on an empty cluster: every role is its own.
    expect(await metricsOf(base1)).toEqual(ALL_HELD);
    expect(await metricsOf(node2.url)).toEqual(NONE_HELD);

    // A trunk written through node 2 (the shared store): node 1 registers it, node 2 does not.
    const created = await node2.api('POST', '/v1/sip-trunks', {
      pbx: 'generic',
      name: 'carrier',
      inbound_auth_type: 'none',
      outbound_host: `127.0.0.1:${registrar.port}`,
      outbound_sip_username: USER,
      outbound_sip_password: PASSWORD,
      register: true,
    }, { key: node1.key });
    expect(created.status, created.text).toBe(201);
    const first = await nextRegistered(0, 10_000);
    expect(senderPort(first)).toBe(node1.sipPort);
    // Node 2 reconciles every 2 s: give it two rounds to show it does not register.
    await delay(2 * RECONCILE_MS);
    expect(registrar.registers.map(senderPort).filter((p) => p !== node1!.sipPort), 'REGISTERs from node 2').toEqual([]);
    expect(node2.daemon.sip!.registrations.active).toBe(false);
    // The state node 1 keeps is read on node 2.
    const shown = await node2.api('GET', `/v1/sip-trunks/${created.body.id}`, undefined, { key: node1.key });
    expect(shown.body.outbound_registration_status).toBe('registered');

    // kill -9 the holder: its connection goes with it, node 2 takes the roles on its next try and
    // registers at its next reconciliation.
    const beforeKill = registrar.registers.length;
    await node1.kill9();
    // Documented bound: a poll to take the role, then the REGISTER at once (here with a
    // reconciliation's worth of slack, times three, for a busy machine).
    const taken = await nextRegistered(beforeKill, (POLL_SECS * 1000 + RECONCILE_MS) * 3);
    expect(senderPort(taken)).toBe(port2);
    expect(await metricsOf(node2.url)).toEqual(ALL_HELD);
    expect(node2.daemon.sip!.registrations.active).toBe(true);

    // The dead node comes back: it holds nothing and does not register.
    await node1.start();
    const afterRestart = registrar.registers.length;
    expect(await metricsOf(base1)).toEqual(NONE_HELD);
    await delay(2 * RECONCILE_MS);
    expect(registrar.registers.slice(afterRestart).filter((r) => senderPort(r) === node1!.sipPort)).toEqual([]);
    expect(await metricsOf(base1)).toEqual(NONE_HELD);

    // The holder (node 2) drains: no Expires 0 from it; node 1 takes over and registers.
    const beforeDrain = registrar.registers.length;
    await node2.close();
    node2 = undefined;
    const handedOver = await nextRegistered(beforeDrain, (POLL_SECS * 1000 + RECONCILE_MS) * 3);
    expect(senderPort(handedOver)).toBe(node1.sipPort);
    expect(registrar.registers.slice(beforeDrain).filter((r) => r.expires === 0), 'un-REGISTERs at the hand-over').toEqual([]);
    expect(await metricsOf(base1)).toEqual(ALL_HELD);
    // The log says who took what.
    expect(node1.output()).toMatch(/cluster role carrier_registration taken/);
  }, 120_000);
});
