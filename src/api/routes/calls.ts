/**
 * Call history: voice sessions (src/session/) and the call bridge write the records; recordings
 * (bridge.recording) are stereo WAV files the bridge wrote, streamed from disk (docs/calls.md).
 */
import { createReadStream, statSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, IdParams, Obj, Uuid } from '../schemas.ts';
import { DomainError, notFound, validation } from '../../domain/errors.ts';
import { isUuid } from '../../domain/ids.ts';
import type { CallDirection } from '../../store/calls.ts';

/** A 404 whose message says more than "<what> not found". */
const notFoundWith = (message: string) => new DomainError('not_found', 'NOT_FOUND', message);

const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);
const Call = Type.Object(
  {
    id: Uuid(),
    agent_id: Nullable(Type.String()),
    sip_trunk_id: Nullable(Type.String()),
    direction: Type.String({ enum: ['inbound', 'outbound', 'web'] }),
    status: Type.String(),
    from: Type.String(),
    to: Type.String(),
    started_at: DateTime(),
    answered_at: Nullable(DateTime()),
    ended_at: Nullable(DateTime()),
    end_reason: Nullable(Type.String()),
    transcript: Type.Array(Type.Unknown()),
    summary: Nullable(Type.String()),
    has_recording: Type.Boolean(),
  },
  { title: 'Call' },
);

export async function callRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store, config } = deps;
  const tags = ['calls'];
  const Query = Obj({
    agent_ids: Type.Optional(Type.String({ description: 'comma-separated agent ids' })),
    status: Type.Optional(Type.String({ maxLength: 40 })),
    direction: Type.Optional(Type.String({ enum: ['inbound', 'outbound', 'web'] })),
    from: Type.Optional(Type.String({ format: 'date-time', description: 'started at or after' })),
    to: Type.Optional(Type.String({ format: 'date-time', description: 'started before' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: config.limits.max_page_size })),
    offset: Type.Optional(Type.Integer({ minimum: 0 })),
  });

  app.get('/v1/calls', { schema: { tags, querystring: Query, response: { 200: Type.Array(Call), ...errorResponses(400, 401) } } }, async (req) => {
    const q = req.query as { agent_ids?: string; status?: string; direction?: CallDirection; from?: string; to?: string; limit?: number; offset?: number };
    const agentIds = q.agent_ids?.split(',').map((s) => s.trim()).filter(Boolean);
    const bad = agentIds?.find((a) => !isUuid(a));
    if (bad) throw validation(`querystring.agent_ids: "${bad}" is not a uuid`);
    // Normalise to the stored form (toISOString) so string comparison orders by time.
    const iso = (s?: string) => (s ? new Date(s).toISOString() : undefined);
    return store.calls.list(req.org.id, {
      agentIds,
      status: q.status,
      direction: q.direction,
      from: iso(q.from),
      to: iso(q.to),
      limit: q.limit ?? 100,
      offset: q.offset ?? 0,
    });
  });

  app.get('/v1/calls/:id', { schema: { tags, params: IdParams, response: { 200: Call, ...errorResponses(400, 401, 404) } } }, async (req) => {
    const { id } = req.params as { id: string };
    const call = store.calls.get(req.org.id, id);
    if (!call) throw notFound('call');
    return call;
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
      if (!store.calls.get(req.org.id, id)) throw notFound('call');
      const path = store.calls.recordingPath(req.org.id, id);
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
