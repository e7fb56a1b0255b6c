/** Builds the package (`tsc -p tsconfig.build.json` into `dist/`): benchmarks measure what users run. */
import { execFileSync } from 'node:child_process';

export function buildDist(): void {
  const root = new URL('../..', import.meta.url).pathname;
  const tsc = new URL('../../node_modules/typescript/bin/tsc', import.meta.url).pathname;
  execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], {
    cwd: root,
    stdio: 'inherit',
  });
}
