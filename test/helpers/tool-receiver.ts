/**
 * A customer's tool.call receiver on loopback: every request is verified with the npm library
 * `standardwebhooks` (what a receiver would use) before it is recorded; one that does not verify
 * is answered 401 and counted in `rejected`. What it answers is set per test (`answer`): a status
 * and body, after a delay, or nothing at all (silent).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { newWebhookSecret } from '../../src/events/standard-webhooks.ts';

export interface ReceivedToolCall {
  /** The verified body. */
  payload: { type: string; id: string; created_at: string; data: { call_id: string; agent_id: string; tool_call_id: string; name: string; arguments: Record<string, unknown> } };
  headers: Record<string, string>;
  at: number;
}

export type ToolAnswer = { status: number; body: string; delayMs?: number } | 'silent';

export interface ToolReceiver {
  url: string;
  secret: string;
  received: ReceivedToolCall[];
  rejected: number;
  answer: (call: ReceivedToolCall) => ToolAnswer;
  close(): Promise<void>;
}

/** `secret` may be set later (the endpoint's, from POST /v1/webhooks): each request is verified with the current one. */
export async function startToolReceiver(): Promise<ToolReceiver> {
  const secret = newWebhookSecret();
  const holder: { server?: Server } = {};
  const r: ToolReceiver = {
    url: '',
    secret,
    received: [],
    rejected: 0,
    answer: () => ({ status: 200, body: '{"output":"ok"}' }),
    close: async () => {
      const server = holder.server!;
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
      let payload: ReceivedToolCall['payload'];
      try {
        payload = new Webhook(r.secret).verify(body, headers) as ReceivedToolCall['payload'];
      } catch {
        r.rejected++;
        res.writeHead(401).end();
        return;
      }
      const call = { payload, headers, at: Date.now() };
      r.received.push(call);
      const a = r.answer(call);
      if (a === 'silent') return;
      setTimeout(() => res.writeHead(a.status, { 'content-type': 'application/json' }).end(a.body), a.delayMs ?? 0);
    });
  });
  holder.server = server;
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  r.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/tools`;
  return r;
}
