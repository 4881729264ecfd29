/**
 * The call record as the service's own OpenAPI document shapes it (spec/service-openapi.json,
 * components.schemas.Call), and every mapping from what callbridge knows about a call to it.
 * Pure functions, no I/O: the store keeps the facts (CallRecord), the API shows them (Call).
 * docs/calls.md has the same mappings as tables; migration 3 (store/migrations.ts) applies them to
 * rows stored before, in SQL, and a test holds the two to the same results.
 */

/** CallStatus of the document. `connected` is never produced here (docs/calls.md). */
export const CALL_STATUSES = ['connected', 'started', 'in_progress', 'auth_failed', 'ended'] as const;
export type CallStatus = (typeof CALL_STATUSES)[number];

/** CallSource of the document. `twilio` is kept for the carrier's own media-stream leg. */
export const CALL_SOURCES = ['twilio', 'sip', 'simulation', 'api'] as const;
export type CallSource = (typeof CALL_SOURCES)[number];

/** The `outcome` filter's buckets (the SDK's CallOutcomeFilter). */
export const CALL_OUTCOMES = ['transferred', 'ended_by_agent', 'ended_by_user'] as const;
export type CallOutcome = (typeof CALL_OUTCOMES)[number];

/** How an ended call ended, in more detail than `ended` (our field `end_status`). */
export const END_STATUSES = ['completed', 'failed', 'busy', 'no_answer', 'expired'] as const;
export type EndStatus = (typeof END_STATUSES)[number];

export type CallDirection = 'inbound' | 'outbound' | 'web';

export const TRANSCRIPT_ENTRY_TYPES = ['message', 'tool_call', 'tool_call_output', 'interruption'] as const;
export type TranscriptEntryType = (typeof TRANSCRIPT_ENTRY_TYPES)[number];

export interface TranscriptToolCall {
  itemId?: string;
  callId?: string;
  toolName?: string;
  /** JSON string of the arguments. */
  arguments?: string;
  output?: string;
  startedAt?: string;
  endedAt?: string;
}

/** One transcript row; a field without a value is absent (never null). */
export interface TranscriptEntry {
  index: number;
  /** user | assistant | system for message rows; absent for tool rows. */
  role?: string;
  message?: string;
  type: TranscriptEntryType;
  toolCall?: TranscriptToolCall;
  toolCallOutput?: string;
  createdAt?: string;
  durationMs?: number;
  turnId?: string;
  /** Ours: an assistant turn cut by barge-in; `message` is only what the caller heard. */
  interrupted?: true;
}

export interface Transcript {
  entries: TranscriptEntry[];
}

/** ContextVariable of the document (extracted_variables): the post-call analysis's fields. */
export interface ContextVariable {
  name?: string;
  type?: 'system' | 'input' | 'extracted';
  description?: string;
  value?: unknown;
  dataType?: 'string' | 'number' | 'boolean' | 'object' | 'array';
  rationale?: string;
}

/**
 * What the post-call analysis found (summarize_calls): the summary, and one extracted variable
 * per analysis field of the agent (`type: extracted`, `dataType: string`, `value` one of the
 * field's choices or null). Written once per call, after its end (CallRepo.setAnalysis).
 */
export interface CallAnalysis {
  /** null when the model wrote none. */
  summary: string | null;
  extracted_variables: ContextVariable[];
}

/**
 * What the conversation runtime records (src/session/runtime-contract.ts TranscriptEntry), typed
 * structurally so this layer imports nothing of the session layer.
 */
export interface RuntimeTranscriptLine {
  role: string;
  text: string;
  at?: string;
  turn_id?: string;
  interrupted?: boolean;
  toolCall?: TranscriptToolCall;
  toolCallOutput?: string;
}

