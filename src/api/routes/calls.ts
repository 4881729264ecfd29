/**
 * Call history in the shape of the service's OpenAPI document (listCalls, getCall,
 * downloadCallRecording): voice sessions (src/session/) and the call bridge write the records,
 * src/domain/call.ts maps them; recordings (bridge.recording) are stereo WAV files the bridge
 * wrote, streamed from disk (docs/calls.md).
 */
import { createReadStream, statSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, IdParams, Obj, Uuid } from '../schemas.ts';
import { DomainError, notFound, validation } from '../../domain/errors.ts';
import { isUuid } from '../../domain/ids.ts';
import type { LiveCallMedia } from '../../domain/live-call.ts';
import { callLatency } from '../../domain/call-latency.ts';
import { TURN_MARKS, TURN_STAGES } from '../../domain/turn-latency.ts';
import {
  CALL_OUTCOMES,
  CALL_SOURCES,
  CALL_STATUSES,
  DEFAULT_PAGE_SIZE,
  END_STATUSES,
  MAX_AGENT_IDS,
  MAX_PAGE,
  MAX_PAGE_SIZE,
  MAX_SEARCH_LENGTH,
  MAX_TAG_LENGTH,
  pagination,
  parseInstant,
  toCall,
  TRANSCRIPT_ENTRY_TYPES,
  type CallListFilter,
  type CallOutcome,
  type CallSource,
  type CallStatus,
} from '../../domain/call.ts';

/** A 404 whose message says more than "<what> not found". */
const notFoundWith = (message: string) => new DomainError('not_found', 'NOT_FOUND', message);

const Enum = (values: readonly string[], description?: string) => Type.Unsafe<string>({ type: 'string', enum: [...values], ...(description ? { description } : {}) });

