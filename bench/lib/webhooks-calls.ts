/**
 * One call as the daemon writes it, for bench/webhooks' children: CallRepo.insert, markAnswered
 * and end with a short transcript, three transactions, each of which also writes the call's event
 * to the outbox of every subscribed endpoint (call.started, call.answered, call.ended).
 */
import { randomUUID } from 'node:crypto';
import type { Store } from '../../src/store/index.ts';

/** A short conversation, so call.ended carries a transcript as a real call's does. */
const TRANSCRIPT = [
  { index: 0, role: 'assistant', message: 'Hello, this is the front desk. How can I help you today?', type: 'message' as const },
  { index: 1, role: 'user', message: 'I would like to move my appointment to Thursday afternoon, please.', type: 'message' as const },
  { index: 2, role: 'assistant', message: 'Done: Thursday at three. Anything else?', type: 'message' as const },
];

/** Writes call number `n` of organization `orgId` from its start to its end. */
export async function writeCall(store: Store, orgId: string, n: number): Promise<void> {
  const id = randomUUID();
  const from = `+1${String(2_025_550_000 + (n % 1_000_000))}`;
  await store.calls.insert({ id, org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'inbound', from, to: '+12025550100', created_at: new Date().toISOString() });
  if (!(await store.calls.markAnswered(id, new Date().toISOString()))) throw new Error(`call ${id} was not answered`);
  if (!(await store.calls.end(id, { ended_at: new Date().toISOString(), termination_reason: 'client_closed', transcript: TRANSCRIPT }))) throw new Error(`call ${id} did not end`);
}
