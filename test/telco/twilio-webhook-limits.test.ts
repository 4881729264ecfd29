/**
 * The carrier's webhooks against what anyone can send before a signature is checked, over real
 * loopback sockets to a real daemon whose log the test reads:
 *
 *   - a body over telco.webhook_body_limit: 413 on its Content-Length alone, before the body is
 *     sent (the socket gets the answer while the client still holds the body back); a chunked
 *     one is cut off once past the limit
 *   - more than telco.webhook_max_parameters form parameters in a small body: 413, the handler
 *     (whose signature check would log a 403) never reached
 *   - a forged webhook with huge To, CallSid and From: a bounded log line
 *   - many forged webhooks from one source: one full line, the others summed up in one line at
 *     the window's end (here: the daemon's stop), every one counted in
 *     callbridge_telco_webhooks_refused_total{route, reason}
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { startLoggedDaemon, type LoggedDaemon } from '../helpers/logged-daemon.ts';
import { incomingCallParams, postVoiceWebhook, sid } from './fake-twilio.ts';

const ACCOUNT = sid('AC');
const AUTH_TOKEN = 'twilio-auth-token-' + sid('');
const NUMBER = '+15550102001';
const BODY_LIMIT = 64 * 1024;

/** One raw HTTP/1.1 exchange: sends `head`, then `body` only if `sendBody`; resolves with the answer's status line. */
function rawPost(port: number, head: string, chunks: string[] = []): Promise<{ statusLine: string; head: string; bytesSent: number }> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    let answer = '';
    let bytesSent = 0;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      s.destroy();
      resolve({ statusLine: answer.split('\r\n')[0] ?? '', head: answer.split('\r\n\r\n')[0] ?? '', bytesSent });
    };
    s.on('data', (d) => {
      answer += d.toString('latin1');
      if (answer.includes('\r\n\r\n')) finish();
    });
    s.on('error', (err) => (done ? undefined : answer !== '' ? finish() : reject(err)));
    s.on('close', finish);
    s.write(head);
    // Chunks one at a time, each after the previous was flushed, until the server answers.
    const next = (i: number) => {
      if (done || i >= chunks.length) return;
      const c = chunks[i]!;
      bytesSent += c.length;
      s.write(`${c.length.toString(16)}\r\n${c}\r\n`, () => setTimeout(() => next(i + 1), 2));
    };
    next(0);
  });
}

describe('carrier webhook limits (body size, parameter count, log flooding)', () => {
  let carrier: FakeCarrier;
  let d: LoggedDaemon;
  let webhook: string;
  let port = 0;

  beforeAll(async () => {
    carrier = await startFakeCarrier();
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, NUMBER);
    d = await startLoggedDaemon({ telco: { api_base_url: carrier.url } });
    webhook = `${d.url}/v1/telco/twilio/voice`;
    port = Number(new URL(d.url).port);
    const r = await d.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
    expect(r.status, r.text).toBe(201);
  });

  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  const refusedMetric = async (route: string, reason: string): Promise<number> => {
    const m = new RegExp(`^callbridge_telco_webhooks_refused_total\\{route="${route}",reason="${reason}"\\} (\\d+)$`, 'm').exec(await d.metrics());
    return m ? Number(m[1]) : 0;
  };

  it('answers 413 to a body over the limit on its Content-Length, before the body is sent', async () => {
    const head = `POST /v1/telco/twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${1024 * 1024}\r\n\r\n`;
    // No body at all: the answer comes from the header.
    const r = await rawPost(port, head);
    expect(r.statusLine).toMatch(/^HTTP\/1\.1 413 /);
    // And the socket is closed after it: the rest of the body is never read.
    expect(r.head).toMatch(/^connection: close$/im);
    expect(await refusedMetric('voice', 'body_too_large')).toBeGreaterThanOrEqual(1);
  });

  it('cuts off a chunked body once it passes the limit', async () => {
    const head = 'POST /v1/telco/twilio/status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n';
    const chunk = 'a=' + 'x'.repeat(16 * 1024 - 3) + '&';
    const r = await rawPost(port, head, Array.from({ length: 64 }, () => chunk));
    expect(r.statusLine).toMatch(/^HTTP\/1\.1 413 /);
    // 1 MB offered; the answer came once the limit was passed (plus what was in flight).
    expect(r.bytesSent).toBeLessThan(512 * 1024);
    expect(await refusedMetric('status', 'body_too_large')).toBe(1);
  });

  it('answers 413 to more parameters than the limit, before the signature is looked at', async () => {
    const before = d.lines.length;
    const params = Object.fromEntries(Array.from({ length: 1500 }, (_, i) => [`p${i}`, '1']));
    const body = new URLSearchParams(params).toString();
    expect(body.length).toBeLessThan(BODY_LIMIT);
    const r = await fetch(webhook, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': 'forged' }, body });
    expect(r.status).toBe(413);
    expect(await r.json()).toEqual({ error: expect.stringContaining('telco.webhook_max_parameters') });
    // The handler never ran: no signature refusal was logged for it.
    expect(d.lines.slice(before).some((l) => l.msg.includes('voice webhook refused (403)'))).toBe(false);
    expect(await refusedMetric('voice', 'too_many_parameters')).toBe(1);
    // 1,000 parameters (the limit) pass to the signature check (of the status route: the voice
    // route's first signature refusal is the next test's).
    const atLimit = new URLSearchParams(Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}`, '1']))).toString();
    const ok = await fetch(`${d.url}/v1/telco/twilio/status`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: atLimit });
    expect(ok.status).toBe(403);
  });

  it('logs a forged webhook with huge fields in a bounded line, once per source, and counts every one', async () => {
    const before = d.lines.length;
    const metricBefore = await refusedMetric('voice', 'bad_signature');
    const huge = (c: string) => c.repeat(10 * 1024);
    const params = { ...incomingCallParams({ accountSid: ACCOUNT, callSid: huge('C'), from: huge('F'), to: huge('T') }) };
    for (let i = 0; i < 50; i++) {
      const r = await postVoiceWebhook(webhook, params, 'not-the-auth-token');
      expect(r.status).toBe(403);
    }
    expect(await refusedMetric('voice', 'bad_signature')).toBe(metricBefore + 50);
    // The first of the window only, every field clipped.
    const refusals = d.lines.slice(before).filter((l) => l.msg.includes('voice webhook refused (403)'));
    expect(refusals.length).toBe(1);
    expect(refusals[0]).toMatchObject({ source: '127.0.0.1', reason: 'bad_signature', route: 'voice', signature: 'present' });
    expect(refusals[0]!.to).toMatch(/^T{128}…$/);
    expect(refusals[0]!.callSid).toMatch(/^C{128}…$/);
    // Every line of this test is bounded, whatever it is (the request lines included).
    for (const l of d.lines.slice(before)) expect(JSON.stringify(l).length).toBeLessThan(2048);
    // The window's end sums up the rest: here the daemon's stop ends it.
    await d.stop();
    const summary = d.lines.filter((l) => l.msg.startsWith('carrier webhooks refused:') && l.route === 'voice' && l.reason === 'bad_signature');
    expect(summary).toEqual([expect.objectContaining({ source: '127.0.0.1', refused: 49 })]);
    for (const l of d.lines) expect(JSON.stringify(l).length).toBeLessThan(2048);
  });
});
