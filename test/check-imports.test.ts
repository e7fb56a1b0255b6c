import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../scripts/check-imports.mjs', import.meta.url));
const roots: string[] = [];

/** A throwaway package tree of `files` (path -> source). */
function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'hostgate-imports-'));
  roots.push(root);
  for (const [path, source] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), source);
  }
  return root;
}

function check(root: string): { code: number | null; out: string } {
  const result = spawnSync(process.execPath, [script, root], { encoding: 'utf8' });
  return { code: result.status, out: result.stdout + result.stderr };
}

afterEach(() => {
  for (const root of roots.splice(0)) rmSync(root, { recursive: true, force: true });
});

describe('scripts/check-imports.mjs (run by npm test)', () => {
  it('passes a tree whose imports only point down the layers', () => {
    const root = tree({
      'src/common/errors.ts': 'export class E extends Error {}\n',
      'src/gate/semaphore.ts': "import { E } from '../common/errors.js';\nexport { E };\n",
      'middleware/index.ts': "export * from '../src/gate/semaphore.js';\n",
    });
    expect(check(root)).toMatchObject({ code: 0 });
  });

  it('fails on a circle of type-only imports', () => {
    const root = tree({
      'src/gate/a.ts': "import type { B } from './b.js';\nexport interface A { b: B }\n",
      'src/gate/b.ts': "import type { A } from './a.js';\nexport interface B { a: A }\n",
    });
    const { code, out } = check(root);
    expect(code).toBe(1);
    expect(out).toContain('import circle: src/gate/a.ts <-> src/gate/b.ts');
  });

  it('fails on an upward import, and on a folder in no layer', () => {
    const root = tree({
      'src/gate/permit.ts': "import type { L } from '../observe/leaks.js';\nexport type P = L;\n",
      'src/observe/leaks.ts': 'export type L = string;\n',
      'src/extras/thing.ts': 'export {};\n',
    });
    const { code, out } = check(root);
    expect(code).toBe(1);
    expect(out).toContain('src/gate/permit.ts imports src/observe/leaks.ts');
    expect(out).toContain('src/extras/thing.ts: in no layer');
  });

  it('ignores imports shown in comments', () => {
    const root = tree({
      'src/common/a.ts':
        "/**\n * @example\n * import { x } from '../gate/b.js';\n */\nexport {};\n",
      'src/gate/b.ts': "import '../common/a.js';\n",
    });
    expect(check(root)).toMatchObject({ code: 0 });
  });
});
