/**
 * The Lua loader (src/redis/lua.ts) on command files a test writes: includes resolved once each,
 * and every way a command can be broken named with its file.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { leasedScripts } from '../../src/redis/leased-scripts.js';
import { loadCommand } from '../../src/redis/lua.js';
import { scripts } from '../../src/redis/scripts.js';

const root = mkdtempSync(join(tmpdir(), 'hostgate-lua-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;

/** Writes `files` (path -> text) into a fresh directory; returns its path. */
function tree(files: Record<string, string>): string {
  const dir = join(root, String(++dirs));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

describe('the Lua loader', () => {
  it('resolves includes relative to the including file, each once where first included, without their headers', () => {
    const dir = tree({
      'run-2.lua':
        '--[[\n  RUN: a doc header\n]]\n--- @include "includes/a"\n--- @include "includes/b"\nreturn a + b\n',
      'includes/a.lua': '--[[ A ]]\n--- @include "base"\nlocal a = base\n',
      'includes/b.lua': "--- @include 'base.lua'\nlocal b = base * 2\n",
      'includes/base.lua': 'local base = 1\n',
    });
    const command = loadCommand(join(dir, 'run-2.lua'));
    expect(command.name).toBe('run');
    expect(command.numberOfKeys).toBe(2);
    expect(command.source).toBe(
      'local base = 1\nlocal a = base\n\nlocal b = base * 2\nreturn a + b\n',
    );
    expect(command.sha).toMatch(/^[0-9a-f]{40}$/);
  });

  it('substitutes {{NAME}} placeholders, and refuses one without a value or a value that would end its literal', () => {
    const dir = tree({
      'set-1.lua': '--- @include "part"\nreturn \'{{LAYOUT}}\' .. math.max({{FLOOR}}, 1)\n',
      'part.lua': "local x = '{{LAYOUT}}'\n",
    });
    const file = join(dir, 'set-1.lua');
    expect(loadCommand(file, { LAYOUT: 'fifo/1', FLOOR: 250 }).source).toBe(
      "local x = 'fifo/1'\nreturn 'fifo/1' .. math.max(250, 1)\n",
    );
    expect(() => loadCommand(file, { LAYOUT: 'fifo/1' })).toThrow(
      `Lua file ${file}: no value for {{FLOOR}}`,
    );
    expect(() => loadCommand(file, { LAYOUT: "it's", FLOOR: 1 })).toThrow(
      /value of \{\{LAYOUT\}\}/,
    );
    expect(() => loadCommand(file, { LAYOUT: 'x', FLOOR: Number.NaN })).toThrow(
      /value of \{\{FLOOR\}\}/,
    );
  });

  it('a placeholder a value brings back in is left over: an error, never a script sent with it', () => {
    const dir = tree({ 'x-1.lua': "return '{{A}}'\n" });
    expect(() => loadCommand(join(dir, 'x-1.lua'), { A: '{{B}}' })).toThrow(
      /placeholder \{\{B\}\} left unsubstituted/,
    );
  });

  it('a missing include names the file that includes it and the file it looked for', () => {
    const dir = tree({ 'run-1.lua': '--- @include "includes/gone"\nreturn 1\n' });
    expect(() => loadCommand(join(dir, 'run-1.lua'))).toThrow(
      `Lua file ${join(dir, 'run-1.lua')}: include ${join(dir, 'includes/gone.lua')} not found`,
    );
  });

  it('a missing command says so (a package built without its .lua files)', () => {
    const dir = tree({});
    expect(() => loadCommand(join(dir, 'gone-1.lua'))).toThrow(/gone-1\.lua not found/);
  });

  it('an include cycle is an error naming the chain, a file including itself too', () => {
    const dir = tree({
      'run-1.lua': '--- @include "a"\nreturn 1\n',
      'a.lua': '--- @include "b"\n',
      'b.lua': '--- @include "a"\n',
      'self-1.lua': '--- @include "self-1"\n',
    });
    expect(() => loadCommand(join(dir, 'run-1.lua'))).toThrow(
      /include cycle a\.lua -> b\.lua -> a\.lua/,
    );
    expect(() => loadCommand(join(dir, 'self-1.lua'))).toThrow(
      /include cycle self-1\.lua -> self-1\.lua/,
    );
  });

  it('a command file not named <name>-<numberOfKeys>.lua is refused', () => {
    const dir = tree({ 'run.lua': 'return 1\n' });
    expect(() => loadCommand(join(dir, 'run.lua'))).toThrow(/<name>-<numberOfKeys>\.lua/);
  });

  it("the FIFO gate's scripts as loaded: five keys each, no include line or placeholder left, the constants in place", () => {
    for (const script of Object.values(scripts)) {
      expect(script.numberOfKeys).toBe(5);
      expect(script.source).not.toMatch(/@include|\{\{/);
      expect(script.source).toContain("local LAYOUT = RATED and 'fifo/1+rate' or 'fifo/1'");
      expect(script.source).toContain('math.max(250, T)');
    }
  });

  it("the leased gate's script as loaded: four keys, its parts in, no include line or placeholder left, the layouts in place", () => {
    const refresh = leasedScripts.refresh;
    expect(refresh.name).toBe('leasedRefresh');
    expect(refresh.numberOfKeys).toBe(4);
    expect(refresh.source).not.toMatch(/@include|\{\{|--\[\[/);
    expect(refresh.source).toContain("local LAYOUT = RATED and 'leased/1+rate' or 'leased/1'");
    expect(refresh.source).toContain("not (RATED and meta[1] == 'leased/1')");
    for (const part of [
      'local function parse(',
      'local function fair(',
      'local function countedOf(',
    ]) {
      expect(refresh.source.split(part)).toHaveLength(2);
    }
  });
});
