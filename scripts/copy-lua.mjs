#!/usr/bin/env node
/**
 * Copies the shared gates' Lua (every `*.lua` under src/) beside the compiled JavaScript, where
 * src/redis/lua.ts finds it from dist/: `src/redis/commands/acquire-5.lua` to
 * `<outDir>/src/redis/commands/acquire-5.lua`. tsc copies no other files; `npm run build` runs
 * this after it, as do the scripts that build the package with tsc themselves (pack-test,
 * doc-tests, the benchmarks).
 *
 * Usage: `node scripts/copy-lua.mjs [outDir]` (default: dist). Exits 1 when src/ holds no Lua.
 */
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Copies src/**\/*.lua into `outDir`/src/; returns how many files it copied. */
export function copyLua(outDir = join(root, 'dist')) {
  const src = join(root, 'src');
  let copied = 0;
  for (const entry of readdirSync(src, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.lua')) continue;
    const from = join(entry.parentPath, entry.name);
    const to = join(resolve(outDir), 'src', relative(src, from));
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(from, to);
    copied++;
  }
  if (copied === 0) throw new Error(`copy-lua: no .lua file under ${src}`);
  return copied;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  copyLua(process.argv[2]);
}
