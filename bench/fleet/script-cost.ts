/**
 * What one leased refresh costs Redis as the fleet grows: the gate's block hash filled with N
 * live entries, then the refresh script run `calls` times as one more process; Redis's own
 * `usec_per_call` (INFO commandstats), the longest call (SLOWLOG) and `MEMORY USAGE` of the
 * hash. The inputs of the capacity model in docs/scale.md.
 *
 * A fleet of more than 128 processes is walked a slice per refresh (leasedPass.lua): a walking
 * call is one slice, and a whole walk (`usecPerPass`) is the slices of one pass, less the
 * refreshes they rode on.
 *
 * Alone: `npx tsx bench/fleet/script-cost.ts [sizes…]` (default 1000 5000; the processes are one
 * more). `SCRIPTS=/path/to/src/redis/leased-scripts.ts` measures another tree's script.
 */
import { pathToFileURL } from 'node:url';
import { leasedScripts } from '../../src/redis/leased-scripts.js';
import type { LuaCommand } from '../../src/redis/lua.js';
import { startRedis } from '../lib/redis-server.js';
import { connectResp } from '../lib/resp.js';

export interface ScriptCost {
  processes: number;
  /** A refresh that does not walk the entries (all but a few per interval). */
  usecPerRefresh: number;
  /** A refresh that walks (a slice of) them: the mean. */
  usecPerWalk: number;
  /** The longest walking call (SLOWLOG): what every other client of Redis waits at most. */
  usecPerWalkMax: number;
  /** Calls of one whole walk (1 when the fleet is walked at once). */
  callsPerPass: number;
  /** Redis CPU of one whole walk beyond its refreshes: slices × (walk − refresh). */
  usecPerPass: number;
  /** Bytes of the block hash. */
  hashBytes: number;
  /** Bytes sent and received per refresh (both directions, one process's call). */
  wireBytes: number;
}

type Conn = { command(...a: (string | number)[]): Promise<unknown> };

export async function scriptCost(
  sizes: readonly number[],
  calls: number,
  script: LuaCommand = leasedScripts.refresh,
): Promise<ScriptCost[]> {
  const redis = await startRedis();
  const conn = await connectResp(redis.port);
  const out: ScriptCost[] = [];
  try {
    for (const n of sizes) {
      await conn.command('FLUSHALL');
      const keys = ['m', 'l', 'h', 'q'].map((k) => `cost:{g${n}}:${k}`);
      await conn.command('HSET', keys[0]!, 'v', 'leased/1', 'c', 100, 'r', 0, 'x', Date.now());
      const far = Date.now() + 3_600_000;
      for (let i = 0; i < n; i += 500) {
        const args: (string | number)[] = [];
        for (let j = i; j < Math.min(n, i + 500); j++) {
          // An entry as this release writes it (its 14 fields, a lead and its refresh's number
          // since stop 52, leasedEntry.lua): an older writer's shorter one is parsed by a slower
          // path, which a live fleet leaves at its first refresh (issue 35: 12 fields here
          // overstated a slice by a fifth).
          args.push(`p${j.toString(16).padStart(16, '0')}`, `${far} 2 2 3 0 0 0 0 0 0 0 0 0 0 0 7`);
        }
        await conn.command('HSET', keys[1]!, ...args);
      }
      await conn.command('SCRIPT', 'LOAD', script.source);
      const once = (scanMs: number) =>
        conn.command(
          'EVALSHA',
          script.sha,
          4,
          ...keys,
          ...[100, 3000, 2000, 'probe0000000000', 2, 3, 1, 0, scanMs],
        );
      const stats = async () => {
        const info = String(await conn.command('INFO', 'commandstats'));
        const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(info);
        return { calls: Number(m?.[1] ?? 0), usec: Number(m?.[2] ?? 0) };
      };
      await conn.command('CONFIG', 'SET', 'slowlog-log-slower-than', 0);
      await conn.command('CONFIG', 'SET', 'slowlog-max-len', 10_000);
      // Whole walks, each from its start (M.t 0: due), a call per slice until the cursor is back.
      const passes = Math.max(1, Math.ceil(calls / 50));
      await conn.command('CONFIG', 'RESETSTAT');
      await conn.command('SLOWLOG', 'RESET');
      for (let p = 0; p < passes; p++) {
        await conn.command('HSET', keys[0]!, 't', 0);
        do await once(0);
        while ((await conn.command('HEXISTS', keys[0]!, 'wc')) === 1);
      }
      const walk = await stats();
      const slow = (await conn.command('SLOWLOG', 'GET', 10_000)) as unknown[][];
      const walkMax = Math.max(
        0,
        ...slow
          .filter((e) => String((e[3] as unknown[])[0]).toUpperCase() === 'EVALSHA')
          .map((e) => Number(e[2])),
      );
      await conn.command('CONFIG', 'RESETSTAT');
      const bytes0 = await netBytes(conn);
      for (let i = 0; i < calls; i++) await once(3_600_000);
      const wire = (await netBytes(conn)) - bytes0;
      const refresh = await stats();
      const usecPerRefresh = refresh.usec / refresh.calls;
      const callsPerPass = walk.calls / passes;
      const hashBytes = Number(await conn.command('MEMORY', 'USAGE', keys[1]!, 'SAMPLES', 0));
      out.push({
        processes: n + 1,
        usecPerRefresh,
        usecPerWalk: walk.usec / walk.calls,
        usecPerWalkMax: walkMax,
        callsPerPass,
        usecPerPass: walk.usec / passes - callsPerPass * usecPerRefresh,
        hashBytes,
        // One INFO's request rides along: a few dozen bytes over `calls`.
        wireBytes: wire / calls,
      });
    }
  } finally {
    conn.close();
    await redis.close();
  }
  return out;
}

async function netBytes(conn: Conn) {
  const info = String(await conn.command('INFO', 'stats'));
  const read = (k: string) => Number(new RegExp(`${k}:(\\d+)`).exec(info)?.[1] ?? 0);
  return read('total_net_input_bytes') + read('total_net_output_bytes');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const sizes = process.argv.slice(2).map(Number);
  const other = process.env.SCRIPTS;
  const script = other
    ? (
        (await import(
          pathToFileURL(other).href
        )) as typeof import('../../src/redis/leased-scripts.js')
      ).leasedScripts.refresh
    : leasedScripts.refresh;
  const calls = Number(process.env.CALLS ?? 300);
  for (const c of await scriptCost(sizes.length > 0 ? sizes : [1000, 5000], calls, script)) {
    console.log(JSON.stringify(c));
  }
}
