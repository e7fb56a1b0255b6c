/**
 * The loader of the shared gates' Lua: one `.lua` file per Redis script, named
 * `<name>-<numberOfKeys>.lua` (BullMQ's layout, src/commands/), shared parts pulled in by a line
 * `--- @include "includes/name"` (relative to the including file, `.lua` implied). A Lua-aware
 * editor and linter read the files as they are; the text Redis runs is assembled here once, at
 * import, so a missing file fails the import of `hostgate/redis`, not a request.
 *
 * - Each file is read once per process; each include is emitted once per command, where it is
 *   first included (a later `@include` of it adds nothing), so shared parts may state their own
 *   dependencies. An include that reaches back to a file still being assembled is a cycle: an
 *   error naming the chain, as is a missing file (naming it and the file that includes it).
 * - A file's leading `--[[ … ]]` block documents it for readers and is not sent to Redis.
 * - TypeScript constants the scripts share (a layout name, a channel suffix) are written
 *   `{{NAME}}` in the Lua (inside a string literal, or where a number goes: `{{X}}` still parses
 *   as Lua, a table constructor) and substituted from `values`. A placeholder without a value,
 *   or one left in the assembled text, is an error naming it: a script never reaches Redis with
 *   one.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { basename, dirname, extname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A script as Redis runs it. */
export interface Script {
  readonly name: string;
  readonly source: string;
  /** SHA1 of the source: what Redis names it by (EVALSHA), known without a round trip. */
  readonly sha: string;
}

/** A command file loaded: its script and the number of keys it declares in its file name. */
export interface LuaCommand extends Script {
  readonly numberOfKeys: number;
}

/** Values of the `{{NAME}}` placeholders, substituted into the Lua text as written. */
export type LuaValues = Readonly<Record<string, string | number>>;

const INCLUDE = /^---[ \t]*@include[ \t]+(["'])(.+?)\1[ \t;\r]*$/gm;
const PLACEHOLDER = /\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}/g;
const COMMAND_FILE = /^([A-Za-z][A-Za-z0-9]*)-(\d+)\.lua$/;
/** A file's leading `--[[ … ]]` block: its documentation, for readers (Redis is not sent it). */
const HEADER = /^--\[\[[\s\S]*?\]\][ \t]*\r?\n/;

/** Each file's text, read once per process. */
const texts = new Map<string, string>();

/**
 * The command in `file` with its includes resolved and its placeholders substituted.
 *
 * @example
 * const claim = loadCommand(new URL('./commands/claim-5.lua', import.meta.url), { LOST: 'lost' });
 * await client.sendCommand(['EVALSHA', claim.sha, claim.numberOfKeys, ...keys, ...args]);
 */
export function loadCommand(file: URL | string, values: LuaValues = {}): LuaCommand {
  const path = typeof file === 'string' ? resolve(file) : fileURLToPath(file);
  const match = COMMAND_FILE.exec(basename(path));
  if (match === null) {
    throw new Error(
      `Lua command ${path}: expected a file named <name>-<numberOfKeys>.lua (as acquire-5.lua)`,
    );
  }
  for (const [name, value] of Object.entries(values)) checkValue(path, name, value);
  const source = assemble(path, undefined, [], new Set([path]), values);
  const left = source.match(PLACEHOLDER)?.[0];
  if (left !== undefined)
    throw new Error(`Lua command ${path}: placeholder ${left} left unsubstituted`);
  return {
    name: match[1]!,
    numberOfKeys: Number(match[2]),
    source,
    sha: createHash('sha1').update(source).digest('hex'),
  };
}

/** `path`'s text with its includes in place (those not yet in `emitted`) and values substituted. */
function assemble(
  path: string,
  includedBy: string | undefined,
  stack: string[],
  emitted: Set<string>,
  values: LuaValues,
): string {
  stack.push(path);
  const own = read(path, includedBy)
    .replace(HEADER, '')
    .replace(PLACEHOLDER, (placeholder, name: string) => {
      const value = values[name];
      if (value === undefined) throw new Error(`Lua file ${path}: no value for ${placeholder}`);
      return String(value);
    });
  const text = own.replace(INCLUDE, (_line, _quote, reference: string) => {
    const target = resolve(
      dirname(path),
      extname(reference) === '' ? `${reference}.lua` : reference,
    );
    if (stack.includes(target)) {
      const chain = [...stack.slice(stack.indexOf(target)), target].map((p) => basename(p));
      throw new Error(`Lua file ${path}: include cycle ${chain.join(' -> ')}`);
    }
    if (emitted.has(target)) return '';
    emitted.add(target);
    return assemble(target, path, stack, emitted, values).replace(/\n$/, '');
  });
  stack.pop();
  return text;
}

function read(path: string, includedBy: string | undefined): string {
  let text = texts.get(path);
  if (text !== undefined) return text;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT') throw error;
    throw new Error(
      includedBy === undefined
        ? `Lua command ${path} not found (a package built without its .lua files?)`
        : `Lua file ${includedBy}: include ${path} not found`,
    );
  }
  texts.set(path, text);
  return text;
}

/** A value goes into the Lua as written: a string must not end the literal it sits in. */
function checkValue(path: string, name: string, value: string | number): void {
  if (typeof value === 'number' ? Number.isFinite(value) : !/['"\\\n\r]/.test(value)) return;
  throw new Error(
    `Lua command ${path}: value of {{${name}}} must be a finite number or a string without quotes, backslashes or line breaks, got ${JSON.stringify(String(value))}`,
  );
}