/**
 * The runtime's lines as the document's entries: agent -> assistant, user -> user (type
 * message); a tool line with its `toolCall` -> type tool_call (the call: callId, toolName,
 * arguments as a JSON string, startedAt) or, when it carries `toolCallOutput`, type
 * tool_call_output (that output, and the call again with output and endedAt), role and message
 * absent, as the service records them; an older tool line (`"<tool name>: <output>"`, no
 * `toolCall`) -> type tool_call with `toolCall { toolName, output }` and the line kept as
 * `message`; an interrupted agent turn keeps `interrupted: true`. `index` is the 0-based position.
 */
export function transcriptFromRuntime(lines: readonly RuntimeTranscriptLine[]): Transcript {
  return { entries: lines.map((l, index) => entryFromRuntime(l, index)) };
}

function entryFromRuntime(l: RuntimeTranscriptLine, index: number): TranscriptEntry {
  if (l.role === 'tool' && l.toolCall !== undefined) {
    const e: TranscriptEntry = { index, type: l.toolCallOutput !== undefined ? 'tool_call_output' : 'tool_call', toolCall: { ...l.toolCall } };
    if (l.toolCallOutput !== undefined) e.toolCallOutput = l.toolCallOutput;
    if (typeof l.at === 'string') e.createdAt = l.at;
    return e;
  }
  const e: TranscriptEntry = { index, type: l.role === 'tool' ? 'tool_call' : 'message' };
  if (l.role === 'agent') e.role = 'assistant';
  else if (l.role !== 'tool' && l.role !== '') e.role = l.role;
  e.message = l.text;
  if (l.role === 'tool') {
    const sep = l.text.indexOf(': ');
    e.toolCall = sep >= 0 ? { toolName: l.text.slice(0, sep), output: l.text.slice(sep + 2) } : { toolName: l.text };
  }
  if (typeof l.at === 'string') e.createdAt = l.at;
  if (typeof l.turn_id === 'string') e.turnId = l.turn_id;
  if (l.interrupted === true) e.interrupted = true;
  return e;
}

/** Bridged SIP calls, inbound or outbound: sip; a session a client opened itself: api. */
export function sourceOf(direction: CallDirection): CallSource {
  return direction === 'web' ? 'api' : 'sip';
}

/** The other party: the caller (inbound, and a web session's caller_id), the callee (outbound). */
export function partyNumber(direction: CallDirection, from: string, to: string): string {
  return direction === 'outbound' ? to : from;
}

/** The session end reasons and the bridge's remote-BYE ends, bucketed for the `outcome` filter. */
const OUTCOMES: Readonly<Record<string, CallOutcome>> = {
  transfer: 'transferred',
  agent_hangup: 'ended_by_agent',
  // Ours: answering-machine detection ended the call (docs/machine-detection.md).
  machine_detected: 'ended_by_agent',
  voicemail_left: 'ended_by_agent',
  timeout: 'ended_by_agent',
  silence_timeout: 'ended_by_agent',
  client_closed: 'ended_by_user',
  // Upstream mode (bridge.upstream_url): the bridge ends the record itself, naming the SIP side.
  'caller side ended: remote_bye': 'ended_by_user',
  'callee side ended: remote_bye': 'ended_by_user',
};

/** The reason of a call whose node stopped heartbeating: a surviving node ended it (docs/store-postgres.md "Several nodes"). */
export const NODE_LOST = 'node_lost';

/** The outcome bucket of a termination reason; undefined for the others (error, expired, a failed dial). */
export function outcomeOf(terminationReason: string): CallOutcome | undefined {
  return Object.hasOwn(OUTCOMES, terminationReason) ? OUTCOMES[terminationReason] : undefined;
}

/** The reasons that bucket into each outcome (docs, and the migration test). */
export const OUTCOME_REASONS: Readonly<Record<string, CallOutcome>> = OUTCOMES;

/** An ended call's end_status when the writer names none: failed for reason error or node_lost, else completed. */
export function endStatusOf(terminationReason: string): EndStatus {
  return terminationReason === 'error' || terminationReason === NODE_LOST ? 'failed' : 'completed';
}

