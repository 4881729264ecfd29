/**
 * Kamailio (Debian `kamailio`) as a carrier's registrar and proxy for the interop tests: a minimal
 * config written into the run's own temporary directory, listening on 127.0.0.1 at a port chosen
 * here, bindings in memory (usrloc db_mode 0), digest against one fixed user and password
 * (pv_auth_check, no database), INVITEs to a registered user relayed to its Contact (lookup +
 * t_relay). Run in the foreground (-DD -E) with its own pid file and runtime dir, started and
 * stopped by the test by PID.
 *
 * Like Kamailio's stock kamailio.cfg, a REGISTER whose credentials do not check out is challenged
 * again (not 403): a client must tell refused credentials from a stale nonce by itself.
 *
 * runKamailio() is the lifecycle alone (check, start, wait, stop), for a config that lives
 * elsewhere: test/cluster runs the shipped deploy/kamailio/kamailio.cfg with `-A` defines.
 */
import { spawnSync } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { peerMissing, requirePeer, type PeerAvailability } from '../helpers/peer-availability.ts';
import { spawnInGroup } from '../helpers/spawn-in-group.ts';

export const KAMAILIO_BIN = process.env.KAMAILIO_BIN ?? '/usr/sbin/kamailio';
const MODULES = '/usr/lib/x86_64-linux-gnu/kamailio/modules';

/**
 * Whether Kamailio and the modules a config loads (default: the registrar's) are installed. When
 * not, tests skip on a developer's machine and fail in CI (CI set), which must install kamailio.
 */
export function kamailioAvailable(modules: readonly string[] = ['registrar.so']): PeerAvailability {
  if (!existsSync(KAMAILIO_BIN)) return peerMissing(`${KAMAILIO_BIN} not found (apt-get install kamailio, or set KAMAILIO_BIN)`);
  for (const m of modules) {
    if (!existsSync(join(MODULES, m))) return peerMissing(`no Kamailio module ${m} in ${MODULES} (apt-get install kamailio)`);
  }
  return { ok: true, skip: false };
}

export interface KamailioOptions {
  user: string;
  password: string;
  /** Kamailio's registrar bounds: what it grants lies between them. */
  minExpires: number;
  maxExpires: number;
  /** Reuse a port (a restart); default a free one. */
  port?: number;
}

export interface Kamailio {
  port: number;
  dir: string;
  /** The main process (its workers are in its process group). */
  pid: number | undefined;
  /** Everything it wrote to stderr. */
  log(): string;
  /** Stops it (SIGTERM to its PID, SIGKILL after 3 s) and deletes its directory. */
  stop(): Promise<void>;
}

/** A UDP port free on loopback right now. */
async function freeUdpPort(): Promise<number> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()));
  const port = s.address().port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

function config(o: KamailioOptions, port: number): string {
  return `#!KAMAILIO
debug=2
log_stderror=yes
children=2
auto_aliases=no
listen=udp:127.0.0.1:${port}
alias="127.0.0.1:${port}"
mpath="${MODULES}/"
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "usrloc.so"
loadmodule "registrar.so"
loadmodule "auth.so"
loadmodule "textops.so"
loadmodule "siputils.so"
loadmodule "xlog.so"
modparam("usrloc", "db_mode", 0)
modparam("registrar", "min_expires", ${o.minExpires})
modparam("registrar", "max_expires", ${o.maxExpires})
modparam("registrar", "default_expires", ${o.maxExpires})

request_route {
  if (!mf_process_maxfwd_header("10")) { sl_send_reply("483", "Too Many Hops"); exit; }
  if (has_totag()) {
    if (loose_route() || is_method("ACK|BYE")) { t_relay(); exit; }
    sl_send_reply("404", "Not here");
    exit;
  }
  if (is_method("REGISTER")) {
    if (!pv_auth_check("$fd", "${o.password}", "0", "1") || $au != "${o.user}") {
      xlog("L_INFO", "REGISTER $fu not authenticated (rc $rc): challenged\\n");
      auth_challenge("$fd", "0");
      exit;
    }
    if (!save("location")) sl_reply_error();
    xlog("L_INFO", "REGISTER $fu saved, Contact $ct, Expires $hdr(Expires)\\n");
    exit;
  }
  if (is_method("INVITE|CANCEL|ACK")) {
    if (is_method("INVITE")) record_route();
    if (!lookup("location")) { sl_send_reply("404", "Not Found"); exit; }
    xlog("L_INFO", "INVITE to $tu relayed to $ru\\n");
    t_relay();
    exit;
  }
  if (is_method("OPTIONS")) { sl_send_reply("200", "OK"); exit; }
  sl_send_reply("405", "Method Not Allowed");
}
`;
}

