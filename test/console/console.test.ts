/**
 * The operator console in a real headless Chromium against a real daemon (docs/console.md): how
 * it is served (CSP and the other headers, only known files), sign-in, a live SIPp call that
 * shows in the live list with its audio figures and leaves it when it ends, that call's page
 * (recording playable from a blob: URL, transcript), caller text rendered as text only, and
 * another organization's key seeing none of it. No page may hit a CSP violation, throw, or open
 * a dialog. Screenshots of the calls page and a call page go to test-artifacts/console/.
 *
 * One daemon (SIP on, recording on) and one browser for the whole file.
 */
import { randomUUID } from 'node:crypto';
import type { Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONSOLE_CSP } from '../../src/api/routes/console.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { chromiumAvailable, expectClean, launchBrowser, text, type TestBrowser } from '../helpers/browser.ts';
import { runSipp, sippAvailable } from '../interop/sipp.ts';

const NUMBER = '+15550008001';
const CALLER = '+15559998001';
const XSS = '<script>alert(1)</script>';
const XSS_IMG = '<img src=x onerror="alert(2)">';
const chromium = chromiumAvailable();
const sipp = sippAvailable();

async function signIn(page: Page, url: string, key: string): Promise<void> {
  await page.goto(`${url}/console/`);
  await page.waitForSelector('#api-key');
  await page.type('#api-key', key);
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-testid=call-history]');
}

