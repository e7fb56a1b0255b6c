import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { redisMissing } from './helpers/redis-server.js';

const root = fileURLToPath(new URL('..', import.meta.url));

/**
 * Keeps the benchmarks from rotting: each one's smoke mode runs a tiny version of every case
 * and exits non-zero on any error (the overload one also unless the invariant held). None of
 * them checks a speed: speed is for `npm run bench*`, on a quiet machine.
 *
 * `npm test` runs the four that cost a few seconds of CPU (the fleet's: 3 processes, the leased
 * mode). The others start Redis servers, replica processes or whole fleets of peers (about 60 s
 * of CPU together, a third of the suite's budget): `npm run bench:smoke` runs every one of them
 * (HOSTGATE_BENCH_SMOKE=all), and CI runs it beside `npm test` on every change. Concurrent: each
 * is a child process that mostly waits on its own children and sockets.
 */
// Without redis-server (and outside CI) the Redis ones print why and exit 0: nothing to compare.
const needsRedis = redisMissing !== undefined && !process.env.CI ? 'needs a private' : 'smoke: OK';
const quick: [string, string][] = [
  ['bench/dispatcher/handler-cost.ts', 'smoke: OK'],
  ['bench/rate.ts', 'smoke: OK'],
  ['bench/contract.ts', 'smoke: OK'],
  ['bench/fleet.ts', needsRedis],
];
const heavy: [string, string][] = [
  ['bench/overload.ts', 'smoke: OK'],
  ['bench/dispatcher.ts', 'smoke: OK'],
  ['bench/node-agent.ts', 'smoke: OK'],
  ['bench/adaptive.ts', 'smoke: OK'],
  ['bench/semaphore.ts', '| hostgate'],
  ['bench/shared.ts', needsRedis],
];
const all = process.env.HOSTGATE_BENCH_SMOKE === 'all';

test.concurrent.each(all ? [...quick, ...heavy] : quick)(
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
