/**
 * POST /v1/agents/{id}/dial: validated fully (every documented error), then placed by the call
 * bridge. With `sipTrunkId`: through that SIP trunk. Without: from the agent's imported carrier
 * number, through the SIP trunk `telco.outbound_trunks` maps its carrier account to when there is
 * one (an operator's explicit choice for that account wins), else through the carrier's own call
 * API (docs/telco.md; needs http.public_url). `{ success: true }` means the call record exists and
 * the call is on its way (the INVITE sent, or the carrier accepted the Calls.json request);
 * progress (answered, busy, no_answer, failed) is in GET /v1/calls/{id}.
 */
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { errorResponses, IdParams, Obj, Uuid, Variable } from '../schemas.ts';
import { forbidden, notFound, unavailable, validation } from '../../domain/errors.ts';
import { DIAL_STRING_PATTERN, isDialString, normalizeDialString } from '../../domain/phone.ts';
import type { Store } from '../../store/index.ts';
import { MACHINE_DETECTION_MODES, type MachineDetectionConfig } from '../../domain/dial.ts';

export interface DialRequest {
  orgId: string;
  agentId: string;
  number: string;
  /** The trunk route, or undefined for the agent's carrier-number route. */
  sipTrunkId?: string;
  /** Carrier route: the agent's imported number the call is placed from. */
  telcoNumberId?: string;
  callerId?: string;
  firstMessage?: string;
  prompt?: string;
  variables: { key: string; value: string }[];
  /** Answering-machine detection: the dial's own option, or an outbound run's (docs/machine-detection.md). */
  machineDetection?: MachineDetectionConfig;
}

/**
 * The dial options' names are the service's (its OpenAPI and SDK: sipTrunkId, callerId,
 * firstMessage, prompt); the snake_case names used before stay accepted as aliases.
 */
export const DIAL_QUERY_ALIASES = { sipTrunkId: 'sip_trunk_id', callerId: 'caller_id', firstMessage: 'first_message' } as const;

const dialOptions = {
  sipTrunkId: Uuid('SIP trunk to call through (the agent must be assigned on it); without it, the agent’s carrier number'),
  callerId: Type.String({ pattern: DIAL_STRING_PATTERN, description: 'caller ID shown to the callee (SIP From user); default: the agent’s number on the trunk, else the agent id' }),
  firstMessage: Type.String({ maxLength: 100_000, description: 'overrides the agent’s first message for this call' }),
};
const aliasOf = (name: keyof typeof DIAL_QUERY_ALIASES) =>
  Type.Optional({ ...dialOptions[name], description: `alias of ${name}; sending both with different values is a 400` });

const Query = Obj({
  number: Type.Optional(Type.String({ maxLength: 40, description: 'phone number to call (or `destination`)' })),
  destination: Type.Optional(Type.String({ maxLength: 40, description: 'same as `number`' })),
  sipTrunkId: Type.Optional(dialOptions.sipTrunkId),
  callerId: Type.Optional(dialOptions.callerId),
  firstMessage: Type.Optional(dialOptions.firstMessage),
  prompt: Type.Optional(Type.String({ maxLength: 100_000, description: 'overrides the agent’s system prompt for this call' })),
  sip_trunk_id: aliasOf('sipTrunkId'),
  caller_id: aliasOf('callerId'),
  first_message: aliasOf('firstMessage'),
  machineDetection: Type.Optional(
    Type.Union(
      MACHINE_DETECTION_MODES.map((m) => Type.Literal(m)),
      { description: 'ours (docs/machine-detection.md): answering-machine detection mode, as the body\'s machineDetection.mode (a message goes in the body)' },
    ),
  ),
});

