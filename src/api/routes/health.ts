import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../../config.ts';
import type { ApiDeps } from '../context.ts';
import { Obj } from '../schemas.ts';

const Health = Obj({ status: Type.String(), reason: Type.Optional(Type.String()), detail: Type.Optional(Type.String()) });

/**
 * What an operator should know about a ready daemon that is not a failure: with the built-in
 * `local` recognizer, callers' words are never transcribed (the agent hears "(speech, N.N
 * seconds)"), which is easy to mistake for a working setup. Undefined when there is nothing to say.
 */
export function readinessDetail(config: Pick<Config, 'stt'>): string | undefined {
  if (config.stt.provider !== 'local') return undefined;
  return 'speech-to-text: no recognizer configured; the built-in local one marks utterances but recognizes no words (set stt.provider to openai or stream for transcripts)';
}

export async function healthRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const detail = readinessDetail(deps.config);
  app.get('/healthz', { config: { public: true }, schema: { tags: ['operations'], response: { 200: Health } } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { config: { public: true }, schema: { tags: ['operations'], response: { 200: Health, 503: Health } } }, async (_req, reply) => {
    const r = deps.readiness();
    if (r.ready && !r.draining) return detail === undefined ? { status: 'ready' } : { status: 'ready', detail };
    // 'unavailable' once started: an operator paged at 3 a.m. must not read "starting" for a store that went away.
    return reply.code(503).send({ status: r.draining ? 'draining' : r.started === true ? 'unavailable' : 'starting', reason: r.reason ?? '' });
  });
}
