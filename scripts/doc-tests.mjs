#!/usr/bin/env node
/**
 * Doc-tests: every ```ts block of README.md and docs/*.md is type-checked against the built
 * package, as a user's project sees it, and every ```ts run block is run against local partners,
 * each copied whole into an empty project: what the page shows is all there is.
 *
 * - The project is a temporary directory OUTSIDE the repository (so nothing resolves from the
 *   repository's node_modules by walking up). Its node_modules holds the package, built (tsc,
 *   tsconfig.build.json) into node_modules/hostgate/ with the root package.json beside it, so
 *   `import ... from 'hostgate'`, 'hostgate/express', ... go through the package's own `exports`
 *   and .d.ts files; the package's `dependencies`; undici (README's install: `npm i hostgate
 *   undici`); and the packages the blocks import, with their @types (links into the repository's
 *   node_modules: a block may import only what a devDependency provides).
 * - Each block becomes one module, <page>-<line>.ts, checked with strict settings, `module:
 *   nodenext`, `noUncheckedIndexedAccess` and `exactOptionalPropertyTypes` (tsc --init's defaults).
 *   Errors are reported at the markdown line they come from.
 * - No hidden setup: a block is checked and run exactly as the page shows it. A fragment that
 *   continues another block (only type-checked) says what it assumes in its own lines
 *   (`declare const limiter: HostLimiter;`). An HTML comment `<!-- setup` before a fence, which
 *   once held lines GitHub did not render, is an error naming its line.
 * - Runnable blocks (```ts run) are run with node, one process each, four at a time, and must
 *   exit 0 by themselves within 60 s (a block that leaves a client, a server or a timer open
 *   fails, as it would hang a reader's terminal). Every `https://NAME.example` URL in them becomes a local partner on
 *   127.0.0.1 (a node:http server that answers 200 with JSON after 20 ms and counts its peak
 *   concurrency), and every quoted host `'NAME.example'` that partner's origin. A run block that
 *   names `redis://127.0.0.1:6379` gets a private redis-server on a free port in its place
 *   (without redis-server: not run, with a line saying so; under CI a failure).
 * - HOSTGATE_UNDICI=8: the project's `undici` is undici 8 (the `undici8` devDependency), for the
 *   blocks' types and for every `undici` import when they run (Node >= 22.19).
 * - Relative links and their #anchors must name a file and a heading that exist, and README.md
 *   stays under 15,000 characters.
 *
 * `node scripts/doc-tests.mjs [--no-build] [--verbose] [--keep] [--run-timeout=MS] [--no-package]
 * [file.md ...]`; part of `npm test`. `--no-build` installs the package from an existing dist/
 * instead; `--keep` leaves the project directory for a look.
 */
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { copyLua } from './copy-lua.mjs';
import { startPartner, startRedis } from './doc-tests/locals.mjs';
import { brokenLinks, extract, importedPackages, partnerHosts } from './doc-tests/markdown.mjs';
import { pooled, run } from './doc-tests/run.mjs';
import { projectWithoutExpress } from './doc-tests/without-express.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const undiciMajor = process.env.HOSTGATE_UNDICI ?? '7';
if (undiciMajor !== '7' && undiciMajor !== '8') {
  throw new TypeError(`HOSTGATE_UNDICI must be 7 or 8, got ${JSON.stringify(undiciMajor)}`);
}

const args = process.argv.slice(2);
const build = !args.includes('--no-build');
const verbose = args.includes('--verbose');
// For blocks that import nothing from hostgate (the harness's own test): no package at all.
const withPackage = !args.includes('--no-package');
const keep = args.includes('--keep');
const runTimeoutArg = args.find((a) => a.startsWith('--run-timeout='));
const runTimeoutMs = runTimeoutArg ? Number(runTimeoutArg.slice('--run-timeout='.length)) : 60_000;
if (!Number.isInteger(runTimeoutMs) || runTimeoutMs <= 0) {
  throw new TypeError(`--run-timeout must be a positive number of ms, got ${runTimeoutArg}`);
}
// The empty project: outside the repository, so that nothing resolves from its node_modules.
const work = mkdtempSync(join(tmpdir(), 'hostgate-doctest-'));
const pkgDir = join(work, 'node_modules', 'hostgate');
const only = args.filter((a) => !a.startsWith('--'));
const pages =
  only.length > 0
    ? only
    : [
        'README.md',
        ...readdirSync(join(root, 'docs'))
          .filter((f) => f.endsWith('.md'))
          .sort()
          .map((f) => `docs/${f}`),
      ];

/** Runs `node ...args`; resolves with the exit code, the output and `timedOut`. */
function node(argv, { cwd = root, timeoutMs = 0, env = process.env } = {}) {
  return run(process.execPath, argv, { cwd, env, timeoutMs });
}

const problems = [];
const blocks = pages.flatMap((page) => extract(root, page, problems));
// No "name": a module in the project resolves 'hostgate' from its node_modules, as a user's does.
writeFileSync(join(work, 'package.json'), '{ "private": true, "type": "module" }\n');

