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
 *
 * Anyone can post to the webhooks before a signature is checked, so they are bounded before
 * anything else: telco.webhook_body_limit bytes (413 without reading the rest) and
 * telco.webhook_max_parameters form parameters (413 before the form is parsed), and their
 * refusals are logged once per source and minute (WebhookRefusalLog) and counted in
 * callbridge_telco_webhooks_refused_total{route, reason}.
 */
import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import { Counter, type Registry } from 'prom-client';
import type { ApiDeps } from '../context.ts';
import { WebhookRefusalLog, type WebhookRoute } from '../../telco/webhook-refusals.ts';
import { clipForLog } from '../../log-fields.ts';
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

/** The parameters of a form body, counted without parsing it (an upper bound: `a&&b` counts 3). */
function formParameterCount(body: string): number {
  if (body === '') return 0;
  let n = 1;
  for (let i = body.indexOf('&'); i !== -1; i = body.indexOf('&', i + 1)) n++;
  return n;
}

/** A 413 of the form parser (the error handler answers it with its message). */
function tooManyParameters(limit: number): FastifyError {
  const err = new Error(`a carrier webhook has at most ${limit} form parameters (telco.webhook_max_parameters)`) as FastifyError;
  err.statusCode = 413;
  err.code = 'TELCO_WEBHOOK_TOO_MANY_PARAMETERS';
  return err;
}

export async function twilioRoutes(app: FastifyInstance, deps: ApiDeps, registry?: Registry): Promise<void> {
  const log = deps.logger.child({ component: 'telco' });
  // Shared with the bridge's outbound dials, which issue tokens too; the grants are in the store.
  const tokens = deps.streamTokens ?? new StreamTokens(deps.store.streamGrants);
  const bodyLimit = deps.config.telco.webhook_body_limit;
  const maxParameters = deps.config.telco.webhook_max_parameters;

  const refusedTotal = new Counter({
    name: 'callbridge_telco_webhooks_refused_total',
    help: "Carrier webhooks refused before their signature was accepted, by route (voice, status) and reason: bad_signature (403), body_too_large and too_many_parameters (413, telco.webhook_body_limit / telco.webhook_max_parameters). The log names each source's first refusal per minute only.",
    labelNames: ['route', 'reason'] as const,
    registers: registry === undefined ? [] : [registry],
  });
  const refusals = new WebhookRefusalLog({ log, count: (route, reason) => refusedTotal.inc({ route, reason }) });
  app.addHook('onClose', (_app, done) => {
    refusals.close();
    done();
  });
  const routeOf = (req: FastifyRequest): WebhookRoute => (req.routeOptions.url === TWILIO_STATUS_PATH ? 'status' : 'voice');
  // The 413s (Fastify's body limit, the parameter count) never reach a handler: counted here.
  app.addHook('onError', (req, reply, err, done) => {
    const reason = err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' ? 'body_too_large' : err.code === 'TELCO_WEBHOOK_TOO_MANY_PARAMETERS' ? 'too_many_parameters' : undefined;
    if (reason !== undefined) {
      // The rest of an oversized body is not read: the socket closes after the answer.
      if (!reply.sent) reply.header('connection', 'close');
      const fields = { url: clipForLog(req.url, 256), contentLength: clipForLog(req.headers['content-length'] ?? '', 20) };
      refusals.refused(req.ip, routeOf(req), reason, fields, `carrier webhook refused (413): ${err.message}`);
    }
    done();
  });

  // The carrier posts its webhooks form-encoded. Kept as ordered pairs: the signature covers
  // every parameter as sent. Registered in this plugin only: the rest of the API speaks JSON.
  // The parameters are counted before URLSearchParams builds its pairs (110,000 of them from one
  // 1 MB body took the main thread from SIP for tens of milliseconds).
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit }, (_req, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    if (formParameterCount(text) > maxParameters) {
      done(tooManyParameters(maxParameters), undefined);
      return;
    }
    done(null, [...new URLSearchParams(text)]);
  });
  const refuse = (req: FastifyRequest, answer: { refusal: { fields: Record<string, unknown>; message: string } }) =>
    refusals.refused(req.ip, routeOf(req), 'bad_signature', answer.refusal.fields, answer.refusal.message);

  app.post(TWILIO_VOICE_PATH, { bodyLimit, config: { public: true }, schema: { hide: true } }, async (req, reply) => {
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
    if (answer.status === 403) {
      refuse(req, answer);
      return reply.code(403).send({ error: answer.error });
    }
    return reply.type('text/xml; charset=utf-8').send(answer.twiml);
  });

  app.post(TWILIO_STATUS_PATH, { bodyLimit, config: { public: true }, schema: { hide: true } }, async (req, reply) => {
    const params = Array.isArray(req.body) ? (req.body as Array<[string, string]>) : [];
    const signature = req.headers['x-twilio-signature'];
    const answer = await readStatusCallback(
      async (accountSid) => (await deps.store.telcoNumbers.importsOfAccount(accountSid)).map((n) => n.auth_token),
      { url: publicBase(deps.config.http.public_url, req) + req.url, params, signature: typeof signature === 'string' ? signature : undefined },
    );
    if (answer.status === 403) refuse(req, answer);
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
