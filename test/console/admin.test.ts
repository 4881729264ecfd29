/**
 * The console's admin pages (docs/console-admin.md) in a real headless Chromium against a real
 * daemon: an agent's prompt and VAD edited and saved (read back through GET), a validation error
 * shown next to its field, a version created and published; the trunk list with registration
 * state and health, a trunk edited, created and deleted without a password ever reaching the
 * page; an assignment with its routing warnings; an API key created (its secret shown once, then
 * gone), used, revoked and refused by the API; another organization's key seeing none of it.
 * No page may hit a CSP violation, throw, or open a dialog. Screenshots of the agents, trunks
 * and keys pages go to test-artifacts/console/.
 *
 * One daemon (SIP off: the trunk's registration state is the one the registration client would
 * have stored) and one browser for the whole file.
 */
import type { Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { untilAsync } from '../helpers/until.ts';
import { chromiumAvailable, expectClean, launchBrowser, text, type TestBrowser } from '../helpers/browser.ts';

/**
 * The little of the page's DOM the functions run in the page use: this Node program does not
 * compile against the DOM's types, and these functions run in Chromium, where document exists.
 */
interface PageElement {
  id: string;
  innerText: string;
  getAttribute(name: string): string | null;
}
declare const document: { querySelector(selector: string): PageElement | null; querySelectorAll(selector: string): Iterable<PageElement> };

const chromium = chromiumAvailable();
const AGENT = 'Front desk <img src=x onerror="alert(1)">';
const TRUNK_PASSWORD = 'pbx-Secret-7f31c2';
const REGISTER_ERROR = '408 Request Timeout: no answer from 127.0.0.1:5999';

/** Sets a field's value as typing would (an input event Preact listens to), faster than typing long text. */
async function fill(page: Page, selector: string, value: string): Promise<void> {
  await page.$eval(
    selector,
    (el, v) => {
      const input = el as unknown as { value: string; dispatchEvent(e: unknown): boolean };
      input.value = v;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      input.dispatchEvent(new Event('change', { bubbles: true }));
    },
    value,
  );
}

/** Clicks the button whose accessible name (aria-label, else its text) is `label`, inside `scope` (a CSS selector). */
async function clickButton(page: Page, label: string, scope = 'main'): Promise<void> {
  const found = await page.waitForFunction(
    (s, l) => [...document.querySelectorAll(`${s} button`)].find((b) => (b.getAttribute('aria-label') ?? (b as unknown as { innerText: string }).innerText.trim()) === l) ?? null,
    { timeout: 5000 },
    scope,
    label,
  );
  await (found as unknown as { click(): Promise<void> }).click();
}

async function waitText(page: Page, selector: string, pattern: RegExp): Promise<string> {
  await page.waitForFunction(
    (s, src, flags) => [...document.querySelectorAll(s)].some((el) => new RegExp(src, flags).test((el as unknown as { innerText: string }).innerText)),
    { timeout: 5000 },
    selector,
    pattern.source,
    pattern.flags,
  );
  return (await page.$$eval(selector, (els) => els.map((el) => (el as unknown as { innerText: string }).innerText))).find((t) => pattern.test(t))!;
}

async function signIn(page: Page, url: string, key: string, hash: string): Promise<void> {
  await page.goto(`${url}/console/`);
  await page.waitForSelector('#api-key');
  await page.type('#api-key', key);
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-testid=call-history]');
  await page.goto(`${url}/console/#${hash}`);
}