/** Writes the config, checks it (kamailio -c), starts Kamailio and waits until it answers OPTIONS. */
export async function startKamailio(o: KamailioOptions): Promise<Kamailio> {
  requirePeer(kamailioAvailable());
  const port = o.port ?? (await freeUdpPort());
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-kamailio-'));
  const cfg = join(dir, 'kamailio.cfg');
  writeFileSync(cfg, config(o, port));
  return runKamailio({ cfg, dir, port });
}

export interface KamailioRun {
  /** The config file to run (it may live outside `dir`, e.g. a shipped one). */
  cfg: string;
  /** A directory of the run's own: pid file, runtime dir, working dir. Deleted by stop(), or when the start fails. */
  dir: string;
  /** The UDP port on 127.0.0.1 where it answers OPTIONS addressed to itself: the start waits for that. */
  port: number;
  /** Pre-processor defines (`-A NAME=value`), for the check and the run alike; string values need their quotes. */
  defines?: Record<string, string | number>;
}

/**
 * Checks a config (kamailio -c, with the defines) and runs it in the foreground (-DD -E) in a
 * process group of its own; resolves once it answers OPTIONS.
 */
export async function runKamailio(run: KamailioRun): Promise<Kamailio> {
  requirePeer(kamailioAvailable([]));
  const { cfg, dir, port } = run;
  const runDir = join(dir, 'run');
  mkdirSync(runDir, { recursive: true });
  const defines = Object.entries(run.defines ?? {}).flatMap(([name, value]) => ['-A', `${name}=${value}`]);
  const check = spawnSync(KAMAILIO_BIN, ['-c', '-f', cfg, ...defines], { encoding: 'utf8' });
  if (check.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`kamailio -c refused the config:\n${check.stderr}`);
  }
  // A process group of its own: Kamailio forks its workers even in the foreground, and a worker
  // whose main process was killed outlives it, so every signal goes to the whole group.
  const proc = spawnInGroup(KAMAILIO_BIN, ['-DD', '-E', '-f', cfg, ...defines, '-P', join(dir, 'kamailio.pid'), '-Y', runDir, '-w', dir, '-m', '32', '-M', '4']);
  try {
    await waitForOptions(port, () => proc.running());
  } catch (err) {
    proc.signal('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${proc.output()}`, { cause: err });
  }
  return {
    port,
    dir,
    pid: proc.pid,
    log: proc.output,
    async stop() {
      await proc.stop(3000);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Polls with OPTIONS until Kamailio answers (it binds after loading its modules). */
async function waitForOptions(port: number, alive: () => boolean): Promise<void> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()));
  const local = s.address().port;
  let answered = false;
  s.on('message', () => {
    answered = true;
  });
  try {
    for (let i = 0; i < 100 && !answered; i++) {
      if (!alive()) throw new Error('kamailio exited at start');
      const msg = [
        `OPTIONS sip:127.0.0.1:${port} SIP/2.0`,
        `Via: SIP/2.0/UDP 127.0.0.1:${local};branch=z9hG4bKstart${i}`,
        `From: <sip:probe@127.0.0.1:${local}>;tag=p${i}`,
        `To: <sip:127.0.0.1:${port}>`,
        `Call-ID: start-probe-${i}@127.0.0.1`,
        `CSeq: ${i + 1} OPTIONS`,
        'Max-Forwards: 70',
        'Content-Length: 0',
        '',
        '',
      ].join('\r\n');
      s.send(msg, port, '127.0.0.1');
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!answered) throw new Error('kamailio did not answer OPTIONS within 10 s');
  } finally {
    s.close();
  }
}
