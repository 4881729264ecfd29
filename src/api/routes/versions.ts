/**
 * The agent's conversation flow: draft, versions (tagged snapshots of the draft), publish, and
 * duplicate (copies an agent and one version into a new agent).
 */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { agentSchemas } from '../agent-schemas.ts';
import { DateTime, errorResponses, IdParams, Obj, Uuid } from '../schemas.ts';
import { sendError } from '../errors.ts';
import { conflict, notFound, validation } from '../../domain/errors.ts';
import { settingsOf } from '../../domain/agent.ts';
import { newId, nowIso } from '../../domain/ids.ts';
import { toAgentResource, type StoredAgent } from '../../store/agents.ts';
import { toVersion, type FlowNode } from '../../store/versions.ts';
import type { Store } from '../../store/index.ts';

/** A flow node: kept as sent (a flow editor owns its shape), but it must have an id and a type. */
const Node = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }), type: Type.String({ minLength: 1, maxLength: 100 }) }, { additionalProperties: true });
const Nodes = Type.Array(Node, { maxItems: 5000 });
const DraftBody = Obj({ nodes: Nodes });
const Draft = Type.Object({ nodes: Nodes, updated_at: Type.Union([DateTime(), Type.Null()]) });
const Version = Type.Object(
  { id: Uuid(), agent_id: Uuid(), created_at: DateTime(), published_at: Type.Union([DateTime(), Type.Null()]), tag: Type.String() },
  { title: 'AgentVersion' },
);
const VersionParams = Obj({ id: Uuid('agent id'), versionId: Uuid('version id') });
const DuplicateBody = Obj({
  graph_version_id: Uuid('a version of the source agent'),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 400 })),
  publish: Type.Optional(Type.Boolean({ default: false })),
});

function checkNodeIds(nodes: FlowNode[]): void {
  const seen = new Set<string>();
  for (const n of nodes) {
    if (seen.has(n.id)) throw validation(`body.nodes: node id "${n.id}" appears twice`);
    seen.add(n.id);
  }
}

async function requireAgent(store: Store, orgId: string, id: string): Promise<StoredAgent> {
  const agent = await store.agents.get(orgId, id);
  if (!agent) throw notFound('agent');
  return agent;
}

