/**
 * README's commands run as printed, in the order a reader runs them, with bash against a real
 * daemon:
 *   1. the first ```sh block under "## A walk through the API" (agents, versions, trunks, ...);
 *   2. the ```sh block under "## A first call" that dials out (`/v1/agents/$AGENT/dial`): the walk-through's ACL
 *      trunk names `sbc.carrier.example`, which does not resolve, so the call is accepted and
 *      then ends `dns_failed`, as the README says;
 *   3. the first ```sh block under "## Calls on a carrier number" (importing a carrier number
 *      and assigning it), against a fake carrier that knows the account, token and number the
 *      block itself uses (a reader needs a real carrier account for it: the README says so).
 * They run as one script, so the later blocks use the variables the walk-through set ($H, $API,
 * $AGENT, $ACL). Exactly as printed but for two things, each checked to occur exactly once:
 *   - `API=http://127.0.0.1:8080` points at the test daemon's port instead;
 *   - `data/initial-api-key` is left as printed and resolved by running bash in a directory whose
 *     `data/` is the daemon's data directory (so the key file is where a reader's would be).
 * Afterwards the effects are checked through the API.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestDaemon, type TestDaemon } from './helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from './helpers/fake-carrier.ts';
import { untilAsync } from './helpers/until.ts';

const README = resolve(dirname(fileURLToPath(import.meta.url)), '../README.md');
const WALKTHROUGH = '## A walk through the API';
const FIRST_CALL = '## A first call';
const CARRIER = '## Calls on a carrier number';
const CALL_LISTS = '## Call lists';
const PRINTED_API = 'API=http://127.0.0.1:8080';
const KEY_FILE = 'data/initial-api-key';

interface Block {
  code: string;
  /** The README line (1-based) of the block's first line of code. */
  firstLine: number;
}

