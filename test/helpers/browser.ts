/**
 * A real headless Chromium for browser tests (Debian's `chromium`, driven by puppeteer-core: the
 * drivers' own browser downloads cannot run here). One browser per test file: `launchBrowser()`
 * in beforeAll, `close()` in afterAll. Pages record what a test wants to assert on: console
 * messages, page errors, dialogs (an alert would be dismissed and recorded) and the page's
 * Content-Security-Policy violations. Screenshots go to test-artifacts/<dir>/ under the
 * repository (gitignored), and their path is printed.
 *
 * Missing chromium skips the tests on a developer's machine and fails them in CI
 * (test/helpers/peer-availability.ts), naming the Debian package.
 */
import { accessSync, constants, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { expect } from 'vitest';
import { peerMissing, requirePeer, type PeerAvailability } from './peer-availability.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The browser binary: $CHROMIUM_BIN, else Debian's /usr/bin/chromium. */
export function chromiumBin(): string {
  return process.env.CHROMIUM_BIN || '/usr/bin/chromium';
}

export function chromiumAvailable(): PeerAvailability {
  const bin = chromiumBin();
  try {
    accessSync(bin, constants.X_OK);
    return { ok: true, skip: false };
  } catch {
    return peerMissing(`chromium not found at ${bin} (apt-get install chromium, or set CHROMIUM_BIN): the console's browser tests run in it`);
  }
}

/** What a page did that a test may assert on. */
export interface PageRecord {
  console: string[];
  errors: string[];
  dialogs: string[];
  cspViolations: string[];
}

export interface TestBrowser {
  browser: Browser;
  /** A new page (its own incognito context: sessionStorage not shared with other pages). */
  newPage(): Promise<{ page: Page; record: PageRecord }>;
  /** Saves a full-page screenshot as test-artifacts/<dir>/<name>.png and prints its path. */
  screenshot(page: Page, name: string): Promise<string>;
  close(): Promise<void>;
}

export async function launchBrowser(artifactsDir = 'console'): Promise<TestBrowser> {
  requirePeer(chromiumAvailable());
  const browser = await puppeteer.launch({
    executablePath: chromiumBin(),
    headless: true,
    // --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--autoplay-policy=no-user-gesture-required', '--mute-audio'],
  });
  const artifacts = join(ROOT, 'test-artifacts', artifactsDir);
  return {
    browser,
    async newPage() {
      const context = await browser.createBrowserContext();
      const page = await context.newPage();
      await page.setViewport({ width: 1280, height: 900 });
      const record: PageRecord = { console: [], errors: [], dialogs: [], cspViolations: [] };
      page.on('console', (m) => {
        record.console.push(`${m.type()}: ${m.text()}`);
        // Chromium reports a blocked load or inline script in the console, not only as an event.
        if (/Content Security Policy/i.test(m.text())) record.cspViolations.push(m.text());
      });
      page.on('pageerror', (err) => record.errors.push(String(err)));
      page.on('dialog', (d) => {
        record.dialogs.push(`${d.type()}: ${d.message()}`);
        void d.dismiss();
      });
      await page.exposeFunction('__cspViolation', (text: string) => record.cspViolations.push(text));
      // A string: it runs in the page, whose DOM types this Node program does not compile against.
      await page.evaluateOnNewDocument(
        "document.addEventListener('securitypolicyviolation', (e) => window.__cspViolation(e.violatedDirective + ' blocked ' + e.blockedURI));",
      );
      return { page, record };
    },
    async screenshot(page, name) {
      mkdirSync(artifacts, { recursive: true });
      const path = join(artifacts, `${name}.png`);
      await page.screenshot({ path, fullPage: true });
      console.log(`screenshot: ${path}`);
      return path;
    },
    async close() {
      await browser.close();
    },
  };
}

/** Nothing a page did that the console must never do: a CSP violation, a page error, a dialog (alert). */
export function expectClean(record: PageRecord): void {
  expect(record.cspViolations, record.console.join('\n')).toEqual([]);
  expect(record.errors, record.console.join('\n')).toEqual([]);
  expect(record.dialogs).toEqual([]);
}

/** The rendered text of the element a selector names. */
export async function text(page: Page, selector: string): Promise<string> {
  return page.$eval(selector, (el) => (el as unknown as { innerText: string }).innerText);
}
