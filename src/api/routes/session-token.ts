/**
 * POST /v1/session-token: stores the session record (with its call row, status pending) and
 * answers its token for /v1/connection; with `transport: "webrtc"` also the LiveKit room, the
 * participant identity, the media server URL and a LiveKit access token (503 when no media server
 * is configured). docs/voice-sessions.md.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { errorResponses, Obj, Uuid, Variable } from '../schemas.ts';
import { notFound, unavailable } from '../../domain/errors.ts';
import type { Store } from '../../store/index.ts';
import type { StoredAgent } from '../../store/agents.ts';
import { signWebrtcToken } from '../../session/tokens.ts';
import { issueSession } from '../../session/issue.ts';

/** caller_id of a WebSocket session when the request names none (API document). */
export const DEFAULT_WEBSOCKET_CALLER_ID = 'api-client';

export const SessionTokenBody = Obj(
  {
    agent_id: Uuid('the agent that runs the session'),
    version_id: Type.Optional(Uuid('version to use; default: the active published version')),
    chat_id: Type.Optional(Uuid('existing chat to continue')),
    caller_id: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    transport: Type.Optional(Type.String({ enum: ['websocket', 'webrtc'] })),
    first_message: Type.Optional(Type.String({ maxLength: 100_000 })),
    prompt: Type.Optional(Type.String({ maxLength: 100_000 })),
    chat: Type.Optional(Type.Boolean()),
    variables: Type.Optional(Type.Array(Variable, { maxItems: 100 })),
  },
  { title: 'SessionTokenRequest' },
);
const Credentials = Type.Object(
  { token: Type.String(), room: Type.Optional(Type.String()), identity: Type.Optional(Type.String()), url: Type.Optional(Type.String()), webrtc_token: Type.Optional(Type.String()) },
  { title: 'SessionCredentials' },
);

/** The version a session runs: the one asked for (it must be the agent's), else the active one. */
export async function resolveSessionVersion(store: Store, orgId: string, body: { agent_id: string; version_id?: string }): Promise<{ agent: StoredAgent; versionId: string | null }> {
  const agent = await store.agents.get(orgId, body.agent_id);
  if (!agent || agent.status !== 'active') throw notFound('active agent');
  if (body.version_id) {
    if (!(await store.versions.get(agent.id, body.version_id))) throw notFound('version of that agent');
    return { agent, versionId: body.version_id };
  }
  return { agent, versionId: agent.active_version_id };
}

interface SessionTokenRequest {
  agent_id: string;
  version_id?: string;
  chat_id?: string;
  caller_id?: string;
  transport?: 'websocket' | 'webrtc';
  first_message?: string;
  prompt?: string;
  chat?: boolean;
  variables?: Array<{ key: string; value: string }>;
}

export async function sessionTokenRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store, tokens, config } = deps;
  app.post(
    '/v1/session-token',
    { schema: { tags: ['sessions'], body: SessionTokenBody, response: { 200: Credentials, ...errorResponses(400, 401, 404, 503) } } },
    async (req) => {
      const body = req.body as SessionTokenRequest;
      const { agent, versionId } = await resolveSessionVersion(store, req.org.id, body);
      const webrtc = body.transport === 'webrtc';
      const { url, api_key: apiKey, api_secret: apiSecret } = config.webrtc;
      if (webrtc && !(url && apiKey && apiSecret)) {
        throw unavailable('transport webrtc needs a WebRTC media server: set webrtc.url, webrtc.api_key and webrtc.api_secret');
      }
      const identity = webrtc ? `caller-${randomBytes(8).toString('hex')}` : undefined;
      const issued = await issueSession(store, tokens, {
        orgId: req.org.id,
        agentId: agent.id,
        versionId,
        callerId: body.caller_id ?? identity ?? DEFAULT_WEBSOCKET_CALLER_ID,
        callTo: agent.name,
        transport: webrtc ? 'webrtc' : 'websocket',
        chatId: body.chat_id ?? null,
        firstMessage: body.first_message ?? null,
        prompt: body.prompt ?? null,
        variables: body.variables ?? [],
        chat: body.chat === true,
      });
      if (!webrtc || !identity) return { token: issued.token };
      const room = `callbridge-${issued.sessionId}`;
      return { token: issued.token, room, identity, url, webrtc_token: await signWebrtcToken({ apiKey, apiSecret, identity, room }) };
    },
  );
}
