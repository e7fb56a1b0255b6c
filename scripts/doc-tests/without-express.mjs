/**
 * A Fastify user's project has no Express types: `hostgate/fastify` must compile there with
 * `skipLibCheck: false` (the setting that checks the package's own .d.ts files, where an import
 * of `express-serve-static-core` would fail). The doc-tests build the package; this checks a small
 * Fastify app against it in a project whose node_modules holds every package of ours but Express
 * and its types (symlinks into the root's node_modules; the package itself a copy).
 */
import { cpSync, mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const EXPRESS = /^(express|express-serve-static-core|@types\/express.*)$/;

const APP = `import Fastify from 'fastify';
import { type HostgateFastifyOptions, hostgate } from 'hostgate/fastify';

const options: HostgateFastifyOptions = {
  limiter: { partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 5 }] },
  deadline: { default: 2000, max: 5000 },
  priority: (req) => (req.headers['x-batch'] ? 'batch' : undefined),
};
const app = Fastify();
await app.register(hostgate, options);
app.get('/', async (req) => (await req.outbound.fetch('https://api.billing.example/')).status);
`;

/**
 * Writes the project into `dir` (the built package is copied from `pkgDir`) and returns the
 * arguments for tsc; the caller runs it and reports its output.
 */
export function projectWithoutExpress(root, dir, pkgDir) {
  rmSync(dir, { recursive: true, force: true });
  const modules = join(dir, 'node_modules');
  mkdirSync(join(modules, '@types'), { recursive: true });
  const link = (name) => symlinkSync(join(root, 'node_modules', name), join(modules, name));
  for (const name of readdirSync(join(root, 'node_modules'))) {
    if (name === '@types' || name === '.bin' || EXPRESS.test(name)) continue;
    if (name.startsWith('@')) {
      mkdirSync(join(modules, name), { recursive: true });
      for (const sub of readdirSync(join(root, 'node_modules', name))) link(`${name}/${sub}`);
    } else link(name);
  }
  for (const name of readdirSync(join(root, 'node_modules', '@types'))) {
    if (!EXPRESS.test(`@types/${name}`)) link(`@types/${name}`);
  }
  // A copy, not a link: tsc resolves a link to its real path, from which the root's
  // node_modules (and Express's types in it) would be found.
  cpSync(pkgDir, join(modules, 'hostgate'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{ "private": true, "type": "module" }\n');
  writeFileSync(join(dir, 'app.ts'), APP);
  const compilerOptions = {
    target: 'ES2022',
    module: 'nodenext',
    moduleResolution: 'nodenext',
    strict: true,
    skipLibCheck: false,
    types: ['node'],
    noEmit: true,
  };
  writeFileSync(
    join(dir, 'tsconfig.json'),
    `${JSON.stringify({ compilerOptions, files: ['app.ts'] }, null, 2)}\n`,
  );
  return ['-p', join(dir, 'tsconfig.json'), '--pretty', 'false'];
}
