/**
 * The markdown side of the doc-tests: the ts blocks of a page, the packages they import, the
 * partner hosts a run block calls, and the relative links that must resolve.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * The ```ts blocks of one markdown page: { page, line (of the fence), run, code, map }, where
 * map[i] is the markdown line of the module's line i + 1. A block is exactly what the page shows:
 * an HTML comment `<!-- setup` (hidden lines GitHub does not render, once put before a block) is
 * reported in `problems` at its line.
 */
export function extract(root, page, problems = []) {
  const lines = readFileSync(join(root, page), 'utf8').split('\n');
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    if (/^\s*<!-- setup\b/.test(lines[i])) {
      problems.push(
        `${page}:${i + 1}: hidden setup: a block must be complete as shown (write what a fragment assumes in it: \`declare const limiter: HostLimiter;\`)`,
      );
    }
    const fence = /^(\s*)```(ts|typescript)(?:\s+(.*))?$/.exec(lines[i]);
    if (!fence) continue;
    const indent = fence[1].length;
    const flags = (fence[3] ?? '').trim().split(/\s+/).filter(Boolean);
    for (const flag of flags) {
      if (flag !== 'run') throw new Error(`${page}:${i + 1}: unknown doc-test flag ${flag}`);
    }
    const code = [];
    const map = [];
    let end = i + 1;
    for (; end < lines.length && !/^\s*```\s*$/.test(lines[end]); end++) {
      code.push(lines[end].slice(Math.min(indent, lines[end].search(/\S|$/))));
      map.push(end + 1);
    }
    if (end === lines.length) throw new Error(`${page}:${i + 1}: unclosed code block`);
    blocks.push({ page, line: i + 1, run: flags.includes('run'), code, map });
    i = end;
  }
  return blocks;
}

/** The packages a block imports (`from 'x'`, `import('x')`): `express`, `@aws-sdk/client-s3`. */
export function importedPackages(text) {
  const names = new Set();
  for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)'([^'.][^']*)'/gm)) {
    const specifier = m[1];
    if (specifier.startsWith('node:')) continue;
    const parts = specifier.split('/');
    names.add(specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]);
  }
  return [...names];
}

/** `https://api.billing.example/x` and `'api.billing.example'`: the partners a run block calls. */
export function partnerHosts(text) {
  const hosts = new Set();
  for (const m of text.matchAll(/https?:\/\/([a-z0-9.-]+\.example)\b/g)) hosts.add(m[1]);
  for (const m of text.matchAll(/'([a-z0-9][a-z0-9.-]*\.example)'/g)) hosts.add(m[1]);
  return [...hosts];
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export function anchorsOf(file) {
  const anchors = new Set();
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const heading = /^#+\s+(.*)$/.exec(line);
    if (heading) {
      anchors.add(
        heading[1]
          .trim()
          .toLowerCase()
          .replace(/[^\p{L}\p{N}_\- ]/gu, '')
          .replaceAll(' ', '-'),
      );
    }
  }
  return anchors;
}

/** Relative links and their #anchors must name a file and a heading that exist. */
export function brokenLinks(root, page) {
  const broken = [];
  const lines = readFileSync(join(root, page), 'utf8').split('\n');
  lines.forEach((line, i) => {
    for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) {
      const link = m[1];
      if (/^[a-z]+:/.test(link)) continue;
      const [path, anchor] = link.split('#');
      const target = path ? join(root, dirname(page), path) : join(root, page);
      if (!existsSync(target)) broken.push(`${page}:${i + 1}: no file ${link}`);
      else if (anchor && target.endsWith('.md') && !anchorsOf(target).has(anchor)) {
        broken.push(`${page}:${i + 1}: no heading for ${link}`);
      }
    }
  });
  return broken;
}