/** The first ```sh block under `heading` (before the next ## heading) for which `pick` holds. */
function shBlock(markdown: string, heading: string, pick: (code: string) => boolean = () => true): Block {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => l.trim() === heading);
  if (start < 0) throw new Error(`README.md has no heading "${heading}"`);
  for (let i = start + 1; i < lines.length; i++) {
    if (/^##\s/.test(lines[i]!)) break; // the next section
    if (!/^```sh\s*$/.test(lines[i]!)) continue;
    const close = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l));
    if (close < 0) throw new Error(`README.md: the sh block at line ${i + 1} is not closed`);
    const block = { code: lines.slice(i + 1, close).join('\n'), firstLine: i + 2 };
    if (pick(block.code)) return block;
    i = close;
  }
  throw new Error(`README.md: no matching \`\`\`sh block under "${heading}"`);
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

describe('README: the walk through the API, the outbound dial and the carrier import run as printed', () => {
  let tmp: string;
  let d: TestDaemon;
  let carrier: FakeCarrier;
  const markdown = readFileSync(README, 'utf8');
  const walkthrough = shBlock(markdown, WALKTHROUGH);
  const dial = shBlock(markdown, FIRST_CALL, (code) => code.includes('/v1/agents/$AGENT/dial'));
  const carrierImport = shBlock(markdown, CARRIER);
  const callList = shBlock(markdown, CALL_LISTS);
  const blocks = [walkthrough, dial, carrierImport, callList];

  beforeAll(async () => {
    await requireTools();
    carrier = await startFakeCarrier();
    // The number the carrier block imports, with the account and token it sends, exists at the carrier.
    const telco = literalBodies(carrierImport.code).find((b) => typeof b.account_sid === 'string');
    if (!telco) throw new Error('the carrier section no longer imports a carrier number: update this test');
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
    expect(occurrences(walkthrough.code, PRINTED_API), `"${PRINTED_API}" in the walk-through`).toBe(1);
    expect(occurrences(walkthrough.code, KEY_FILE), `"${KEY_FILE}" in the walk-through`).toBe(1);
    for (const b of [dial, carrierImport, callList]) {
      expect(b.code, `README.md:${b.firstLine}: a later block sets API or KEY itself`).not.toMatch(/\b(API|KEY)=/);
    }
    // The blocks talk to the daemon only: never run one that writes to the reader's home or dials a phone.
    for (const b of blocks) expect(b.code, `README.md:${b.firstLine}: not a REST block`).not.toMatch(/~\/|\$HOME|\bbaresip\b|\bsipp\b/);
    expect(d.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);

    const prelude = [
      'set -euo pipefail',
      // -E: the ERR trap fires inside $(...) too, so the line reported is the failing one.
      'set -E',
      // Inside the curl wrapper the failing line is the caller's (BASH_LINENO), not the wrapper's;
      // README_LINE maps a line of this script to the README line it was copied from.
      `trap 'rc=$?; l=$LINENO; [[ "\${FUNCNAME[0]:-}" == curl ]] && l=\${BASH_LINENO[0]}; echo "walk-through failed at README.md:\${README_LINE[$l]:-?} (script line $l, exit $rc)" >&2' ERR`,
      // `curl -s` exits 0 on a 4xx/5xx, and `| jq -r .id` then hands "null" to the next step:
      // a broken step would pass unseen. --fail-with-body makes an HTTP status >= 400 fail the
      // script (and still prints the error body); -q ignores a reader's ~/.curlrc; --max-time
      // keeps a hung request from hanging the test. The blocks themselves run unchanged.
      'curl() { command curl -q --fail-with-body --max-time 20 "$@"; }',
      'export -f curl',
    ];
    // Script lines, each with the README line it came from (0: not from the README).
    const lines: { text: string; readmeLine: number }[] = prelude.map((text) => ({ text, readmeLine: 0 }));
    lines.unshift({ text: '', readmeLine: 0 }); // the README_LINE array, filled in below
    for (const b of blocks) {
      const code = b === walkthrough ? b.code.replace(PRINTED_API, `API=${d.url}`) : b.code;
      code.split('\n').forEach((text, i) => lines.push({ text, readmeLine: b.firstLine + i }));
    }
    lines[0]!.text = `README_LINE=(0 ${lines.map((l) => l.readmeLine).join(' ')})`;
    const file = join(tmp, 'walkthrough.sh');
    writeFileSync(file, lines.map((l) => l.text).join('\n') + '\n');

    const r = await run('bash', [file], { cwd: tmp, timeoutMs: 50_000 });
    // Name the README line that failed, with its text, first thing in the failure message.
    const readmeLines = markdown.split('\n');
    const failedAt = [...new Set([...r.stderr.matchAll(/README\.md:(\d+)/g)].map((m) => Number(m[1])))]
      .map((n) => `README.md:${n}: ${readmeLines[n - 1]?.trim() ?? '?'}`)
      .join('\n');
    expect(r.code, `bash exited ${r.code}\n${failedAt}\n--- stderr\n${r.stderr}\n--- stdout (last 2000 chars)\n${r.stdout.slice(-2000)}`).toBe(0);
    expect(carrier.requests.length, 'the import asked the carrier').toBeGreaterThan(0);

    // The effects, through the API (the plain test client).
    const bodies = literalBodies(walkthrough.code);
    const created = bodies.find((b) => typeof b.name === 'string' && 'prompt' in b);
    const patch = bodies.find((b) => 'vad_settings' in b);
    const version = bodies.find((b) => typeof b.tag === 'string');
    const trunks = bodies.filter((b) => typeof b.pbx === 'string');
    const telco = literalBodies(carrierImport.code).find((b) => typeof b.account_sid === 'string');
    expect(created && patch && version && telco, 'the blocks create, patch, version an agent and import a number').toBeTruthy();
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

    // Assignment bodies interpolate $AGENT, so they are escaped JSON in double quotes.
    const number = /\\"number\\":\\"([^\\"]+)\\"/.exec(walkthrough.code)?.[1];
    const alternate = /\\"alternate_number\\":\\"([^\\"]+)\\"/.exec(walkthrough.code)?.[1];
    const sipTrunks = (await d.api('GET', '/v1/sip-trunks')).body as any[];
    const assigned: Record<string, any[]> = {};
    for (const t of trunks) {
      const trunk = sipTrunks.find((x) => x.name === t.name);
      expect(trunk, `trunk "${t.name}"`).toMatchObject({ pbx: t.pbx, inbound_auth_type: t.inbound_auth_type });
      assigned[t.inbound_auth_type] = (await d.api('GET', `/v1/sip-trunks/${trunk.id}/assignments`)).body as any[];
    }
    expect(assigned.digest).toEqual([expect.objectContaining({ agent_id: agent.id, number })]);
    expect(assigned.acl).toEqual([expect.objectContaining({ agent_id: agent.id, alternate_number: alternate })]);

    // The dial through the ACL trunk: accepted, then ended dns_failed (its outbound_host is made up).
    const dialled = decodeURIComponent(/[?&]number=([^&"]+)/.exec(dial.code)?.[1] ?? '');
    expect(dialled, 'the dial block names a number').not.toBe('');
    let outbound: any;
    await untilAsync(
      async () => {
        const calls = ((await d.api('GET', '/v1/calls?outbound=true')).body as any).calls as any[];
        outbound = calls.find((c) => c.to === dialled);
        return outbound?.status === 'ended';
      },
      `the outbound call to ${dialled} ended`,
      15_000,
    );
    expect(outbound, `the outbound call to ${dialled}`).toMatchObject({ direction: 'outbound', status: 'ended' });
    expect(outbound.termination_reason).toMatch(/^dns_failed/);

    // The carrier import: the number is there, with the label sent, and assigned to the agent.
    const numbers = (await d.api('GET', '/v1/telco/numbers')).body as any[];
    const imported = numbers.find((n) => n.phone_number === telco.phone_number);
    expect(imported).toMatchObject({ account_sid: telco.account_sid, label: telco.label });
    expect(((await d.api('GET', `/v1/agents/${agent.id}`)).body as any).phone_number_id).toBe(imported.id);

    // The call list: its contact with the variables sent, and one run with the settings sent
    // (scheduled or under way: whether now is inside its window depends on the clock).
    const runBody = literalBodies(callList.code).find((b) => typeof b.max_concurrent === 'number');
    expect(runBody, 'the call-list block creates a run').toBeDefined();
    const lists = (await d.api('GET', '/v1/outbound-lists')).body as any[];
    expect(lists, 'one outbound list').toHaveLength(1);
    expect(lists[0]).toMatchObject({ agent_id: agent.id, contact_count: 1 });
    const contacts = (await d.api('GET', `/v1/outbound-lists/${lists[0].id}/contacts`)).body as any[];
    expect(contacts[0]).toMatchObject({ phone_number: '+15551234567', variables: [{ key: 'name', value: 'Ada' }] });
    const runs = (await d.api('GET', `/v1/outbound-lists/${lists[0].id}/runs`)).body as any[];
    expect(runs).toHaveLength(1);
    expect(runs[0]).toMatchObject({ max_concurrent: runBody.max_concurrent, calls_per_minute: runBody.calls_per_minute, retry: runBody.retry, window: runBody.window, machine_detection: runBody.machine_detection });
    expect(['scheduled', 'running', 'completed']).toContain(runs[0].status);
  });
});
