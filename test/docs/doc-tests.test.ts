import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The doc-test harness (scripts/doc-tests.mjs) must fail, naming the markdown line, for each
 * kind of mistake it exists to catch; a harness that passes everything would be worse than none.
 * The fixture imports nothing from hostgate (`--no-package`: no build), so this costs one tsc
 * run over a few tiny modules and three node processes (one killed after 15 s: long enough
 * that a block which does exit, on a loaded machine, is not taken for one that never does).
 */
test('doc-tests fail on a type error, hidden setup, a failing or unending run block and a broken link, at their lines', async () => {
  const child = spawn(
    process.execPath,
    [
      'scripts/doc-tests.mjs',
      '--no-package',
      '--run-timeout=15000',
      '--verbose',
      'test/docs/fixtures/broken.md',
    ],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk;
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  expect(code, output).toBe(1);
  // noUncheckedIndexedAccess: counts.a is number | undefined (line 7 of the page).
  expect(output).toMatch(/broken\.md:7: error TS2322/);
  // A hidden setup comment is an error at its line; the block it hid setup for does not compile.
  expect(output).toMatch(/broken\.md:13: hidden setup/);
  expect(output).toMatch(/broken\.md:17: error TS2304: Cannot find name 'limit'/);
  // The run block reached its local partner, then failed; the passing one ran.
  expect(output).toMatch(/broken\.md:23: the run block exited 1[\s\S]*failed on purpose/);
  expect(output).toMatch(/200/);
  expect(output).toMatch(/broken\.md:32: ran/);
  // A run block must exit by itself: one that leaves a timer running fails, named.
  expect(output).toMatch(/broken\.md:38: the run block did not exit by itself within 15000 ms/);
  // A fragment that declares what it assumes in its own lines compiles.
  expect(output).not.toMatch(/broken\.md:4[4-8]: error/);
  expect(output).toMatch(/broken\.md:51: no file missing\.md/);
  expect(output).toMatch(/broken\.md:51: no heading for #no-such-heading/);
  expect(output).not.toMatch(/#a-page-with-one-mistake-of-each-kind/);
}, 120_000);