describe.skipIf(chromium.skip)(`console admin pages (chromium)${chromium.ok ? '' : `: ${chromium.reason}`}`, () => {
  let d: TestDaemon;
  let b: TestBrowser;
  let otherKey: string;
  let agentId: string;
  let trunkId: string;

  beforeAll(async () => {
    [d, b] = await Promise.all([startTestDaemon({ sip: { enabled: false } }), launchBrowser('console')]);
    agentId = (await d.api('POST', '/v1/agents', { name: AGENT, prompt: 'Be brief.', voice_settings: { provider: 'provider_1', id: 'local-en-1', speed: 1.2 } })).body.id;
    const trunk = await d.api('POST', '/v1/sip-trunks', {
      pbx: 'generic',
      name: 'Main PBX',
      inbound_sip_username: 'main-pbx',
      inbound_sip_password: TRUNK_PASSWORD,
      outbound_host: '127.0.0.1:5999',
      outbound_sip_username: 'cb',
      outbound_sip_password: TRUNK_PASSWORD,
      register: true,
    });
    expect(trunk.status, trunk.text).toBe(201);
    trunkId = trunk.body.id;
    // What the registration client stores when the carrier does not answer its REGISTER.
    await d.daemon.store.sipTrunks.setOutboundRegistration(trunkId, { status: 'failed', error: REGISTER_ERROR, expiresAt: null });
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: '200' })).status).toBe(201);
    otherKey = await d.newOrgKey('another org');
  }, 60_000);
  afterAll(async () => {
    await b?.close();
    await d?.close();
  });

  it("agents: the prompt and VAD saved (read back through GET), an error shown at its field; a version created and published", async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, d.key, '/agents');
    const row = await page.waitForSelector(`[data-testid=agents] tr[data-agent-id="${agentId}"] a`);
    // The name's markup is text: no image element was made of it.
    expect(await row!.evaluate((a) => (a as unknown as { innerText: string }).innerText)).toBe(AGENT);
    expect(await page.$('[data-testid=agents] img')).toBeNull();
    await b.screenshot(page, 'agents');
    await row!.click();
    await page.waitForSelector('[data-testid=agent-form] #f-prompt');
    // Every input of the form has a label.
    const unlabelled = await page.$$eval('[data-testid=agent-form] input, [data-testid=agent-form] textarea, [data-testid=agent-form] select', (els) =>
      els.filter((el) => !document.querySelector(`label[for="${el.id}"]`)).map((el) => (el as unknown as { name: string }).name),
    );
    expect(unlabelled).toEqual([]);

    await fill(page, '#f-prompt', 'You answer for the front desk. <b>Keep it short.</b>');
    await fill(page, '#f-vad_settings-stop_secs', '50');
    await clickButton(page, 'Save');
    expect(await waitText(page, '#agent-error', /stop_secs/)).toMatch(/must be <= 10/);
    expect(await page.$eval('#f-vad_settings-stop_secs', (el) => el.getAttribute('aria-invalid'))).toBe('true');
    expect(await text(page, '#f-vad_settings-stop_secs-error')).toMatch(/stop_secs/);
    expect((await d.api('GET', `/v1/agents/${agentId}`)).body.prompt).toBe('Be brief.');

    await fill(page, '#f-vad_settings-stop_secs', '0.6');
    await clickButton(page, 'Save');
    await waitText(page, '[data-testid=agent-form] [role=status]', /Saved/);
    await b.screenshot(page, 'agent');
    expect(await page.$('#agent-error')).toBeNull();
    const saved = (await d.api('GET', `/v1/agents/${agentId}`)).body;
    expect(saved.prompt).toBe('You answer for the front desk. <b>Keep it short.</b>');
    expect(saved.vad_settings.stop_secs).toBe(0.6);
    expect(saved.name).toBe(AGENT);

    // A new voice: the voice's tuning, which the form does not show, is kept.
    await fill(page, '#f-voice_settings-id', 'local-multi-1');
    await clickButton(page, 'Save');
    await page.waitForFunction(() => /Saved/.test(document.querySelector('[data-testid=agent-form] [role=status]')?.innerText ?? '') && !document.querySelector('[data-testid=agent-form] [aria-busy]'));
    await untilAsync(async () => (await d.api('GET', `/v1/agents/${agentId}`)).body.voice_settings.id === 'local-multi-1', 'voice saved');
    expect((await d.api('GET', `/v1/agents/${agentId}`)).body.voice_settings).toEqual({ provider: 'provider_1', id: 'local-multi-1', speed: 1.2 });

    await fill(page, '#f-tag', 'v1');
    await clickButton(page, 'Create version');
    const version = await page.waitForSelector('[data-testid=versions] tr[data-version-id]');
    const versionId = await version!.evaluate((tr) => tr.getAttribute('data-version-id'));
    await clickButton(page, 'Publish v1', '[data-testid=versions]');
    await clickButton(page, 'Publish v1 now', '[data-testid=versions]');
    await waitText(page, '[data-testid=versions] td', /live/);
    const versions = (await d.api('GET', `/v1/agents/${agentId}/versions`)).body as Array<{ id: string; published_at: string | null }>;
    expect(versions).toEqual([expect.objectContaining({ id: versionId, published_at: expect.any(String) })]);
    expectClean(record);
    await page.close();
  });

  it('trunks: registration state and health listed; edit, create and delete through the form; passwords never on the page', async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, d.key, '/trunks');
    const row = `[data-testid=trunks] tr[data-trunk-id="${trunkId}"]`;
    await page.waitForSelector(row);
    expect(await text(page, `${row} [data-testid=outbound-state]`)).toBe(`failed\n${REGISTER_ERROR}`);
    expect(await text(page, `${row} [data-testid=inbound-state]`)).toBe('not registered');
    await b.screenshot(page, 'trunks');

    await clickButton(page, 'Edit Main PBX', row);
    await page.waitForFunction(() => (document.querySelector('#f-name') as unknown as { value: string } | null)?.value === 'Main PBX');
    // The form shows the trunk, but its password fields start empty: the API never returned one.
    expect(await page.$eval('#f-inbound_sip_password', (el) => (el as unknown as { value: string }).value)).toBe('');
    // Meanwhile someone else changes another field: saving the name must not undo it.
    expect((await d.api('PATCH', `/v1/sip-trunks/${trunkId}`, { outbound_sip_username: 'cb-renamed' })).status).toBe(200);
    await fill(page, '#f-name', 'Main PBX (HQ)');
    await clickButton(page, 'Save trunk');
    await waitText(page, '[role=status]', /Trunk saved/);
    const edited = (await d.api('GET', `/v1/sip-trunks/${trunkId}`)).body;
    expect(edited).toMatchObject({ name: 'Main PBX (HQ)', inbound_sip_username: 'main-pbx', outbound_sip_username: 'cb-renamed', register: true, outbound_host: '127.0.0.1:5999' });
    // The password left empty was kept.
    expect((await d.daemon.store.sipTrunks.credentials(trunkId))?.inbound?.password).toBe(TRUNK_PASSWORD);

    await fill(page, '#f-name', 'Branch office');
    await fill(page, '#f-inbound_sip_username', 'branch-1');
    await fill(page, '#f-inbound_sip_password', 'branch-Secret-99');
    await clickButton(page, 'Create trunk');
    await waitText(page, '[role=status]', /Trunk created/);
    const branch = ((await d.api('GET', '/v1/sip-trunks')).body as Array<{ id: string; name: string }>).find((t) => t.name === 'Branch office')!;
    expect(branch).toBeDefined();
    await page.waitForSelector(`[data-testid=trunks] tr[data-trunk-id="${branch.id}"]`);
    const content = await page.content();
    for (const secret of [TRUNK_PASSWORD, 'branch-Secret-99']) expect(content).not.toContain(secret);

    await clickButton(page, 'Delete Branch office', `[data-testid=trunks] tr[data-trunk-id="${branch.id}"]`);
    await clickButton(page, 'Delete for good', `[data-testid=trunks] tr[data-trunk-id="${branch.id}"]`);
    await waitText(page, '[role=status]', /deleted/);
    expect((await d.api('GET', `/v1/sip-trunks/${branch.id}`)).status).toBe(404);
    expectClean(record);
    await page.close();
  });

  it('numbers: the trunk assignment with the agent it routes to and its routing warnings', async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, d.key, '/numbers');
    const row = await page.waitForSelector('[data-testid=assignments] tr[data-assignment-id]');
    const cells = await row!.$$eval('td', (tds) => tds.map((td) => (td as unknown as { innerText: string }).innerText));
    expect(cells.slice(0, 5)).toEqual(['Main PBX (HQ)', '200', '–', AGENT, 'routes as configured']);
    expect(await text(page, '[data-testid=carrier-numbers]')).toContain('No carrier numbers imported.');
    expectClean(record);
    await page.close();
  });

  it('API keys: a new key shown once, working, revoked and then refused by the API', async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, d.key, '/keys');
    await waitText(page, '[data-testid=keys] td', /this console/);
    await fill(page, '#f-name', 'CRM integration');
    await clickButton(page, 'Create key');
    await page.waitForSelector('[data-testid=new-key-secret]');
    const secret = await page.$eval('[data-testid=new-key-secret]', (el) => (el as unknown as { value: string }).value);
    expect(secret).toMatch(/^cbk_/);
    expect((await d.api('GET', '/v1/agents', undefined, { key: secret })).status).toBe(200);
    await b.screenshot(page, 'keys');
    await clickButton(page, 'I have stored it');
    await page.waitForFunction(() => !document.querySelector('[data-testid=new-key]'));
    const keyRow = await waitText(page, '[data-testid=keys] tr', /CRM integration/);
    expect(keyRow).toContain(secret.slice(0, 10));
    // Gone from the page for good: the list shows the prefix only.
    expect(await page.content()).not.toContain(secret);

    const id = ((await d.api('GET', '/v1/api-keys')).body as Array<{ id: string; name: string }>).find((k) => k.name === 'CRM integration')!.id;
    const row = `[data-testid=keys] tr[data-key-id="${id}"]`;
    await clickButton(page, `Revoke ${secret.slice(0, 10)}…`, row);
    await clickButton(page, 'Revoke for good', row);
    await waitText(page, '[role=status]', /revoked/);
    const refused = await d.api('GET', '/v1/agents', undefined, { key: secret });
    expect(refused.status).toBe(401);
    expect(await page.$(row)).toBeNull();

    // The console's own key is the organization's last but one: revoking the other is fine,
    // revoking the last is refused with the server's reason.
    const own = ((await d.api('GET', '/v1/api-keys')).body as Array<{ id: string; current: boolean }>).find((k) => k.current)!;
    expect(((await d.api('GET', '/v1/api-keys')).body as unknown[]).length).toBe(1);
    await clickButton(page, `Revoke ${d.key.slice(0, 10)}…`, `[data-testid=keys] tr[data-key-id="${own.id}"]`);
    await clickButton(page, 'Revoke for good', `[data-testid=keys] tr[data-key-id="${own.id}"]`);
    expect(await waitText(page, '[role=alert]', /last active API key/)).toBeTruthy();
    expectClean(record);
    await page.close();
  });

  it("another organization's key sees none of it", async () => {
    const { page, record } = await b.newPage();
    await signIn(page, d.url, otherKey, '/agents');
    await waitText(page, '[data-testid=agents]', /No agents yet/);
    await page.goto(`${d.url}/console/#/trunks`);
    await waitText(page, '[data-testid=trunks]', /No SIP trunks yet/);
    await page.goto(`${d.url}/console/#/numbers`);
    await waitText(page, '[data-testid=assignments]', /No numbers assigned/);
    await page.goto(`${d.url}/console/#/keys`);
    await page.waitForSelector('[data-testid=keys] tr[data-key-id]');
    expect(await page.$$('[data-testid=keys] tr[data-key-id]')).toHaveLength(1);
    await page.goto(`${d.url}/console/#/agents/${agentId}`);
    expect(await waitText(page, '[role=alert]', /agent not found/)).toBeTruthy();
    const content = await page.content();
    for (const ours of ['Front desk', 'Main PBX', 'CRM integration', d.key.slice(0, 10)]) expect(content).not.toContain(ours);
    expectClean(record);
    await page.close();
  });
});
