/**
 * The carrier's final word on a dial that never connected, and the status callbacks of dials this
 * node does not hold (docs/telco.md "Several nodes behind one load balancer"): behind a shared
 * load balancer a dial's callbacks may reach any node, and a node without the dial pending reads
 * it from the store. Only a dial of the callback's account that is still ringing is touched: a
 * final status ends it (grant spent, record ended as a dial that never connected), `answered` is
 * remembered in the store; one that ended or streams (on any node) is left to that node.
 *
 * Apart from CarrierDials (carrier-dial.ts), which keeps the dials placed here (their watchdogs,
 * the store check), because these steps read and write only the store: nothing of this node's
 * state, so they are the same whichever node the callback reaches.
 */
import type { Logger } from '../log.ts';
import type { Store } from '../store/index.ts';
import type { CarrierCallProgress, CarrierCallStatus } from '../telco/twilio-call-status.ts';
import type { StreamTokens } from '../telco/twilio-stream-tokens.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import type { CallRecordWriter } from './call-record-writer.ts';

export interface DialCallbackDeps {
  store: Pick<Store, 'streamGrants'>;
  tokens: Pick<StreamTokens, 'revoke' | 'bindCall'>;
  records: Pick<CallRecordWriter, 'failedDial'>;
  metrics?: BridgeMetrics | undefined;
  log: Logger;
}

type FinalStatus = Extract<CarrierCallProgress, { kind: 'ended' }>;

/** The failed-dial reason of a final status (completed without a stream: answered, but the TwiML never reached us). */
const failedReason = (pr: FinalStatus) => (pr.dial === 'completed' ? 'no_media_stream' : pr.dial);

/** A final status of a dial never connected: its grant spent, its record ended (unless another node did, or it streams). */
export async function endUnconnectedDial(deps: DialCallbackDeps, callId: string, u: CarrierCallStatus, pr: FinalStatus, log: Logger): Promise<void> {
  const reason = failedReason(pr);
  await deps.tokens.revoke(callId);
  if (await deps.records.failedDial(callId, reason, u.sipResponseCode)) {
    deps.metrics?.failure(`dial_${reason}`);
    log.info({ callSid: u.callSid, status: pr.status, sipResponseCode: u.sipResponseCode }, 'outbound carrier call not connected');
  } else {
    log.info({ callSid: u.callSid, status: pr.status }, 'final status of an outbound carrier call that ended or streams elsewhere: nothing to do here');
  }
}

/** A verified status callback for a dial not pending here (placed by another node, or forgotten): read from the store. */
export async function dialStatusElsewhere(deps: DialCallbackDeps, u: CarrierCallStatus): Promise<void> {
  if (u.callId === undefined) return;
  const grants = deps.store.streamGrants;
  const d = await grants.carrierDial(u.callId, u.accountSid);
  if (d === undefined || (d.callSid !== null && d.callSid !== u.callSid) || d.ended || d.streaming) {
    deps.log.debug({ callId: u.callId, callSid: u.callSid, known: d !== undefined }, 'status callback of a call not ringing here or anywhere: ignored');
    return;
  }
  const log = deps.log.child({ component: 'bridge', callId: u.callId, orgId: d.orgId, callSid: u.callSid });
  // The placing node may not have stored the CallSid yet: the grant needs it for the stream.
  if (d.callSid === null) await deps.tokens.bindCall(u.callId, u.callSid);
  const pr = u.progress;
  if (pr.kind === 'progress') log.info({ status: pr.status, placedElsewhere: true }, 'outbound carrier call progress');
  else if (pr.kind === 'answered') {
    await grants.markAnswered(u.callId);
    log.info({ placedElsewhere: true }, 'outbound carrier call answered: waiting for its media stream');
  } else await endUnconnectedDial(deps, u.callId, u, pr, log);
}
