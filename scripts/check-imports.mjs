#!/usr/bin/env node
/**
 * The import rules of src/, middleware/ and fastify/, checked by `npm test` (scripts/test.mjs):
 *
 * 1. No import circles: no file reaches itself through relative imports, `import type` and
 *    `export … from` included (a type-only circle still ties the files' meaning together).
 * 2. Arrows only point down the layers below. A file may import its own folder and the layers
 *    beneath it; never a layer above. A new folder must be given its place here.
 *
 * Usage: `node scripts/check-imports.mjs [root]` (default: the package). Exits 1 on a violation,
 * printing each circle and each upward import.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Bottom to top: each layer may import only the ones before it (and itself). */
const LAYERS = [
  'src/common', // errors, option checking, histograms, Retry-After parsing
  'src/gate', // the counting gate and its collaborators
  'src/adaptive', // adaptive limits
  'src/observe', // collectors, Prometheus, OTel, leak detector
  'src/redis', // shared gates
  'src/partners', // HostLimiter, origins
  'src/http', // undici interceptor, LimitedAgent, limitFetch, teardown
  'src/node-http', // LimitedHttpAgent for node:http clients (beside src/http: neither imports the other)
  'src/retry', // retries with a fresh permit per attempt
  'src/index.ts', // the package's entry: re-exports every layer
  'middleware', // Express (hostgate/express)
  'fastify', // Fastify (hostgate/fastify): reuses middleware's Express-free parts
];

/**
 * Upward imports allowed anyway, each with its reason: `['from/file.ts', 'to/file.ts', 'why']`.
 * None today; add one only with a reason a reviewer accepts.
 */
const EXCEPTIONS = [];

const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));

const files = [];
const walk = (dir) => {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (/\.tsx?$/.test(name) && !name.endsWith('.d.ts')) files.push(path);
  }
};
for (const dir of ['src', 'middleware', 'fastify'])
  if (existsSync(join(root, dir))) walk(join(root, dir));

const rel = (file) => relative(root, file).split(sep).join('/');
const layerOf = (file) => {
  const path = rel(file);
  return LAYERS.findIndex((layer) => path === layer || path.startsWith(`${layer}/`));
};

// Block comments and whole-line `//` comments hold examples, not imports.
const COMMENTS = /\/\*[\s\S]*?\*\/|^\s*\/\/.*$/gm;
const IMPORT =
  /(?:^|[;\s])(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\s+from\s+)?['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;

const known = new Set(files);
/** file -> the files of the tree it imports */
const edges = new Map();
for (const file of files) {
  const out = new Set();
  const source = readFileSync(file, 'utf8').replace(COMMENTS, '');
  for (const match of source.matchAll(IMPORT)) {
    const base = resolve(dirname(file), match[1] ?? match[2]);
    const candidates = [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts'), base];
    const target = candidates.find((c) => known.has(c));
    if (target !== undefined) out.add(target);
  }
  edges.set(file, out);
}

const problems = [];

for (const file of files) {
  if (layerOf(file) === -1) problems.push(`${rel(file)}: in no layer (add its folder to LAYERS)`);
}
for (const [file, targets] of edges) {
  for (const target of targets) {
    const from = layerOf(file);
    const to = layerOf(target);
    if (from === -1 || to === -1 || to <= from) continue;
    const allowed = EXCEPTIONS.some(([a, b]) => a === rel(file) && b === rel(target));
    if (!allowed) {
      problems.push(`${rel(file)} imports ${rel(target)}: ${LAYERS[to]} is above ${LAYERS[from]}`);
    }
  }
}

// Tarjan's strongly connected components: each component of more than one file is a circle.
let next = 0;
const index = new Map();
const low = new Map();
const stack = [];
const onStack = new Set();
const visit = (v) => {
  index.set(v, next);
  low.set(v, next);
  next++;
  stack.push(v);
  onStack.add(v);
  for (const w of edges.get(v)) {
    if (!index.has(w)) {
      visit(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
  }
  if (low.get(v) !== index.get(v)) return;
  const component = [];
  let w;
  do {
    w = stack.pop();
    onStack.delete(w);
    component.push(w);
  } while (w !== v);
  if (component.length > 1 || edges.get(v).has(v)) {
    problems.push(`import circle: ${component.map(rel).sort().join(' <-> ')}`);
  }
};
for (const file of files) if (!index.has(file)) visit(file);

if (problems.length > 0) {
  process.stderr.write(`imports (scripts/check-imports.mjs):\n  ${problems.join('\n  ')}\n`);
  process.exit(1);
}
process.stdout.write(`imports: no circle, no upward import (${files.length} files)\n`);
