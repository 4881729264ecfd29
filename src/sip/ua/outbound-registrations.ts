/**
 * Every trunk's registration with its carrier (`register: true`), kept in step with the trunks:
 * the list is read again every `reconcileMs`, so a trunk created, changed or deleted through the
 * API starts, restarts or stops its registration without a daemon restart.
 *
 *   trunk appears with register: true      -> a new OutboundRegistration (REGISTER now)
 *   its host, username, password or        -> the old one un-REGISTERs (Expires 0), a new one
 *   contact user changes                      registers
 *   it disappears (deleted, register off)  -> un-REGISTER, forgotten
 *   close({ unregister: true })            -> every one un-REGISTERs at once, bounded in time
 *   setActive(false)                       -> every one stops WITHOUT un-REGISTERing (another
 *                                             node of the cluster registers instead); nothing
 *                                             runs until setActive(true)
 *
 * The trunk list comes from the caller (the store adapter in bridge/), so this file reads no
 * store; states go back through onState for the store to keep and the API to show.
 */
import { createHash } from 'node:crypto';
import { outboundTarget, type Pbx } from '../../domain/sip-trunk.ts';
import { parseUri, type HeaderValue } from '../message/index.ts';
import type { TransactionLayer, TransactionTimers } from '../transaction/index.ts';
import type { SipTransportLayer } from '../transport/index.ts';
import { OutboundRegistration, type OutboundRegistrationState, type RegistrationAttemptOutcome, type RegistrationRetry, type RegistrationTarget } from './outbound-registration.ts';
import { resolveDestination } from './uac.ts';
import type { TrunkTargets } from './trunk-targets.ts';
import type { Endpoint } from '../transport/index.ts';

/** A trunk that registers, as the caller reads it (credentials decrypted, for SIP only). */
export interface RegisteringTrunk {
  id: string;
  pbx: Pbx;
  outbound_host: string;
  username: string;
  /** Never logged. */
  password: string;
  /** The user part of our Contact, unique per trunk: how the carrier's calls to it find the trunk. */
  contactUser: string;
}

export interface OutboundRegistrationsOptions {
  layer: TransactionLayer;
  transport: SipTransportLayer;
  /** Read at every reconciliation; may throw (logged, nothing changes that round). */
  trunks: () => readonly RegisteringTrunk[] | Promise<readonly RegisteringTrunk[]>;
  expiresSecs: number;
  retry: RegistrationRetry;
  /** How often the trunk list is compared with the running registrations. Default 2 s. */
  reconcileMs?: number;
  unregisterTimeoutMs?: number;
  headers?: [string, HeaderValue][];
  onState?: (trunkId: string, state: OutboundRegistrationState) => void;
  onAttempt?: (trunkId: string, outcome: RegistrationAttemptOutcome) => void;
  logger: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
  clock?: TransactionTimers;
  /**
   * RFC 3263 resolution (NAPTR/SRV/A) with failover between the registrar's targets and the
   * shared dead-target memory (the user agent's). Without it: an A/AAAA lookup, one target.
   */
  targets?: TrunkTargets;
  /** Silence before the next target; default 4 s. */
  failoverTimeoutMs?: number;
  /** Whether to register at all from the start (see setActive); default true. */
  active?: boolean;
}

interface Running {
  /** Hash of what the registration was built from; a change means register anew. */
  fingerprint: string;
  registration: OutboundRegistration | undefined;
}

function fingerprintOf(t: RegisteringTrunk): string {
  // Hashed so the password is not kept a second time in plain text.
  return createHash('sha256').update(JSON.stringify([t.pbx, t.outbound_host, t.username, t.password, t.contactUser])).digest('hex');
}

function hostPort(host: string, port: number | undefined): string {
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return port === undefined ? h : `${h}:${port}`;
}

export class OutboundRegistrations {
  readonly #o: OutboundRegistrationsOptions;
  readonly #running = new Map<string, Running>();
  readonly #states = new Map<string, OutboundRegistrationState>();
  /** Why a trunk's registration could not start, as last logged: retried every round, logged once. */
  readonly #startErrors = new Map<string, string>();
  #timer: NodeJS.Timeout | undefined;
  #reconciling: Promise<void> | undefined;
  #closed = false;
  #active: boolean;

  constructor(o: OutboundRegistrationsOptions) {
    this.#o = o;
    this.#active = o.active ?? true;
  }

  /** Whether registrations run (false: another node of the cluster registers). */
  get active(): boolean {
    return this.#active;
  }

