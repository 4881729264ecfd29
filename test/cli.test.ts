/** The real `callbridge` command in a child process: first start, keys create, bad config, SIGTERM. */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../src/store/index.ts';

const BIN = join(import.meta.dirname, '..', 'bin', 'callbridge.js');
const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'callbridge-cli-'));
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });

function envFor(dataDir: string, extra: Record<string, string> = {}) {
  return { ...process.env, CALLBRIDGE_DATA_DIR: dataDir, CALLBRIDGE_HTTP_HOST: '127.0.0.1', CALLBRIDGE_LOG_LEVEL: 'info', ...extra };
}

/** `node <args>` (or another command) as a child process: its stdout and stderr so far, and its exit code. */
function spawnDaemon(args: string[], env: NodeJS.ProcessEnv, command = process.execPath) {
  const child = spawn(command, args, { env });
  let out = '';
  child.stdout.on('data', (b) => (out += b));
  child.stderr.on('data', (b) => (out += b));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

async function waitReady(url: string, ms = 15000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const ok = await fetch(url + '/readyz').then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`daemon at ${url} not ready after ${ms} ms`);
}

describe('callbridge CLI', () => {
  it('first start creates an organization and key, prints it once, writes it 0600; SIGTERM stops cleanly', async () => {
    const dataDir = tempDir();
    const port = await freePort();
    const { child, output, exited } = spawnDaemon([BIN, 'start'], envFor(dataDir, { CALLBRIDGE_HTTP_PORT: String(port) }));
    try {
      await waitReady(`http://127.0.0.1:${port}`);
      const out = output();
      const keyFile = join(dataDir, 'initial-api-key');
      const key = readFileSync(keyFile, 'utf8').trim();
      expect(statSync(keyFile).mode & 0o777).toBe(0o600);
      expect(key).toMatch(/^cbk_/);
      // Printed once (the plain line), never inside a JSON log line.
      expect(out.split(key).length - 1).toBe(1);
      for (const line of out.split('\n').filter((l) => l.startsWith('{'))) expect(line).not.toContain(key);
      const r = await fetch(`http://127.0.0.1:${port}/v1/agents`, { headers: { authorization: `Bearer ${key}` } });
      expect(r.status).toBe(200);
      // The log line that says where the key is.
      expect(out).toContain('first start: created organization and API key');
      // Plain `node bin/callbridge.js` runs the media threads with V8's concurrent GC: it says so.
      expect(out).toContain('media threads without --single-threaded-gc');
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  });

  // npm start, the bin run as a program (its shebang) and the Docker image start node with
  // --single-threaded-gc: the media threads collect their own garbage (docs/media-workers.md).
  it.runIf(process.platform === 'linux')('npm start and the bin run directly start node with --single-threaded-gc, and then do not warn', async () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'package.json'), 'utf8')) as { scripts: { start: string } };
    // npm start also sets glibc's MALLOC_ARENA_MAX (2 unless the environment says otherwise).
    const [arenas, node, ...npmStart] = pkg.scripts.start.split(' ');
    expect(arenas).toBe('MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX:-2}');
    expect(node).toBe('node');
    const dockerfile = readFileSync(join(import.meta.dirname, '..', 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^CMD \["node", "--single-threaded-gc", "bin\/callbridge.js", "start"\]$/m);
    expect(dockerfile).toMatch(/^\s+MALLOC_ARENA_MAX=2 \\$/m);
    const ways: Array<[string, string[], Record<string, string>]> = [
      [process.execPath, npmStart.map((a) => (a === 'bin/callbridge.js' ? BIN : a)), { MALLOC_ARENA_MAX: '2' }],
      [BIN, ['start'], {}],
    ];
    for (const [command, args, extraEnv] of ways) {
      const dataDir = tempDir();
      const port = await freePort();
      const { child, output, exited } = spawnDaemon(args, envFor(dataDir, { CALLBRIDGE_HTTP_PORT: String(port), ...extraEnv }), command);
      try {
        await waitReady(`http://127.0.0.1:${port}`);
        expect(readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0'), command).toContain('--single-threaded-gc');
        expect(output()).not.toContain('without --single-threaded-gc');
      } finally {
        child.kill('SIGTERM');
      }
      expect(await exited).toBe(0);
      // The startup line names the arena setting; without it the daemon warns (src/media/malloc-arenas.ts).
      if (extraEnv.MALLOC_ARENA_MAX) {
        expect(output()).toContain('"mallocArenaMax":"2"');
        expect(output()).not.toContain('MALLOC_ARENA_MAX is not set');
      } else if (!process.env.MALLOC_ARENA_MAX) {
        expect(output()).toContain('MALLOC_ARENA_MAX is not set');
      }
    }
  });

  it('a second start on the same data directory creates no new key', async () => {
    const dataDir = tempDir();
    const port = await freePort();
    for (let i = 0; i < 2; i++) {
      const child = spawn(process.execPath, [BIN, 'start'], { env: envFor(dataDir, { CALLBRIDGE_HTTP_PORT: String(port) }) });
      let out = '';
      child.stdout.on('data', (b) => (out += b));
      const exited = new Promise((resolve) => child.on('exit', resolve));
      await waitReady(`http://127.0.0.1:${port}`);
      child.kill('SIGTERM');
      await exited;
      if (i === 1) expect(out).not.toContain('its API key is');
    }
  });

  it('keys create --org NAME prints only the new key, which works', async () => {
    const dataDir = tempDir();
    const r = spawnSync(process.execPath, [BIN, 'keys', 'create', '--org', 'Acme'], { env: envFor(dataDir), encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^cbk_[A-Za-z0-9_-]+\n$/);
    const store = await openStore(dataDir, '');
    try {
      expect((await store.organizations.byApiKey(r.stdout.trim()))?.name).toBe('Acme');
    } finally {
      await store.close();
    }
    const missing = spawnSync(process.execPath, [BIN, 'keys', 'create'], { env: envFor(dataDir), encoding: 'utf8' });
    expect(missing.status).toBe(2);
    expect(missing.stderr).toContain('--org NAME is required');
  });

  it('a bad setting stops start-up with a message naming it', () => {
    const dataDir = tempDir();
    const cases: Array<[Record<string, string>, string]> = [
      [{ CALLBRIDGE_HTTP_PORT: '99999' }, 'http.port'],
      [{ CALLBRIDGE_REGION: 'mars-east1' }, 'region.self'],
      [{ CALLBRIDGE_LOG_LEVEL: 'loud' }, 'log_level'],
      [{ CALLBRIDGE_DEFAULT_LLM: 'nope/model' }, 'agent_defaults.llm'],
    ];
    for (const [env, name] of cases) {
      const r = spawnSync(process.execPath, [BIN, 'start'], { env: envFor(dataDir, env), encoding: 'utf8', timeout: 15000 });
      expect(r.status, JSON.stringify(env)).toBe(2);
      expect(r.stderr).toContain(name);
    }
    const cfg = join(dataDir, 'bad.json');
    writeFileSync(cfg, JSON.stringify({ http: { port: 'eighty' } }));
    const f = spawnSync(process.execPath, [BIN, 'start'], { env: envFor(dataDir, { CALLBRIDGE_CONFIG: cfg }), encoding: 'utf8', timeout: 15000 });
    expect(f.status).toBe(2);
    expect(f.stderr).toContain('http.port');
    const unknown = spawnSync(process.execPath, [BIN, 'frobnicate'], { encoding: 'utf8' });
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain('usage');
  });

  // convict's own port and nat formats took parseInt of the text ("5x" -> 5).
  it('a port or count that is not a whole number stops start-up naming the setting', () => {
    const dataDir = tempDir();
    const cases: Array<[Record<string, string>, string]> = [
      [{ CALLBRIDGE_SIP_PORT: '5x' }, 'sip.port'],
      [{ CALLBRIDGE_HTTP_PORT: '18481.7' }, 'http.port'],
      [{ CALLBRIDGE_HTTP_PORT: '' }, 'http.port'],
      [{ CALLBRIDGE_BRIDGE_MAX_CALLS: '20x' }, 'bridge.max_calls'],
      [{ CALLBRIDGE_RTP_PORT_MIN: '-1' }, 'rtp.port_min'],
    ];
    for (const [env, name] of cases) {
      const r = spawnSync(process.execPath, [BIN, 'start'], { env: envFor(dataDir, env), encoding: 'utf8', timeout: 15000 });
      expect(r.status, JSON.stringify(env)).toBe(2);
      expect(r.stderr).toContain(name);
      expect(r.stderr).toContain('whole number');
    }
  });

  it('a busy port stops start-up with one line naming the setting, no stack trace', async () => {
    const busy = createServer();
    const port = await new Promise<number>((resolve) => busy.listen(0, '127.0.0.1', () => resolve((busy.address() as { port: number }).port)));
    try {
      const r = spawnSync(process.execPath, [BIN, 'start'], {
        env: envFor(tempDir(), { CALLBRIDGE_HTTP_PORT: String(port), CALLBRIDGE_SIP_HOST: '127.0.0.1', CALLBRIDGE_SIP_PORT: '0', CALLBRIDGE_LOG_LEVEL: 'error' }),
        encoding: 'utf8',
        timeout: 20000,
      });
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(`cannot listen on 127.0.0.1:${port} (http.port, CALLBRIDGE_HTTP_PORT): it is already in use`);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    } finally {
      busy.close();
    }
  });

  it('a start that fails (HTTP port busy) on a fresh data directory prints and writes no key; the next start that works does', async () => {
    const busy = createServer();
    const port = await new Promise<number>((resolve) => busy.listen(0, '127.0.0.1', () => resolve((busy.address() as { port: number }).port)));
    const dataDir = tempDir();
    const keyFile = join(dataDir, 'initial-api-key');
    try {
      const failed = spawnSync(process.execPath, [BIN, 'start'], {
        env: envFor(dataDir, { CALLBRIDGE_HTTP_PORT: String(port), CALLBRIDGE_SIP_HOST: '127.0.0.1', CALLBRIDGE_SIP_PORT: '0' }),
        encoding: 'utf8',
        timeout: 20000,
      });
      expect(failed.status).toBe(1);
      expect(failed.stderr).toContain('already in use');
      expect(failed.stdout + failed.stderr).not.toContain('its API key is');
      expect(existsSync(keyFile)).toBe(false);
    } finally {
      busy.close();
    }
    const free = await freePort();
    const { child, output, exited } = spawnDaemon([BIN, 'start'], envFor(dataDir, { CALLBRIDGE_HTTP_PORT: String(free), CALLBRIDGE_SIP_HOST: '127.0.0.1', CALLBRIDGE_SIP_PORT: '0' }));
    try {
      await waitReady(`http://127.0.0.1:${free}`);
      const key = readFileSync(keyFile, 'utf8').trim();
      expect(output()).toContain(`its API key is:\n${key}\n`);
      const me = await fetch(`http://127.0.0.1:${free}/v1/organization`, { headers: { authorization: `Bearer ${key}` } });
      expect(me.status).toBe(200);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });

  it('a misspelled CALLBRIDGE_ variable is warned about at start, naming the closest setting, never its value', async () => {
    const busy = createServer();
    const port = await new Promise<number>((resolve) => busy.listen(0, '127.0.0.1', () => resolve((busy.address() as { port: number }).port)));
    try {
      // The busy port ends the start right after the warnings.
      const r = spawnSync(process.execPath, [BIN, 'start'], {
        env: envFor(tempDir(), {
          CALLBRIDGE_HTTP_PORT: String(port),
          CALLBRIDGE_HTPP_PORT: '8081',
          CALLBRIDGE_ENCRYPTON_KEY: 'not-a-real-secret-4f1d',
          CALLBRIDGE_SIP_PORT: '0',
          CALLBRIDGE_SIP_HOST: '127.0.0.1',
          CALLBRIDGE_TEST_ANYTHING: '1',
        }),
        encoding: 'utf8',
        timeout: 20000,
      });
      expect(r.status).toBe(1);
      const warnings = r.stdout.split('\n').filter((l) => l.includes('is not a callbridge setting')).map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(warnings.map((w) => [w.variable, w.closest, w.setting])).toEqual([
        ['CALLBRIDGE_ENCRYPTON_KEY', 'CALLBRIDGE_ENCRYPTION_KEY', 'security.encryption_key'],
        ['CALLBRIDGE_HTPP_PORT', 'CALLBRIDGE_HTTP_PORT', 'http.port'],
      ]);
      expect(warnings[1]!.msg).toContain('did you mean CALLBRIDGE_HTTP_PORT (http.port)?');
      expect(warnings.every((w) => w.level === 40)).toBe(true); // warn
      expect(r.stdout + r.stderr).not.toContain('not-a-real-secret-4f1d');
    } finally {
      busy.close();
    }
  });

  it('keys (or telco) without a known sub-command prints that group\'s usage and exits 2', () => {
    const bare = spawnSync(process.execPath, [BIN, 'keys'], { encoding: 'utf8' });
    expect(bare.status).toBe(2);
    expect(bare.stderr).not.toContain('unknown command');
    expect(bare.stderr).toContain('callbridge keys needs a sub-command (create)');
    expect(bare.stderr).toContain('callbridge keys create --org NAME');
    const typo = spawnSync(process.execPath, [BIN, 'keys', 'creat', '--org', 'Acme'], { encoding: 'utf8' });
    expect(typo.status).toBe(2);
    expect(typo.stderr).toContain('callbridge keys has no sub-command "creat" (create)');
    const telco = spawnSync(process.execPath, [BIN, 'telco'], { encoding: 'utf8' });
    expect(telco.status).toBe(2);
    expect(telco.stderr).toContain('callbridge telco set-voice-urls');
  });

  it('--version prints the version; a bare callbridge prints the usage', () => {
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '..', 'package.json'), 'utf8')) as { version: string };
    const v = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8' });
    expect(v.status).toBe(0);
    expect(v.stdout).toBe(`callbridge ${pkg.version}\n`);
    const bare = spawnSync(process.execPath, [BIN], { encoding: 'utf8' });
    expect(bare.status).toBe(0);
    expect(bare.stdout).toContain('usage');
  });
  // rtp.main_thread_realtime: the daemon's main thread (SIP, REST, the voice sessions) under
  // SCHED_RR below the media threads, and Node's helper threads (V8's platform workers...) one
  // below the media threads; any real-time setting without --single-threaded-gc warns.
  it.runIf(process.platform === 'linux')('rtp.main_thread_realtime puts the main thread under SCHED_RR below the media threads, Node\'s helpers one below them; without --single-threaded-gc it warns', async () => {
    const sched = (pid: number, tid: number) => {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields from 3 on
      return { rtPriority: Number(f[40 - 3]), policy: Number(f[41 - 3]) };
    };
    const privileged = process.getuid?.() === 0;
    for (const flag of [true, false]) {
      const dataDir = tempDir();
      const port = await freePort();
      const sipPort = await freePort();
      const rtpMin = 42000 + 2 * Math.floor(Math.random() * 1000);
      const env = envFor(dataDir, {
        CALLBRIDGE_HTTP_PORT: String(port),
        CALLBRIDGE_SIP_HOST: '127.0.0.1',
        CALLBRIDGE_SIP_PORT: String(sipPort),
        CALLBRIDGE_RTP_ADDRESS: '127.0.0.1',
        CALLBRIDGE_RTP_PORT_MIN: String(rtpMin),
        CALLBRIDGE_RTP_PORT_MAX: String(rtpMin + 99),
        CALLBRIDGE_RTP_MEDIA_THREAD_REALTIME: '4',
        CALLBRIDGE_RTP_MAIN_THREAD_REALTIME: '3',
      });
      const { child, output, exited } = spawnDaemon([...(flag ? ['--single-threaded-gc'] : []), BIN, 'start'], env);
      try {
        await waitReady(`http://127.0.0.1:${port}`);
        const out = output();
        const pid = child.pid!;
        const main = sched(pid, pid);
        const realtimeThreads = readdirSync(`/proc/${pid}/task`).map((t) => sched(pid, Number(t)));
        if (privileged) {
          expect(main).toEqual({ rtPriority: 3, policy: 2 });
          expect(out).toContain('main thread real-time (SCHED_RR)');
          const helperLine = out.split('\n').find((l) => l.includes("Node's helper threads real-time"));
          const helpers = (JSON.parse(helperLine ?? '{}') as { threads?: number }).threads ?? 0;
          expect(helpers).toBeGreaterThanOrEqual(4); // V8's platform workers at least
          // The two media threads at 4; the main thread and the helpers at 3; threads started
          // later (libuv's pool, if new) under the normal policy.
          expect(realtimeThreads.filter((t) => t.policy === 2).map((t) => t.rtPriority).sort()).toEqual([...Array(1 + helpers).fill(3), 4, 4]);
        } else {
          expect(main.policy).toBe(0);
          expect(out).toContain('could not make the main thread real-time');
          expect(out).toContain("could not make Node's helper threads real-time");
        }
        expect(out.includes('without --single-threaded-gc')).toBe(!flag);
        // The kernel's real-time throttling, warned about while it can stop the media threads.
        const rtRuntime = Number(readFileSync('/proc/sys/kernel/sched_rt_runtime_us', 'utf8'));
        const rtPeriod = Number(readFileSync('/proc/sys/kernel/sched_rt_period_us', 'utf8'));
        expect(out.includes('the kernel throttles real-time threads')).toBe(rtRuntime >= 0 && rtRuntime < rtPeriod);
      } finally {
        child.kill('SIGTERM');
      }
      expect(await exited).toBe(0);
    }
  });
});
