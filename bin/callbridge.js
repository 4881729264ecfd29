#!/usr/bin/env -S node --single-threaded-gc
// Runs the compiled build when there is one (Docker image), else the TypeScript sources via tsx.
import { existsSync } from 'node:fs';

const dist = new URL('../dist/cli.js', import.meta.url);
if (existsSync(dist)) {
  await import(dist.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(new URL('../src/cli.ts', import.meta.url).href);
}
