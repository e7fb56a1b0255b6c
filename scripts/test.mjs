#!/usr/bin/env node
/**
 * `npm test`: lint (Biome, under a second), the import rules (scripts/check-imports.mjs: no
 * circles, arrows only down the layers) and the file lengths (scripts/check-lines.mjs: no source
 * file over 450 lines but the excepted ones), then the typecheck (`tsc --noEmit`, incremental)
 * and the doc-tests (scripts/doc-tests.mjs: build, type-check every ts block of the docs, run
 * the runnable ones) beside the suite (`vitest run`). Much of the suite waits on sockets, timers
 * and child processes, so their ~9 s (27 s cold) and ~35 s of one core fit into its idle time
 * instead of running before it. Their output is held back and printed after vitest's; the exit
 * code is non-zero if any failed. Arguments go to vitest: `npm test -- test/http/fetch.test.ts`
 * (the typecheck and the doc-tests run all the same). Its last lines are vitest's summary, plain, then `N passed, N failed, N skipped` alone (from its JSON
 * report, after the typecheck's and doc-tests' output), for any CI to read; a run in which no
 * test passed fails.
 */
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readCounts, summary } from './test-counts.mjs';

const bin = (pkg, path) =>
  fileURLToPath(new URL(`../node_modules/${pkg}/${path}`, import.meta.url));

/** Runs `node <script> ...args`; resolves with its exit code (and output, when captured). */
function run(script, args, capture, env = process.env) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [script, ...args], {
      stdio: capture ? ['ignore', 'pipe', 'pipe'] : 'inherit',
      env,
    });
    let output = '';
    if (capture) {
      child.stdout.setEncoding('utf8').on('data', (chunk) => {
        output += chunk;
      });
      child.stderr.setEncoding('utf8').on('data', (chunk) => {
        output += chunk;
      });
    }
    child.on('error', (error) => resolve({ code: 1, output: `${output}${error}\n` }));
    child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), output }));
  });
}

const lint = await run(bin('@biomejs/biome', 'bin/biome'), ['check', '.'], false);
if (lint.code !== 0) process.exit(lint.code);
const imports = await run(fileURLToPath(new URL('check-imports.mjs', import.meta.url)), [], false);
if (imports.code !== 0) process.exit(imports.code);
const lines = await run(fileURLToPath(new URL('check-lines.mjs', import.meta.url)), [], false);
if (lines.code !== 0) process.exit(lines.code);

// Incremental: the check of an unchanged tree is read back from .typecheck.tsbuildinfo (gitignored),
// ~9 s of CPU instead of ~27 s cold (2026-12-06); a fresh clone pays the whole check once.
const typecheck = run(
  bin('typescript', 'bin/tsc'),
  [
    '-p',
    'tsconfig.json',
    '--noEmit',
    '--incremental',
    '--tsBuildInfoFile',
    '.typecheck.tsbuildinfo',
  ],
  true,
);
const docTests = run(fileURLToPath(new URL('doc-tests.mjs', import.meta.url)), [], true);
// vitest's own report, and a JSON one for the closing line below (HOSTGATE_TEST_JSON keeps it
// where CI sums its legs).
const report =
  process.env.HOSTGATE_TEST_JSON || join(tmpdir(), `hostgate-vitest-${process.pid}.json`);
// Every file but the fault lane (vitest.config.ts, `npm run test:faults`), unless files are named.
const named = process.argv.slice(2).some((arg) => !arg.startsWith('-'));
const lane = process.env.HOSTGATE_TEST_LANE ?? (named ? 'all' : 'suite');
const suite = await run(
  bin('vitest', 'vitest.mjs'),
  [
    'run',
    '--reporter=default',
    '--reporter=json',
    `--outputFile.json=${report}`,
    ...process.argv.slice(2),
  ],
  false,
  { ...process.env, HOSTGATE_TEST_LANE: lane },
);
const types = await typecheck;
process.stdout.write(
  types.code === 0 ? '\ntypecheck (tsc --noEmit): OK\n' : `\ntypecheck (tsc --noEmit) FAILED:\n`,
);
if (types.code !== 0) process.stdout.write(types.output);
const docs = await docTests;
process.stdout.write(docs.output);
// Plain closing lines that any CI can read: vitest's summary of the tests it ran.
const counts = readCounts(report);
if (!process.env.HOSTGATE_TEST_JSON) rmSync(report, { force: true });
if (counts === undefined) process.stdout.write('no report from vitest\n');
else process.stdout.write(`\n${summary(counts)}`);
process.exit(suite.code || types.code || docs.code || (counts?.passed ? 0 : 1));
