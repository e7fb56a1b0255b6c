#!/usr/bin/env node
/**
 * No source file over {@link LIMIT} lines in src/, middleware/ and fastify/ (issue 34), checked by
 * `npm test` (scripts/test.mjs) beside the import rules. A file past it holds more than a reader
 * can follow in one sitting: split it along a seam of responsibility. middleware/ and fastify/
 * count too: they are the package's own source (hostgate/express, hostgate/fastify), under the
 * same import rules (scripts/check-imports.mjs), read by the same newcomers. Lua counts as
 * TypeScript does; tests, benchmarks and examples do not.
 *
 * A file still over is named in {@link EXCEPTIONS} with its reason and issue. An excepted file
 * that is back under the limit (or gone) fails the check too, so the list only shrinks.
 *
 * Usage: `node scripts/check-lines.mjs [root]` (default: the package). Exits 1 listing each
 * file over the limit with its line count, and each exception that no longer holds.
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Longest source file allowed, in lines as an editor numbers them. */
export const LIMIT = 450;

/** The folders whose source files are counted. */
export const DIRS = ['src', 'middleware', 'fastify'];

/**
 * Files allowed over the limit for now, each with its reason: `['path', 'why']`. Each must
 * still be over it: remove a file from here in the commit that splits it.
 */
export const EXCEPTIONS = [];

const SOURCE = /\.(?:[cm]?[jt]s|tsx|lua)$/;

/** Newline characters (`wc -l`), plus a last line without one. */
function countLines(text) {
  let lines = 0;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lines++;
  return text.length > 0 && !text.endsWith('\n') ? lines + 1 : lines;
}

/**
 * Counts every source file of `root`'s {@link DIRS}. Returns the files counted (path relative
 * to root, with `/`, and lines) and the problems: files over `limit` not excepted, and
 * exceptions that no longer hold.
 */
export function checkLines(root, { limit = LIMIT, exceptions = EXCEPTIONS } = {}) {
  const files = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (SOURCE.test(name) && !name.endsWith('.d.ts')) {
        files.push({
          path: relative(root, path).split(sep).join('/'),
          lines: countLines(readFileSync(path, 'utf8')),
        });
      }
    }
  };
  for (const dir of DIRS) if (existsSync(join(root, dir))) walk(join(root, dir));

  const excepted = new Map(exceptions);
  const problems = [];
  for (const { path, lines } of files) {
    if (lines > limit && !excepted.has(path)) {
      problems.push(`${path}: ${lines} lines (over ${limit}: split it)`);
    }
  }
  for (const [path] of exceptions) {
    const file = files.find((f) => f.path === path);
    if (file === undefined) {
      problems.push(`${path}: excepted but not found (remove it from EXCEPTIONS)`);
    } else if (file.lines <= limit) {
      problems.push(
        `${path}: ${file.lines} lines, no longer over ${limit} (remove it from EXCEPTIONS)`,
      );
    }
  }
  return { files, problems };
}

// The CLI, when run as a script (the test imports checkLines instead). Real paths: run through a
// symlinked folder, the check must still run rather than pass by doing nothing.
const self = fileURLToPath(import.meta.url);
const main = process.argv[1];
if (main !== undefined && existsSync(main) && realpathSync(main) === realpathSync(self)) {
  const root = resolve(process.argv[2] ?? join(dirname(self), '..'));
  const { files, problems } = checkLines(root);
  if (problems.length > 0) {
    process.stderr.write(`lines (scripts/check-lines.mjs):\n  ${problems.join('\n  ')}\n`);
    process.exit(1);
  }
  const over = EXCEPTIONS.map(([path, why]) => {
    const lines = files.find((f) => f.path === path)?.lines;
    return `\n  excepted: ${path} ${lines} lines (${why})`;
  });
  process.stdout.write(`lines: no file over ${LIMIT} (${files.length} files)${over.join('')}\n`);
}
