// PLACEHOLDER: replaced by the sip-trunks work (helper).
import type { FastifyInstance } from 'fastify';
import type { ApiDeps } from '../context.ts';
export async function sipTrunkRoutes(_app: FastifyInstance, _deps: ApiDeps): Promise<void> {}
