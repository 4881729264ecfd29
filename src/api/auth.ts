/** `Authorization: Bearer <key>` on every /v1 route that is not public. */
import type { FastifyInstance } from 'fastify';
import type { Store } from '../store/index.ts';
import type { Organization } from '../store/organizations.ts';
import { sendError } from './errors.ts';

export function installAuth(app: FastifyInstance, store: Store): void {
  app.decorateRequest('org', null as unknown as Organization);
  app.decorateRequest('apiKeyId', '');
  // A callback hook, not an async one: it runs on every request and waits only for the key lookup.
  app.addHook('onRequest', (req, reply, done) => {
    // Unmatched routes fall through to the 404 handler; public routes need no key.
    if (!req.routeOptions.url || req.routeOptions.config?.public) return done();
    const header = req.headers.authorization;
    const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    // Replying ends the request without done(); the reply is not returned (it is thenable).
    if (!match) {
      sendError(reply, 401, 'missing API key: send Authorization: Bearer <key>');
      return;
    }
    // On SQLite a known key is answered from the repository's cache (the promise is already
    // settled); on PostgreSQL the database decides on every request (docs/api-keys.md).
    store.organizations.authenticate(match[1] as string).then(
      (owner) => {
        if (!owner) {
          sendError(reply, 401, 'invalid API key');
          return;
        }
        req.org = owner.org;
        req.apiKeyId = owner.keyId;
        done();
      },
      (err: unknown) => done(err as Error),
    );
  });
}
