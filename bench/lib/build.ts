/**
 * Builds the package as `npm run build` does (`tsc -p tsconfig.build.json` into `dist/`, then the
 * Lua beside it): benchmarks measure what users run.
 */
import { execFileSync } from 'node:child_process';

export function buildDist(): void {
  const root = new URL('../..', import.meta.url).pathname;
  const tsc = new URL('../../node_modules/typescript/bin/tsc', import.meta.url).pathname;
  execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], {
    cwd: root,
    stdio: 'inherit',
  });
  execFileSync(process.execPath, ['scripts/copy-lua.mjs'], { cwd: root, stdio: 'inherit' });
}
