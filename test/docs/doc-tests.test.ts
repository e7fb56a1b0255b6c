import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The doc-test harness (scripts/doc-tests.mjs) must fail, naming the markdown line, for each
 * kind of mistake it exists to catch; a harness that passes everything would be worse than none.
 * The fixture imports nothing from hostgate (`--no-package`: no build), so this costs one tsc
 * run over two tiny modules and two node processes.
 */
test('doc-tests fail on a type error, a failing run block and a broken link, at their lines', async () => {
  const child = spawn(
    process.execPath,
    [
      'scripts/doc-tests.mjs',
      '--no-package',
      '--work=.doctest-selftest',
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
  // The hidden setup's declaration is in scope: no error for the block at lines 13-20.
  expect(output).not.toMatch(/broken\.md:1[3-9]: error/);
  // The run block reached its local partner, then failed; the passing one ran.
  expect(output).toMatch(/broken\.md:23: the run block exited 1[\s\S]*failed on purpose/);
  expect(output).toMatch(/200/);
  expect(output).toMatch(/broken\.md:32: ran/);
  expect(output).toMatch(/broken\.md:36: no file missing\.md/);
  expect(output).toMatch(/broken\.md:36: no heading for #no-such-heading/);
  expect(output).not.toMatch(/#a-page-with-one-mistake-of-each-kind/);
}, 60_000);