  /**
   * Starts or stops registering without closing. Stopping drops every registration at once and
   * sends no un-REGISTER: the bindings stay at the carriers until the node that registers instead
   * replaces them (or they expire). States are forgotten, so nothing more is reported for them.
   */
  async setActive(active: boolean): Promise<void> {
    if (this.#closed || this.#active === active) return;
    this.#active = active;
    if (active) {
      await this.reconcile();
      return;
    }
    const all = [...this.#running.values()];
    this.#running.clear();
    this.#states.clear();
    this.#startErrors.clear();
    await Promise.all(all.map((r) => r.registration?.stop({ unregister: false })));
  }

  /** The current state per registering trunk id. */
  get states(): ReadonlyMap<string, OutboundRegistrationState> {
    return this.#states;
  }

  /** Registers every trunk that should be, then keeps reconciling. */
  async start(): Promise<void> {
    await this.reconcile();
    this.#timer = setInterval(() => void this.reconcile(), this.#o.reconcileMs ?? 2000);
    this.#timer.unref();
  }

  /** Compares the trunk list with the running registrations once (see the file comment). */
  reconcile(): Promise<void> {
    this.#reconciling ??= this.#reconcile().finally(() => {
      this.#reconciling = undefined;
    });
    return this.#reconciling;
  }

  /** Stops every registration; with `unregister`, each sends Expires 0 (in parallel, bounded). */
  async close(options: { unregister: boolean }): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    await this.#reconciling;
    const all = [...this.#running.values()];
    this.#running.clear();
    await Promise.all(all.map((r) => r.registration?.stop(options)));
  }

