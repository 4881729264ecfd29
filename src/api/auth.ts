/** `Authorization: Bearer <key>` on every /v1 route that is not public. */
import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/index.ts';
import type { Organization } from '../store/organizations.ts';
import { sendError } from './errors.ts';

export function installAuth(app: FastifyInstance, store: Store): void {
  app.decorateRequest('org', null as unknown as Organization);
  app.addHook('onRequest', async (req, reply) => {
    // Unmatched routes fall through to the 404 handler; public routes need no key.
    if (!req.routeOptions.url || req.routeOptions.config?.public) return;
    const header = req.headers.authorization;
    const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    if (!match) return sendError(reply, 401, 'missing API key: send Authorization: Bearer <key>');
    const org = store.organizations.byApiKey(match[1] as string);
    if (!org) return sendError(reply, 401, 'invalid API key');
    req.org = org;
  });
}
