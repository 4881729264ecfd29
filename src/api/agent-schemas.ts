/** JSON Schemas of the Agent resource, built from configuration (model catalog and limits). */
import { Type, type TSchema } from '@sinclair/typebox';
import { modelCatalog, type Config } from '../config.ts';
import { AGENT_STATUSES, ANALYSIS_FIELD_NAME_PATTERN, ANALYSIS_LIMITS, LANGUAGES, TIMEOUT_ACTIONS, VOICE_PROVIDERS } from '../domain/agent.ts';
import { TIMEOUT_TWINS, VAD_TWINS, VOICE_PROVIDER_NAMES, VOICE_PROVIDER_VENDOR_NAMES } from '../domain/agent-aliases.ts';
import { DIAL_STRING_PATTERN } from '../domain/phone.ts';
import { DateTime, NullableUuid, Obj, Uuid } from './schemas.ts';

const StrEnum = (values: readonly string[], description?: string) => Type.Unsafe<string>({ type: 'string', enum: [...values], description });
/** Tuning fields: "when sent and non-zero, between 0 and 2" (API document, Limits). */
const Tuning = (description: string) => Type.Optional(Type.Number({ minimum: 0, maximum: 2, description }));

/**
 * Adds each field's twin (the SDK types' second name, src/domain/agent-aliases.ts) with the same
 * schema, described as the alias it is, so both validate alike and /v1/openapi.json shows them.
 */
function withTwins<T extends Record<string, TSchema>>(props: T, twins: Partial<Record<keyof T & string, string>>): Record<string, TSchema> {
  const out: Record<string, TSchema> = { ...props };
  for (const [canonical, twin] of Object.entries(twins) as [string, string][]) {
    const schema = props[canonical];
    if (schema) out[twin] = Type.Optional({ ...schema, description: `alias of ${canonical} (the service SDK's name); sending both with different values is a 400` });
  }
  return out;
}

