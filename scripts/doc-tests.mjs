#!/usr/bin/env node
/**
 * Doc-tests: every ```ts block of README.md and docs/*.md is type-checked against the built
 * package, as a user's project sees it, and every ```ts run block is run against local partners.
 *
 * - The package is built (tsc, tsconfig.build.json) into .doctest/node_modules/hostgate/ with the
 *   root package.json beside it, so `import ... from 'hostgate'`, 'hostgate/express', ... go
 *   through the package's own `exports` and its .d.ts files, never through src/.
 * - Each block becomes one module, .doctest/<page>-<line>.ts, checked with strict settings, `module:
 *   nodenext`, `noUncheckedIndexedAccess` and `exactOptionalPropertyTypes` (tsc --init's defaults).
 * - Hidden setup: an HTML comment right before the fence, `<!-- setup` on its first line and `-->`
 *   on its last, holds lines put before the block (imports, `declare const signal: AbortSignal;`).
 *   GitHub does not render it. Errors are reported at the markdown line they come from.
 * - Runnable blocks (```ts run) are run with node, one process each (30 s bound, for a hang). Every
 *   `https://NAME.example` URL in them becomes a local partner on 127.0.0.1 (a node:http server
 *   that answers 200 with JSON after 20 ms and counts its peak concurrency), and every quoted host
 *   `'NAME.example'` that partner's origin; the block must exit 0. A run block that names
 *   `redis://127.0.0.1:6379` gets a private redis-server on a free port in its place (without
 *   redis-server: not run, with a line saying so; under CI a failure).
 * - HOSTGATE_UNDICI=8 checks the blocks against undici 8's types (the `undici8` devDependency) and
 *   runs them with every `undici` import resolved to it (Node >= 22.19).
 * - Relative links and their #anchors must name a file and a heading that exist, and README.md
 *   stays under 15,000 characters.
 *
 * `node scripts/doc-tests.mjs [--no-build] [--verbose] [--work=DIR] [--no-package] [file.md ...]`;
 * part of `npm test`. `--no-build` installs the package from an existing dist/ instead.
 */
import { spawn } from 'node:child_process';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPartner, startRedis } from './doc-tests/locals.mjs';
import { brokenLinks, extract, partnerHosts } from './doc-tests/markdown.mjs';
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
const workArg = args.find((a) => a.startsWith('--work='));
const work = join(root, workArg ? workArg.slice('--work='.length) : '.doctest');
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

/** Runs `node ...args`; resolves with the exit code and the output. */
function node(argv, { cwd = root, timeoutMs = 0, env = process.env } = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, argv, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const append = (chunk) => {
      output += chunk;
    };
    child.stdout.setEncoding('utf8').on('data', append);
    child.stderr.setEncoding('utf8').on('data', append);
    const timer =
      timeoutMs > 0
        ? setTimeout(() => {
            output += `\n(killed after ${timeoutMs} ms)\n`;
            child.kill('SIGKILL');
          }, timeoutMs)
        : undefined;
    child.on('error', (error) => {
      clearTimeout(timer);
      resolve({ code: 1, output: `${output}${error}\n` });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal ? 1 : 0), output });
    });
  });
}

const blocks = pages.flatMap((page) => extract(root, page));
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
// No "name": a module in .doctest/ resolves 'hostgate' from .doctest/node_modules, as a user's does.
writeFileSync(join(work, 'package.json'), '{ "private": true, "type": "module" }\n');

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
    process.exit(1);
  }
} else if (withPackage) {
  cpSync(join(root, 'dist'), join(pkgDir, 'dist'), { recursive: true });
}
if (withPackage) cpSync(join(root, 'package.json'), join(pkgDir, 'package.json'));

// Run blocks get their partners before the check: the origins replace the host names in place,
// inside the string literals, so types and line numbers are the same as the page's.
const REDIS_URL = 'redis://127.0.0.1:6379';
const skipped = [];
for (const block of blocks) {
  if (!block.run) continue;
  const text = [...block.setup, ...block.code].join('\n');
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
  let text = [...block.setup, ...block.code].join('\n');
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
  typeRoots: [join(root, 'node_modules', '@types')],
  outDir: 'out',
  rootDir: '.',
  noEmitOnError: false,
  ...(undiciMajor === '8'
    ? { paths: { undici: [relative(work, join(root, 'node_modules', 'undici8', 'index.d.ts'))] } }
    : {}),
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
const failures = pages.flatMap((page) => brokenLinks(root, page));
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
const hookArgs =
  undiciMajor === '8' ? ['--import', join(root, 'scripts', 'doc-tests', 'undici8.mjs')] : [];
const results = await Promise.all(
  runs.map(async (block) => {
    const js = join(work, 'out', block.file.replace(/\.ts$/, '.js'));
    const result = await node([...hookArgs, js], { cwd: work, timeoutMs: 30_000 });
    return { block, partners: block.partners, result };
  }),
);
for (const { block, partners, result } of results) {
  const seen = partners.map((p) => `${p.name}: ${p.arrived} requests, peak ${p.peak}`).join('; ');
  if (result.code !== 0) {
    failures.push(
      `${block.page}:${block.line}: the run block exited ${result.code}\n${result.output}`,
    );
  } else if (verbose) {
    process.stdout.write(
      `${block.page}:${block.line}: ran${seen ? ` (${seen})` : ''}\n${result.output}`,
    );
  }
}

await Promise.all(runs.flatMap((b) => b.partners.map((p) => p.close())));
for (const block of runs) block.redis?.stop();
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
