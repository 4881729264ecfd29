/**
 * The `callbridge` command:
 *   callbridge start                      run the daemon in the foreground
 *   callbridge keys create --org NAME     create an organization (if new) and print a new API key
 *                                         (`keys` or `telco` without a known sub-command: that
 *                                         group's usage, exit 2)
 *   callbridge telco set-voice-urls [--org NAME]
 *                                         point imported numbers' voice webhook at this daemon
 *   callbridge migrate-store --from sqlite:<path> --to postgres://...
 *                                         copy a single node's SQLite store into PostgreSQL
 *   callbridge --version                  print the version
 */
import { readFileSync } from 'node:fs';
import { loadConfig, ConfigError, type Config } from './config.ts';
import { describeUnknownVariable, unknownVariables } from './config-env.ts';
import { createLogger } from './log.ts';
import { startDaemon } from './main.ts';
import { migrateStoreCommand, MIGRATE_STORE_USAGE } from './migrate-store-command.ts';
import { openStore } from './store/index.ts';
import { createCarrierClient } from './telco/carrier-client.ts';
import { setVoiceUrls, voiceUrlOf } from './telco/twilio-voice-url.ts';

const KEYS_USAGE = `  callbridge keys create --org NAME   create an organization if new and print a new API key`;
const TELCO_USAGE = `  callbridge telco set-voice-urls [--org NAME]
                                      point the imported carrier numbers' voice webhook at
                                      http.public_url/v1/telco/twilio/voice (carrier API)`;
const USAGE = `usage:
  callbridge start                    run the daemon (settings: CALLBRIDGE_* env vars, CALLBRIDGE_CONFIG file)
${KEYS_USAGE}
${TELCO_USAGE}
  ${MIGRATE_STORE_USAGE}
  callbridge --version                print the version`;
/** The commands that take a sub-command, and the usage of their sub-commands. */
const GROUPS: Record<string, { subs: readonly string[]; usage: string }> = {
  keys: { subs: ['create'], usage: KEYS_USAGE },
  telco: { subs: ['set-voice-urls'], usage: TELCO_USAGE },
};

/** package.json sits two levels up from both src/cli.ts and dist/cli.js. */
function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** An error a person can act on, instead of a stack trace: which setting names the busy port. */
function listenFailure(err: unknown, config: Config): string | undefined {
  // The socket's own error, possibly wrapped (the SIP transports keep it as `cause`).
  let e = err as (NodeJS.ErrnoException & { port?: number; address?: string; cause?: unknown }) | undefined;
  const busy = (x: typeof e) => x?.code === 'EADDRINUSE' || x?.code === 'EACCES' || x?.code === 'EADDRNOTAVAIL';
  while (e && !busy(e) && e.cause) e = e.cause as typeof e;
  if (!e || !busy(e)) return undefined;
  const settings: Array<[number, string, string]> = [
    [config.http.port, 'http.port', 'CALLBRIDGE_HTTP_PORT'],
    [config.sip.port, 'sip.port', 'CALLBRIDGE_SIP_PORT'],
    [config.sip.tls_port, 'sip.tls_port', 'CALLBRIDGE_SIP_TLS_PORT'],
  ];
  const hit = settings.find(([port]) => port === e.port);
  const what = hit ? ` (${hit[1]}, ${hit[2]})` : '';
  const why = e.code === 'EADDRINUSE' ? 'is already in use' : e.code === 'EACCES' ? 'needs privileges this process lacks' : 'is not an address of this machine';
  return `cannot listen on ${e.address ?? ''}:${e.port ?? '?'}${what}: it ${why}`;
}