// The service document's schemas (spec/service-openapi.json), field for field; a field with no
// value is absent. Fields of ours follow, marked in their description. Every field a response
// carries must be named here: the serializer drops the others.
const TranscriptToolCall = Type.Object(
  {
    itemId: Type.Optional(Type.String()),
    callId: Type.Optional(Type.String()),
    toolName: Type.Optional(Type.String()),
    arguments: Type.Optional(Type.String({ description: 'JSON string of arguments.' })),
    output: Type.Optional(Type.String()),
    startedAt: Type.Optional(DateTime()),
    endedAt: Type.Optional(DateTime()),
  },
  { title: 'TranscriptToolCall' },
);
const TranscriptEntry = Type.Object(
  {
    index: Type.Optional(Type.Integer()),
    role: Type.Optional(Type.String({ description: 'For message rows: user, assistant, or system. Absent for tool rows.' })),
    message: Type.Optional(Type.String()),
    type: Type.Optional(Enum(TRANSCRIPT_ENTRY_TYPES)),
    toolCall: Type.Optional(TranscriptToolCall),
    toolCallOutput: Type.Optional(Type.String()),
    createdAt: Type.Optional(DateTime()),
    durationMs: Type.Optional(Type.Integer()),
    turnId: Type.Optional(Type.String()),
    interrupted: Type.Optional(Type.Boolean({ description: 'callbridge: an assistant turn cut by barge-in; message is only what the caller heard.' })),
  },
  { title: 'TranscriptEntry' },
);
const ContextVariable = Type.Object(
  {
    name: Type.Optional(Type.String()),
    type: Type.Optional(Enum(['system', 'input', 'extracted'])),
    description: Type.Optional(Type.String()),
    value: Type.Optional(Type.Unknown()),
    dataType: Type.Optional(Enum(['string', 'number', 'boolean', 'object', 'array'])),
    rationale: Type.Optional(Type.String()),
  },
  { title: 'ContextVariable' },
);
const Ms = (description: string) => Type.Number({ description });
const markFields = Object.fromEntries(TURN_MARKS.map((m) => [m, Type.Optional(Type.Number())]));
const stageFields = Object.fromEntries(TURN_STAGES.map((s) => [s, Type.Optional(Type.Number())]));
const Percentiles = Type.Object({ p50: Type.Number(), p95: Type.Number() }, { title: 'LatencyPercentiles' });
const CallLatency = Type.Object(
  {
    turns: Type.Array(
      Type.Object(
        {
          index: Type.Integer({ description: '0-based, in the order the agent turns started' }),
          turn_id: Type.String({ description: 'the turn id of the response_text / transcript entries' }),
          kind: Type.String({ description: 'first, reply, reprompt or closing' }),
          started_at: DateTime(),
          marks: Type.Object(markFields, { description: 'ms since started_at of each moment the turn had (docs/latency.md)' }),
          stages: Type.Object(stageFields, { description: 'ms of each stage whose two marks the turn had' }),
          voice_to_voice_ms: Type.Optional(Ms('speech_end -> audio_out_first, when the turn has both')),
          barge_in_ms: Type.Optional(Ms('ms since started_at when the caller cut the turn')),
        },
        { title: 'LatencyTurn' },
      ),
    ),
    summary: Type.Object(
      {
        turns: Type.Integer(),
        stages: Type.Object(Object.fromEntries(TURN_STAGES.map((s) => [s, Type.Optional(Percentiles)]))),
        voice_to_voice_ms: Type.Union([Percentiles, Type.Null()]),
      },
      { title: 'LatencySummary' },
    ),
  },
  { title: 'CallLatency', description: 'callbridge: where each agent turn\'s time went (GET /v1/calls/{id} only; docs/latency.md). Figures in ms, to 0.1 ms.' },
);
const Call = Type.Object(
  {
    id: Uuid(),
    agent_id: Type.Optional(Uuid('absent once the agent was deleted')),
    graph_version_id: Type.Optional(Uuid('the agent version the session ran')),
    organization_id: Type.Optional(Uuid()),
    party_number: Type.Optional(Type.String({ description: 'inbound: the caller; outbound: the number called; api: the session\'s caller_id' })),
    status: Type.Optional(Enum(CALL_STATUSES)),
    source: Type.Optional(Enum(CALL_SOURCES)),
    termination_reason: Type.Optional(Type.String()),
    extracted_variables: Type.Optional(
      Type.Array(ContextVariable, { description: 'the post-call analysis\'s fields (the agent\'s analysis_fields; value one of the field\'s choices or null); [] until it ran' }),
    ),
    outbound: Type.Optional(Type.Boolean()),
    created_at: Type.Optional(DateTime()),
    connected_at: Type.Optional(DateTime()),
    started_at: Type.Optional(DateTime()),
    ended_at: Type.Optional(DateTime()),
    summary: Type.Optional(Type.String({ description: 'the post-call analysis\'s summary (summarize_calls); absent until there is one' })),
    transcript: Type.Optional(Type.Object({ entries: Type.Array(TranscriptEntry) }, { title: 'Transcript' })),
    tags: Type.Optional(Type.Array(Type.String())),
    duration_seconds: Type.Optional(Type.Integer({ description: 'from started_at to ended_at, when both are set' })),
    outbound_list_run_id: Type.Optional(Uuid('the outbound run that placed the call (docs/outbound.md)')),
    outbound_contact_id: Type.Optional(Uuid('the outbound list contact the call was placed to')),
    direction: Type.Optional(Enum(['inbound', 'outbound', 'web'], 'callbridge: inbound, outbound (phone calls) or web (a session a client opened)')),
    from: Type.Optional(Type.String({ description: 'callbridge: inbound, the caller; outbound, the caller ID shown; web, the caller_id' })),
    to: Type.Optional(Type.String({ description: 'callbridge: inbound, the number dialled; outbound, the number called; web, the agent' })),
    sip_trunk_id: Type.Optional(Uuid('callbridge: the SIP trunk of a phone call')),
    end_status: Type.Optional(Enum(END_STATUSES, 'callbridge: how an ended call ended')),
    outcome: Type.Optional(Enum(CALL_OUTCOMES, 'callbridge: the outcome filter\'s bucket of termination_reason')),
    has_recording: Type.Optional(Type.Boolean({ description: 'callbridge: GET /v1/calls/{id}/recording has a WAV' })),
    carrier_call_id: Type.Optional(Type.String({ description: 'callbridge: the carrier\'s id of the call (its CallSid), for calls on the carrier\'s own voice path (source twilio)' })),
    analyzed_at: Type.Optional(Type.String({ format: 'date-time', description: 'callbridge: when the post-call analysis was stored; absent when it did not run (off, failed) or is still running' })),
    latency: Type.Optional(CallLatency),
    machine_detection: Type.Optional(
      Type.Object(
        {
          result: Enum(['human', 'machine', 'unknown'], 'what the callee was judged to be'),
          decided_after_ms: Type.Integer({ description: 'ms from the answer to the decision' }),
          beep: Type.Boolean({ description: 'a voicemail beep was heard (by the decision, or by the message of leave_message)' }),
        },
        { title: 'MachineDetection', description: 'callbridge: answering-machine detection\'s outcome on an outbound call whose dial asked for it (docs/machine-detection.md)' },
      ),
    ),
    sip: Type.Optional(
      Type.Object(
        {
          call_id: Type.String({ description: 'the SIP dialog\'s Call-ID (at most 256 characters)' }),
          final_status: Type.Optional(Type.Integer({ description: 'the INVITE\'s final response: sent by callbridge (inbound), received (outbound dial); absent when the call got none' })),
          final_reason: Type.Optional(Type.String({ description: 'that response\'s reason phrase (at most 128 characters)' })),
        },
        { title: 'SipDetails', description: 'callbridge: a SIP call\'s Call-ID and final response, for a carrier ticket (docs/calls.md "SIP details"); absent for calls not on SIP' },
      ),
    ),
  },
  { title: 'Call' },
);
const PaginatedCallsResponse = Type.Object(
  {
    calls: Type.Array(Call),
    pagination: Type.Object(
      { page: Type.Integer(), page_size: Type.Integer(), total: Type.Integer(), total_pages: Type.Integer(), has_next: Type.Boolean(), has_prev: Type.Boolean() },
      { title: 'PaginationInfo' },
    ),
  },
  { title: 'PaginatedCallsResponse' },
);

