/**
 * The registration client's view of the store (sip/ua/outbound-registrations.ts): the trunks that
 * are to register, with their decrypted outbound credentials, and where their states are kept for
 * the API to read (SipTrunkRepo computes the shown status from them on read). sip/ imports nothing
 * of store/, so the mapping lives here.
 */
import type { Store } from '../store/index.ts';
import type { RegisteringTrunk } from '../sip/ua/index.ts';
import type { OutboundRegistrationState } from '../sip/ua/index.ts';

/** Every trunk with register: true and what its REGISTER needs. */
export async function registeringTrunksOf(store: Store): Promise<RegisteringTrunk[]> {
  return (await store.sipTrunks.registeringTrunks()).map((t) => ({
    id: t.id,
    pbx: t.pbx,
    outbound_host: t.outbound_host,
    username: t.outbound_sip_username,
    password: t.outbound_sip_password,
    contactUser: t.outbound_contact_user,
  }));
}

/** Keeps a trunk's registration state; a trunk deleted meanwhile is simply not updated. */
export function storeOutboundRegistrationState(store: Store, trunkId: string, state: OutboundRegistrationState): Promise<void> {
  return store.sipTrunks.setOutboundRegistration(trunkId, { status: state.status, error: state.error, expiresAt: state.expiresAt ?? null });
}