/** How an outbound call that never connected ends (the SIP outcome of the dial). */
export interface FailedDialEnd {
  termination_reason: string;
  status: 'ended' | 'auth_failed';
  end_status: EndStatus;
}

/**
 * busy and no_answer keep their name as end_status; auth_failed (the trunk refused our
 * credentials: 401/403/407) is the document's status auth_failed; anything else failed. The
 * reason carries the final SIP status when there was one: `busy (486)`.
 */
export function failedDialEnd(reason: string, sipStatus?: number): FailedDialEnd {
  const termination_reason = sipStatus ? `${reason} (${sipStatus})` : reason;
  if (reason === 'busy' || reason === 'no_answer') return { termination_reason, status: 'ended', end_status: reason };
  return { termination_reason, status: reason === 'auth_failed' ? 'auth_failed' : 'ended', end_status: 'failed' };
}

/**
 * Ours: what answering-machine detection decided on an outbound call that asked for it
 * (docs/machine-detection.md): the result, ms from the answer to the decision, and whether a
 * beep was heard (by the end of the detection, or of the wait for it before a message).
 */
export interface MachineDetectionOutcome {
  result: 'human' | 'machine' | 'unknown';
  decided_after_ms: number;
  beep: boolean;
}

/**
 * Ours: what a carrier's ticket asks for about a SIP call (docs/calls.md "SIP details"): the
 * dialog's Call-ID and the INVITE's final response: the one callbridge sent (inbound) or received
 * (outbound dial); null when the call never got one (it ended before any final response).
 */
export interface SipDetails {
  call_id: string;
  final_status: number | null;
  final_reason: string | null;
}

/** A Call-ID is the peer's choice of length: the record keeps this much of it (RFC 3261 sets no bound). */
export const SIP_CALL_ID_MAX = 256;
/** A reason phrase is the peer's text too: enough to recognise it. */
export const SIP_REASON_MAX = 128;

/** The stored shape of SIP details: peer-controlled strings cut (no ellipsis: a Call-ID is matched, not read). */
export function clippedSipDetails(d: SipDetails): SipDetails {
  return {
    call_id: d.call_id.slice(0, SIP_CALL_ID_MAX),
    final_status: d.final_status,
    final_reason: d.final_reason === null ? null : d.final_reason.slice(0, SIP_REASON_MAX),
  };
}

/** The stored facts of one call (store/calls.ts); null = no value. */
export interface CallRecord {
  id: string;
  org_id: string;
  /** null once the agent was deleted. */
  agent_id: string | null;
  graph_version_id: string | null;
  sip_trunk_id: string | null;
  direction: CallDirection;
  source: CallSource;
  status: CallStatus;
  end_status: EndStatus | null;
  from: string;
  to: string;
  party_number: string;
  /** The record was created: session token issued, INVITE routed, dial requested. */
  created_at: string;
  /** The voice session started: its socket opened; for a phone call, it was answered. */
  started_at: string | null;
  ended_at: string | null;
  termination_reason: string | null;
  outcome: CallOutcome | null;
  transcript: Transcript;
  summary: string | null;
  /** The post-call analysis's fields ([] until it ran, or when the agent names none). */
  extracted_variables: ContextVariable[];
  /** When the post-call analysis was stored; null when it has not run (off, failed, or still running). */
  analyzed_at: string | null;
  has_recording: boolean;
  /** The carrier's id of the call (CallSid) on the carrier's own voice path (source twilio). */
  carrier_call_id: string | null;
  /** The outbound run that placed the call, and its contact (docs/outbound.md); null otherwise. */
  outbound_list_run_id?: string | null;
  outbound_contact_id?: string | null;
  tags: string[];
  machine_detection: MachineDetectionOutcome | null;
  /** A SIP call's Call-ID and final response; null off SIP (web, carrier media streams) or before the bridge stored them. */
  sip?: SipDetails | null;
}

