import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

/**
 * Keeps the overload benchmark from rotting: its smoke mode runs a few hundred callers through
 * every limiter at two permit counts, the shed probe, the memory calibration and a short open
 * loop, and exits non-zero unless every run completed and the invariant held. It checks no
 * speed.
 */
test('bench/overload.ts --smoke completes with the invariant held', async () => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/overload.ts', '--smoke'], {
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
  const timer = setTimeout(() => child.kill('SIGKILL'), 18_000);
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  clearTimeout(timer);
  expect(output, output).toContain('smoke: OK');
  expect(code, output).toBe(0);
}, 20_000);
