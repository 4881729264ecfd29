/**
 * README's walk-through runs as printed. The first ```sh block under the heading
 * "## A walk through the API" is run with bash against a real daemon, exactly as printed but for
 * two things, each checked to occur exactly once:
 *   - `API=http://127.0.0.1:8080` points at the test daemon's port instead;
 *   - `data/initial-api-key` is left as printed and resolved by running bash in a directory whose
 *     `data/` is the daemon's data directory (so the key file is where a reader's would be).
 * The carrier import goes to the fake carrier, given the account, token and number the block
 * itself uses. Afterwards the effects are checked through the API.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestDaemon, type TestDaemon } from './helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from './helpers/fake-carrier.ts';

const README = resolve(dirname(fileURLToPath(import.meta.url)), '../README.md');
const HEADING = '## A walk through the API';
const PRINTED_API = 'API=http://127.0.0.1:8080';
const KEY_FILE = 'data/initial-api-key';

/** The block's code and the README line its first line is on (1-based). */
function walkthroughBlock(markdown: string): { code: string; firstLine: number } {
  const lines = markdown.split('\n');
  const heading = lines.findIndex((l) => l.trim() === HEADING);
  if (heading < 0) throw new Error(`README.md has no heading "${HEADING}"`);
  let open = -1;
  for (let i = heading + 1; i < lines.length; i++) {
    if (/^##\s/.test(lines[i]!)) break; // the next section: the walk-through has no sh block
    if (/^```sh\s*$/.test(lines[i]!)) {
      open = i;
      break;
    }
  }
  if (open < 0) throw new Error(`README.md: no \`\`\`sh block under "${HEADING}"`);
  const close = lines.findIndex((l, i) => i > open && /^```\s*$/.test(l));
  if (close < 0) throw new Error(`README.md: the sh block at line ${open + 1} is not closed`);
  return { code: lines.slice(open + 1, close).join('\n'), firstLine: open + 2 };
}

const occurrences = (text: string, needle: string) => text.split(needle).length - 1;

/** Every `-d '<json>'` body of the block, parsed (single-quoted ones are literal JSON). */
function literalBodies(code: string): any[] {
  return [...code.matchAll(/-d '(\{[^']*\})'/g)].map((m) => JSON.parse(m[1]!));
}

/** Runs a command without blocking the event loop (the daemon under test shares it). */
function run(cmd: string, args: string[], opts: { cwd?: string; timeoutMs?: number } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 10_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}

/** jq and curl are the README's tools; .ci/run installs them. Missing ones fail, never skip. */
async function requireTools(): Promise<void> {
  const missing: string[] = [];
  for (const tool of ['bash', 'curl', 'jq']) {
    const r = await run('bash', ['-c', `command -v ${tool}`]).catch(() => ({ code: 1 }));
    if (r.code !== 0) missing.push(tool);
  }
  if (missing.length > 0) throw new Error(`the README walk-through needs ${missing.join(', ')} on PATH (apt-get install ${missing.join(' ')})`);
  // --fail-with-body (below) is curl 7.76.0 or later.
  const v = /curl (\d+)\.(\d+)/.exec((await run('curl', ['--version'])).stdout);
  if (!v || Number(v[1]) * 1000 + Number(v[2]) < 7076) throw new Error(`curl 7.76.0 or later is needed for --fail-with-body, found ${v?.[0] ?? 'an unknown version'}`);
}

describe('README: the walk through the API runs as printed', () => {
  let tmp: string;
  let d: TestDaemon;
  let carrier: FakeCarrier;
  const { code: block, firstLine } = walkthroughBlock(readFileSync(README, 'utf8'));

  beforeAll(async () => {
    await requireTools();
    carrier = await startFakeCarrier();
    // The number the block imports, with the account and token it sends, exists at the carrier.
    const telco = literalBodies(block).find((b) => typeof b.account_sid === 'string');
    if (!telco) throw new Error('the walk-through no longer imports a carrier number: update this test');
    carrier.addNumber(telco.account_sid, telco.auth_token, telco.phone_number);
    tmp = mkdtempSync(join(tmpdir(), 'callbridge-readme-'));
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } }, join(tmp, 'data'));
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('exits 0 with every curl succeeding, and leaves the resources it describes', { timeout: 60_000 }, async () => {
    expect(occurrences(block, PRINTED_API), `"${PRINTED_API}" in the block`).toBe(1);
    expect(occurrences(block, KEY_FILE), `"${KEY_FILE}" in the block`).toBe(1);
    expect(d.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const code = block.replace(PRINTED_API, `API=${d.url}`);

    const prelude = [
      'set -euo pipefail',
      // -E: the ERR trap fires inside $(...) too, so the line reported is the failing one.
      'set -E',
      // Inside the curl wrapper the failing line is the caller's (BASH_LINENO), not the wrapper's.
      `trap 'rc=$?; l=$LINENO; [[ "\${FUNCNAME[0]:-}" == curl ]] && l=\${BASH_LINENO[0]}; echo "walk-through failed at README.md:$((l + ${firstLine} - PRELUDE_LINES - 1)) (exit $rc)" >&2' ERR`,
      // `curl -s` exits 0 on a 4xx/5xx, and `| jq -r .id` then hands "null" to the next step:
      // a broken step would pass unseen. --fail-with-body makes an HTTP status >= 400 fail the
      // script (and still prints the error body); -q ignores a reader's ~/.curlrc; --max-time
      // keeps a hung request from hanging the test. The block itself runs unchanged.
      'curl() { command curl -q --fail-with-body --max-time 20 "$@"; }',
      'export -f curl',
    ];
    const script = [...prelude.map((l) => l.replace('PRELUDE_LINES', String(prelude.length))), code, ''].join('\n');
    const file = join(tmp, 'walkthrough.sh');
    writeFileSync(file, script);

    const r = await run('bash', [file], { cwd: tmp, timeoutMs: 50_000 });
    // Name the README line that failed, with its text, first thing in the failure message.
    const readmeLines = readFileSync(README, 'utf8').split('\n');
    const failedAt = [...new Set([...r.stderr.matchAll(/README\.md:(\d+)/g)].map((m) => Number(m[1])))]
      .map((n) => `README.md:${n}: ${readmeLines[n - 1]?.trim() ?? '?'}`)
      .join('\n');
    expect(r.code, `bash exited ${r.code}\n${failedAt}\n--- stderr\n${r.stderr}\n--- stdout (last 2000 chars)\n${r.stdout.slice(-2000)}`).toBe(0);
    expect(carrier.requests.length, 'the import asked the carrier').toBeGreaterThan(0);

    // The effects, through the API (the plain test client).
    const bodies = literalBodies(block);
    const created = bodies.find((b) => typeof b.name === 'string' && 'prompt' in b);
    const patch = bodies.find((b) => 'vad_settings' in b);
    const version = bodies.find((b) => typeof b.tag === 'string');
    const telco = bodies.find((b) => typeof b.account_sid === 'string');
    const trunks = bodies.filter((b) => typeof b.pbx === 'string');
    expect(created && patch && version && telco, 'the block creates, patches, versions an agent and imports a number').toBeTruthy();
    expect(trunks).toHaveLength(2);

    const agents = (await d.api('GET', '/v1/agents')).body as any[];
    const agent = agents.find((a) => a.name === created.name);
    expect(agent, `agent "${created.name}"`).toBeDefined();
    expect(agent.prompt).toBe(created.prompt);
    expect(agent.vad_settings.stop_secs).toBe(patch.vad_settings.stop_secs);
    expect(agent.keyterms).toEqual(patch.keyterms);

    const versions = (await d.api('GET', `/v1/agents/${agent.id}/versions`)).body as any[];
    expect(versions.find((v) => v.tag === version.tag)?.published_at, `version "${version.tag}" published`).toEqual(expect.any(String));

    const copy = agents.find((a) => a.name === `${created.name} (Copy)`);
    expect(copy, 'the duplicated agent').toBeDefined();
    const copyVersions = (await d.api('GET', `/v1/agents/${copy.id}/versions`)).body as any[];
    expect(copyVersions.some((v) => v.published_at !== null), 'duplicate with publish: true published a version').toBe(true);

    const numbers = (await d.api('GET', '/v1/telco/numbers')).body as any[];
    expect(numbers.find((n) => n.phone_number === telco.phone_number)).toMatchObject({ account_sid: telco.account_sid, label: telco.label });

    // Assignment bodies interpolate $AGENT, so they are escaped JSON in double quotes.
    const number = /\\"number\\":\\"([^\\"]+)\\"/.exec(block)?.[1];
    const alternate = /\\"alternate_number\\":\\"([^\\"]+)\\"/.exec(block)?.[1];
    const sipTrunks = (await d.api('GET', '/v1/sip-trunks')).body as any[];
    const assigned: Record<string, any[]> = {};
    for (const t of trunks) {
      const trunk = sipTrunks.find((x) => x.name === t.name);
      expect(trunk, `trunk "${t.name}"`).toMatchObject({ pbx: t.pbx, inbound_auth_type: t.inbound_auth_type });
      assigned[t.inbound_auth_type] = (await d.api('GET', `/v1/sip-trunks/${trunk.id}/assignments`)).body as any[];
    }
    expect(assigned.digest).toEqual([expect.objectContaining({ agent_id: agent.id, number })]);
    expect(assigned.acl).toEqual([expect.objectContaining({ agent_id: agent.id, alternate_number: alternate })]);
  });
});