// The project's node_modules besides the package: links into the repository's node_modules for
// the package's own dependencies, undici (the README's install), the packages the blocks import
// and their types. Nothing else: the package must not need a devDependency at run time.
const rootPkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const rootModules = join(root, 'node_modules');
const modules = join(work, 'node_modules');
/** Links `name` (the repository's `target`) and, as npm hoists them, its dependencies. */
function link(name, target = name) {
  const to = join(modules, name);
  if (!existsSync(join(rootModules, target)) || existsSync(to)) return;
  mkdirSync(dirname(to), { recursive: true });
  symlinkSync(join(rootModules, target), to, 'dir');
  // A package's dependencies sit beside it in a user's node_modules (hoisted), where the
  // package's types and hostgate's can both resolve them (@types/express's
  // @types/express-serve-static-core, which hostgate/express augments).
  const manifest = JSON.parse(readFileSync(join(rootModules, target, 'package.json'), 'utf8'));
  for (const dep of Object.keys(manifest.dependencies ?? {})) link(dep);
}
const imported = new Set(
  blocks
    .flatMap((block) => importedPackages(block.code.join('\n')))
    .filter((n) => n !== 'hostgate'),
);
link('undici', undiciMajor === '8' ? 'undici8' : 'undici');
imported.delete('undici');
for (const name of Object.keys(rootPkg.dependencies ?? {})) link(name);
for (const name of imported) {
  link(name);
  link(`@types/${name.startsWith('@') ? name.slice(1).replace('/', '__') : name}`);
}
link('@types/node');

if (withPackage && build) {
  const built = await node([
    tsc,
    '-p',
    join(root, 'tsconfig.build.json'),
    '--outDir',
    join(pkgDir, 'dist'),
    '--sourceMap',
    'false',
    '--inlineSources',
    'false',
  ]);
  if (built.code !== 0) {
    process.stdout.write(`doc-tests: building the package failed:\n${built.output}`);
    rmSync(work, { recursive: true, force: true });
    process.exit(1);
  }
  copyLua(join(pkgDir, 'dist'));
} else if (withPackage) {
  cpSync(join(root, 'dist'), join(pkgDir, 'dist'), { recursive: true });
}
if (withPackage) cpSync(join(root, 'package.json'), join(pkgDir, 'package.json'));

/**
 * What the built package's JavaScript imports at run time that a user's install does not bring:
 * a bare specifier that is neither a Node builtin nor in the package's `dependencies` or
 * `peerDependencies` (fastify-plugin, a devDependency, was one: every in-repository test passed,
 * and `import('hostgate/fastify')` failed in users' projects). Type-only imports are gone from
 * the JavaScript, so this reads exactly what Node will resolve.
 */
function undeclaredImports(pkgRoot) {
  const manifest = JSON.parse(readFileSync(join(pkgRoot, 'package.json'), 'utf8'));
  const declared = new Set([
    manifest.name, // a self-reference resolves through the package's own exports
    ...Object.keys(manifest.dependencies ?? {}),
    ...Object.keys(manifest.peerDependencies ?? {}),
  ]);
  const found = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.js')) {
        // Comments hold examples (`import { HostLimiter } from 'hostgate'`), not imports.
        const text = readFileSync(path, 'utf8').replace(/\/\*[\s\S]*?\*\/|^\s*\/\/.*$/gm, '');
        const specifiers = text.matchAll(
          /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*|^\s*import\s+)['"]([^'"./][^'"]*)['"]/gm,
        );
        for (const [, specifier] of specifiers) {
          if (specifier.startsWith('node:') || builtinModules.includes(specifier)) continue;
          const parts = specifier.split('/');
          const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
          if (!declared.has(name)) {
            found.push(
              `the package's ${relative(pkgRoot, path)} imports '${specifier}', which is in neither dependencies nor peerDependencies: users who install hostgate do not get it`,
            );
          }
        }
      }
    }
  };
  walk(join(pkgRoot, 'dist'));
  return found;
}

// Run blocks get their partners before the check: the origins replace the host names in place,
// inside the string literals, so types and line numbers are the same as the page's.
const REDIS_URL = 'redis://127.0.0.1:6379';
const skipped = [];
for (const block of blocks) {
  if (!block.run) continue;
  const text = block.code.join('\n');
  block.partners = await Promise.all(partnerHosts(text).map(startPartner));
  if (text.includes(REDIS_URL)) {
    block.redis = await startRedis();
    if (block.redis === undefined) {
      // As the suite's Redis tests: skipped with a reason locally, a failure under CI.
      block.run = false;
      skipped.push(`${block.page}:${block.line}: not run, redis-server is not installed`);
    }
  }
}
const files = blocks.map((block) => {
  const base = `${block.page.replace(/\.md$/, '').replace(/[/\\]/g, '-')}-${block.line}`;
  let text = block.code.join('\n');
  for (const partner of block.partners ?? []) {
    const host = partner.name.replaceAll('.', '\\.');
    text = text
      .replace(new RegExp(`https?://${host}(:\\d+)?\\b`, 'g'), partner.origin)
      .replace(new RegExp(`'${host}'`, 'g'), `'${partner.origin}'`);
  }
  if (block.redis) text = text.replaceAll(REDIS_URL, block.redis.url);
  block.file = `${base}.ts`;
  writeFileSync(join(work, block.file), `${text}\n`);
  return block.file;
});

