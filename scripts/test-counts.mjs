#!/usr/bin/env node
/**
 * The counts of vitest JSON reports (`--reporter=json`): passed, failed and skipped tests. Run
 * with report paths, it prints their sum as one plain closing line, `tests: N passed, N failed,
 * N skipped` (CI's legs, .ci/run), and exits non-zero when a report is missing, a test failed or
 * none passed.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `{ passed, failed, skipped }` of one report, or undefined when there is none. */
export function readCounts(path) {
  if (!existsSync(path)) return undefined;
  try {
    const r = JSON.parse(readFileSync(path, 'utf8'));
    return {
      passed: r.numPassedTests ?? 0,
      failed: r.numFailedTests ?? 0,
      skipped: (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0),
    };
  } catch {
    return undefined;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const sum = { passed: 0, failed: 0, skipped: 0 };
  let missing = 0;
  for (const path of process.argv.slice(2)) {
    const counts = readCounts(path);
    if (counts === undefined) {
      missing++;
      process.stderr.write(`no vitest report at ${path}\n`);
      continue;
    }
    sum.passed += counts.passed;
    sum.failed += counts.failed;
    sum.skipped += counts.skipped;
  }
  process.stdout.write(
    `tests: ${sum.passed} passed, ${sum.failed} failed, ${sum.skipped} skipped\n`,
  );
  process.exit(missing > 0 || sum.failed > 0 || sum.passed === 0 ? 1 : 0);
}
