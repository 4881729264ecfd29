/** Agents: create, list, get, partial update, delete. */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { agentSchemas } from '../agent-schemas.ts';
import { errorResponses, IdParams, Pagination } from '../schemas.ts';
import { foldAgentAliases } from '../../domain/agent-aliases.ts';
import { analysisFieldsProblem, applyPatch, settingsForCreate, type AgentDefaults, type AgentInput, type AgentSettings } from '../../domain/agent.ts';
import { conflict, notFound, validation } from '../../domain/errors.ts';
import { newId, nowIso } from '../../domain/ids.ts';
import { toAgentResource } from '../../store/agents.ts';
import type { Store } from '../../store/index.ts';
import type { Config } from '../../config.ts';

export function agentDefaults(config: Config): AgentDefaults {
  const d = config.agent_defaults;
  return {
    status: d.status,
    llm: d.llm,
    fallback_llm: d.fallback_llm,
    prompt: d.prompt,
    first_message: d.first_message,
    first_message_interruption_time: d.first_message_interruption_time,
    default_language: d.default_language as AgentDefaults['default_language'],
    summarize_calls: d.summarize_calls,
    analysis_fields: [],
    noise_cancel_settings: { enabled: d.noise_enabled, level: d.noise_level },
    vad_settings: { start_secs: d.vad_start_secs, stop_secs: d.vad_stop_secs, silence_timeout_secs: d.vad_silence_timeout_secs },
    enable_first_message_outbound: d.enable_first_message_outbound,
    voice_settings: { id: d.voice_id, provider: d.voice_provider as AgentDefaults['voice_settings']['provider'] },
    timeout_settings: {
      default_timeout: d.default_timeout,
      timeout_action: d.timeout_action,
      silence_counter: d.silence_counter,
      silence_timeout_action: d.silence_timeout_action,
    },
    keyterms: [...d.keyterms],
  };
}

/** Rules across fields, checked on the merged result so a PATCH cannot leave an agent inconsistent. */
function checkSettings(s: AgentSettings): void {
  const fieldsProblem = analysisFieldsProblem(s.analysis_fields);
  if (fieldsProblem !== undefined) throw validation(fieldsProblem);
  const t = s.timeout_settings;
  if (t.timeout_action === 'transfer_call' && !t.transfer_number) {
    throw validation('timeout_settings.transfer_number is required when timeout_action is transfer_call');
  }
  if (t.silence_timeout_action === 'transfer_call' && !t.silence_transfer_number) {
    throw validation('timeout_settings.silence_transfer_number is required when silence_timeout_action is transfer_call');
  }
}

/**
 * A voice_settings sent in a body must name a voice provider this server serves and, when that
 * provider's voice list is known, one of its voices (src/agent/voice-catalog/catalog.ts). Only
 * what the body sends is checked: a PATCH of other fields does not fail on a stored voice.
 */
async function checkVoice(deps: ApiDeps, log: { info(o: object, m: string): void }, voice: AgentInput['voice_settings']): Promise<void> {
  if (!voice) return;
  const r = await deps.voiceCatalog.check(voice.provider, voice.id);
  if (!r.ok) throw validation(r.error);
  if (r.unchecked) log.info({ provider: voice.provider, voiceId: voice.id }, `voice id accepted unchecked: ${r.unchecked}`);
}

/**
 * phone_number_id must name a number of the same organization, held by no other agent (an
 * imported number routes to exactly one agent).
 */
async function checkPhoneNumber(store: Store, orgId: string, agentId: string, phoneNumberId: string | null): Promise<void> {
  if (phoneNumberId === null) return;
  if (!(await store.telcoNumbers.get(orgId, phoneNumberId))) {
    throw validation('phone_number_id does not name a telco number of this organization');
  }
  const holder = await store.agents.holderOfPhoneNumber(phoneNumberId);
  if (holder && holder !== agentId) throw conflict(`phone_number_id is already assigned to agent ${holder}`);
}

export async function agentRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store, config } = deps;
  const { AgentCreate, AgentPatch, Agent } = agentSchemas(config);
  const defaults = agentDefaults(config);
  const tags = ['agents'];

  app.post(
    '/v1/agents',
    { schema: { tags, body: AgentCreate, response: { 201: Agent, ...errorResponses(400, 401, 409) } } },
    async (req, reply) => {
      const input = foldAgentAliases(req.body as AgentInput & { name: string });
      const settings = settingsForCreate(defaults, input);
      checkSettings(settings);
      await checkVoice(deps, req.log, input.voice_settings);
      const id = newId();
      const agent = await store.tx(async (tx) => {
        await checkPhoneNumber(tx, req.org.id, id, input.phone_number_id ?? null);
        await tx.agents.insert({
          id,
          org_id: req.org.id,
          name: input.name,
          status: input.status ?? defaults.status,
          phone_number_id: input.phone_number_id ?? null,
          settings,
          created_at: nowIso(),
        });
        return tx.agents.get(req.org.id, id);
      });
      req.log.info({ agentId: id }, 'agent created');
      return reply.code(201).send(toAgentResource(agent!));
    },
  );

  app.get(
    '/v1/agents',
    { schema: { tags, querystring: Pagination(config.limits.max_page_size), response: { 200: Type.Array(Agent), ...errorResponses(400, 401) } } },
    async (req) => {
      const q = req.query as { limit?: number; offset?: number };
      return (await store.agents.list(req.org.id, q.limit ?? 100, q.offset ?? 0)).map(toAgentResource);
    },
  );

  app.get('/v1/agents/:id', { schema: { tags, params: IdParams, response: { 200: Agent, ...errorResponses(400, 401, 404) } } }, async (req) => {
    const { id } = req.params as { id: string };
    const agent = await store.agents.get(req.org.id, id);
    if (!agent) throw notFound('agent');
    return toAgentResource(agent);
  });

  app.patch(
    '/v1/agents/:id',
    { schema: { tags, params: IdParams, body: AgentPatch, response: { 200: Agent, ...errorResponses(400, 401, 404, 409) } } },
    async (req) => {
      const { id } = req.params as { id: string };
      const input = foldAgentAliases(req.body as AgentInput);
      // 404 before 400, so another organization's agent id answers as if it did not exist.
      if (input.voice_settings && !(await store.agents.get(req.org.id, id))) throw notFound('agent');
      await checkVoice(deps, req.log, input.voice_settings);
      const updated = await store.tx(async (tx) => {
        const current = await tx.agents.get(req.org.id, id);
        if (!current) throw notFound('agent');
        const settings = applyPatch(current, input);
        checkSettings(settings);
        const phone = input.phone_number_id === undefined ? current.phone_number_id || null : input.phone_number_id;
        if (input.phone_number_id !== undefined) await checkPhoneNumber(tx, req.org.id, id, phone);
        await tx.agents.update({
          id,
          org_id: req.org.id,
          name: input.name ?? current.name,
          status: input.status ?? current.status,
          phone_number_id: phone,
          settings,
          updated_at: nowIso(),
        });
        return (await tx.agents.get(req.org.id, id))!;
      });
      return toAgentResource(updated);
    },
  );

  app.delete('/v1/agents/:id', { schema: { tags, params: IdParams, response: { 204: Type.Null(), ...errorResponses(400, 401, 404) } } }, async (req, reply) => {
    const { id } = req.params as { id: string };
    if (!(await store.agents.delete(req.org.id, id))) throw notFound('agent');
    req.log.info({ agentId: id }, 'agent deleted');
    return reply.code(204).send();
  });
}
