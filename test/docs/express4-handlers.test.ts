/**
 * README's Express example (and four in docs/) wrote `app.get(path, async (req, res) => { await
 * req.outbound.fetch(...) })` under "Express 4 and 5". Express 4 ignores the promise a handler
 * returns, so the first client hang-up (ClientDisconnectedError) or shed (QueueFullError) was an
 * unhandled rejection and the whole server exited: README's block, run on express 4.22 with a
 * client that hung up, printed `triggerUncaughtException ... ClientDisconnectedError` and exit
 * code 1. The pages say hostgate/express supports both, so an Express block's async handler must
 * take `next` and hand its error on (`catch (error) { next(error) }`), which both majors route to
 * shed(). docs/node-http.md already did; test/express/hang-up-quiet.test.ts runs that form on both.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const pages = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md'))];

/** The ```ts blocks of a page that import hostgate/express, with the line of each fence. */
function expressBlocks(page: string): { line: number; code: string }[] {
  const lines = readFileSync(
    join(root, page === 'README.md' ? page : `docs/${page}`),
    'utf8',
  ).split('\n');
  const blocks: { line: number; code: string }[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^\s*```(ts|typescript)\b/.test(lines[i]!)) continue;
    let end = i + 1;
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end]!)) end++;
    const code = lines.slice(i + 1, end).join('\n');
    if (code.includes("from 'hostgate/express'")) blocks.push({ line: i + 1, code });
    i = end;
  }
  return blocks;
}

it("every async Express handler in README and docs hands its error to next (Express 4 crashed on README's at the first hang-up)", () => {
  const offenders: string[] = [];
  let handlers = 0;
  for (const page of pages) {
    for (const block of expressBlocks(page)) {
      // A route handler: app.get/post/put/patch/delete/all(path, ..., async (req, res[, next]) =>
      for (const m of block.code.matchAll(
        /\bapp\.(?:get|post|put|patch|delete|all)\([^\n]*?async \(([^)]*)\)\s*=>\s*\{/g,
      )) {
        handlers++;
        const params = m[1]!.split(',').map((p) => p.trim());
        const body = block.code.slice(m.index! + m[0].length);
        if (params.length < 3 || !/catch \((\w+)\) \{\s*(?:return )?next\(\1\)/.test(body)) {
          const line = block.line + block.code.slice(0, m.index).split('\n').length;
          offenders.push(`${page === 'README.md' ? page : `docs/${page}`}:${line}`);
        }
      }
    }
  }
  expect(handlers).toBeGreaterThan(3); // the check found the pages' handlers at all
  expect(offenders).toEqual([]);
});