/** The query with each snake_case alias folded into the service's name. @throws validation when the two differ. */
export function foldDialAliases(q: Record<string, string | undefined>): Record<string, string | undefined> {
  const out = { ...q };
  for (const [name, alias] of Object.entries(DIAL_QUERY_ALIASES)) {
    const value = out[alias];
    delete out[alias];
    if (value === undefined) continue;
    if (out[name] !== undefined && out[name] !== value) {
      throw validation(`querystring: ${name} and ${alias} are the same option with different values; send one of them`);
    }
    out[name] = value;
  }
  return out;
}
const MachineDetection = Obj(
  {
    mode: Type.Union(
      MACHINE_DETECTION_MODES.map((m) => Type.Literal(m)),
      { description: 'off: no detection; hangup: a machine\'s call ends at once; leave_message: `message` is spoken after the beep, then the call ends' },
    ),
    message: Type.Optional(Type.String({ maxLength: 10_000, description: 'leave_message: what to say ({{variables}} filled in); default: the first message' })),
  },
  { description: 'ours (docs/machine-detection.md): answering-machine detection for this call' },
);
const Body = Obj({ variables: Type.Optional(Type.Array(Variable, { maxItems: 100 })), machineDetection: Type.Optional(MachineDetection) });

/** The dial's machine detection from the body's object and the query's mode (which must agree). @throws validation when they differ. */
export function machineDetectionOf(queryMode: string | undefined, body: MachineDetectionConfig | undefined): MachineDetectionConfig | undefined {
  if (queryMode !== undefined && body !== undefined && body.mode !== queryMode) {
    throw validation('machineDetection: the querystring names mode ' + queryMode + ' and the body ' + body.mode + '; send one of them');
  }
  const md = body ?? (queryMode !== undefined ? { mode: queryMode as MachineDetectionConfig['mode'] } : undefined);
  if (md === undefined || md.mode === 'off') return undefined;
  if (md.message !== undefined && md.mode !== 'leave_message') throw validation('body.machineDetection.message applies to mode leave_message only');
  return md;
}

/** Resolves and checks everything a dial needs; throws the documented error otherwise. */
export async function resolveDial(
  store: Store,
  orgId: string,
  agentId: string,
  query: Record<string, string | undefined>,
  variables: DialRequest['variables'],
  bodyMachineDetection?: MachineDetectionConfig,
): Promise<DialRequest> {
  const q = foldDialAliases(query);
  if (q.number !== undefined && q.destination !== undefined && normalizeDialString(q.number) !== normalizeDialString(q.destination)) {
    throw validation('querystring: number and destination name different numbers; send one of them');
  }
  const raw = q.number ?? q.destination;
  if (raw === undefined || raw === '') throw validation('querystring.number (or destination) is required');
  if (!isDialString(raw)) throw validation('querystring.number must be an E.164 number or a dial string of digits, * and #');
  const machineDetection = machineDetectionOf(q.machineDetection, bodyMachineDetection);
  const agent = await store.agents.get(orgId, agentId);
  if (!agent) throw notFound('agent');
  if (agent.status !== 'active') throw notFound('active agent');
  const req: DialRequest = {
    orgId,
    agentId,
    number: normalizeDialString(raw),
    callerId: q.callerId,
    firstMessage: q.firstMessage,
    prompt: q.prompt,
    variables,
    ...(machineDetection ? { machineDetection } : {}),
  };
  if (q.sipTrunkId) {
    if (!(await store.sipTrunks.get(orgId, q.sipTrunkId))) throw notFound('sip trunk');
    if (!(await store.assignments.listByTrunk(q.sipTrunkId)).some((a) => a.agent_id === agentId)) {
      throw forbidden('the agent has no assignment on that SIP trunk');
    }
    req.sipTrunkId = q.sipTrunkId;
  } else {
    if (!agent.phone_number_id) throw validation('the agent has no carrier number; assign phone_number_id or pass sipTrunkId');
    req.telcoNumberId = agent.phone_number_id;
  }
  return req;
}

/**
 * Without callerId: the agent's number on that trunk (what a callback would dial), else the
 * agent id, as the service's document says of this parameter.
 */
async function defaultCallerId(store: Store, trunkId: string, agentId: string): Promise<string> {
  const a = (await store.assignments.listByTrunk(trunkId)).find((x) => x.agent_id === agentId);
  return a?.number || a?.alternate_number || agentId;
}

/**
 * Places a resolved dial: through its SIP trunk, or from the agent's carrier number (through the
 * trunk telco.outbound_trunks names for its account, else the carrier's call API). Shared by the
 * dial route and the outbound dialer (main.ts hands it to src/outbound/ as its placeCall).
 * @throws DomainError as the dial route documents (too_many when a call slot is refused,
 * unavailable when outbound calling is not possible now).
 */