  async #reconcile(): Promise<void> {
    if (this.#closed || !this.#active) return;
    let trunks: readonly RegisteringTrunk[];
    try {
      trunks = await this.#o.trunks();
    } catch (err) {
      this.#o.logger.warn({ err }, 'outbound registration: reading the trunks failed');
      return;
    }
    // Set inactive while the list was read: another node registers now.
    if (this.#closed || !this.#active) return;
    const wanted = new Map(trunks.map((t) => [t.id, t]));
    const stopping: Promise<void>[] = [];
    for (const [id, r] of this.#running) {
      const t = wanted.get(id);
      if (t !== undefined && fingerprintOf(t) === r.fingerprint) continue;
      this.#running.delete(id);
      this.#states.delete(id);
      this.#startErrors.delete(id);
      if (r.registration !== undefined) {
        this.#o.logger.info({ trunkId: id }, t === undefined ? 'outbound registration: trunk deleted or register turned off: un-registering' : 'outbound registration: trunk host or credentials changed: un-registering, then registering anew');
        stopping.push(r.registration.stop({ unregister: true }));
      }
    }
    // Trunks that never got running (their host did not resolve) and are gone now.
    for (const id of [...this.#startErrors.keys()]) {
      if (wanted.has(id)) continue;
      this.#startErrors.delete(id);
      this.#states.delete(id);
    }
    // The old binding goes before the new one is asked for (same Contact: a registrar could
    // otherwise take our Expires 0 as removing the new binding).
    await Promise.all(stopping);
    for (const t of wanted.values()) {
      if (this.#closed || !this.#active || this.#running.has(t.id)) continue;
      await this.#startOne(t);
    }
  }

  async #startOne(t: RegisteringTrunk): Promise<void> {
    const running: Running = { fingerprint: fingerprintOf(t), registration: undefined };
    this.#running.set(t.id, running);
    const log = { trunkId: t.id, outboundHost: t.outbound_host };
    const fail = (error: string): void => {
      // Stopped meanwhile (closed, set inactive, the trunk changed): not ours to report.
      if (this.#running.get(t.id) !== running) return;
      if (this.#startErrors.get(t.id) !== error) this.#o.logger.warn({ ...log, error }, 'outbound registration cannot start; retrying every few seconds');
      this.#startErrors.set(t.id, error);
      this.#setState(t.id, { status: 'failed', error, expiresAt: undefined });
      // Forgotten, so the next reconciliation tries again (a DNS name may resolve later).
      this.#running.delete(t.id);
    };
    let target;
    try {
      target = outboundTarget(t);
    } catch {
      target = undefined;
    }
    if (target === undefined) return fail('outbound_host is not a usable host[:port][;transport=]');
    const trunkTargets = this.#o.targets;
    // Our Contact for a target: the listener of its protocol and family (its transport may differ per target).
    const contactFor = (e: Endpoint): string => {
      const l = this.#o.transport.localEndpoint(e.protocol, e.address.includes(':') ? 6 : 4);
      // A sips: registrar: a sips: Contact (the carrier must reach us over TLS too).
      if (target.secure === true) return parseUri(`sips:${t.contactUser}@${hostPort(l.address, l.port)}`).toString();
      return parseUri(`sip:${t.contactUser}@${hostPort(l.address, l.port)}${l.protocol === 'udp' ? '' : `;transport=${l.protocol}`}`).toString();
    };
    const resolveTargets = async (): Promise<RegistrationTarget[]> => {
      const ends = trunkTargets === undefined ? [await resolveDestination(target.host, target.port, target.transport)] : ((await trunkTargets.resolve(t))?.targets.map((x) => x.destination) ?? []);
      const out: RegistrationTarget[] = [];
      for (const e of ends) {
        try {
          out.push({ destination: e, contact: contactFor(e) });
        } catch {
          // no listener to send to it from
        }
      }
      if (out.length === 0 && ends.length > 0) throw new Error(`no ${ends[0]!.protocol.toUpperCase()} listener to register from`);
      return out;
    };
    let first: RegistrationTarget[];
    try {
      first = await resolveTargets();
    } catch (err) {
      return fail(err instanceof Error ? err.message : String(err));
    }
    if (this.#closed || this.#running.get(t.id) !== running) return;
    if (first.length === 0) return fail('outbound_host resolved to no target');
    const { destination, contact } = first[0]!;
    const scheme = target.secure === true ? 'sips' : 'sip';
    const transportParam = target.secure === true || target.transport === 'udp' ? '' : `;transport=${target.transport}`;
    const registrarHost = hostPort(target.host, target.port);
    let aor: string;
    let requestUri: string;
    try {
      aor = parseUri(`${scheme}:${encodeURIComponent(t.username)}@${registrarHost}`).toString();
      requestUri = parseUri(`${scheme}:${registrarHost}${transportParam}`).toString();
    } catch (err) {
      return fail(`cannot build the REGISTER: ${err instanceof Error ? err.message : String(err)}`);
    }
    this.#startErrors.delete(t.id);
    let lastStatus: string | undefined;
    running.registration = new OutboundRegistration({
      layer: this.#o.layer,
      destination,
      requestUri,
      aor,
      contact,
      credentials: { username: t.username, password: t.password },
      expiresSecs: this.#o.expiresSecs,
      retry: this.#o.retry,
      ...(this.#o.unregisterTimeoutMs !== undefined ? { unregisterTimeoutMs: this.#o.unregisterTimeoutMs } : {}),
      ...(this.#o.headers ? { headers: this.#o.headers } : {}),
      ...(this.#o.clock ? { clock: this.#o.clock } : {}),
      onState: (state) => {
        if (this.#running.get(t.id) !== running) return;
        // One line per change of status, not per refresh.
        if (state.status !== lastStatus) {
          if (state.status === 'registered') this.#o.logger.info({ ...log, aor, contact, expiresAt: state.expiresAt }, 'outbound registration: registered');
          else if (state.status !== 'pending') this.#o.logger.warn({ ...log, aor, status: state.status, error: state.error }, 'outbound registration failed; retrying after a back-off');
          lastStatus = state.status;
        }
        this.#setState(t.id, state);
      },
      onAttempt: (outcome) => this.#o.onAttempt?.(t.id, outcome),
      // RFC 5626 CRLF keep-alives on a TCP/TLS registration (none over UDP).
      keepAlive: {
        ping: (e, timeoutMs) => this.#o.transport.pingEndpoint(e, timeoutMs),
        onFlowFailed: (e, why) =>
          this.#o.logger.warn({ ...log, registrar: `${e.protocol}:${e.address}:${e.port}`, why }, 'outbound registration: keep-alive failed (no pong); registering again on a new connection'),
      },
      ...(trunkTargets !== undefined
        ? {
            targets: resolveTargets,
            ...(this.#o.failoverTimeoutMs !== undefined ? { failoverTimeoutMs: this.#o.failoverTimeoutMs } : {}),
            onTarget: (e: Endpoint, result: 'failed' | 'answered') => (result === 'failed' ? trunkTargets.status.failed(e) : trunkTargets.status.answered(e)),
          }
        : {}),
    });
    running.registration.start();
  }

  #setState(trunkId: string, state: OutboundRegistrationState): void {
    this.#states.set(trunkId, state);
    try {
      this.#o.onState?.(trunkId, state);
    } catch (err) {
      this.#o.logger.warn({ err, trunkId }, 'outbound registration: onState threw');
    }
  }
}