/** The API's Call: the document's fields (absent when there is no value) and ours after them. */
export interface Call {
  id: string;
  agent_id?: string;
  graph_version_id?: string;
  organization_id: string;
  party_number: string;
  status: CallStatus;
  source: CallSource;
  termination_reason?: string;
  extracted_variables: ContextVariable[];
  outbound: boolean;
  created_at: string;
  connected_at?: string;
  started_at?: string;
  ended_at?: string;
  summary?: string;
  transcript: Transcript;
  tags: string[];
  duration_seconds?: number;
  outbound_list_run_id?: string;
  outbound_contact_id?: string;
  // Ours, beyond the document:
  direction: CallDirection;
  from: string;
  to: string;
  sip_trunk_id?: string;
  end_status?: EndStatus;
  outcome?: CallOutcome;
  has_recording: boolean;
  carrier_call_id?: string;
  analyzed_at?: string;
  machine_detection?: MachineDetectionOutcome;
  sip?: { call_id: string; final_status?: number; final_reason?: string };
}

/** Whole seconds from started_at to ended_at (rounded), when both are set. */
export function durationSeconds(startedAt: string | null, endedAt: string | null): number | undefined {
  if (startedAt === null || endedAt === null) return undefined;
  const ms = Date.parse(endedAt) - Date.parse(startedAt);
  return Number.isFinite(ms) ? Math.max(0, Math.round(ms / 1000)) : undefined;
}

/**
 * The API shape of a record. connected_at and started_at are both the moment the voice session
 * started (its socket connected, which for a phone call is when it was answered and bridged):
 * callbridge has one such moment.
 */
export function toCall(r: CallRecord): Call {
  const c: Call = {
    id: r.id,
    organization_id: r.org_id,
    party_number: r.party_number,
    status: r.status,
    source: r.source,
    extracted_variables: r.extracted_variables,
    outbound: r.direction === 'outbound',
    created_at: r.created_at,
    transcript: r.transcript,
    tags: r.tags,
    direction: r.direction,
    from: r.from,
    to: r.to,
    has_recording: r.has_recording,
  };
  if (r.agent_id !== null) c.agent_id = r.agent_id;
  if (r.graph_version_id !== null) c.graph_version_id = r.graph_version_id;
  if (r.termination_reason !== null) c.termination_reason = r.termination_reason;
  if (r.started_at !== null) c.connected_at = c.started_at = r.started_at;
  if (r.ended_at !== null) c.ended_at = r.ended_at;
  if (r.summary !== null) c.summary = r.summary;
  const duration = durationSeconds(r.started_at, r.ended_at);
  if (duration !== undefined) c.duration_seconds = duration;
  if (r.sip_trunk_id !== null) c.sip_trunk_id = r.sip_trunk_id;
  if (r.end_status !== null) c.end_status = r.end_status;
  if (r.outcome !== null) c.outcome = r.outcome;
  if (r.carrier_call_id !== null) c.carrier_call_id = r.carrier_call_id;
  if (r.analyzed_at !== null) c.analyzed_at = r.analyzed_at;
  if (r.outbound_list_run_id != null) c.outbound_list_run_id = r.outbound_list_run_id;
  if (r.outbound_contact_id != null) c.outbound_contact_id = r.outbound_contact_id;
  if (r.machine_detection !== null) c.machine_detection = r.machine_detection;
  if (r.sip != null) {
    c.sip = { call_id: r.sip.call_id };
    if (r.sip.final_status !== null) c.sip.final_status = r.sip.final_status;
    if (r.sip.final_reason !== null) c.sip.final_reason = r.sip.final_reason;
  }
  return c;
}

// -------------------------------------------------------------------------------------------
// Listing: filters, instants, pagination.

export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;
/** Pages beyond this are a 400: offsets stay exact integers (any page past the end is empty). */
export const MAX_PAGE = 1_000_000_000;
/** More agent ids than this in one `agent_ids` is a 400 (each becomes a bound SQL value). */
export const MAX_AGENT_IDS = 100;
export const MAX_SEARCH_LENGTH = 256;
export const MAX_TAG_LENGTH = 128;

