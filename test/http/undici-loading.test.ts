import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { Agent, Dispatcher } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadUndici } from '../../src/http/undici.js';
import { HostLimiter, LimitedAgent } from '../../src/index.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const undici8 = JSON.parse(
  await readFile(join(root, 'node_modules/undici8/package.json'), 'utf8'),
) as { version: string };
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
const nodeRunsUndici8 = major > 22 || (major === 22 && minor >= 19);

describe('undici is loaded where it is used, not at import', () => {
  it('hostgate loads the same undici the tests import, and LimitedAgent is one of its Dispatchers', async () => {
    expect(loadUndici().Agent).toBe(Agent);
    const agent = new LimitedAgent(new Agent(), new HostLimiter({ partners: [] }));
    expect(agent).toBeInstanceOf(Dispatcher);
    expect(agent).toBeInstanceOf(LimitedAgent);
    expect(typeof agent.compose).toBe('function');
    await agent.close();
  });

  /*
   * Issue 23: on Node 20, `npm i hostgate undici` installs undici 8, which throws at load there;
   * hostgate imported undici at its top, so even a program using only Semaphore crashed. Here a
   * project as npm lays it out: hostgate's compiled files and an `undici` that is undici 8.
   */
  describe('a project whose undici is undici 8', () => {
    let project: string;
    beforeAll(async () => {
      project = await mkdtemp(join(tmpdir(), 'hostgate-undici8-'));
      const pkg = join(project, 'node_modules/hostgate');
      for (const dir of ['src', 'middleware'])
        await transpileTree(join(root, dir), join(pkg, 'dist', dir));
      await writeFile(join(pkg, 'package.json'), await readFile(join(root, 'package.json')));
      await symlink(
        join(root, 'node_modules/undici8'),
        join(project, 'node_modules/undici'),
        'dir',
      );
      await symlink(
        join(root, 'node_modules/p-retry'),
        join(project, 'node_modules/p-retry'),
        'dir',
      );
      await writeFile(join(project, 'main.mjs'), CHILD);
    }, 20_000);
    afterAll(async () => {
      if (project !== undefined) await rm(project, { recursive: true, force: true });
    });

    it(`imports hostgate's core without loading undici, and LimitedAgent and outbound() name the fix (Node ${process.versions.node})`, async () => {
      const report = await runChild(project);
      // The core works, and nothing of undici was loaded for it.
      expect(report.ran).toBe(true);
      expect(report.undiciLoadedByCore).toEqual([]);
      if (nodeRunsUndici8) {
        expect(report).toMatchObject({ agent: 'ok', outbound: 'ok' });
      } else {
        const fix = new RegExp(
          `^hostgate: the installed undici ${undici8.version.replaceAll('.', '\\.')} needs Node >= 22\\.19\\.0, and this is Node ${process.versions.node.replaceAll('.', '\\.')}\\. Install undici 7, which runs on Node 20: npm i undici@7`,
        );
        expect(report.agent).toMatch(fix);
        expect(report.outbound).toMatch(fix);
        expect(report.codes).toEqual([
          'HOSTGATE_UNDICI_UNSUPPORTED',
          'HOSTGATE_UNDICI_UNSUPPORTED',
        ]);
      }
    }, 20_000);
  });
});

/** The user's program: the core first, then the two entry points that need undici. */
const CHILD = `
import { createRequire } from 'node:module';
import { HostLimiter, LimitedAgent, limitFetch, limitHosts, Semaphore } from 'hostgate';
import { outbound } from 'hostgate/express';
const require = createRequire(import.meta.url);
const report = { codes: [] };
const gate = new Semaphore({ limit: 1 });
await gate.run(async () => {});
const limiter = new HostLimiter({ partners: [{ name: 'p', hosts: ['p.example'], limit: 2 }] });
limitHosts(limiter);
limitFetch(async () => new Response('x'), limiter);
report.ran = true;
report.undiciLoadedByCore = Object.keys(require.cache).filter((p) => p.includes('undici'));
const fake = { dispatch: () => true, close: async () => {}, destroy: async () => {} };
for (const [name, make] of [['agent', () => new LimitedAgent(fake, limiter)], ['outbound', () => outbound({ limiter })]]) {
  try { make(); report[name] = 'ok'; } catch (error) { report[name] = error.message; report.codes.push(error.code); }
}
console.log(JSON.stringify(report));
`;

async function transpileTree(from: string, to: string): Promise<void> {
  for (const entry of await readdir(from, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue;
    const file = join(entry.parentPath, entry.name);
    const out = join(to, relative(from, file)).replace(/\.ts$/, '.js');
    const { outputText } = ts.transpileModule(await readFile(file, 'utf8'), {
      compilerOptions: {
        module: ts.ModuleKind.ESNext,
        target: ts.ScriptTarget.ES2022,
        verbatimModuleSyntax: true,
      },
      fileName: file,
    });
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, outputText);
  }
}

function runChild(cwd: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['main.mjs'], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      out += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      err += c;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`child exited ${code}: ${err}`));
      else resolve(JSON.parse(out) as Record<string, unknown>);
    });
  });
}