export async function versionRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store, config } = deps;
  const { Agent } = agentSchemas(config);
  const tags = ['versions'];

  app.get('/v1/agents/:id/draft', { schema: { tags, params: IdParams, response: { 200: Draft, ...errorResponses(400, 401, 404) } } }, async (req) => {
    const { id } = req.params as { id: string };
    await requireAgent(store, req.org.id, id);
    const draft = await store.versions.getDraft(id);
    return { nodes: draft?.nodes ?? [], updated_at: draft?.updated_at ?? null };
  });

  app.put(
    '/v1/agents/:id/draft',
    { schema: { tags, params: IdParams, body: DraftBody, response: { 200: Draft, ...errorResponses(400, 401, 404) } } },
    async (req) => {
      const { id } = req.params as { id: string };
      const { nodes } = req.body as { nodes: FlowNode[] };
      checkNodeIds(nodes);
      return store.tx(async (tx) => {
        await requireAgent(tx, req.org.id, id);
        const d = await tx.versions.putDraft(id, nodes, nowIso());
        return { nodes: d.nodes, updated_at: d.updated_at };
      });
    },
  );

  app.get('/v1/agents/:id/versions', { schema: { tags, params: IdParams, response: { 200: Type.Array(Version), ...errorResponses(400, 401, 404) } } }, async (req) => {
    const { id } = req.params as { id: string };
    await requireAgent(store, req.org.id, id);
    return store.versions.list(id);
  });

  app.post(
    '/v1/agents/:id/versions',
    { schema: { tags, params: IdParams, body: Obj({ tag: Type.String({ minLength: 1, maxLength: 200 }) }), response: { 201: Version, ...errorResponses(400, 401, 404) } } },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      const { tag } = req.body as { tag: string };
      const version = await store.tx(async (tx) => {
        await requireAgent(tx, req.org.id, id);
        const v = { id: newId(), agent_id: id, tag, nodes: (await tx.versions.getDraft(id))?.nodes ?? [], created_at: nowIso(), published_at: null };
        await tx.versions.insert(v);
        return toVersion(v);
      });
      return reply.code(201).send(version);
    },
  );

  app.get(
    '/v1/agents/:id/versions/:versionId',
    { schema: { tags, params: VersionParams, response: { 200: Type.Object({ version: Version, nodes: Nodes }), ...errorResponses(400, 401, 404) } } },
    async (req) => {
      const { id, versionId } = req.params as { id: string; versionId: string };
      await requireAgent(store, req.org.id, id);
      const v = await store.versions.get(id, versionId);
      if (!v) throw notFound('version');
      return { version: toVersion(v), nodes: v.nodes };
    },
  );

  app.post(
    '/v1/agents/:id/versions/:versionId/publish',
    { schema: { tags, params: VersionParams, response: { 200: Version, ...errorResponses(400, 401, 404, 409) } } },
    async (req) => {
      const { id, versionId } = req.params as { id: string; versionId: string };
      const published = await store.tx(async (tx) => {
        await requireAgent(tx, req.org.id, id);
        if (!(await tx.versions.get(id, versionId))) throw notFound('version');
        const at = nowIso();
        if (!(await tx.versions.markPublished(versionId, at))) throw conflict('version is already published');
        await tx.agents.setActiveVersion(id, versionId, at);
        return toVersion((await tx.versions.get(id, versionId))!);
      });
      req.log.info({ agentId: id, versionId }, 'version published');
      return published;
    },
  );

  app.post(
    '/v1/agents/:id/duplicate',
    {
      // The API document: 401 of duplicate has no body.
      config: { emptyUnauthorizedBody: true },
      // A missing body is "missing graph_version_id" (400), said plainly.
      preValidation: async (req, reply) => {
        if (req.body === undefined || req.body === null) return sendError(reply, 400, 'body.graph_version_id is required');
      },
      schema: { tags, params: IdParams, body: DuplicateBody, response: { 201: Agent, 401: Type.Null(), ...errorResponses(400, 404, 409, 500) } },
    },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      const body = req.body as { graph_version_id: string; name?: string; publish?: boolean };
      const created = await duplicateAgent(store, req.org.id, id, body, newId());
      req.log.info({ sourceAgentId: id, agentId: created.id, published: body.publish === true }, 'agent duplicated');
      return reply.code(201).send(toAgentResource(created));
    },
  );
}

/**
 * Copies the source agent and one of its versions into a new agent, in one transaction.
 * The status table of the API document, in order: 404 agent or version not found; 400 the
 * version has no nodes; 409 the destination already has a draft (only reachable when the
 * destination id already exists with a draft, which a fresh uuid never does: checked anyway,
 * because the contract names it). The copy has no phone number and no active version unless
 * `publish` creates and publishes one from the carried-over draft.
 */
export function duplicateAgent(
  store: Store,
  orgId: string,
  sourceId: string,
  body: { graph_version_id: string; name?: string; publish?: boolean },
  destinationId: string,
): Promise<StoredAgent> {
  return store.tx(async (tx) => {
    const source = await requireAgent(tx, orgId, sourceId);
    const version = await tx.versions.get(sourceId, body.graph_version_id);
    if (!version) throw notFound('graph version');
    if (version.nodes.length === 0) throw validation('the source version has no nodes');
    if (await tx.versions.getDraft(destinationId)) throw conflict('the destination agent already has a draft');
    const at = nowIso();
    await tx.agents.insert({
      id: destinationId,
      org_id: orgId,
      name: body.name ?? `${source.name} (Copy)`,
      status: source.status,
      phone_number_id: null,
      settings: settingsOf(source),
      created_at: at,
    });
    await tx.versions.putDraft(destinationId, version.nodes, at);
    if (body.publish) {
      const published = { id: newId(), agent_id: destinationId, tag: version.tag, nodes: version.nodes, created_at: at, published_at: at };
      await tx.versions.insert(published);
      await tx.agents.setActiveVersion(destinationId, published.id, at);
    }
    return (await tx.agents.get(orgId, destinationId))!;
  });
}
