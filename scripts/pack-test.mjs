#!/usr/bin/env node
/**
 * The package as a user installs it: `npm pack`, then for each entry point an EMPTY project in a
 * temporary directory with the tarball and only the peers its guide names (README's install
 * section), installed from the npm registry through the local cache (`--prefer-offline`). Each
 * project runs one smoke module (scripts/pack-test/*.mjs) that imports its subpath and makes a
 * real call through it against a loopback partner on 127.0.0.1 (the Redis ones against a private
 * redis-server on a free port). In-repository tests cannot see what this sees: a subpath that
 * needs a package that is only a devDependency (fastify-plugin was one) imports fine there,
 * because the repository's node_modules has it.
 *
 * The peers are the current majors at the versions the repository's devDependencies pin
 * (reproducible, and in the npm cache after `npm ci`): undici 7 on Node 20, undici 8 (the
 * `undici8` alias's version) where Node >= 22.19; got 16 where Node >= 22 (its `engines`), got
 * 14 (`got14`) on Node 20. CI runs it on Node 20 and on Node 24.
 *
 * `node scripts/pack-test.mjs [--no-build] [--undici=7|8] [--only=WORD] [--keep]`; exits non-zero naming each
 * project that failed to install or whose smoke failed.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { copyLua } from './copy-lua.mjs';
import { startPartner, startRedis } from './doc-tests/locals.mjs';
import { pooled, run as runChild } from './doc-tests/run.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2);
const [nodeMajor, nodeMinor] = process.versions.node.split('.').map(Number);
const undiciArg = args.find((a) => a.startsWith('--undici='))?.slice('--undici='.length);
const undiciMajor =
  undiciArg ?? (nodeMajor > 22 || (nodeMajor === 22 && nodeMinor >= 19) ? '8' : '7');
if (undiciMajor !== '7' && undiciMajor !== '8') {
  throw new TypeError(`--undici must be 7 or 8, got ${JSON.stringify(undiciMajor)}`);
}

const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
/** `name@version` as the devDependency `alias` pins it (an `npm:` alias names its package). */
function pinned(name, alias = name) {
  const spec = pkg.devDependencies[alias];
  if (spec === undefined) throw new Error(`pack-test: no devDependency ${alias} to pin ${name}`);
  return spec.startsWith('npm:') ? spec.slice('npm:'.length) : `${name}@${spec}`;
}
const undici = undiciMajor === '8' ? pinned('undici', 'undici8') : pinned('undici');
const got = nodeMajor >= 22 ? pinned('got') : pinned('got', 'got14');

/** One empty project per guide: its smoke module and the packages the guide says to install. */
const projects = [
  { name: 'hostgate', smoke: 'core.mjs', peers: [undici] },
  { name: 'hostgate/express', smoke: 'express.mjs', peers: [undici, pinned('express')] },
  { name: 'hostgate/fastify', smoke: 'fastify.mjs', peers: [undici, pinned('fastify')] },
  {
    name: 'hostgate/redis (node-redis)',
    smoke: 'redis.mjs',
    argv: ['redis'],
    redis: true,
    peers: [undici, pinned('redis')],
  },
  {
    name: 'hostgate/redis (ioredis)',
    smoke: 'redis.mjs',
    argv: ['ioredis'],
    redis: true,
    peers: [undici, pinned('ioredis')],
  },
  { name: 'hostgate/prometheus', smoke: 'prometheus.mjs', peers: [undici, pinned('prom-client')] },
  {
    name: 'hostgate/otel',
    smoke: 'otel.mjs',
    peers: [undici, pinned('@opentelemetry/api'), pinned('@opentelemetry/sdk-metrics')],
  },
  {
    name: 'LimitedHttpAgent with axios, got, the AWS SDK',
    smoke: 'clients.mjs',
    peers: [undici, pinned('axios'), got, pinned('@aws-sdk/client-s3')],
  },
];

