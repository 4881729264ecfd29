/**
 * Optional OPTIONS pings to every trunk's outbound host (options-ping.ts), with the hosts
 * resolved ahead of each round: the pinger's target list is synchronous, DNS is not. A trunk
 * whose host does not resolve is reported down once, with why. Status changes are logged (one
 * line each) and kept for metrics.
 */
import { outboundTarget, type Pbx } from '../../domain/sip-trunk.ts';
import { OptionsPinger, type OptionsPingTarget } from './options-ping.ts';
import type { TransactionLayer } from '../transaction/index.ts';
import { resolveDestination } from './uac.ts';

export interface PingedTrunk {
  id: string;
  pbx: Pbx;
  outbound_host: string;
}

export interface TrunkHealthOptions {
  layer: TransactionLayer;
  /** Read at every round, so trunks added or removed through the API are picked up. */
  trunks: () => readonly PingedTrunk[];
  intervalMs: number;
  from: string;
  userAgent: string;
  logger: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
  onStatus?: (trunkId: string, up: boolean) => void;
}

export class TrunkHealth {
  readonly #o: TrunkHealthOptions;
  readonly #pinger: OptionsPinger;
  /** Resolved targets by trunk id, refreshed before each round. */
  #targets: OptionsPingTarget[] = [];
  readonly #status = new Map<string, boolean>();
  readonly #unresolvable = new Set<string>();
  #timer: NodeJS.Timeout | undefined;

  constructor(o: TrunkHealthOptions) {
    this.#o = o;
    this.#pinger = new OptionsPinger({
      layer: o.layer,
      targets: () => this.#targets,
      intervalMs: o.intervalMs,
      from: o.from,
      headers: [['User-Agent', o.userAgent]],
      logger: o.logger,
      onStatus: (id, status, detail) => this.#set(id, status === 'up', { status: detail.status, reason: detail.reason, failures: detail.failures, rttMs: detail.rttMs }),
    });
  }

  /** Up/down per trunk id, as last observed. */
  status(trunkId: string): boolean | undefined {
    return this.#status.get(trunkId);
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
    for (const t of this.#o.trunks()) {
      let target;
      try {
        target = outboundTarget(t);
      } catch {
        target = undefined;
      }
      if (target === undefined) continue;
      try {
        const destination = await resolveDestination(target.host, target.port, target.transport);
        this.#unresolvable.delete(t.id);
        const host = target.host.includes(':') && !target.host.startsWith('[') ? `[${target.host}]` : target.host;
        out.push({ id: t.id, destination, uri: `sip:${host}${target.port ? `:${target.port}` : ''}${target.transport === 'udp' ? '' : `;transport=${target.transport}`}` });
      } catch (err) {
        if (!this.#unresolvable.has(t.id)) {
          this.#unresolvable.add(t.id);
          this.#set(t.id, false, { error: err instanceof Error ? err.message : String(err) });
        }
      }
    }
    this.#targets = out;
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