// callbridge: the live media figures of a call this node bridges now (GET /v1/calls/live).
const LiveMedia = Type.Object(
  {
    packets_received: Type.Integer({ description: 'RTP packets received from the caller so far' }),
    packets_lost: Type.Integer({ description: 'RTP packets lost so far (RFC 3550 A.3: expected - received)' }),
    loss_ratio: Type.Number({ description: 'lost / (received + lost), 0..1, 4 decimals' }),
    jitter_ms: Type.Number({ description: 'interarrival jitter of the caller\'s stream (RFC 3550 A.8), ms' }),
    late_frames: Type.Optional(Type.Integer({ description: 'agent frames sent to the caller later than their 20 ms slot; absent when the call\'s media does not count them' })),
  },
  { title: 'LiveCallMedia', description: 'callbridge: figures so far, at most about a second old' },
);
const LiveCall = Type.Intersect([Call, Type.Object({ live: LiveMedia })], { title: 'LiveCall' });
const LiveCallsResponse = Type.Object({ calls: Type.Array(LiveCall) }, { title: 'LiveCallsResponse' });

/** The live figures as the API names them. */
function liveMedia(m: LiveCallMedia): Static<typeof LiveMedia> {
  const lost = Math.max(0, m.packetsLost);
  const total = m.packetsReceived + lost;
  return {
    packets_received: m.packetsReceived,
    packets_lost: m.packetsLost,
    loss_ratio: total > 0 ? Number((lost / total).toFixed(4)) : 0,
    jitter_ms: Math.round(m.jitterMs * 10) / 10,
    ...(m.lateFrames !== undefined ? { late_frames: m.lateFrames } : {}),
  };
}

const Query = Obj({
  organization_id: Type.Optional(Uuid('ignored: the API key names the organization')),
  // The maximum only keeps page x page_size a safe integer; any page past the end is empty.
  page: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE, default: 1, description: 'Page number (1-based). Default 1.' })),
  page_size: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE, description: `Page size. Default ${DEFAULT_PAGE_SIZE}, maximum ${MAX_PAGE_SIZE}.` })),
  agent_ids: Type.Optional(Type.String({ description: `Comma-separated agent UUIDs (at most ${MAX_AGENT_IDS}).` })),
  status: Type.Optional(Enum(CALL_STATUSES)),
  source: Type.Optional(Enum(CALL_SOURCES)),
  date_from: Type.Optional(Type.String({ maxLength: 64, description: 'created_at on or after this instant (RFC 3339 / ISO 8601; a date alone: its start, UTC).' })),
  date_to: Type.Optional(Type.String({ maxLength: 64, description: 'created_at on or before this instant (a date alone: its end, UTC).' })),
  outbound: Type.Optional(Enum(['true', 'false'])),
  search: Type.Optional(Type.String({ maxLength: MAX_SEARCH_LENGTH, description: 'Substring of party_number (case-sensitive).' })),
  tag: Type.Optional(Type.String({ maxLength: MAX_TAG_LENGTH })),
  outcome: Type.Optional(Enum(CALL_OUTCOMES)),
  outbound_list_run_id: Type.Optional(Uuid('calls placed by this outbound run')),
  outbound_contact_id: Type.Optional(Uuid('calls placed to this outbound contact')),
});

interface ListQuery {
  page?: number;
  page_size?: number;
  agent_ids?: string;
  status?: CallStatus;
  source?: CallSource;
  date_from?: string;
  date_to?: string;
  outbound?: 'true' | 'false';
  search?: string;
  tag?: string;
  outcome?: CallOutcome;
  outbound_list_run_id?: string;
  outbound_contact_id?: string;
}