/** What GET /v1/calls filters by, parsed and checked. */
export interface CallListFilter {
  agentIds?: string[];
  status?: CallStatus;
  source?: CallSource;
  /** Inclusive bounds on created_at, ISO 8601 UTC with milliseconds (the stored form). */
  dateFrom?: string;
  dateTo?: string;
  outbound?: boolean;
  /** Substring of party_number (case-sensitive). */
  search?: string;
  tag?: string;
  outcome?: CallOutcome;
  /** The outbound run that placed the call (docs/outbound.md). */
  outboundListRunId?: string;
  /** The outbound contact the call was placed to. */
  outboundContactId?: string;
}

// YYYY-MM-DD, optionally [T or space]hh:mm[:ss[.fraction]] and an offset (Z, ±hh:mm, ±hhmm).
const INSTANT_RE = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?([Zz]|[+-]\d{2}:?\d{2})?)?$/;

/**
 * An RFC 3339 / ISO 8601 instant as the stored form (`toISOString`, millisecond precision), or
 * undefined when it is not one. Stored times have whole milliseconds, so a finer bound is rounded
 * inward without changing which calls match: up for `from`, down for `to`. A date alone is the
 * whole day (UTC): its first millisecond as `from`, its last as `to`. No offset means UTC.
 */
export function parseInstant(s: string, bound: 'from' | 'to'): string | undefined {
  const m = INSTANT_RE.exec(s);
  if (!m) return undefined;
  const [, y, mo, d, h, mi, sec, frac, off] = m;
  const num = (v: string | undefined) => (v === undefined ? 0 : Number(v));
  if (num(mo) < 1 || num(mo) > 12 || num(d) < 1 || num(h) > 23 || num(mi) > 59 || num(sec) > 59) return undefined;
  const digits = (frac ?? '').padEnd(9, '0');
  let ms = Number(digits.slice(0, 3));
  if (bound === 'from' && Number(digits.slice(3)) > 0) ms += 1;
  let offsetMin = 0;
  if (off !== undefined && off.toUpperCase() !== 'Z') {
    const hh = Number(off.slice(1, 3));
    const mm = Number(off.slice(-2));
    if (hh > 23 || mm > 59) return undefined;
    offsetMin = (off.startsWith('-') ? -1 : 1) * (hh * 60 + mm);
  }
  const date = new Date(0);
  date.setUTCFullYear(num(y), num(mo) - 1, num(d));
  // A day that does not exist (2026-02-30) rolls over: refuse it.
  if (date.getUTCDate() !== num(d) || date.getUTCMonth() !== num(mo) - 1) return undefined;
  const dateOnly = h === undefined;
  if (dateOnly) date.setUTCHours(bound === 'to' ? 23 : 0, bound === 'to' ? 59 : 0, bound === 'to' ? 59 : 0, bound === 'to' ? 999 : 0);
  else date.setUTCHours(num(h), num(mi) - offsetMin, num(sec), ms);
  // Outside years 0000-9999 the ISO form is not four digits and would not sort as text.
  if (!Number.isFinite(date.getTime()) || date.getUTCFullYear() < 0 || date.getUTCFullYear() > 9999) return undefined;
  return date.toISOString();
}

/** PaginationInfo of the document. */
export interface PaginationInfo {
  page: number;
  page_size: number;
  total: number;
  total_pages: number;
  has_next: boolean;
  has_prev: boolean;
}

/** 1-based pages of pageSize: a page past the end is empty, with has_prev true and has_next false. */
export function pagination(page: number, pageSize: number, total: number): PaginationInfo {
  const total_pages = Math.ceil(total / pageSize);
  return { page, page_size: pageSize, total, total_pages, has_next: page < total_pages, has_prev: page > 1 };
}
