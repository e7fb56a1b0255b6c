import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { redisMissing } from './helpers/redis-server.js';

const root = fileURLToPath(new URL('..', import.meta.url));

/**
 * Keeps the benchmarks from rotting: each one's smoke mode runs a tiny version of every case
 * and exits non-zero on any error (the overload one also unless the invariant held). None of
 * them checks a speed: speed is for `npm run bench*`, on a quiet machine. Concurrent: each is
 * a child process that mostly waits on its own children and sockets, and one after another they
 * were the suite's longest file (42 s of a 117 s run).
 */
test.concurrent.each([
  ['bench/overload.ts', 'smoke: OK'],
  ['bench/dispatcher.ts', 'smoke: OK'],
  ['bench/dispatcher/handler-cost.ts', 'smoke: OK'],
  ['bench/node-agent.ts', 'smoke: OK'],
  ['bench/adaptive.ts', 'smoke: OK'],
  ['bench/semaphore.ts', '| hostgate'],
  ['bench/rate.ts', 'smoke: OK'],
  ['bench/contract.ts', 'smoke: OK'],
  // Without redis-server (and outside CI) it prints why and exits 0: nothing to compare.
  [
    'bench/shared.ts',
    redisMissing !== undefined && !process.env.CI ? 'needs a private' : 'smoke: OK',
  ],
  [
    'bench/fleet.ts',
    redisMissing !== undefined && !process.env.CI ? 'needs a private' : 'smoke: OK',
  ],
])(
  '%s --smoke completes',
  async (script, expected) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, '--smoke'], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    // Seconds on a quiet machine; the bound is for a hung child, not for a busy machine.
    const timer = setTimeout(() => child.kill('SIGKILL'), 110_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    clearTimeout(timer);
    expect(output, output).toContain(expected);
    expect(code, output).toBe(0);
  },
  120_000,
);
