/**
 * The campaign's one private `redis-server` and the faults done to it, plus the two scripts
 * that read and move a gate's state from outside the library: the clock-step emulation and the
 * invariant check.
 *
 * Not bench/lib/redis-server.ts: that one keeps no data across a restart (each start gets a
 * fresh directory, deleted on exit) and starts again without its extra arguments. Here the
 * directory lives as long as the campaign, so "restart with its data" is SAVE + SIGKILL + a
 * start that loads the dump, and `enable-debug-command` (for DEBUG SLEEP) survives restarts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../bench/lib/redis-server.js';
import { connectResp, type RespValue } from '../../bench/lib/resp.js';

export class ChaosRedis {
  readonly port: number;
  readonly dir: string;
  #child: ChildProcess | undefined;
  #stopped = false;

  private constructor(port: number, dir: string) {
    this.port = port;
    this.dir = dir;
  }

  static async start(): Promise<ChaosRedis> {
    const redis = new ChaosRedis(await freePort(), mkdtempSync(join(tmpdir(), 'hostgate-chaos-')));
    await redis.#spawn();
    return redis;
  }

  get running(): boolean {
    const c = this.#child;
    return c !== undefined && c.exitCode === null && c.signalCode === null;
  }

  async #spawn(): Promise<void> {
    const args = [
      '--port',
      String(this.port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      this.dir,
      '--dbfilename',
      'dump.rdb',
      '--enable-debug-command',
      'local',
    ];
    const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#child = child;
    this.#stopped = false;
    let log = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis-server not ready\n${log}`)), 10_000);
      const onData = (chunk: string) => {
        log += chunk;
        if (log.includes('Ready to accept connections')) {
          clearTimeout(timer);
          resolve();
        }
      };
      child.stdout?.setEncoding('utf8').on('data', onData);
      child.stderr?.setEncoding('utf8').on('data', onData);
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`redis-server exited (${signal ?? code}) before ready\n${log}`));
      });
    });
    child.stdout?.resume();
    child.stderr?.resume();
  }

  /** One command on a fresh connection, given up after `timeoutMs` (a stopped Redis never answers). */
  async command(timeoutMs: number, ...args: (string | number)[]): Promise<RespValue> {
    const conn = await connectResp(this.port, timeoutMs);
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      return await Promise.race([
        conn.command(...args),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`redis: no answer to ${args[0]}`)), timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
      conn.close();
    }
  }

  pause(): void {
    this.#child?.kill('SIGSTOP');
    this.#stopped = true;
  }

  resume(): void {
    this.#child?.kill('SIGCONT');
    this.#stopped = false;
  }

  async kill(): Promise<void> {
    const child = this.#child;
    if (child === undefined || !this.running) return;
    const exited = once(child, 'exit');
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await exited;
  }

  /** Starts again on the same port: from the dump in its directory if `withData`, else empty. */
  async start(withData: boolean): Promise<void> {
    await this.kill();
    if (!withData) rmSync(join(this.dir, 'dump.rdb'), { force: true });
    await this.#spawn();
  }

  /** SAVE now (the dump `start(true)` loads). */
  async save(): Promise<void> {
    await this.command(5000, 'SAVE');
  }

  /** Back to health between schedules: running, not stopped, no pause, no memory limit. */
  async heal(): Promise<void> {
    if (this.#stopped) this.resume();
    if (!this.running) await this.start(false);
    for (let i = 0; ; i++) {
      try {
        await this.command(3000, 'CLIENT', 'UNPAUSE');
        await this.command(3000, 'CONFIG', 'SET', 'maxmemory', '0');
        return;
      } catch (error) {
        if (i >= 3) {
          await this.start(false);
          return;
        }
        await new Promise((r) => setTimeout(r, 500)); // a DEBUG SLEEP still running
        void error;
      }
    }
  }

  async close(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The keys of gate `name` under the campaign's prefix (SCAN: whatever keys the library keeps). */
export async function gateKeys(redis: ChaosRedis, name: string): Promise<string[]> {
  const pattern = `chaos:{${name}}:*`;
  const keys: string[] = [];
  let cursor = '0';
  do {
    const reply = (await redis.command(2000, 'SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)) as [
      string,
      string[],
    ];
    cursor = reply[0];
    keys.push(...reply[1]);
  } while (cursor !== '0');
  return keys.sort();
}

/**
 * The clock-step emulation (docs/shared-gates.md, issue 32 item 2; /work/coord/SHARED-FIXES.md):
 * Redis's clock stepping forward by S ms is emulated by ONE script that moves every stored
 * timestamp of the gate back by S ms (a negative shift: a step back). Which fields: data-driven,
 * not a list, so a field a fix adds (a `lastRun` in the meta hash, say) moves too: every number
 * that is a Redis-time ms timestamp, i.e. within 40 days of Redis `TIME` now, wherever it is
 * stored: a sorted set's scores (FIFO: lease/claim expiries in `h`, liveness ends in `p`; not
 * `q`'s arrival sequence numbers), a hash's values and every number inside a value (FIFO meta:
 * `r` recovery end, `t` the GCRA TAT, `n`'s `<head>@<slot time>`; leased meta: `r`, `x`, `t`;
 * leased `l` entries: `<expiry> … <counted until> …`), and a string's value. Counters, caps,
 * rates, blocks and sequence numbers are far from `TIME` and stay. Key TTLs are not moved (the
 * gate's TTLs are 30 days; nothing of a gate's meaning lives in them).
 */
const CLOCK_STEP = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local shift = tonumber(ARGV[1])
local SPAN = 40 * 86400000
local moved = 0
local function stamp(v) return v ~= nil and v > 1e12 and math.abs(v - now) < SPAN end
local function fmt(v, orig)
  if string.find(orig, '[.eE]') then return string.format('%.17g', v) end
  return string.format('%d', v)
end
local function rewrite(s)
  return (string.gsub(s, '%d+%.?%d*', function(tok)
    local v = tonumber(tok)
    if stamp(v) then
      moved = moved + 1
      return fmt(v - shift, tok)
    end
    return nil
  end))
end
for _, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'zset' then
    local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    local args = {}
    for i = 1, #all, 2 do
      local v = tonumber(all[i + 1])
      if stamp(v) then
        args[#args + 1] = string.format('%.17g', v - shift)
        args[#args + 1] = all[i]
        moved = moved + 1
      end
    end
    for i = 1, #args, 1000 do
      redis.call('ZADD', key, unpack(args, i, math.min(#args, i + 999)))
    end
  elseif kind == 'hash' then
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do
      local v = rewrite(all[i + 1])
      if v ~= all[i + 1] then redis.call('HSET', key, all[i], v) end
    end
  elseif kind == 'string' then
    local v0 = redis.call('GET', key)
    local v = rewrite(v0)
    if v ~= v0 then redis.call('SET', key, v, 'KEEPTTL') end
  end
end
return moved
`;

/** Redis's clock steps by `stepMs` (negative: back) for gate `name`; returns the fields moved. */
export async function clockStep(redis: ChaosRedis, name: string, stepMs: number): Promise<number> {
  const keys = await gateKeys(redis, name);
  if (keys.length === 0) return 0;
  return Number(await redis.command(2000, 'EVAL', CLOCK_STEP, keys.length, ...keys, stepMs));
}

/**
 * The gate's state as Redis holds it, in one read-only script (EVAL_RO: it runs under OOM too):
 * Redis time, the meta hash, the leased block hash and the FIFO lease set.
 */
const READ_STATE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]),
  redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')}
`;

const HELD_BY = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local units, prefix = 0, ARGV[1] .. ':'
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')) do
  if string.sub(id, 1, #prefix) == prefix then
    units = units + tonumber(string.match(id, '/(%d+)$') or 1)
  end
end
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if entry then
  local e, b, h = string.match(entry, '^(%d+) (%d+) (%d+)')
  if tonumber(e) > now then units = units + math.max(tonumber(b), tonumber(h)) end
end
return units
`;

/**
 * The units Redis counts for one process of a gate now (FIFO: its live leases by weight; leased:
 * max(block, held) of its live entry): what a SIGKILL takes out of the cap until they lapse.
 * Undefined when Redis does not answer within `timeoutMs`.
 */
export async function heldBy(
  redis: ChaosRedis,
  name: string,
  processId: string,
  timeoutMs: number,
): Promise<number | undefined> {
  const base = `chaos:{${name}}:`;
  try {
    const units = await redis.command(
      timeoutMs,
      'EVAL_RO',
      HELD_BY,
      2,
      `${base}l`,
      `${base}h`,
      processId,
    );
    return Number(units);
  } catch {
    return undefined;
  }
}

export interface GateState {
  now: number;
  meta: Record<string, string>;
  /** Leased: live entries (expiry > now): [block, held] each, and the stored `_s`. */
  blocks: [number, number][];
  storedSum: number | undefined;
  /** FIFO: live units in the lease set (score > now). */
  liveUnits: number;
}

function pairs(list: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  const items = (list ?? []) as string[];
  for (let i = 0; i + 1 < items.length; i += 2) out[items[i]!] = items[i + 1]!;
  return out;
}

export async function readState(
  redis: ChaosRedis,
  name: string,
  timeoutMs: number,
): Promise<GateState> {
  const base = `chaos:{${name}}:`;
  const reply = (await redis.command(
    timeoutMs,
    'EVAL_RO',
    READ_STATE,
    3,
    `${base}m`,
    `${base}l`,
    `${base}h`,
  )) as [number, string[], string[], string[]];
  const now = Number(reply[0]);
  const meta = pairs(reply[1]);
  const l = pairs(reply[2]);
  const blocks: [number, number][] = [];
  for (const [id, entry] of Object.entries(l)) {
    if (id.startsWith('_')) continue;
    const [expiry, block, held] = entry.split(' ').map(Number) as [number, number, number];
    if (expiry > now) blocks.push([block, held]);
  }
  return {
    now,
    meta,
    blocks,
    storedSum: l._s === undefined ? undefined : Number(l._s),
    liveUnits: reply[3].length,
  };
}

/** After every process closed: each key of the gate with its PTTL (-1: it lives for good). */
export async function leftovers(
  redis: ChaosRedis,
  name: string,
): Promise<{ key: string; pttl: number; size: number }[]> {
  const out: { key: string; pttl: number; size: number }[] = [];
  for (const key of await gateKeys(redis, name)) {
    const pttl = Number(await redis.command(2000, 'PTTL', key));
    const type = String(await redis.command(2000, 'TYPE', key));
    const sizeCmd = type === 'hash' ? 'HLEN' : type === 'zset' ? 'ZCARD' : undefined;
    const size = sizeCmd ? Number(await redis.command(2000, sizeCmd, key)) : 1;
    out.push({ key, pttl, size });
  }
  return out;
}