/** The query as a filter; 400 naming the parameter for what the schema cannot say. */
export function listFilter(q: ListQuery): CallListFilter {
  const f: CallListFilter = {};
  const agentIds = q.agent_ids?.split(',').map((s) => s.trim()).filter(Boolean);
  if (agentIds?.length) {
    const bad = agentIds.find((a) => !isUuid(a));
    if (bad !== undefined) throw validation(`querystring.agent_ids: "${bad}" is not a uuid`);
    if (agentIds.length > MAX_AGENT_IDS) throw validation(`querystring.agent_ids names more than ${MAX_AGENT_IDS} agents`);
    f.agentIds = [...new Set(agentIds.map((a) => a.toLowerCase()))];
  }
  for (const [name, bound] of [['date_from', 'from'], ['date_to', 'to']] as const) {
    const raw = q[name];
    if (raw === undefined || raw === '') continue;
    const iso = parseInstant(raw, bound);
    if (iso === undefined) throw validation(`querystring.${name} must be an RFC 3339 / ISO 8601 date or date-time, e.g. 2026-01-31T09:00:00Z`);
    if (bound === 'from') f.dateFrom = iso;
    else f.dateTo = iso;
  }
  if (q.status !== undefined) f.status = q.status;
  if (q.source !== undefined) f.source = q.source;
  if (q.outbound !== undefined) f.outbound = q.outbound === 'true';
  if (q.search) f.search = q.search;
  if (q.tag) f.tag = q.tag;
  if (q.outcome !== undefined) f.outcome = q.outcome;
  if (q.outbound_list_run_id !== undefined) f.outboundListRunId = q.outbound_list_run_id.toLowerCase();
  if (q.outbound_contact_id !== undefined) f.outboundContactId = q.outbound_contact_id.toLowerCase();
  return f;
}

export async function callRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store } = deps;
  const tags = ['calls'];

  app.get(
    '/v1/calls',
    {
      schema: {
        tags,
        description: 'Paginated calls of the organization of the API key, newest first (created_at), filtered by the optional query parameters (docs/calls.md).',
        querystring: Query,
        response: { 200: PaginatedCallsResponse, ...errorResponses(400, 401) },
      },
    },
    async (req) => {
      const q = req.query as ListQuery;
      const page = q.page ?? 1;
      const pageSize = q.page_size ?? DEFAULT_PAGE_SIZE;
      // organization_id is accepted for clients of the service document and ignored: an API key
      // belongs to one organization, and a parameter must never widen what a key can read.
      const { calls, total } = await store.calls.list(req.org.id, listFilter(q), pageSize, (page - 1) * pageSize);
      return { calls: calls.map(toCall), pagination: pagination(page, pageSize, total) };
    },
  );

  app.get(
    '/v1/calls/live',
    {
      schema: {
        tags,
        description:
          'callbridge: the calls of the organization of the API key that this node is bridging now (their media running), newest first, each with its live media figures (`live`). Calls on other nodes and sessions without a phone leg are not listed (docs/calls.md).',
        response: { 200: LiveCallsResponse, ...errorResponses(401) },
      },
    },
    async (req) => {
      const live = deps.liveCalls?.() ?? [];
      // Each call is read with the key's organization: another organization's call is simply not found.
      const records = await Promise.all(live.map(async (m) => ({ m, record: await store.calls.get(req.org.id, m.callId) })));
      const calls = records.flatMap(({ m, record }) => (record ? [{ ...toCall(record), live: liveMedia(m) }] : []));
      calls.sort((a, b) => (b.created_at ?? '').localeCompare(a.created_at ?? ''));
      return { calls };
    },
  );

  app.get('/v1/calls/:id', { schema: { tags, params: IdParams, response: { 200: Call, ...errorResponses(400, 401, 404) } } }, async (req) => {
    const { id } = req.params as { id: string };
    const call = await store.calls.get(req.org.id, id);
    if (!call) throw notFound('call');
    return { ...toCall(call), latency: callLatency(await store.turnTimelines.list(req.org.id, id)) };
  });

  app.get(
    '/v1/calls/:id/recording',
    {
      schema: {
        tags,
        description: 'The call\'s recording: a stereo PCM16 WAV, left channel the caller, right channel the agent (bridge.recording must be on).',
        params: IdParams,
        response: { 200: { description: 'WAV audio', content: { 'audio/wav': { schema: Type.String({ format: 'binary' }) } } }, ...errorResponses(400, 401, 404) },
      },
    },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      if (!(await store.calls.get(req.org.id, id))) throw notFound('call');
      const path = await store.calls.recordingPath(req.org.id, id);
      if (path === undefined) throw notFoundWith('call has no recording (recording is off, or the call was never answered)');
      let size: number;
      try {
        const st = statSync(path);
        if (!st.isFile()) throw new Error('not a file');
        size = st.size;
      } catch {
        req.log.warn({ callId: id, path }, 'recording file missing on disk');
        throw notFoundWith('recording file is gone: it was deleted from the server');
      }
      return reply
        .header('content-type', 'audio/wav')
        .header('content-length', size)
        .header('content-disposition', `attachment; filename="${id}.wav"`)
        .header('cache-control', 'private, no-store')
        .send(createReadStream(path));
    },
  );
}