// `--only=WORD`: the projects whose name contains WORD (to check one entry point quickly).
const only = args.find((a) => a.startsWith('--only='))?.slice('--only='.length);
if (only !== undefined) {
  const kept = projects.filter((p) => p.name.includes(only));
  if (kept.length === 0) throw new TypeError(`--only=${only} names no project`);
  projects.splice(0, projects.length, ...kept);
}

/** Runs a command (bounded by `timeoutMs`, for a hang): { code, output, timedOut }. */
function run(command, argv, { cwd = root, env = process.env, timeoutMs = 120_000 } = {}) {
  return runChild(command, argv, { cwd, env, timeoutMs });
}

const started = Date.now();
const work = mkdtempSync(join(tmpdir(), 'hostgate-pack-test-'));
const failures = [];
const cleanups = [];
try {
  if (!args.includes('--no-build')) {
    const built = await run(process.execPath, [
      join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
      '-p',
      join(root, 'tsconfig.build.json'),
    ]);
    if (built.code !== 0) throw new Error(`building the package failed:\n${built.output}`);
    copyLua();
  }
  const packed = await run('npm', ['pack', '--json', '--pack-destination', work]);
  if (packed.code !== 0) throw new Error(`npm pack failed:\n${packed.output}`);
  const tarball = join(
    work,
    JSON.parse(packed.output.slice(packed.output.indexOf('[')))[0].filename,
  );

  // Installs, a few at once: from the local npm cache where it has the packages.
  const installed = await pooled(
    projects.map((project, i) => async () => {
      const dir = join(work, `project-${i}`);
      mkdirSync(dir);
      writeFileSync(join(dir, 'package.json'), '{ "private": true, "type": "module" }\n');
      const result = await run(
        'npm',
        [
          'install',
          '--prefer-offline',
          '--no-audit',
          '--no-fund',
          '--ignore-scripts',
          '--loglevel=error',
          tarball,
          ...project.peers,
        ],
        { cwd: dir, timeoutMs: 180_000 },
      );
      if (result.code !== 0) {
        failures.push(
          `${project.name}: npm install ${project.peers.join(' ')} failed:\n${result.output}`,
        );
        return undefined;
      }
      copyFileSync(join(root, 'scripts', 'pack-test', project.smoke), join(dir, project.smoke));
      return dir;
    }),
    3,
  );

  const partner = await startPartner('partner.example');
  cleanups.push(() => partner.close());
  const lines = await pooled(
    projects.map((project, i) => async () => {
      const dir = installed[i];
      if (dir === undefined) return undefined;
      const env = { ...process.env, PARTNER: partner.origin };
      delete env.NODE_OPTIONS;
      if (project.redis) {
        const redis = await startRedis();
        if (redis === undefined) {
          failures.push(`${project.name}: redis-server is not installed`);
          return undefined;
        }
        cleanups.push(() => redis.stop());
        env.REDIS_URL = redis.url;
      }
      const result = await run(process.execPath, [project.smoke, ...(project.argv ?? [])], {
        cwd: dir,
        env,
        timeoutMs: 30_000,
      });
      if (result.code !== 0) {
        failures.push(
          `${project.name}: the smoke (${project.smoke}) exited ${result.code}:\n${result.output}`,
        );
        return undefined;
      }
      return `  ${project.name} [${project.peers.join(', ')}]: ${result.output.trim()}`;
    }),
    3,
  );
  for (const line of lines) if (line !== undefined) process.stdout.write(`${line}\n`);
} catch (error) {
  failures.push(String(error?.message ?? error));
} finally {
  for (const cleanup of cleanups) await cleanup();
  if (args.includes('--keep')) process.stdout.write(`pack-test: projects kept in ${work}\n`);
  else rmSync(work, { recursive: true, force: true });
}

const summary = `pack-test (Node ${process.versions.node}, ${undici}): ${projects.length} projects, ${Math.round((Date.now() - started) / 1000)} s`;
if (failures.length > 0) {
  process.stdout.write(`${summary}: FAILED\n${failures.join('\n')}\n`);
  process.exit(1);
}
process.stdout.write(`${summary}: OK\n`);