export async function placeDial(deps: Pick<ApiDeps, 'store' | 'config' | 'dialer' | 'carrierDialer'>, dial: DialRequest, log: Pick<FastifyBaseLogger, 'info'>): Promise<{ callId: string }> {
  if (dial.sipTrunkId === undefined) {
    // The carrier-number route: through the trunk configured for the number's carrier
    // account, presenting that number as the caller ID unless one was given.
    const number = await deps.store.telcoNumbers.get(dial.orgId, dial.telcoNumberId ?? '');
    if (!number) throw notFound('phone number');
    const route = deps.config.telco.outbound_trunks.find((t) => t.account_sid === number.account_sid);
    if (!route) {
      // The carrier's own call API: the call is from the agent's number, the only caller ID
      // the carrier accepts without verification, so callerId (a SIP From user) is not used.
      if (deps.carrierDialer === undefined || deps.config.http.public_url === '') {
        throw unavailable(`outbound calls from carrier number ${number.phone_number} need a SIP trunk for its carrier account ${number.account_sid}: add it to telco.outbound_trunks, or pass sipTrunkId, or set http.public_url (CALLBRIDGE_PUBLIC_URL) to call through the carrier's call API`);
      }
      if (dial.callerId !== undefined && dial.callerId !== number.phone_number) {
        throw validation(`callerId applies to SIP trunk dials: a call through the carrier's call API is from the agent's number ${number.phone_number}`);
      }
      const { callId } = await deps.carrierDialer({ orgId: dial.orgId, agentId: dial.agentId, telcoNumberId: number.id, number: dial.number, firstMessage: dial.firstMessage, prompt: dial.prompt, variables: dial.variables, ...(dial.machineDetection !== undefined ? { machineDetection: dial.machineDetection } : {}) });
      log.info({ agentId: dial.agentId, callId, telcoNumberId: number.id }, 'outbound call placed through the carrier call API');
      return { callId };
    }
    if (!(await deps.store.sipTrunks.get(dial.orgId, route.sip_trunk_id))) throw unavailable(`telco.outbound_trunks names SIP trunk ${route.sip_trunk_id} for account ${number.account_sid}, which this organization does not have`);
    dial.sipTrunkId = route.sip_trunk_id;
    dial.callerId ??= number.phone_number;
  }
  if (deps.dialer === undefined) throw unavailable('outbound calling needs the SIP user agent (sip.enabled is false)');
  const { callId } = await deps.dialer({
    orgId: dial.orgId,
    agentId: dial.agentId,
    sipTrunkId: dial.sipTrunkId,
    number: dial.number,
    callerId: dial.callerId ?? (await defaultCallerId(deps.store, dial.sipTrunkId, dial.agentId)),
    firstMessage: dial.firstMessage,
    prompt: dial.prompt,
    variables: dial.variables,
    ...(dial.machineDetection !== undefined ? { machineDetection: dial.machineDetection } : {}),
  });
  log.info({ agentId: dial.agentId, callId, trunkId: dial.sipTrunkId }, 'outbound call placed');
  return { callId };
}

export async function dialRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  app.post(
    '/v1/agents/:id/dial',
    {
      // The body is optional: no body means no variables.
      preValidation: async (req) => {
        if (req.body === undefined || req.body === null) req.body = {};
      },
      schema: {
        tags: ['calls'],
        params: IdParams,
        querystring: Query,
        body: Body,
        response: { 200: Type.Object({ success: Type.Boolean() }), ...errorResponses(400, 401, 403, 404, 429, 500, 502, 503) },
      },
    },
    async (req) => {
      const { id } = req.params as { id: string };
      const body = (req.body ?? {}) as { variables?: DialRequest['variables']; machineDetection?: MachineDetectionConfig };
      const dial = await resolveDial(deps.store, req.org.id, id, req.query as Record<string, string | undefined>, body.variables ?? [], body.machineDetection);
      await placeDial(deps, dial, req.log);
      return { success: true };
    },
  );
}
