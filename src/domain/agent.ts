/**
 * The Agent resource: its stored shape, server defaults on create, and the partial-update rules
 * of PATCH (only sent fields change; vad_settings merges field by field; keyterms replaces).
 */
export const LANGUAGES = ['multi', 'en', 'es', 'fr', 'de', 'it', 'pt', 'ru', 'zh', 'ja', 'ko', 'ar', 'hi'] as const;
export const VOICE_PROVIDERS = ['provider_1', 'provider_2', 'provider_3', 'provider_4', 'provider_5', 'provider_6'] as const;
export const TIMEOUT_ACTIONS = ['end_call', 'transfer_call'] as const;
export const AGENT_STATUSES = ['active', 'inactive'] as const;

/** Bounds of analysis_fields: few fields with few short choices keep the model's task small. */
export const ANALYSIS_LIMITS = { fields: 10, choices: 20, nameLength: 64, choiceLength: 100, descriptionLength: 500 } as const;
/** An analysis field's name: usable as a variable name in any client. */
export const ANALYSIS_FIELD_NAME_PATTERN = '^[A-Za-z][A-Za-z0-9_]*$';

export type AgentStatus = (typeof AGENT_STATUSES)[number];
export type VoiceProvider = (typeof VOICE_PROVIDERS)[number];

export interface VoiceSettings {
  id: string;
  provider: VoiceProvider;
  speed?: number;
  stability?: number;
  similarity_boost?: number;
  volume?: number;
}

export interface TimeoutSettings {
  default_timeout: number;
  timeout_action: (typeof TIMEOUT_ACTIONS)[number];
  transfer_number?: string;
  transfer_message?: string;
  silence_counter: number;
  silence_timeout_action: (typeof TIMEOUT_ACTIONS)[number];
  silence_transfer_number?: string;
  /** Said before a transfer by the silence action; transfer_message when unset. */
  silence_transfer_message?: string;
}

/**
 * A structured field of the post-call analysis (ours, beside the service's summarize_calls): the
 * model picks one of `choices` for it from the transcript, or none (docs/calls.md "Post-call
 * analysis"). The answer is shown in the call's extracted_variables.
 */
export interface AnalysisField {
  /** The variable's name in extracted_variables: a letter, then letters, digits and _. */
  name: string;
  /** What the field means, for the model (and shown beside the answer). */
  description?: string;
  /** The answers allowed; anything else the model says is stored as null. */
  choices: string[];
}

/** Everything of an Agent but its identity, ownership and timestamps. */
export interface AgentSettings {
  llm: string;
  fallback_llm: string;
  prompt: string;
  first_message: string;
  first_message_interruption_time: number;
  default_language: (typeof LANGUAGES)[number];
  summarize_calls: boolean;
  /** Structured fields the post-call analysis fills in (used when summarize_calls is on); [] for none. */
  analysis_fields: AnalysisField[];
  noise_cancel_settings: { enabled: boolean; level: number };
  vad_settings: { start_secs: number; stop_secs: number; silence_timeout_secs: number };
  enable_first_message_outbound: boolean;
  voice_settings: VoiceSettings;
  timeout_settings: TimeoutSettings;
  keyterms: string[];
}

export interface Agent extends AgentSettings {
  id: string;
  name: string;
  status: AgentStatus;
  /** "" when unassigned, as the API document says. */
  phone_number_id: string;
  created_at: string;
  updated_at: string;
}

/** A create or PATCH body after schema validation. */
export type AgentInput = Partial<
  Omit<AgentSettings, 'noise_cancel_settings' | 'vad_settings' | 'timeout_settings' | 'voice_settings'>
> & {
  name?: string;
  status?: AgentStatus;
  phone_number_id?: string | null;
  noise_cancel_settings?: Partial<AgentSettings['noise_cancel_settings']>;
  vad_settings?: Partial<AgentSettings['vad_settings']>;
  timeout_settings?: Partial<TimeoutSettings>;
  voice_settings?: VoiceSettings;
};

export type AgentDefaults = Omit<AgentSettings, never> & { status: AgentStatus };

/**
 * Applies a create body to the defaults. Nested objects merge over the defaults field by field
 * so `{ vad_settings: { stop_secs: 1 } }` keeps the default start_secs. An empty keyterms list
 * means "server default", as the API document says.
 */
export function settingsForCreate(defaults: AgentDefaults, input: AgentInput): AgentSettings {
  return applyPatch(defaults, { ...input, keyterms: input.keyterms?.length ? input.keyterms : defaults.keyterms });
}

/** Just the settings of an agent-like object (a stored agent carries identity fields too). */
export function settingsOf(a: AgentSettings): AgentSettings {
  return structuredClone({
    llm: a.llm,
    fallback_llm: a.fallback_llm,
    prompt: a.prompt,
    first_message: a.first_message,
    first_message_interruption_time: a.first_message_interruption_time,
    default_language: a.default_language,
    summarize_calls: a.summarize_calls,
    // Agents stored before analysis_fields existed have none.
    analysis_fields: a.analysis_fields ?? [],
    noise_cancel_settings: a.noise_cancel_settings,
    vad_settings: a.vad_settings,
    enable_first_message_outbound: a.enable_first_message_outbound,
    voice_settings: a.voice_settings,
    timeout_settings: a.timeout_settings,
    keyterms: a.keyterms,
  });
}

/**
 * Rules of analysis_fields the schema cannot say: names unique. Returns the message of a 400
 * naming the field, or undefined.
 */
export function analysisFieldsProblem(fields: readonly AnalysisField[]): string | undefined {
  const seen = new Set<string>();
  for (const [i, f] of fields.entries()) {
    if (seen.has(f.name)) return `body.analysis_fields.${i}.name: "${f.name}" is named twice (field names are unique)`;
    seen.add(f.name);
  }
  return undefined;
}

/** Applies a PATCH body to stored settings: only sent fields change. */
export function applyPatch(current: AgentSettings, input: AgentInput): AgentSettings {
  const next = settingsOf(current);
  const scalarKeys = [
    'llm',
    'fallback_llm',
    'prompt',
    'first_message',
    'first_message_interruption_time',
    'default_language',
    'summarize_calls',
    'enable_first_message_outbound',
  ] as const;
  for (const k of scalarKeys) {
    if (input[k] !== undefined) (next as unknown as Record<string, unknown>)[k] = input[k];
  }
  if (input.keyterms !== undefined) next.keyterms = [...input.keyterms];
  // Replaces the whole list, as keyterms: a field is edited by sending the list it belongs to.
  if (input.analysis_fields !== undefined) next.analysis_fields = structuredClone(input.analysis_fields);
  if (input.vad_settings) next.vad_settings = { ...next.vad_settings, ...input.vad_settings };
  if (input.noise_cancel_settings) next.noise_cancel_settings = { ...next.noise_cancel_settings, ...input.noise_cancel_settings };
  if (input.timeout_settings) next.timeout_settings = { ...next.timeout_settings, ...input.timeout_settings };
  // voice_settings carries id and provider together (API document): it replaces the whole object.
  if (input.voice_settings) next.voice_settings = { ...input.voice_settings };
  return next;
}
