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
          args.push(`p${j.toString(16).padStart(16, '0')}`, `${far} 2 2 3`);
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
      const run = async (scanMs: number) => {
        await once(scanMs);
        await conn.command('CONFIG', 'RESETSTAT');
        await conn.command('SLOWLOG', 'RESET');
        const bytes0 = await netBytes(conn);
        for (let i = 0; i < calls; i++) await once(scanMs);
        const bytes = (await netBytes(conn)) - bytes0;
        const info = String(await conn.command('INFO', 'commandstats'));
        const usec = Number(
          /cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(info)?.[1],
        );
        const slow = (await conn.command('SLOWLOG', 'GET', calls + 10)) as unknown[][];
        const max = Math.max(0, ...slow.map((e) => Number(e[2])));
        return { usec, bytes, max };
      };
      await conn.command('CONFIG', 'SET', 'slowlog-log-slower-than', 0);
      await conn.command('CONFIG', 'SET', 'slowlog-max-len', calls + 10);
      // One whole walk from its start: calls until the cursor is back at 0.
      await conn.command('HDEL', keys[0]!, 'wc');
      let callsPerPass = 0;
      do {
        await once(0);
        callsPerPass++;
      } while ((await conn.command('HEXISTS', keys[0]!, 'wc')) === 1 && callsPerPass < 10_000);
      const walk = await run(0);
      // The walk under way ends before the refreshes are measured (each call walks a slice).
      while ((await conn.command('HEXISTS', keys[0]!, 'wc')) === 1) await once(3_600_000);
      const refresh = await run(3_600_000);
      const hashBytes = Number(await conn.command('MEMORY', 'USAGE', keys[1]!, 'SAMPLES', 0));
      out.push({
        processes: n + 1,
        usecPerRefresh: refresh.usec,
        usecPerWalk: walk.usec,
        usecPerWalkMax: walk.max,
        callsPerPass,
        usecPerPass: callsPerPass * (walk.usec - refresh.usec),
        hashBytes,
        // One INFO's request rides along: a few dozen bytes over `calls`.
        wireBytes: refresh.bytes / calls,
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
