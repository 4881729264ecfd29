/**
 * RegistrationStore over the store: the bindings of the PBX registered on a digest trunk
 * (sip/ua/registrar.ts), and the trunk's stored outcome of its last REGISTER. The registrar's
 * types are the SIP layer's; the rows are the store's (store/registrations.ts); this file maps
 * one to the other, so sip/ imports nothing of store/.
 */
import type { Store } from '../store/index.ts';
import type { StoredRegistration } from '../store/registrations.ts';
import type { RegisteredContact, RegistrationBinding, RegistrationStore } from '../sip/ua/index.ts';

function toBinding(r: StoredRegistration): RegistrationBinding {
  return {
    contact: r.contact,
    expiresAt: r.expires_at,
    callId: r.call_id,
    cseq: r.cseq,
    transport: r.transport,
    sourceAddress: r.source_address,
    sourcePort: r.source_port,
    ...(r.connection_id === null ? {} : { connectionId: r.connection_id }),
    updatedAt: r.updated_at,
  };
}

function toRow(trunkId: string, b: RegistrationBinding): StoredRegistration {
  return {
    trunk_id: trunkId,
    contact: b.contact,
    expires_at: b.expiresAt,
    call_id: b.callId,
    cseq: b.cseq,
    transport: b.transport,
    source_address: b.sourceAddress,
    source_port: b.sourcePort,
    connection_id: b.connectionId ?? null,
    updated_at: b.updatedAt,
  };
}

export class StoreRegistrations implements RegistrationStore {
  readonly #store: Store;

  constructor(store: Store) {
    this.#store = store;
  }

  async bindings(trunkId: string, now: number): Promise<RegistrationBinding[]> {
    return (await this.#store.registrations.live(trunkId, now)).map(toBinding);
  }

  replace(trunkId: string, bindings: readonly RegistrationBinding[]): Promise<void> {
    return this.#store.registrations.replace(
      trunkId,
      bindings.map((b) => toRow(trunkId, b)),
    );
  }

  /**
   * Kept on the trunk as `auth_failed` until an authenticated REGISTER clears it; the API shows
   * `registered` over it while bindings live (SipTrunkRepo computes the status on read).
   */
  authOutcome(trunkId: string, ok: boolean): Promise<void> {
    return this.#store.sipTrunks.setRegistrationStatus(trunkId, { inbound: ok ? 'not_registered' : 'auth_failed' });
  }
}

/** The trunk's most recent unexpired binding, as an outbound call needs it; undefined when none. */
export async function registeredContactOf(store: Store, trunkId: string, now = Date.now()): Promise<RegisteredContact | undefined> {
  const r = await store.registrations.latest(trunkId, now);
  if (r === undefined) return undefined;
  return {
    contact: r.contact,
    transport: r.transport,
    sourceAddress: r.source_address,
    sourcePort: r.source_port,
    ...(r.connection_id === null ? {} : { connectionId: r.connection_id }),
  };
}
