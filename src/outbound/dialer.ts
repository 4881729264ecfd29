/**
 * The outbound dialer (docs/outbound.md): every node runs one. Each tick it settles the run
 * contacts whose calls have ended (from their call records), then, for each open run, moves it
 * between scheduled and running as its window opens and closes in its contacts' time zones, claims
 * the contacts due under the run's pacing whose zone is inside the window now (store/outbound-runs.ts
 * decides, on the database, so that nodes sharing it never dial one contact twice nor exceed
 * max_concurrent together) and places their calls through
 * `placeCall`, the same dial the REST API uses (the composition root hands it in: this folder
 * never imports the bridge). A run with nothing left to call is completed.
 */
import { randomUUID } from 'node:crypto';
import { DomainError } from '../domain/errors.ts';
import { nowIso } from '../domain/ids.ts';
import { attemptOutcome, nextAfter, openZones, type ContactVariables, type RunSettings } from '../domain/outbound.ts';
import type { ClaimedContact, OpenRun, OutboundRunRepo } from '../store/outbound-runs.ts';
import type { Logger } from '../log.ts';

/** One call of a run, as the list routes it. */
export interface RunDial {
  orgId: string;
  agentId: string;
  /** The list's trunk, or null for the agent's carrier-number route (from_number). */
  sipTrunkId: string | null;
  callerId: string | null;
  number: string;
  variables: ContactVariables;
  machineDetection?: RunSettings['machine_detection'];
}

/** Places the call (its record exists when this resolves); DomainError when it cannot. */
export type PlaceCall = (d: RunDial) => Promise<{ callId: string }>;

export interface OutboundDialerOptions {
  runs: OutboundRunRepo;
  placeCall: PlaceCall;
  nodeId: string;
  logger: Logger;
  /** How often the dialer looks for work (outbound.tick_ms). */
  tickMs: number;
  /** How long a claimed contact stays this node's before another may take it (outbound.lease_secs). */
  leaseMs: number;
  /** A dial refused for a call slot (or while draining) is tried again after this long, the attempt not counted. */
  slotRetryMs: number;
  /** The most dials this node has being placed at once. */
  maxPlacing?: number;
  clock?: () => Date;
}

/** Dial errors that mean "not now" rather than "this attempt failed". */
const LATER_KINDS = new Set(['too_many', 'unavailable']);
/** Ended attempts settled per tick. */
const SETTLE_BATCH = 200;

export class OutboundDialer {
  readonly #o: OutboundDialerOptions;
  /** Lease owner: the node and this process (a restarted node does not inherit its old leases). */
  readonly #owner: string;
  /** Calls this process's previous run of the node left ringing were created before this. */
  readonly #startedAt = nowIso();
  readonly #placing = new Set<Promise<void>>();
  #timer: NodeJS.Timeout | undefined;
  #ticking = false;
  #closed = false;

  constructor(o: OutboundDialerOptions) {
    this.#o = o;
    this.#owner = `${o.nodeId}:${randomUUID().slice(0, 8)}`;
  }

  start(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => void this.tick(), this.#o.tickMs);
    this.#timer.unref();
  }

  /** Stops claiming; dials being placed finish (their calls go on, settled by whichever node runs next). */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    await Promise.allSettled([...this.#placing]);
  }

  /** One pass (the timer's; tests may call it). A pass still running makes this a no-op. */
  async tick(): Promise<void> {
    if (this.#ticking || this.#closed) return;
    this.#ticking = true;
    try {
      await this.#settle();
      const at = this.#o.clock?.() ?? new Date();
      for (const run of await this.#o.runs.open()) {
        if (this.#closed) break;
        await this.#work(run, at);
      }
    } catch (err) {
      this.#o.logger.error({ err }, 'outbound dialer pass failed');
    } finally {
      this.#ticking = false;
    }
  }

  async #settle(): Promise<void> {
    for (const a of await this.#o.runs.endedAttempts(this.#startedAt, SETTLE_BATCH)) {
      const outcome = attemptOutcome(a);
      const next = nextAfter(outcome, a.attempts, a.settings, a.run_status);
      if (await this.#o.runs.settle(a, outcome, next)) this.#o.logger.info({ runId: a.run_id, contactId: a.contact_id, callId: a.call_id, outcome, attempts: a.attempts, next: next.state }, 'outbound attempt settled');
    }
  }

  /**
   * The contact zones of the run whose window is open at `at` (null: contacts without a zone, on
   * the window's own), or undefined for a run without a window (no filter). A run with no pending
   * contact left follows the window's own zone.
   */
  async #openZones(run: OpenRun, at: Date): Promise<Array<string | null> | undefined> {
    const w = run.settings.window;
    if (w === undefined) return undefined;
    const zones = await this.#o.runs.pendingZones(run.id);
    return openZones(w, zones.length > 0 ? zones : [null], at);
  }

  async #work(run: OpenRun, at: Date): Promise<void> {
    const zones = await this.#openZones(run, at);
    const open = zones === undefined || zones.length > 0;
    const wanted = open ? 'running' : 'scheduled';
    if (run.status !== wanted) await this.#o.runs.setWaiting(run.id, wanted, nowIso());
    if (!open) return;
    const room = (this.#o.maxPlacing ?? 50) - this.#placing.size;
    if (room > 0) {
      for (const c of await this.#o.runs.claim(run.id, this.#owner, this.#o.leaseMs, room, zones)) {
        const p = this.#place(run, c).finally(() => this.#placing.delete(p));
        this.#placing.add(p);
      }
    }
    if (await this.#o.runs.finishIfDone(run.id, nowIso())) this.#o.logger.info({ runId: run.id }, 'outbound run completed');
  }

  async #place(run: OpenRun, c: ClaimedContact): Promise<void> {
    const log = this.#o.logger.child({ runId: run.id, contactId: c.contact_id });
    try {
      const { callId } = await this.#o.placeCall({
        orgId: run.org_id,
        agentId: run.agent_id,
        sipTrunkId: run.sip_trunk_id,
        callerId: run.caller_id,
        number: c.phone_number,
        variables: c.variables,
        ...(run.settings.machine_detection !== undefined ? { machineDetection: run.settings.machine_detection } : {}),
      });
      if (!(await this.#o.runs.placed(run.id, c.contact_id, this.#owner, callId))) log.warn({ callId }, 'outbound call placed after its claim lapsed (outbound.lease_secs too short?)');
    } catch (err) {
      if (err instanceof DomainError && LATER_KINDS.has(err.kind)) {
        log.debug({ reason: err.message }, 'outbound dial deferred');
        await this.#o.runs.release(run.id, c.contact_id, this.#owner, this.#o.slotRetryMs).catch((e: unknown) => log.error({ err: e }, 'releasing an outbound contact failed'));
        return;
      }
      log.warn({ err: err instanceof DomainError ? err.message : err }, 'outbound dial failed');
      const next = nextAfter('failed', c.attempts + 1, run.settings, 'running');
      await this.#o.runs.failedToPlace(run.id, c.contact_id, this.#owner, next).catch((e: unknown) => log.error({ err: e }, 'recording a failed outbound dial failed'));
    }
  }
}
