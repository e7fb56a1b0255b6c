import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** `npm run demo` as the README's quick start runs it: `tsx examples/demo.ts`, exit code 0. */
test('the demo runs and reports that every invariant held', async () => {
  const child = spawn(process.execPath, ['node_modules/tsx/dist/cli.mjs', 'examples/demo.ts'], {
    cwd: root,
    env: { ...process.env, FORCE_COLOR: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c;
  });
  child.stderr.on('data', (c: Buffer) => {
    err += c;
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  expect({ code, err }, out).toEqual({ code: 0, err: '' });
  expect(out).toContain('1000/1000 done');
  expect(out).toMatch(/billing\s+20\s+(\d+)/);
  expect(out).toContain('EVERY INVARIANT HELD');
  for (const [, cap, peak] of out.matchAll(
    /^\s+(?:billing|inventory|shipping)\s+(\d+)\s+(\d+)/gm,
  )) {
    expect(Number(peak)).toBeLessThanOrEqual(Number(cap));
  }
}, 90_000);
