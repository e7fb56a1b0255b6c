#!/usr/bin/env node
/**
 * The counts of vitest JSON reports (`--reporter=json`): test files, and passed, failed and skipped
 * tests. Run with report paths, it prints their sum in vitest's own closing shape, plain (no
 * colour), as the last lines of CI's legs (.ci/run):
 *
 *      Test Files  121 passed (121)
 *           Tests  1285 passed | 2 skipped (1287)
 *     1285 passed, 0 failed, 2 skipped
 *
 * The last line is the plain closing line CI reads in any language ('N passed, N failed' alone on
 * a line, ../.library/env/README.md): vitest is not among the runners whose closing lines it
 * knows. Exits non-zero when a report is missing, a test failed or none passed.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `{ files, filesPassed, filesFailed, passed, failed, skipped }` of one report, or undefined. */
export function readCounts(path) {
  if (!existsSync(path)) return undefined;
  try {
    const r = JSON.parse(readFileSync(path, 'utf8'));
    const files = Array.isArray(r.testResults) ? r.testResults : [];
    // A file whose every test was skipped is skipped, as vitest's own summary counts it.
    const skippedFile = (f) =>
      Array.isArray(f.assertionResults) &&
      f.assertionResults.length > 0 &&
      f.assertionResults.every((a) => a.status !== 'passed' && a.status !== 'failed');
    return {
      files: files.length,
      filesPassed: files.filter((f) => f.status === 'passed' && !skippedFile(f)).length,
      filesFailed: files.filter((f) => f.status === 'failed').length,
      passed: r.numPassedTests ?? 0,
      failed: r.numFailedTests ?? 0,
      skipped: (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0),
    };
  } catch {
    return undefined;
  }
}

/**
 * vitest's closing summary for these counts, plain (` Test Files  …`, `      Tests  …`), then the
 * plain line `N passed, N failed, N skipped` alone, last.
 */
export function summary(c) {
  const part = (n, word) => (n > 0 ? [`${n} ${word}`] : []);
  const files = [...part(c.filesFailed, 'failed'), ...part(c.filesPassed, 'passed')];
  const skippedFiles = c.files - c.filesPassed - c.filesFailed;
  files.push(...part(skippedFiles, 'skipped'));
  const tests = [
    ...part(c.failed, 'failed'),
    ...part(c.passed, 'passed'),
    ...part(c.skipped, 'skipped'),
  ];
  const total = c.passed + c.failed + c.skipped;
  return (
    ` Test Files  ${files.join(' | ') || '0 passed'} (${c.files})\n` +
    `      Tests  ${tests.join(' | ') || '0 passed'} (${total})\n` +
    `${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped\n`
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const sum = { files: 0, filesPassed: 0, filesFailed: 0, passed: 0, failed: 0, skipped: 0 };
  let missing = 0;
  for (const path of process.argv.slice(2)) {
    const counts = readCounts(path);
    if (counts === undefined) {
      missing++;
      process.stderr.write(`no vitest report at ${path}\n`);
      continue;
    }
    for (const key of Object.keys(sum)) sum[key] += counts[key];
  }
  process.stdout.write(`\n${summary(sum)}`);
  process.exit(missing > 0 || sum.failed > 0 || sum.passed === 0 ? 1 : 0);
}
