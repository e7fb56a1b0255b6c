import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

interface CheckLines {
  LIMIT: number;
  EXCEPTIONS: [string, string][];
  checkLines(
    root: string,
    options?: { limit?: number; exceptions?: [string, string][] },
  ): { files: { path: string; lines: number }[]; problems: string[] };
}

// In process (the script runs its CLI only as the entry point): no child process for the fast lane.
const script = new URL('../scripts/check-lines.mjs', import.meta.url).href;
const { LIMIT, EXCEPTIONS, checkLines } = (await import(script)) as CheckLines;
const roots: string[] = [];

/** A throwaway package tree of `files` (path -> number of lines). */
function tree(files: Record<string, number>): string {
  const root = mkdtempSync(join(tmpdir(), 'hostgate-lines-'));
  roots.push(root);
  for (const [path, lines] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), 'export {};\n'.repeat(lines));
  }
  return root;
}

afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
});

describe('scripts/check-lines.mjs (run by npm test)', () => {
  it('allows 450 lines, and gives each exception a reason with its issue', () => {
    expect(LIMIT).toBe(450);
    for (const [path, why] of EXCEPTIONS) {
      expect(path).toMatch(/^(src|middleware|fastify)\//);
      expect(why).toMatch(/issue \d+/);
    }
  });

  it('passes a tree whose files are all at or under the limit', () => {
    const root = tree({ 'src/gate/a.ts': 450, 'middleware/b.ts': 10, 'fastify/c.ts': 3 });
    const { files, problems } = checkLines(root, { exceptions: [] });
    expect(problems).toEqual([]);
    expect(files).toEqual([
      { path: 'src/gate/a.ts', lines: 450 },
      { path: 'middleware/b.ts', lines: 10 },
      { path: 'fastify/c.ts', lines: 3 },
    ]);
  });

  it('lists each file over the limit with its count, in src/, middleware/, fastify/ and Lua', () => {
    const root = tree({
      'src/partners/host-limiter.ts': 753,
      'src/redis/commands/take-1.lua': 451,
      'middleware/shed.ts': 460,
      'fastify/index.ts': 500,
      'test/big.test.ts': 2000, // tests are not counted
      'src/README.md': 900, // nor docs
    });
    expect(checkLines(root, { exceptions: [] }).problems).toEqual([
      'src/partners/host-limiter.ts: 753 lines (over 450: split it)',
      'src/redis/commands/take-1.lua: 451 lines (over 450: split it)',
      'middleware/shed.ts: 460 lines (over 450: split it)',
      'fastify/index.ts: 500 lines (over 450: split it)',
    ]);
  });

  it('counts a last line without a newline (wc -l would not)', () => {
    const root = tree({});
    mkdirSync(join(root, 'src'));
    writeFileSync(join(root, 'src/a.ts'), `${'x\n'.repeat(450)}y`);
    expect(checkLines(root, { exceptions: [] }).problems).toEqual([
      'src/a.ts: 451 lines (over 450: split it)',
    ]);
  });

  it('lets an excepted file stay over, and fails once it is split or gone', () => {
    const exceptions: [string, string][] = [
      ['src/redis/big.ts', 'being split in issue 34'],
      ['src/redis/split.ts', 'being split in issue 34'],
      ['src/redis/gone.ts', 'being split in issue 34'],
    ];
    const root = tree({ 'src/redis/big.ts': 900, 'src/redis/split.ts': 300 });
    expect(checkLines(root, { exceptions }).problems).toEqual([
      'src/redis/split.ts: 300 lines, no longer over 450 (remove it from EXCEPTIONS)',
      'src/redis/gone.ts: excepted but not found (remove it from EXCEPTIONS)',
    ]);
  });
});
