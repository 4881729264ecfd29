/**
 * POST /v1/session-token: validated fully now; tokens and the /v1/connection server come with
 * issue 5. Until then a valid request answers 503 saying so, never a token that opens nothing.
 */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { errorResponses, Obj, Uuid, Variable } from '../schemas.ts';
import { notFound, unavailable } from '../../domain/errors.ts';
import type { Store } from '../../store/index.ts';

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
export function resolveSessionVersion(store: Store, orgId: string, body: { agent_id: string; version_id?: string }): { versionId: string | null } {
  const agent = store.agents.get(orgId, body.agent_id);
  if (!agent || agent.status !== 'active') throw notFound('active agent');
  if (body.version_id) {
    if (!store.versions.get(agent.id, body.version_id)) throw notFound('version of that agent');
    return { versionId: body.version_id };
  }
  return { versionId: agent.active_version_id };
}

export async function sessionTokenRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  app.post(
    '/v1/session-token',
    { schema: { tags: ['sessions'], body: SessionTokenBody, response: { 200: Credentials, ...errorResponses(400, 401, 404, 503) } } },
    async (req) => {
      const body = req.body as { agent_id: string; version_id?: string; transport?: string };
      resolveSessionVersion(deps.store, req.org.id, body);
      if (body.transport === 'webrtc' && !deps.config.webrtc.url) {
        throw unavailable('transport webrtc needs a WebRTC media server: set webrtc.url, webrtc.api_key and webrtc.api_secret');
      }
      throw unavailable('voice sessions are not available yet: this build has no /v1/connection server (see docs/status.md)');
    },
  );
}
