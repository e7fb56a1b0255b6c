/**
 * The markdown side of the doc-tests: the ts blocks of a page with their hidden setup, the
 * partner hosts a run block calls, and the relative links that must resolve.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * The ```ts blocks of one markdown page: { page, line (of the fence), run, setup, code, map }, where
 * map[i] is the markdown line of the module's line i + 1.
 */
export function extract(root, page) {
  const lines = readFileSync(join(root, page), 'utf8').split('\n');
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^(\s*)```(ts|typescript)(?:\s+(.*))?$/.exec(lines[i]);
    if (!fence) continue;
    const indent = fence[1].length;
    const flags = (fence[3] ?? '').trim().split(/\s+/).filter(Boolean);
    for (const flag of flags) {
      if (flag !== 'run') throw new Error(`${page}:${i + 1}: unknown doc-test flag ${flag}`);
    }
    const setup = [];
    const map = [];
    if (i > 0 && lines[i - 1].trim() === '-->') {
      let start = i - 2;
      while (start >= 0 && !/^\s*<!-- setup\s*$/.test(lines[start])) {
        if (lines[start].includes('-->')) break;
        start--;
      }
      if (start < 0 || !/^\s*<!-- setup\s*$/.test(lines[start])) {
        throw new Error(`${page}:${i}: a comment before a ts block must start with "<!-- setup"`);
      }
      for (let j = start + 1; j < i - 1; j++) {
        setup.push(lines[j].slice(Math.min(indent, lines[j].search(/\S|$/))));
        map.push(j + 1);
      }
    }
    const code = [];
    let end = i + 1;
    for (; end < lines.length && !/^\s*```\s*$/.test(lines[end]); end++) {
      code.push(lines[end].slice(Math.min(indent, lines[end].search(/\S|$/))));
      map.push(end + 1);
    }
    if (end === lines.length) throw new Error(`${page}:${i + 1}: unclosed code block`);
    blocks.push({ page, line: i + 1, run: flags.includes('run'), setup, code, map });
    i = end;
  }
  return blocks;
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
