/**
 * This node's lease and the look for dead nodes (docs/store-postgres.md "Several nodes"): at start the node frees the
 * call slots its previous run left and writes its lease; then every cluster.heartbeat_secs it
 * refreshes the lease and takes over the nodes whose lease is older than
 * cluster.node_timeout_secs (their calls end failed, node_lost; their slots are freed). At a
 * clean stop, after its calls have ended, it deletes its lease.
 */
import type { Store } from './index.ts';

export interface NodeHeartbeatOptions {
  nodeId: string;
  heartbeatMs: number;
  nodeTimeoutMs: number;
  /** What operators see in the lease table. */
  httpUrl?: string;
  sipAddress?: string;
  log: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void; debug(obj: object, msg: string): void };
  /** Live leases seen at each heartbeat (a gauge). */
  onNodes?: (count: number) => void;
}

export class NodeHeartbeat {
  readonly #store: Pick<Store, 'clusterNodes' | 'callSlots' | 'client'>;
  readonly #o: NodeHeartbeatOptions;
  #startedAt: number | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** The beat in progress: beats never overlap, and stop() waits for it. */
  #beating: Promise<void> | undefined;

  constructor(store: Pick<Store, 'clusterNodes' | 'callSlots' | 'client'>, options: NodeHeartbeatOptions) {
    this.#store = store;
    this.#o = options;
  }

  /** Frees this node's leftover slots, writes its lease and starts beating. Before any call is taken. */
  async start(): Promise<void> {
    const { nodeId } = this.#o;
    // SQLite: one node owns the file, so every slot in it is a previous run's (whatever node id
    // that run had). PostgreSQL: only this node's; the others' belong to live nodes or to the sweep.
    const freed = this.#store.client.dialect === 'sqlite' ? await this.#store.callSlots.releaseAll() : await this.#store.callSlots.releaseNode(nodeId);
    // A fresh lease of this id is another process with the same cluster.node_id (or this node's
    // previous run, killed less than node_timeout_secs ago): worth a line, since two live nodes
    // sharing an id would end each other's calls at start and take each other's lease.
    const same = (await this.#store.clusterNodes.list()).find((n) => n.node_id === nodeId && n.age_ms < this.#o.nodeTimeoutMs);
    if (same !== undefined) this.#o.log.warn({ nodeId, lastHeartbeatMsAgo: same.age_ms }, 'cluster: a lease of this node id was refreshed recently: if another node runs with this cluster.node_id, give each node its own');
    if (freed > 0) this.#o.log.warn({ nodeId, slots: freed }, 'cluster: freed call slots a previous run of this node never gave back');
    this.#startedAt = await this.#join();
    const nodes = await this.#store.clusterNodes.list();
    this.#o.onNodes?.(nodes.length);
    this.#o.log.info({ nodeId, startedAt: this.#startedAt, nodes: nodes.map((n) => n.node_id) }, 'cluster: lease written');
    this.#timer = setInterval(() => {
      this.#beating ??= this.#beat().finally(() => (this.#beating = undefined));
    }, this.#o.heartbeatMs);
    this.#timer.unref();
  }

  /** One heartbeat and one look for dead nodes now (tests; the timer does it otherwise). */
  beat(): Promise<void> {
    this.#beating ??= this.#beat().finally(() => (this.#beating = undefined));
    return this.#beating;
  }

  /** Stops beating and deletes this run's lease (a clean stop: the calls have ended). */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#beating;
    if (this.#startedAt !== undefined) await this.#store.clusterNodes.leave(this.#o.nodeId, this.#startedAt);
    this.#startedAt = undefined;
  }

  #join(): Promise<number> {
    return this.#store.clusterNodes.join(this.#o.nodeId, { ...(this.#o.httpUrl !== undefined ? { httpUrl: this.#o.httpUrl } : {}), ...(this.#o.sipAddress !== undefined ? { sipAddress: this.#o.sipAddress } : {}) });
  }

  async #beat(): Promise<void> {
    const { nodeId, log } = this.#o;
    if (this.#startedAt === undefined) return;
    try {
      if (!(await this.#store.clusterNodes.heartbeat(nodeId, this.#startedAt))) {
        // A survivor declared this node dead (no heartbeat for node_timeout_secs: a stall, or the
        // database out of reach) and ended its calls: the node is alive, so it takes a new lease.
        log.warn({ nodeId }, 'cluster: this node\'s lease was taken over (declared dead: its calls were ended node_lost); writing a new one');
        this.#startedAt = await this.#join();
      }
      const lost = await this.#store.clusterNodes.sweepDead(this.#o.nodeTimeoutMs, new Date().toISOString());
      for (const l of lost) log.warn({ nodeId, lostNode: l.nodeId, calls: l.calls, slots: l.slots }, `cluster: node ${l.nodeId} stopped heartbeating: ended its ${l.calls} call(s) as node_lost and freed ${l.slots} call slot(s)`);
      const nodes = await this.#store.clusterNodes.list();
      this.#o.onNodes?.(nodes.length);
      log.debug({ nodeId, nodes: nodes.length }, 'cluster: heartbeat');
    } catch (err) {
      // The next beat tries again; past node_timeout_secs without one, the others take over.
      log.warn({ err, nodeId }, 'cluster: heartbeat failed');
    }
  }
}