describe.skipIf(chromium.skip || sipp.skip)(`operator console (chromium)${chromium.ok ? '' : `: ${chromium.reason}`}`, () => {
  let d: TestDaemon;
  let b: TestBrowser;
  let otherKey: string;
  let agentId: string;
  const xssCallId = randomUUID();

  beforeAll(async () => {
    [d, b] = await Promise.all([startTestDaemon({ rtp: { address: '127.0.0.1' }, bridge: { recording: true } }), launchBrowser('console')]);
    agentId = (await d.api('POST', '/v1/agents', { name: 'Front desk', first_message: 'Hello from the console test.' })).body.id;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'loopback acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
    otherKey = await d.newOrgKey('another org');
    // An ended call whose caller said markup, with a tool call: caller text is data, never markup.
    const orgId = (await d.api('GET', '/v1/organization')).body.id as string;
    const at = new Date().toISOString();
    await d.daemon.store.calls.insert({ id: xssCallId, org_id: orgId, agent_id: agentId, sip_trunk_id: null, direction: 'inbound', from: XSS_IMG, to: NUMBER, created_at: at });
    await d.daemon.store.calls.end(xssCallId, {
      ended_at: at,
      termination_reason: 'client_closed',
      transcript: [
        { index: 0, type: 'message', role: 'user', message: `hi ${XSS} there` },
        { index: 1, type: 'tool_call_output', toolCall: { toolName: 'lookup_order', arguments: '{"order":"<b>42</b>"}' }, toolCallOutput: XSS_IMG },
        { index: 2, type: 'message', role: 'assistant', message: 'Your order ships today.' },
      ],
    });
  }, 60_000);
  afterAll(async () => {
    await b?.close();
    await d?.close();
  });

  it('serves the console with a strict CSP, nosniff, no referrer; only known files; off with console.enabled false', async () => {
    for (const path of ['/console', '/console/', '/console/app.js', '/console/vendor/chart.umd.js', '/console/no-such-file.js']) {
      const res = await fetch(`${d.url}${path}`);
      expect(res.headers.get('content-security-policy'), path).toBe(CONSOLE_CSP);
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
      expect(res.headers.get('referrer-policy'), path).toBe('no-referrer');
    }
    const index = await fetch(`${d.url}/console/`);
    expect(index.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(index.headers.get('cache-control')).toBe('no-cache');
    const html = await index.text();
    // No inline script or style: every script has a src, no style element or attribute.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/<style|style=/);
    const chart = await fetch(`${d.url}/console/vendor/chart.umd.js`);
    expect(chart.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(chart.headers.get('cache-control')).toBe('public, max-age=86400');
    const again = await fetch(`${d.url}/console/app.js`, { headers: { 'if-none-match': chart.headers.get('etag')! } });
    expect(again.status).toBe(200);
    const etag = again.headers.get('etag')!;
    expect((await fetch(`${d.url}/console/app.js`, { headers: { 'if-none-match': etag } })).status).toBe(304);
    for (const path of ['/console/no-such-file.js', '/console/vendor/htm.mjs', '/console/..%2fpackage.json', '/console/vendor/..%2f..%2fpackage.json']) {
      const res = await fetch(`${d.url}${path}`);
      expect(res.status, path).toBe(404);
      expect(await res.json(), path).toMatchObject({ error: expect.stringContaining('no console file') });
    }
    const doc = (await d.api('GET', '/v1/openapi.json', undefined, { key: null })).body;
    expect(Object.keys(doc.paths['/v1/calls/live'].get.responses).sort()).toEqual(['200', '401']);
    expect(doc.paths['/console/{*}'] ?? doc.paths['/console']).toBeUndefined();
    expect((await d.api('GET', '/v1/calls/live', undefined, { key: null })).status).toBe(401);
    const off = await startTestDaemon({ sip: { enabled: false }, console: { enabled: false } });
    try {
      expect((await fetch(`${off.url}/console/`)).status).toBe(404);
    } finally {
      await off.close();
    }
  });

  it('sign-in: a wrong key gets a clear message; the right key opens the calls page; sign-out forgets the key', async () => {
    const { page, record } = await b.newPage();
    await page.goto(`${d.url}/console/`);
    await page.waitForSelector('#api-key');
    // The field is labelled "API key".
    expect(await page.$eval('label[for=api-key]', (l) => l.textContent)).toBe('API key');
    await page.type('#api-key', 'not-a-key');
    await page.click('button[type=submit]');
    await page.waitForSelector('#signin-error');
    expect(await text(page, '#signin-error')).toMatch(/API key was not accepted/);
    expect(await page.evaluate('sessionStorage.length')).toBe(0);
    await page.$eval('#api-key', (el) => ((el as unknown as { value: string }).value = ''));
    await signIn(page, d.url, d.key);
    expect(page.url()).toMatch(/#\/calls$/);
    // The key is in sessionStorage, never in the URL or a cookie.
    expect(page.url()).not.toContain(d.key);
    expect(await page.cookies()).toEqual([]);
    await page.click('header button');
    await page.waitForSelector('#api-key');
    expect(await page.evaluate('sessionStorage.length')).toBe(0);
    expectClean(record);
    await page.close();
  });

  it('a live SIPp call shows in the live list with its audio figures and leaves it when it ends; its page plays the recording and shows the transcript', async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, d.key);
    expect(await page.$('[data-testid=no-live-calls]')).not.toBeNull();
    const call = runSipp({ scenario: 'inbound-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, keys: { caller: CALLER }, durationMs: 4000 });
    const row = await page.waitForSelector('[data-testid=live-calls] tr[data-call-id]', { timeout: 10_000 });
    const callId = await row!.evaluate((tr) => tr.getAttribute('data-call-id'));
    const cells = await row!.$$eval('td', (tds) => tds.map((td) => (td as unknown as { innerText: string }).innerText));
    expect(cells[0]).toBe('Front desk');
    expect(cells[1]).toBe('trunk loopback acl');
    expect(cells[2]).toBe(CALLER);
    expect(cells[4]).toMatch(/^(in_progress|connected|started)$/);
    expect(cells[5]).toMatch(/^\d+(\.\d+)? %/);
    expect(cells[6]).toMatch(/^\d+\.\d ms$/);
    // The REST extension behind it, scoped by organization; the media's figures (late frames
    // from the media thread's snapshot, at most a second old).
    let live = await d.api('GET', '/v1/calls/live');
    for (const until = Date.now() + 3000; live.body.calls[0]?.live.late_frames === undefined && Date.now() < until; await new Promise((res) => setTimeout(res, 100))) {
      live = await d.api('GET', '/v1/calls/live');
    }
    expect(live.status, live.text).toBe(200);
    expect(live.body.calls).toHaveLength(1);
    expect(live.body.calls[0]).toMatchObject({ id: callId, agent_id: agentId, from: CALLER, to: NUMBER, direction: 'inbound' });
    expect(live.body.calls[0].live).toEqual({
      packets_received: expect.any(Number),
      packets_lost: expect.any(Number),
      loss_ratio: expect.any(Number),
      jitter_ms: expect.any(Number),
      late_frames: expect.any(Number),
    });
    expect(live.body.calls[0].live.packets_received).toBeGreaterThan(0);
    expect((await d.api('GET', '/v1/calls/live', undefined, { key: otherKey })).body).toEqual({ calls: [] });
    await b.screenshot(page, 'calls-live');
    const r = await call;
    expect(r.code, r.describe()).toBe(0);
    await page.waitForSelector('[data-testid=no-live-calls]', { timeout: 10_000 });

    // The turn timelines are stored off the hot path: the first message's is there within moments.
    let latency = (await d.api('GET', `/v1/calls/${callId}`)).body.latency;
    for (const until = Date.now() + 5000; latency.turns.length === 0 && Date.now() < until; await new Promise((res) => setTimeout(res, 100))) {
      latency = (await d.api('GET', `/v1/calls/${callId}`)).body.latency;
    }
    expect(latency.turns.length, JSON.stringify(latency)).toBeGreaterThan(0);

    // The history lists the ended call; its page has the recording and the transcript.
    await page.waitForSelector(`[data-testid=call-history] tr[data-call-id="${callId}"] a`, { timeout: 10_000 });
    await b.screenshot(page, 'calls');
    // The history's filters are GET /v1/calls's: the number filter leaves the SIPp call only.
    expect((await page.$$('[data-testid=call-history] tr[data-call-id]')).length).toBe(2);
    await page.type('input[name=search]', CALLER.slice(2));
    await page.click('form[aria-label="Call history filters"] button[type=submit]');
    await page.waitForFunction(
      `(() => { const rows = document.querySelectorAll('[data-testid=call-history] tr[data-call-id]'); return rows.length === 1 && rows[0].getAttribute('data-call-id') === ${JSON.stringify(callId)}; })()`,
    );
    await page.click(`[data-testid=call-history] tr[data-call-id="${callId}"] a`);
    await page.waitForSelector('[data-testid=transcript]');
    expect(await text(page, '[data-testid=transcript]')).toContain('Hello from the console test.');
    expect(await text(page, '[data-testid=call-details]')).toContain(CALLER);
    // The carrier-ticket rows show what GET returns: SIPp's Call-ID and the 200 callbridge sent.
    const sip = (await d.api('GET', `/v1/calls/${callId}`)).body.sip;
    expect(sip).toMatchObject({ call_id: r.messages.find((m) => m.raw.startsWith('INVITE '))!.header('Call-ID'), final_status: 200, final_reason: 'OK' });
    const details = await page.$$eval('[data-testid=call-details] dt', (dts) => dts.map((dt) => [(dt as unknown as { innerText: string }).innerText, (dt.nextElementSibling as unknown as { innerText: string }).innerText]));
    expect(details).toContainEqual(['SIP Call-ID', sip.call_id]);
    expect(details).toContainEqual(['Final SIP status', '200 OK']);
    await page.waitForSelector('audio[data-testid=recording]', { timeout: 10_000 });
    const audio = await page.$eval('audio[data-testid=recording]', async (el) => {
      // The page's audio element (DOM types are not compiled in this Node program).
      const a = el as unknown as { readyState: number; muted: boolean; paused: boolean; src: string; duration: number; play(): Promise<void>; addEventListener(t: string, f: () => void, o: object): void };
      if (a.readyState < 1) await new Promise<void>((res) => a.addEventListener('loadedmetadata', res, { once: true }));
      a.muted = true;
      await a.play();
      return { src: a.src, duration: a.duration, playing: !a.paused };
    });
    expect(audio.src).toMatch(/^blob:/);
    expect(audio.duration).toBeGreaterThan(3);
    expect(audio.playing).toBe(true);
    // The per-turn latency (the call's latency field) drawn by Chart.js as stacked bars, labelled.
    const chart = await page.$eval('canvas[data-testid=latency-chart]', (el) => {
      const c = (globalThis as unknown as { Chart: { getChart(e: unknown): { config: { type: string; options: any }; data: { labels: string[]; datasets: { label: string; data: number[] }[] } } } }).Chart.getChart(el)!;
      return { role: el.getAttribute('role'), label: el.getAttribute('aria-label'), type: c.config.type, stacked: c.config.options.scales.y.stacked, labels: c.data.labels, data: c.data.datasets.map((s) => s.data) };
    });
    expect(chart).toMatchObject({ role: 'img', type: 'bar', stacked: true, labels: latency.turns.map((_: unknown, i: number) => `Turn ${i + 1}`) });
    const stages = ['stt', 'turn_commit', 'llm', 'sentence', 'tts', 'playout'];
    expect(chart.data).toEqual(stages.map((s) => latency.turns.map((t: { stages: Record<string, number> }) => t.stages[s] ?? 0)));
    expect(chart.label).toMatch(/^Latency per turn, stacked by stage: turn 1: /);
    const firstStage = stages.find((s) => latency.turns[0].stages[s] !== undefined);
    if (firstStage) expect(chart.label).toContain(`${Math.round(latency.turns[0].stages[firstStage])} ms`);
    await b.screenshot(page, 'call');
    expectClean(record);
    await page.close();
  });

  it('caller text is rendered as text: markup in a transcript and a number shows literally and runs nothing', async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, d.key);
    await page.goto(`${d.url}/console/#/calls/${xssCallId}`);
    await page.waitForSelector('[data-testid=transcript]');
    const transcript = await text(page, '[data-testid=transcript]');
    expect(transcript).toContain(`hi ${XSS} there`);
    expect(transcript).toContain('lookup_order');
    expect(transcript).toContain(XSS_IMG);
    expect(transcript).toContain('"order": "<b>42</b>"');
    expect(await text(page, '[data-testid=call-details]')).toContain(XSS_IMG);
    expect(await page.$$eval('#app script, #app img, #app b', (els) => els.length)).toBe(0);
    expectClean(record);
    await page.close();
  });

  it("another organization's key sees none of the first organization's calls", async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, otherKey);
    expect(await page.$$('[data-testid=call-history] tr[data-call-id]')).toEqual([]);
    expect(await text(page, '[data-testid=call-history]')).toContain('No calls match.');
    await page.goto(`${d.url}/console/#/calls/${xssCallId}`);
    await page.waitForSelector('[role=alert]');
    expect(await text(page, '[role=alert]')).toBe('call not found');
    expectClean(record);
    await page.close();
  });
});
