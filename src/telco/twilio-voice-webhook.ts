/**
 * The carrier's voice webhook (Twilio: POST, form-encoded, X-Twilio-Signature): the decision of
 * what happens to a call to an imported number, before anything else runs.
 *
 *   1. the signature, first: it must verify with the auth token of an import under the calling
 *      account (`AccountSid`), or the request gets 403 and nothing about any number is told.
 *   2. the called number (`To`): an import of it under that account whose own token verifies, in
 *      the organization that imported it (else <Reject/>: the number is not imported here);
 *   3. the agent holding that import, active (else <Reject/>), and room under bridge.max_calls
 *      and bridge.max_calls_per_org (else <Reject reason="busy"/>; the organization's slot is
 *      reserved for the call's stream);
 *   4. a one-time stream token bound to this CallSid, and <Connect><Stream> to this daemon with
 *      the call's identifiers and the token as parameters.
 *
 * Idempotent per CallSid (checked after the signature, before the routing): while the call's
 * token waits for its stream, the same webhook again gets the same answer (the token is derived
 * from the CallSid, one grant per call in the store); once the stream started, or the token
 * expired, or a call record carries the CallSid, it gets <Reject/>.
 *
 * One organization never reaches another's agent: the route is the verified import's own
 * organization, and when two organizations imported the number under the same account with the
 * same token (both can sign for it) the call is ambiguous unless exactly one assigned it: then it
 * is rejected.
 */
import type { Logger } from '../log.ts';
import { clipForLog } from '../log-fields.ts';
import { validTwilioSignature } from './twilio-signature.ts';
import type { StreamGrant, StreamTokens } from './twilio-stream-tokens.ts';
import { connectStreamTwiml, rejectTwiml } from './twilio-twiml.ts';

export interface NumberImport {
  id: string;
  org_id: string;
  phone_number: string;
  auth_token: string;
}

export interface VoiceWebhookDeps {
  /** The imports under a carrier account, tokens opened (TelcoNumberRepo.importsOfAccount). */
  importsOfAccount(accountSid: string): NumberImport[] | Promise<NumberImport[]>;
  /** The agent holding an import in its organization, and whether it is active. */
  holderOf(orgId: string, numberId: string): { id: string; active: boolean } | undefined | Promise<{ id: string; active: boolean } | undefined>;
  /**
   * The concurrent call limit a new call of the organization would exceed now (the setting's
   * name), or undefined: then the call is counted from now on (a slot reserved for its stream).
   */
  callLimitReached(orgId: string, callSid: string): string | undefined | Promise<string | undefined>;
  tokens: StreamTokens;
  log: Logger;
}

export interface WebhookRequest {
  /** The URL the carrier requested: public base + path (+ query), as it signed it. */
  url: string;
  params: ReadonlyArray<readonly [string, string]>;
  signature: string | undefined;
  /** wss URL of the stream endpoint. */
  streamUrl: string;
}

/**
 * A refusal the caller logs (WebhookRefusalLog: once per source and window, whoever sends them):
 * its fields clipped, never a token.
 */
export interface Refusal {
  fields: Record<string, unknown>;
  message: string;
}

export type WebhookAnswer = { status: 403; error: string; refusal: Refusal } | { status: 200; twiml: string };

export async function answerVoiceWebhook(deps: VoiceWebhookDeps, req: WebhookRequest): Promise<WebhookAnswer> {
  const p = new Map(req.params);
  const to = p.get('To') ?? '';
  const accountSid = p.get('AccountSid') ?? '';
  const callSid = p.get('CallSid') ?? '';
  const from = p.get('From') ?? '';
  // Every field of the request is the peer's: bounded in the log, however long it is.
  const ids = { callSid: clipForLog(callSid), to: clipForLog(to), accountSid: clipForLog(accountSid) };
  const log = deps.log.child(ids);

  const imports = accountSid === '' ? [] : await deps.importsOfAccount(accountSid);
  // One check per distinct token: an account's imports usually share one.
  const verifies = new Map<string, boolean>();
  const signedBy = (token: string): boolean => {
    let ok = verifies.get(token);
    if (ok === undefined) verifies.set(token, (ok = validTwilioSignature(token, req.url, req.params, req.signature)));
    return ok;
  };
  if (!imports.some((n) => signedBy(n.auth_token))) {
    return {
      status: 403,
      error: 'X-Twilio-Signature does not verify for this URL and account',
      refusal: {
        fields: { ...ids, url: clipForLog(req.url, 256), signature: req.signature === undefined ? 'missing' : 'present', knownAccount: imports.length > 0 },
        message: 'voice webhook refused (403): the X-Twilio-Signature does not verify with the auth token of any import of that account',
      },
    };
  }
  if (callSid === '' || to === '') {
    log.warn('voice webhook without CallSid or To: call rejected');
    return { status: 200, twiml: rejectTwiml('rejected') };
  }
  // One CallSid is one call, however often its webhook comes (the carrier's retry, or a replay of
  // a signed request: the signature has no timestamp). The store decides, on any node.
  const prior = await deps.tokens.callState(accountSid, callSid);
  if (prior === 'pending') {
    log.info('voice webhook repeated: answered with the same stream and token');
    return { status: 200, twiml: connectStreamTwiml(req.streamUrl, { token: deps.tokens.callToken(accountSid, callSid), callSid, from, to }) };
  }
  if (prior === 'used') {
    log.warn('call rejected: this CallSid had its call already (its stream started, or its token expired)');
    return { status: 200, twiml: rejectTwiml('rejected') };
  }
  const verified = imports.filter((n) => n.phone_number === to && signedBy(n.auth_token));
  if (verified.length === 0) {
    log.warn('call rejected: the called number is not imported under that account');
    return { status: 200, twiml: rejectTwiml('rejected') };
  }

  const held: Array<{ number: NumberImport; agent: { id: string; active: boolean } }> = [];
  for (const n of verified) {
    const agent = await deps.holderOf(n.org_id, n.id);
    if (agent !== undefined) held.push({ number: n, agent });
  }
  if (held.length !== 1) {
    log.warn({ orgs: verified.map((n) => n.org_id), assigned: held.length }, held.length === 0 ? 'call rejected: the number is not assigned to an agent' : 'call rejected: the number is assigned in more than one organization');
    return { status: 200, twiml: rejectTwiml('rejected') };
  }
  const { number, agent } = held[0]!;
  if (!agent.active) {
    log.warn({ orgId: number.org_id, agentId: agent.id }, 'call rejected: the agent is inactive');
    return { status: 200, twiml: rejectTwiml('rejected') };
  }
  const limit = await deps.callLimitReached(number.org_id, callSid);
  if (limit !== undefined) {
    log.warn({ orgId: number.org_id, agentId: agent.id }, `call rejected busy: the concurrent call limit ${limit} is reached`);
    return { status: 200, twiml: rejectTwiml('busy') };
  }
  const grant: StreamGrant = { orgId: number.org_id, agentId: agent.id, numberId: number.id, callSid, accountSid, from, to };
  const token = await deps.tokens.issueForCall(grant);
  log.info({ orgId: number.org_id, agentId: agent.id, from: clipForLog(from) }, 'carrier call accepted: connecting its media stream');
  return { status: 200, twiml: connectStreamTwiml(req.streamUrl, { token, callSid, from, to }) };
}
