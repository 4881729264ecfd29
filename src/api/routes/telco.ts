// PLACEHOLDER: replaced by the telco-numbers work (helper).
import type { FastifyInstance } from 'fastify';
import type { ApiDeps } from '../context.ts';
export async function telcoRoutes(_app: FastifyInstance, _deps: ApiDeps): Promise<void> {}