export function agentSchemas(config: Config) {
  const L = config.limits;
  const catalog = modelCatalog(config);
  const text = (max: number, description?: string) => Type.String({ maxLength: max, description });
  const transferNumber = (description: string) =>
    Type.Optional(Type.String({ pattern: DIAL_STRING_PATTERN, description: `${description}; E.164 or digits, * and #` }));

  const NoiseCancel = Obj({
    enabled: Type.Optional(Type.Boolean()),
    level: Type.Optional(Type.Number({ minimum: 0, maximum: 100, description: 'strength, percent' })),
  });
  const Vad = Obj(
    withTwins(
      {
        start_secs: Type.Optional(Type.Number({ minimum: 0, maximum: 10 })),
        stop_secs: Type.Optional(Type.Number({ minimum: 0, maximum: 10 })),
        silence_timeout_secs: Type.Optional(Type.Number({ minimum: 0, maximum: L.max_default_timeout })),
      },
      VAD_TWINS,
    ),
  );
  const timeoutFields = {
    default_timeout: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: L.max_default_timeout, description: `seconds, at most ${L.max_default_timeout}` })),
    timeout_action: Type.Optional(StrEnum(TIMEOUT_ACTIONS)),
    transfer_number: transferNumber('transfer target of timeout_action transfer_call'),
    transfer_message: Type.Optional(text(L.max_prompt_length)),
    silence_counter: Type.Optional(Type.Integer({ minimum: 0, maximum: 100 })),
    silence_timeout_action: Type.Optional(StrEnum(TIMEOUT_ACTIONS)),
    silence_transfer_number: transferNumber('transfer target of silence_timeout_action transfer_call'),
    silence_transfer_message: Type.Optional(text(L.max_prompt_length, 'said before the silence action transfers; transfer_message when unset')),
  };
  const Timeout = Obj(withTwins(timeoutFields, TIMEOUT_TWINS));
  const vendorNames = Object.entries(VOICE_PROVIDER_VENDOR_NAMES).map(([vendor, neutral]) => `${vendor} = ${neutral}`).join(', ');
  const Voice = Obj({
    id: Type.String({ minLength: 1, maxLength: 200 }),
    provider: StrEnum(VOICE_PROVIDER_NAMES, `${VOICE_PROVIDERS.join(', ')}, or the service's vendor name (${vendorNames}); responses use the neutral name`),
    speed: Tuning('speech rate'),
    stability: Tuning('stability'),
    similarity_boost: Tuning('similarity boost'),
    volume: Tuning('output level'),
  });

  const A = ANALYSIS_LIMITS;
  const AnalysisField = Obj({
    name: Type.String({ minLength: 1, maxLength: A.nameLength, pattern: ANALYSIS_FIELD_NAME_PATTERN, description: 'the name in the call\'s extracted_variables' }),
    description: Type.Optional(text(A.descriptionLength, 'what the field means, for the model')),
    choices: Type.Array(Type.String({ minLength: 1, maxLength: A.choiceLength }), {
      minItems: 1,
      maxItems: A.choices,
      uniqueItems: true,
      description: 'the answers allowed; anything else the model says is stored as null',
    }),
  });
  const AnalysisFields = Type.Array(AnalysisField, {
    maxItems: A.fields,
    description: 'callbridge: structured fields the post-call analysis (summarize_calls) fills in, each from a fixed list of choices (docs/calls.md); replaces the whole list',
  });

  const fields = {
    phone_number_id: Type.Optional(NullableUuid('uuid of a telco number of the organization, or null to clear')),
    llm: Type.Optional(StrEnum(catalog, 'from GET /v1/llms')),
    fallback_llm: Type.Optional(StrEnum(catalog, 'from GET /v1/llms')),
    status: Type.Optional(StrEnum(AGENT_STATUSES)),
    prompt: Type.Optional(text(L.max_prompt_length)),
    first_message: Type.Optional(text(L.max_prompt_length)),
    first_message_interruption_time: Type.Optional(Type.Number({ minimum: 0, maximum: 3600 })),
    default_language: Type.Optional(StrEnum(LANGUAGES)),
    summarize_calls: Type.Optional(Type.Boolean({ description: 'after the call, the agent\'s model writes the call\'s summary (and analysis_fields)' })),
    analysis_fields: Type.Optional(AnalysisFields),
    noise_cancel_settings: Type.Optional(NoiseCancel),
    vad_settings: Type.Optional(Vad),
    enable_first_message_outbound: Type.Optional(Type.Boolean()),
    timeout_settings: Type.Optional(Timeout),
    keyterms: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: L.max_keyterm_length }), { maxItems: L.max_keyterms })),
    voice_settings: Type.Optional(Voice),
  };
  const name = Type.String({ minLength: 1, maxLength: L.max_name_length });

  const AgentCreate = Obj({ name, ...fields }, { title: 'AgentCreate' });
  const AgentPatch = Obj({ name: Type.Optional(name), ...fields }, { title: 'AgentPatch' });

  const Agent = Type.Object(
    {
      id: Uuid(),
      phone_number_id: Type.String({ description: 'empty when unassigned' }),
      name: Type.String(),
      llm: Type.String(),
      fallback_llm: Type.String(),
      status: StrEnum(AGENT_STATUSES),
      prompt: Type.String(),
      first_message: Type.String(),
      first_message_interruption_time: Type.Number(),
      default_language: StrEnum(LANGUAGES),
      summarize_calls: Type.Boolean(),
      analysis_fields: Type.Array(
        Type.Object({ name: Type.String(), description: Type.Optional(Type.String()), choices: Type.Array(Type.String()) }),
        { description: 'callbridge: structured fields of the post-call analysis' },
      ),
      created_at: DateTime(),
      updated_at: DateTime(),
      noise_cancel_settings: Type.Object({ enabled: Type.Boolean(), level: Type.Number() }),
      vad_settings: Type.Object({ start_secs: Type.Number(), stop_secs: Type.Number(), silence_timeout_secs: Type.Number() }),
      enable_first_message_outbound: Type.Boolean(),
      voice_settings: Type.Object({
        id: Type.String(),
        provider: Type.String(),
        speed: Type.Optional(Type.Number()),
        stability: Type.Optional(Type.Number()),
        similarity_boost: Type.Optional(Type.Number()),
        volume: Type.Optional(Type.Number()),
      }),
      timeout_settings: Type.Object({
        default_timeout: Type.Number(),
        timeout_action: Type.String(),
        transfer_number: Type.Optional(Type.String()),
        transfer_message: Type.Optional(Type.String()),
        silence_counter: Type.Integer(),
        silence_timeout_action: Type.String(),
        silence_transfer_number: Type.Optional(Type.String()),
        silence_transfer_message: Type.Optional(Type.String()),
      }),
      keyterms: Type.Array(Type.String()),
    },
    { title: 'Agent' },
  );
  return { AgentCreate, AgentPatch, Agent };
}
