import { createRequire } from 'node:module';
import type * as Undici from 'undici';

/*
 * undici, loaded on first use rather than at import: `import { Semaphore } from 'hostgate'`
 * must work wherever Node does, and undici 8 (what `npm i undici` installs, also on Node 20)
 * throws at load on a Node older than it supports. Synchronous (`require`), because it is
 * reached from constructors and dispatch paths, and the package has no top-level await (it must
 * stay `require()`-able on Node 20). The peer dependency resolves from here as an `import` would.
 */

const require = createRequire(import.meta.url);
let loaded: typeof Undici | undefined;
let refused: Error | undefined;

/** The `undici` package, or one clear error when the installed major cannot run on this Node. */
export function loadUndici(): typeof Undici {
  if (loaded !== undefined) return loaded;
  if (refused !== undefined) throw refused;
  const pkg = require('undici/package.json') as { version?: string; engines?: { node?: string } };
  const needs = minimumNode(pkg.engines?.node);
  if (needs !== undefined && compareVersions(process.versions.node, needs) < 0) {
    refused = new Error(
      `hostgate: the installed undici ${pkg.version} needs Node >= ${needs}, and this is Node ${process.versions.node}. Install undici 7, which runs on Node 20: npm i undici@7 (or run Node >= ${needs}).`,
    );
    (refused as Error & { code: string }).code = 'HOSTGATE_UNDICI_UNSUPPORTED';
    throw refused;
  }
  loaded = require('undici') as typeof Undici;
  return loaded;
}

/** `">=22.19.0"` → `"22.19.0"`; another shape of range is not checked (undefined). */
function minimumNode(range: string | undefined): string | undefined {
  const match = range === undefined ? null : /^\s*>=\s*v?(\d+(?:\.\d+){0,2})\s*$/.exec(range);
  return match?.[1];
}

function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