async function main(argv: string[]): Promise<number> {
  const [cmd, sub, ...rest] = argv;
  if (cmd === undefined) {
    process.stdout.write(USAGE + '\n');
    return 0;
  }
  if ((cmd === '--version' || cmd === '-v' || cmd === 'version') && sub === undefined) {
    process.stdout.write(`callbridge ${version()}\n`);
    return 0;
  }
  if (cmd === 'start' && sub === undefined) return start();
  if (cmd === 'keys' && sub === 'create') {
    const i = rest.indexOf('--org');
    const org = i >= 0 ? rest[i + 1] : undefined;
    if (!org || org.startsWith('--') || rest.length !== 2) {
      process.stderr.write(`callbridge keys create: --org NAME is required\n${USAGE}\n`);
      return 2;
    }
    const config = loadConfig();
    const store = await openStore(config.data_dir, config.security.encryption_key, { url: config.store.url, poolSize: config.store.pool_size });
    try {
      process.stdout.write((await store.organizations.createKey(org)).key + '\n');
    } finally {
      await store.close();
    }
    return 0;
  }
  if (cmd === 'telco' && sub === 'set-voice-urls') return setVoiceUrlsCommand(rest);
  if (cmd === 'migrate-store') return migrateStoreCommand(argv.slice(1));
  if (cmd === '--help' || cmd === 'help' || cmd === '-h') {
    process.stdout.write(USAGE + '\n');
    return 0;
  }
  const group = GROUPS[cmd];
  if (group !== undefined) {
    // `callbridge keys` alone (or a misspelled sub-command): what the group offers, not "unknown command".
    const why = sub === undefined ? 'needs a sub-command' : `has no sub-command "${sub}"`;
    process.stderr.write(`callbridge ${cmd} ${why} (${group.subs.join(', ')}):\nusage:\n${group.usage}\n`);
    return 2;
  }
  process.stderr.write(`callbridge: unknown command "${argv.join(' ')}"\n${USAGE}\n`);
  return 2;
}

/**
 * Points imported numbers at this daemon's voice webhook: one line per number on stdout
 * (`<phone_number> <phone_sid> ok` or `... failed: <why>`); exit 1 when any failed, 2 on usage
 * (no http.public_url, an unknown --org).
 */
async function setVoiceUrlsCommand(args: string[]): Promise<number> {
  const i = args.indexOf('--org');
  const orgName = i >= 0 ? args[i + 1] : undefined;
  if ((i >= 0 && (!orgName || orgName.startsWith('--'))) || args.length !== (i >= 0 ? 2 : 0)) {
    process.stderr.write(`callbridge telco set-voice-urls: unexpected arguments\n${USAGE}\n`);
    return 2;
  }
  const config = loadConfig();
  if (config.http.public_url === '') {
    process.stderr.write('callbridge telco set-voice-urls: http.public_url (CALLBRIDGE_PUBLIC_URL) is not set: the carrier needs the URL it can reach this daemon at\n');
    return 2;
  }
  const store = await openStore(config.data_dir, config.security.encryption_key, { url: config.store.url, poolSize: config.store.pool_size });
  try {
    let orgId: string | undefined;
    if (orgName !== undefined) {
      orgId = (await store.organizations.byName(orgName))?.id;
      if (orgId === undefined) {
        process.stderr.write(`callbridge telco set-voice-urls: no organization named "${orgName}"\n`);
        return 2;
      }
    }
    const voiceUrl = voiceUrlOf(config.http.public_url);
    const outcomes = await setVoiceUrls(store, createCarrierClient(config), voiceUrl, orgId);
    for (const o of outcomes) process.stdout.write(`${o.phone_number} ${o.phone_sid} ${o.error === undefined ? 'ok' : `failed: ${o.error}`}\n`);
    process.stderr.write(`${outcomes.filter((o) => o.error === undefined).length} of ${outcomes.length} numbers now send their calls to ${voiceUrl}\n`);
    return outcomes.every((o) => o.error === undefined) ? 0 : 1;
  } finally {
    await store.close();
  }
}

async function start(): Promise<number> {
  const config = loadConfig();
  const logger = createLogger(config.log_level);
  for (const u of unknownVariables(process.env)) logger.warn({ variable: u.name, closest: u.closest, setting: u.setting }, describeUnknownVariable(u));
  let daemon: Awaited<ReturnType<typeof startDaemon>>;
  try {
    daemon = await startDaemon(config, logger);
  } catch (err) {
    const message = listenFailure(err, config);
    if (message === undefined) throw err;
    process.stderr.write(`callbridge: ${message}\n`);
    return 1;
  }
  const stop = (signal: string) => {
    logger.info({ signal }, 'draining');
    daemon.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'error while stopping');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  return new Promise<number>(() => {});
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof ConfigError) process.stderr.write(`callbridge: ${err.message}\n`);
    else process.stderr.write(`callbridge: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(err instanceof ConfigError ? 2 : 1);
  },
);
