/**
 * The voice session of a routed inbound leg: the routed agent must still be there and active
 * (it may have been deactivated while the call rang), then a session is opened for it with the
 * call's numbers, trunk and session variables (call-variables.ts). What the core gets is either that opening or why to refuse the call.
 */
import type { Store } from '../store/index.ts';
import type { CallLeg, RefusalCause } from './call-leg.ts';
import type { OpenedSession, SessionOpener } from './session-opener.ts';
import type { SessionVariable } from '../session/runtime-contract.ts';

/** What the core needs of the opened session (the session's id and where to connect). */
export type InboundSession = { refuse: RefusalCause; why: string } | { open: () => Promise<Pick<OpenedSession, 'sessionId' | 'connectUrl'>> };

export async function inboundSession(
  agents: Pick<Store['agents'], 'get'>,
  sessions: SessionOpener,
  leg: Pick<CallLeg, 'route' | 'from' | 'to'>,
  variables: SessionVariable[] = [],
): Promise<InboundSession> {
  const route = leg.route;
  if (route === undefined) return { refuse: 'internal_error', why: 'inbound call without a route' };
  const agent = await agents.get(route.orgId, route.agentId);
  if (agent === undefined || agent.status !== 'active') return { refuse: 'agent_unavailable', why: `agent ${route.agentId} is gone or inactive` };
  return {
    open: () =>
      sessions.open({
        orgId: route.orgId,
        agentId: agent.id,
        versionId: agent.active_version_id,
        callerId: leg.from,
        callTo: leg.to,
        direction: 'inbound',
        sipTrunkId: route.trunkId,
        variables,
      }),
  };
}
