/**
 * The carrier's programmable-voice path (Twilio), beside SIP (docs/telco.md):
 *
 *   POST /v1/telco/twilio/voice   the number's voice webhook: form-encoded, X-Twilio-Signature
 *                                 checked first (403 otherwise), answered with TwiML
 *   GET  /v1/telco/twilio/stream  the media stream WebSocket the TwiML connects the call to
 *   POST /v1/telco/twilio/status  call status callbacks (outbound dials' progress, the end of
 *                                 calls on imported numbers): signature checked like the webhook
 *
 * Both are public routes (no API key: the carrier has none of ours). The webhook is
 * authenticated by the carrier's signature with the number's auth token, the stream by the
 * one-time token the webhook put in its parameters. The signed URL is http.public_url + the path
 * as requested; without public_url, http://<Host header> (only right without a proxy in front).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ApiDeps } from '../context.ts';
import { answerVoiceWebhook } from '../../telco/twilio-voice-webhook.ts';
import { serveTwilioStream } from '../../telco/twilio-stream-socket.ts';
import { StreamTokens } from '../../telco/twilio-stream-tokens.ts';
import { readStatusCallback } from '../../telco/twilio-call-status.ts';
import { TWILIO_STATUS_PATH, TWILIO_STREAM_PATH, TWILIO_VOICE_PATH } from '../../telco/twilio-voice-url.ts';

export { TWILIO_STATUS_PATH, TWILIO_STREAM_PATH, TWILIO_VOICE_PATH };

/** The base URL the carrier was given for this daemon, no trailing slash. */
function publicBase(publicUrl: string, req: FastifyRequest): string {
  if (publicUrl !== '') return publicUrl.replace(/\/+$/, '');
  return `${req.protocol}://${req.headers.host ?? 'localhost'}`;
}

export async function twilioRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const log = deps.logger.child({ component: 'telco' });
  // Shared with the bridge's outbound dials, which issue tokens too; the grants are in the store.
  const tokens = deps.streamTokens ?? new StreamTokens(deps.store.streamGrants);

  // The carrier posts its webhooks form-encoded. Kept as ordered pairs: the signature covers
  // every parameter as sent. Registered in this plugin only: the rest of the API speaks JSON.
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
    done(null, [...new URLSearchParams(typeof body === 'string' ? body : body.toString('utf8'))]);
  });

  app.post(TWILIO_VOICE_PATH, { config: { public: true }, schema: { hide: true } }, async (req, reply) => {
    const params = Array.isArray(req.body) ? (req.body as Array<[string, string]>) : [];
    const base = publicBase(deps.config.http.public_url, req);
    const signature = req.headers['x-twilio-signature'];
    const answer = await answerVoiceWebhook(
      {
        importsOfAccount: (accountSid) => deps.store.telcoNumbers.importsOfAccount(accountSid),
        holderOf: async (orgId, numberId) => {
          const id = await deps.store.agents.holderOfPhoneNumber(numberId);
          const agent = id === undefined ? undefined : await deps.store.agents.get(orgId, id);
          return agent === undefined ? undefined : { id: agent.id, active: agent.status === 'active' };
        },
        // Without a bridge nothing can take the call: as if bridge.max_calls were reached.
        callLimitReached: (orgId, callSid) => deps.carrierStreams?.callLimitReached(orgId, callSid) ?? 'bridge.max_calls',
        tokens,
        log,
      },
      {
        url: base + req.url,
        params,
        signature: typeof signature === 'string' ? signature : undefined,
        streamUrl: base.replace(/^http/, 'ws') + TWILIO_STREAM_PATH,
      },
    );
    if (answer.status === 403) return reply.code(403).send({ error: answer.error });
    return reply.type('text/xml; charset=utf-8').send(answer.twiml);
  });

  app.post(TWILIO_STATUS_PATH, { config: { public: true }, schema: { hide: true } }, async (req, reply) => {
    const params = Array.isArray(req.body) ? (req.body as Array<[string, string]>) : [];
    const signature = req.headers['x-twilio-signature'];
    const answer = await readStatusCallback(
      async (accountSid) => (await deps.store.telcoNumbers.importsOfAccount(accountSid)).map((n) => n.auth_token),
      { url: publicBase(deps.config.http.public_url, req) + req.url, params, signature: typeof signature === 'string' ? signature : undefined },
      log,
    );
    if (answer.status !== 204) return reply.code(answer.status).send({ error: answer.error });
    await deps.carrierStreams?.callStatus(answer.update);
    return reply.code(204).send();
  });

  app.route({
    method: 'GET',
    url: TWILIO_STREAM_PATH,
    config: { public: true },
    schema: { hide: true },
    handler: (_req, reply) => reply.code(426).header('upgrade', 'websocket').send({ error: 'upgrade to a WebSocket: this endpoint speaks the carrier media stream protocol only' }),
    wsHandler: (socket) => {
      const streams = deps.carrierStreams;
      if (streams === undefined) {
        log.warn('media stream refused: this daemon bridges no calls');
        socket.close(1013, 'calls are not bridged on this daemon');
        return;
      }
      serveTwilioStream(socket, { tokens, log, onStart: (stream) => streams.handle(stream), mediaTimeoutMs: deps.config.rtp.media_timeout_secs * 1000 });
    },
  });
}