const compilerOptions = {
  target: 'ES2022',
  lib: ['ES2023', 'ESNext.Disposable'],
  module: 'nodenext',
  moduleResolution: 'nodenext',
  moduleDetection: 'force',
  strict: true,
  noUncheckedIndexedAccess: true,
  exactOptionalPropertyTypes: true,
  verbatimModuleSyntax: true,
  isolatedModules: true,
  skipLibCheck: true,
  types: ['node'],
  typeRoots: [join(modules, '@types')],
  outDir: 'out',
  rootDir: '.',
  noEmitOnError: false,
};
writeFileSync(
  join(work, 'tsconfig.json'),
  `${JSON.stringify({ compilerOptions, files }, null, 2)}\n`,
);

// hostgate/fastify in a project without Express's types, its .d.ts files checked (skipLibCheck
// false): beside the blocks' check, both are tsc runs of a few seconds. Outside the repository,
// or tsc would find Express's types in its node_modules by walking up.
const fastifyWork = mkdtempSync(join(tmpdir(), 'hostgate-fastify-'));
const [checked, fastifyOnly] = await Promise.all([
  node([tsc, '-p', join(work, 'tsconfig.json'), '--pretty', 'false']),
  withPackage
    ? node([tsc, ...projectWithoutExpress(root, fastifyWork, pkgDir)]).finally(() =>
        rmSync(fastifyWork, { recursive: true, force: true }),
      )
    : { code: 0, output: '' },
]);
const failures = [
  ...problems,
  ...(withPackage ? undeclaredImports(pkgDir) : []),
  ...pages.flatMap((page) => brokenLinks(root, page)),
];
if (fastifyOnly.code !== 0) {
  failures.push(
    `hostgate/fastify does not compile in a project without Express's types (skipLibCheck false):\n${fastifyOnly.output}`,
  );
}
// The README says what and why, installs and links out; the guides live in docs/.
const readmeChars = readFileSync(join(root, 'README.md'), 'utf8').length;
if (readmeChars > 15_000) {
  failures.push(`README.md: ${readmeChars} characters, over 15,000: move text into a docs/ page`);
}
if (checked.code !== 0) {
  const byFile = new Map(blocks.map((b) => [b.file, b]));
  for (const line of checked.output.split('\n')) {
    const m = /^([^(]+\.ts)\((\d+),(\d+)\): (.*)$/.exec(line);
    const block = m && byFile.get(basename(m[1]));
    if (block) {
      const mdLine = block.map[Number(m[2]) - 1] ?? block.line;
      failures.push(`${block.page}:${mdLine}: ${m[4]}`);
    } else if (line.trim() !== '') {
      failures.push(line);
    }
  }
  if (failures.length === 0) failures.push(`tsc exited ${checked.code}`);
}

const runs = blocks.filter((b) => b.run);
// Four at a time: each block's bound (for a hang) counts from its own start, and a block waiting
// for a core behind a dozen others on a loaded machine is not hanging.
const results = await pooled(
  runs.map((block) => async () => {
    const js = join(work, 'out', block.file.replace(/\.ts$/, '.js'));
    const started = performance.now();
    const result = await node([js], { cwd: work, timeoutMs: runTimeoutMs });
    result.ms = Math.round(performance.now() - started);
    return { block, partners: block.partners, result };
  }),
  4,
);
for (const { block, partners, result } of results) {
  const seen = partners.map((p) => `${p.name}: ${p.arrived} requests, peak ${p.peak}`).join('; ');
  if (result.timedOut) {
    failures.push(
      `${block.page}:${block.line}: the run block did not exit by itself within ${runTimeoutMs} ms: close what it opened (a Redis client, a server, a dispatcher, a timer)\n${result.output}`,
    );
  } else if (result.code !== 0) {
    failures.push(
      `${block.page}:${block.line}: the run block exited ${result.code}\n${result.output}`,
    );
  } else if (verbose) {
    process.stdout.write(
      `${block.page}:${block.line}: ran in ${result.ms} ms${seen ? ` (${seen})` : ''}\n${result.output}`,
    );
  }
}

await Promise.all(runs.flatMap((b) => b.partners.map((p) => p.close())));
for (const block of runs) block.redis?.stop();
if (keep) process.stdout.write(`doc-tests: the project is kept in ${work}\n`);
else rmSync(work, { recursive: true, force: true });
if (skipped.length > 0) {
  if (process.env.CI) failures.push(...skipped);
  else process.stdout.write(`${skipped.join('\n')}\n`);
}
const summary = `doc-tests (undici ${undiciMajor}): ${blocks.length} blocks checked, ${runs.length} run`;
if (failures.length > 0) {
  process.stdout.write(`${summary}: FAILED\n${failures.join('\n')}\n`);
  process.exit(1);
}
process.stdout.write(`${summary}: OK\n`);
