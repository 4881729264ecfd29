/**
 * The per-trunk and per-organization call limits (bridge.max_calls_per_trunk,
 * bridge.max_calls_per_org). On PostgreSQL they are counted in the store's call_slots table so
 * that they hold across every node sharing the database (docs/store-postgres.md "Several
 * nodes"). On SQLite one node owns the file, so this node's memory holds the whole count:
 * MemorySlots, which costs nothing, where a slot row costs a committed transaction (about 2.7 ms
 * an acquire and release measured on the development VM). bridge.max_calls stays per node,
 * counted in memory by BridgedCalls (bridged-calls.ts).
 *
 * A slot is taken when a call is admitted and given back when it ends, whatever the end. When
 * neither limit applies to a call (both 0, or only a per-trunk limit and no trunk) nothing is
 * read or written: the default configuration costs the call setup no database round trip.
 */
import { randomUUID } from 'node:crypto';
import type { CallSlotRepo, SlotLimits, SlotRefusal, SlotRequest } from '../store/call-slots.ts';
import { isUniqueViolation } from '../store/db.ts';

/** Where slots are counted: the store's CallSlotRepo (PostgreSQL) or MemorySlots (SQLite: one node). */
export type SlotCounter = Pick<CallSlotRepo, 'acquire' | 'release' | 'wouldRefuse' | 'count' | 'adopt' | 'releaseHeldBy'>;

/** The slots of one node in memory, with the same answers as CallSlotRepo gives for a database only this node uses. */
export class MemorySlots implements SlotCounter {
  readonly #slots = new Map<string, Omit<SlotRequest, 'id'>>();

  acquire(req: SlotRequest, limits: SlotLimits): Promise<SlotRefusal | undefined> {
    const over = this.#over(req, limits);
    if (over === undefined) this.#slots.set(req.id, { nodeId: req.nodeId, orgId: req.orgId, trunkId: req.trunkId });
    return Promise.resolve(over);
  }

  wouldRefuse(req: Omit<SlotRequest, 'id' | 'nodeId'>, limits: SlotLimits): Promise<SlotRefusal | undefined> {
    return Promise.resolve(this.#over(req, limits));
  }

  release(id: string): Promise<void> {
    this.#slots.delete(id);
    return Promise.resolve();
  }

  adopt(id: string, nodeId: string): Promise<boolean> {
    const s = this.#slots.get(id);
    if (s !== undefined) s.nodeId = nodeId;
    return Promise.resolve(s !== undefined);
  }

  releaseHeldBy(id: string, nodeId: string): Promise<void> {
    if (this.#slots.get(id)?.nodeId === nodeId) this.#slots.delete(id);
    return Promise.resolve();
  }

  count(by: { orgId: string } | { trunkId: string } | { nodeId: string }): Promise<number> {
    let n = 0;
    for (const s of this.#slots.values()) if ('orgId' in by ? s.orgId === by.orgId : 'trunkId' in by ? s.trunkId === by.trunkId : s.nodeId === by.nodeId) n++;
    return Promise.resolve(n);
  }

  #over(req: Omit<SlotRequest, 'id' | 'nodeId'>, limits: SlotLimits): SlotRefusal | undefined {
    let org = 0;
    let trunk = 0;
    for (const s of this.#slots.values()) {
      if (s.orgId === req.orgId) org++;
      if (req.trunkId !== null && s.trunkId === req.trunkId) trunk++;
    }
    if (limits.perOrg > 0 && org >= limits.perOrg) return 'org';
    if (limits.perTrunk > 0 && req.trunkId !== null && trunk >= limits.perTrunk) return 'trunk';
    return undefined;
  }
}

export interface CallSlotLimits {
  maxCallsPerTrunk: number;
  maxCallsPerOrg: number;
}

/** A slot held by a call (or the nothing a call needs when no limit applies to it). */
export interface HeldSlot {
  /** Gives the slot back; idempotent. */
  release(): void;
}

export type SlotResult = { refused: SlotRefusal; why: string } | { held: HeldSlot };

const NOTHING_HELD: HeldSlot = { release: () => undefined };

export class CallSlots {
  readonly #repo: SlotCounter;
  readonly #nodeId: string;
  readonly #limits: CallSlotLimits;
  readonly #log: { warn(obj: object, msg: string): void };
  /** Releases still on their way (shutdown waits for them). */
  readonly #releasing = new Set<Promise<void>>();
  /** Slots this node reserved for a leg to come (reserve()), each with the timer that frees it unadopted. */
  readonly #reserved = new Map<string, NodeJS.Timeout>();

  constructor(repo: SlotCounter, nodeId: string, limits: CallSlotLimits, log: { warn(obj: object, msg: string): void }) {
    this.#repo = repo;
    this.#nodeId = nodeId;
    this.#limits = limits;
    this.#log = log;
  }

  /** Whether a call of this organization through this trunk is counted (false: no database work). */
  applies(trunkId: string | null): boolean {
    return this.#limits.maxCallsPerOrg > 0 || (this.#limits.maxCallsPerTrunk > 0 && trunkId !== null);
  }

  /**
   * Takes a slot for a call, or says which limit refuses it (with a sentence naming the
   * organization or trunk and the setting). `force`: count the call without refusing it (a call
   * already answered, e.g. the stream of an outbound carrier dial checked when it was placed).
   */
  async acquire(orgId: string, trunkId: string | null, force = false): Promise<SlotResult> {
    if (!this.applies(trunkId)) return { held: NOTHING_HELD };
    const id = randomUUID();
    const l = this.#limits;
    const refused = await this.#repo.acquire({ id, nodeId: this.#nodeId, orgId, trunkId }, force ? { perOrg: 0, perTrunk: 0 } : { perOrg: l.maxCallsPerOrg, perTrunk: l.maxCallsPerTrunk });
    if (refused !== undefined) return { refused, why: refusal(refused, orgId, trunkId, l) };
    return { held: this.#heldSlot(id, orgId) };
  }

  #heldSlot(id: string, orgId: string): HeldSlot {
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.#release(id, orgId);
      },
    };
  }

