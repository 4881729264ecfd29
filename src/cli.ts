/**
 * The `callbridge` command:
 *   callbridge start                      run the daemon in the foreground
 *   callbridge keys create --org NAME     create an organization (if new) and print a new API key
 */
import { loadConfig, ConfigError } from './config.ts';
import { createLogger } from './log.ts';
import { startDaemon } from './main.ts';
import { openStore } from './store/index.ts';

const USAGE = `usage:
  callbridge start                    run the daemon (settings: CALLBRIDGE_* env vars, CALLBRIDGE_CONFIG file)
  callbridge keys create --org NAME   create an organization if new and print a new API key`;

async function main(argv: string[]): Promise<number> {
  const [cmd, sub, ...rest] = argv;
  if (cmd === 'start' && sub === undefined) return start();
  if (cmd === 'keys' && sub === 'create') {
    const i = rest.indexOf('--org');
    const org = i >= 0 ? rest[i + 1] : undefined;
    if (!org || org.startsWith('--') || rest.length !== 2) {
      process.stderr.write(`callbridge keys create: --org NAME is required\n${USAGE}\n`);
      return 2;
    }
    const config = loadConfig();
    const store = openStore(config.data_dir, config.security.encryption_key);
    try {
      process.stdout.write(store.organizations.createKey(org).key + '\n');
    } finally {
      store.close();
    }
    return 0;
  }
  if (cmd === '--help' || cmd === 'help' || cmd === '-h') {
    process.stdout.write(USAGE + '\n');
    return 0;
  }
  process.stderr.write(`callbridge: unknown command "${argv.join(' ')}"\n${USAGE}\n`);
  return 2;
}

async function start(): Promise<number> {
  const config = loadConfig();
  const logger = createLogger(config.log_level);
  const daemon = await startDaemon(config, logger);
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
