/**
 * Opens a voice session: the session record (with its call row) is stored first, then its token
 * is returned, because a client may connect the moment it has it. Shared by POST
 * /v1/session-token (web clients) and the call bridge (phone calls, which connect to
 * /v1/connection like any other client).
 */
import { randomUUID } from 'node:crypto';
import type { Store } from '../store/index.ts';
import type { CallDirection } from '../store/calls.ts';
import type { CallSource } from '../domain/call.ts';
import type { SessionTransport } from '../store/sessions.ts';
import type { SessionTokens } from './tokens.ts';
import type { MachineDetectionConfig } from '../domain/dial.ts';

export interface IssueSessionInput {
  orgId: string;
  agentId: string;
  versionId: string | null;
  callerId: string;
  /** `to` of the call record: the number called, or the agent's name for web sessions. */
  callTo: string;
  transport?: SessionTransport;
  direction?: CallDirection;
  sipTrunkId?: string | null;
  chatId?: string | null;
  firstMessage?: string | null;
  prompt?: string | null;
  variables?: Array<{ key: string; value: string }>;
  /** An outbound dial's answering-machine detection (docs/machine-detection.md). */
  machineDetection?: MachineDetectionConfig | null;
  chat?: boolean;
  /** The call record's source when not the direction's (a carrier media stream: twilio), and the carrier's call id. */
  source?: CallSource;
  carrierCallId?: string | null;
}

export interface IssuedSession {
  sessionId: string;
  token: string;
}

export async function issueSession(store: Store, tokens: SessionTokens, s: IssueSessionInput): Promise<IssuedSession> {
  const sessionId = randomUUID();
  const issued = await tokens.sign({ sessionId, orgId: s.orgId, agentId: s.agentId, versionId: s.versionId, chat: s.chat === true });
  await store.sessions.create({
    id: sessionId,
    org_id: s.orgId,
    agent_id: s.agentId,
    version_id: s.versionId,
    caller_id: s.callerId,
    transport: s.transport ?? 'websocket',
    chat_id: s.chatId ?? null,
    first_message: s.firstMessage ?? null,
    prompt: s.prompt ?? null,
    variables: s.variables ?? [],
    machine_detection: s.machineDetection ?? null,
    scopes: issued.claims.scopes,
    token_jti: issued.claims.jti,
    token_expires_at: issued.expiresAt,
    created_at: new Date().toISOString(),
    call_to: s.callTo,
    direction: s.direction ?? 'web',
    sip_trunk_id: s.sipTrunkId ?? null,
    ...(s.source !== undefined ? { source: s.source } : {}),
    carrier_call_id: s.carrierCallId ?? null,
  });
  return { sessionId, token: issued.token };
}