  #unreserve(key: string, orgId: string): void {
    clearTimeout(this.#reserved.get(key));
    this.#reserved.delete(key);
    this.#track(this.#repo.releaseHeldBy(key, this.#nodeId), key, orgId);
  }

  /**
   * Reserves a slot under `key` for a call whose leg comes later, maybe on another node (the
   * carrier's voice webhook: the call's media stream adopts it, adopt()). Unadopted after `ttlMs`
   * (the stream's token has expired by then) it is freed. Undefined: reserved, or no limit applies.
   */
  async reserve(orgId: string, key: string, ttlMs: number): Promise<{ refused: SlotRefusal; why: string } | undefined> {
    if (!this.applies(null)) return undefined;
    if (this.#reserved.has(key)) return undefined;
    let refused: SlotRefusal | undefined;
    try {
      refused = await this.#repo.acquire({ id: key, nodeId: this.#nodeId, orgId, trunkId: null }, { perOrg: this.#limits.maxCallsPerOrg, perTrunk: 0 });
    } catch (err) {
      // The same call's webhook again (the carrier retried it, maybe on another node): reserved already.
      if (isUniqueViolation(err)) return undefined;
      throw err;
    }
    if (refused !== undefined) return { refused, why: refusal(refused, orgId, null, this.#limits) };
    const timer = setTimeout(() => this.#unreserve(key, orgId), ttlMs);
    timer.unref();
    this.#reserved.set(key, timer);
    return undefined;
  }

  /**
   * The slot reserved under `key` (by any node), taken over by this node's call; when there is
   * none (no reservation, or it was freed), a slot taken now as acquire() does.
   */
  async adopt(orgId: string, key: string): Promise<SlotResult> {
    if (!this.applies(null)) return { held: NOTHING_HELD };
    clearTimeout(this.#reserved.get(key));
    this.#reserved.delete(key);
    if (!(await this.#repo.adopt(key, this.#nodeId))) return this.acquire(orgId, null);
    return { held: this.#heldSlot(key, orgId) };
  }

  /** Frees the reservations no call adopted yet (the node stops: a stream after that takes a new slot). */
  dropReservations(): void {
    for (const key of [...this.#reserved.keys()]) this.#unreserve(key, '');
  }

  /** Which limit a call would exceed now, without taking a slot (a look before a carrier call is placed or accepted). */
  async wouldRefuse(orgId: string, trunkId: string | null): Promise<SlotRefusal | undefined> {
    if (!this.applies(trunkId)) return undefined;
    return this.#repo.wouldRefuse({ orgId, trunkId }, { perOrg: this.#limits.maxCallsPerOrg, perTrunk: this.#limits.maxCallsPerTrunk });
  }

  /** The slots this node holds now (its calls counted against the limits). */
  held(): Promise<number> {
    return this.#repo.count({ nodeId: this.#nodeId });
  }

  /** Resolves once every release issued so far is done (before the store closes). */
  async settled(): Promise<void> {
    while (this.#releasing.size > 0) await Promise.all([...this.#releasing]);
  }

  #release(id: string, orgId: string): void {
    this.#track(this.#repo.release(id), id, orgId);
  }

  #track(release: Promise<void>, id: string, orgId: string): void {
    const p = release.catch((err: unknown) => {
      // The slot stays counted until this node restarts (it frees its own slots at start) or,
      // if it dies, until a survivor frees them (docs/store-postgres.md "Several nodes").
      this.#log.warn({ err, orgId, slot: id }, 'giving back a call slot failed: it stays counted until this node restarts');
    });
    this.#releasing.add(p);
    void p.then(() => this.#releasing.delete(p));
  }
}

/** The log and error sentence of a refusal. */
function refusal(over: SlotRefusal, orgId: string, trunkId: string | null, l: CallSlotLimits): string {
  return over === 'org'
    ? `the concurrent call limit of organization ${orgId} (bridge.max_calls_per_org ${l.maxCallsPerOrg}) is reached`
    : `the concurrent call limit of trunk ${trunkId ?? ''} (bridge.max_calls_per_trunk ${l.maxCallsPerTrunk}) is reached`;
}
