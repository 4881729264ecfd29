/**
 * Optional OPTIONS pings to every target of every trunk's outbound host (options-ping.ts). The
 * targets are resolved ahead of each round (the pinger's target list is synchronous, DNS is not):
 * with RFC 3263 (trunk-targets.ts) a host with several SRV targets or addresses gets one ping per
 * target. A target whose pings go unanswered is marked out of service in the shared TargetStatus
 * (calls and registrations then try it last); one that answers again is put back.
 *
 * A trunk is up while at least one of its targets answers, down when all of them are down (or
 * its host does not resolve, reported once with why). Changes are logged, one line each, and
 * passed to onStatus for metrics.
 */
import { outboundTarget, type Pbx } from '../../domain/sip-trunk.ts';
import { endpointKey } from '../dns/index.ts';
import { OptionsPinger, type OptionsPingStatus, type OptionsPingTarget } from './options-ping.ts';
import type { TransactionLayer } from '../transaction/index.ts';
import type { Endpoint } from '../transport/index.ts';
import { resolveDestination } from './uac.ts';
import type { TrunkTargets } from './trunk-targets.ts';

export interface PingedTrunk {
  id: string;
  pbx: Pbx;
  outbound_host: string;
}

export interface TrunkHealthOptions {
  layer: TransactionLayer;
  /** Read at every round, so trunks added or removed through the API are picked up. */
  trunks: () => readonly PingedTrunk[] | Promise<readonly PingedTrunk[]>;
  intervalMs: number;
  from: string;
  userAgent: string;
  logger: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
  onStatus?: (trunkId: string, up: boolean) => void;
  /** RFC 3263 targets and the shared dead-target memory; without it, one A/AAAA target per trunk. */
  targets?: TrunkTargets;
  /** Consecutive unanswered pings that mark a target down. Default 2 (options-ping.ts). */
  failuresBeforeDown?: number;
}

export interface PingedTarget {
  destination: Endpoint;
  /** undefined before its first answer or failure. */
  status: OptionsPingStatus | undefined;
}

interface TargetInfo {
  trunkId: string;
  destination: Endpoint;
}

export class TrunkHealth {
  readonly #o: TrunkHealthOptions;
  readonly #pinger: OptionsPinger;
  /** Resolved targets, refreshed before each round; ids are "<trunk id> <endpoint>". */
  #targets: OptionsPingTarget[] = [];
  readonly #info = new Map<string, TargetInfo>();
  readonly #status = new Map<string, boolean>();
  readonly #unresolvable = new Set<string>();
  #timer: NodeJS.Timeout | undefined;

  constructor(o: TrunkHealthOptions) {
    this.#o = o;
    this.#pinger = new OptionsPinger({
      layer: o.layer,
      targets: () => this.#targets,
      intervalMs: o.intervalMs,
      ...(o.failuresBeforeDown !== undefined ? { failuresBeforeDown: o.failuresBeforeDown } : {}),
      from: o.from,
      headers: [['User-Agent', o.userAgent]],
      logger: o.logger,
      onStatus: (id, status, detail) => this.#onTarget(id, status, { status: detail.status, reason: detail.reason, failures: detail.failures, rttMs: detail.rttMs }),
    });
  }

  /** Up/down per trunk id, as last observed (up: at least one target answers). */
  status(trunkId: string): boolean | undefined {
    return this.#status.get(trunkId);
  }

  /** The pinged targets of a trunk and their status. */
  targets(trunkId: string): PingedTarget[] {
    return this.#targets.filter((t) => this.#info.get(t.id)?.trunkId === trunkId).map((t) => ({ destination: t.destination, status: this.#pinger.status(t.id) }));
  }

  async start(): Promise<void> {
    await this.#resolve();
    this.#pinger.start();
    this.#timer = setInterval(() => void this.#resolve(), this.#o.intervalMs);
    this.#timer.unref();
  }

  close(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#pinger.close();
  }

  async #resolve(): Promise<void> {
    const out: OptionsPingTarget[] = [];
    let trunks: readonly PingedTrunk[];
    try {
      trunks = await this.#o.trunks();
    } catch (err) {
      // The targets of the last good read keep being pinged.
      this.#o.logger.warn({ err }, 'OPTIONS ping: reading the trunks failed');
      return;
    }
    for (const t of trunks) {
      let target;
      try {
        target = outboundTarget(t);
      } catch {
        target = undefined;
      }
      if (target === undefined) continue;
      try {
        const ends = this.#o.targets === undefined ? [await resolveDestination(target.host, target.port, target.transport)] : ((await this.#o.targets.resolve(t))?.targets.map((x) => x.destination) ?? []);
        this.#unresolvable.delete(t.id);
        const host = target.host.includes(':') && !target.host.startsWith('[') ? `[${target.host}]` : target.host;
        for (const destination of ends) {
          const id = `${t.id} ${endpointKey(destination)}`;
          this.#info.set(id, { trunkId: t.id, destination });
          // The Request-URI names the trunk's host; the transport is the one this target is reached by.
          out.push({ id, destination, uri: `sip:${host}${target.port ? `:${target.port}` : ''}${destination.protocol === 'udp' ? '' : `;transport=${destination.protocol}`}` });
        }
      } catch (err) {
        if (!this.#unresolvable.has(t.id)) {
          this.#unresolvable.add(t.id);
          this.#set(t.id, false, { error: err instanceof Error ? err.message : String(err) });
        }
      }
    }
    this.#targets = out;
    const ids = new Set(out.map((t) => t.id));
    for (const id of [...this.#info.keys()]) if (!ids.has(id)) this.#info.delete(id);
    this.#o.targets?.status.keepPinged(new Set(out.map((t) => endpointKey(t.destination))));
  }

  #onTarget(id: string, status: OptionsPingStatus, detail: Record<string, unknown>): void {
    const info = this.#info.get(id);
    if (info === undefined) return;
    this.#o.targets?.status.pinged(info.destination, status === 'up');
    const mine = this.#targets.filter((t) => this.#info.get(t.id)?.trunkId === info.trunkId);
    const states = mine.map((t) => (t.id === id ? status : this.#pinger.status(t.id)));
    const target = `${info.destination.protocol}:${info.destination.address}:${info.destination.port}`;
    if (mine.length > 1) {
      if (status === 'up') this.#o.logger.info({ trunkId: info.trunkId, target, ...detail }, 'trunk target is up (OPTIONS answered)');
      else this.#o.logger.warn({ trunkId: info.trunkId, target, ...detail }, 'trunk target is down (OPTIONS unanswered): tried last until it answers again');
    }
    if (states.includes('up')) this.#set(info.trunkId, true, { target, ...detail });
    else if (states.every((s) => s === 'down')) this.#set(info.trunkId, false, { target, ...detail });
  }

  #set(id: string, up: boolean, detail: Record<string, unknown>): void {
    const before = this.#status.get(id);
    this.#status.set(id, up);
    if (before === up) return;
    if (up) this.#o.logger.info({ trunkId: id, ...detail }, 'trunk outbound host is up (OPTIONS answered)');
    else this.#o.logger.warn({ trunkId: id, ...detail }, 'trunk outbound host is down (OPTIONS unanswered or unresolvable)');
    this.#o.onStatus?.(id, up);
  }
}
