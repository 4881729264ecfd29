/**
 * A real webhook receiver on loopback: every request is verified with the npm library
 * `standardwebhooks` (the receiver's side of the Standard Webhooks scheme), as an integrator's
 * server would, and kept. Its answers are scripted: a queue of behaviours (an HTTP status, or
 * 'hang': no answer until the sender gives up), then `fallback` (default 200).
 *
 *   const rx = await startWebhookReceiver();
 *   rx.secret = created.secret;         // the secret from POST /v1/webhooks
 *   rx.script.push(500, 'hang');        // the next two requests fail, the third gets 200
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export type ReceiverBehaviour = number | 'hang';

export interface ReceivedWebhook {
  headers: Record<string, string>;
  body: string;
  /** The parsed body; undefined when the signature did not verify (`verifyError` says why). */
  event: any;
  verifyError?: string;
  /** The answer it got ('hang': none). */
  answer: ReceiverBehaviour;
}

export interface WebhookReceiver {
  url: string;
  port: number;
  /** The secret requests are verified with (set it from the create answer). */
  secret: string;
  script: ReceiverBehaviour[];
  fallback: ReceiverBehaviour;
  received: ReceivedWebhook[];
  /** The requests answered 2xx whose signature verified. */
  accepted(): ReceivedWebhook[];
  close(): Promise<void>;
}

export async function startWebhookReceiver(port = 0): Promise<WebhookReceiver> {
  const hanging = new Set<http.ServerResponse>();
  const rx: WebhookReceiver = {
    url: '',
    port: 0,
    secret: '',
    script: [],
    fallback: 200,
    received: [],
    accepted: () => rx.received.filter((r) => r.event !== undefined && typeof r.answer === 'number' && r.answer >= 200 && r.answer < 300),
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
      const answer = rx.script.length > 0 ? rx.script.shift()! : rx.fallback;
      let event: any;
      let verifyError: string | undefined;
      try {
        event = new Webhook(rx.secret).verify(body, headers);
      } catch (err) {
        verifyError = (err as Error).message;
      }
      rx.received.push({ headers, body, event, answer, ...(verifyError !== undefined ? { verifyError } : {}) });
      if (answer === 'hang') {
        hanging.add(res);
        res.on('close', () => hanging.delete(res));
        return;
      }
      res.writeHead(answer, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  rx.port = (server.address() as AddressInfo).port;
  rx.url = `http://127.0.0.1:${rx.port}/hooks`;
  return rx;
}
