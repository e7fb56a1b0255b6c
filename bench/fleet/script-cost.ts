/**
 * What one leased refresh costs Redis as the fleet grows: the gate's block hash filled with N
 * live entries, then the refresh script run `calls` times as one more process; Redis's own
 * `usec_per_call` (INFO commandstats) and `MEMORY USAGE` of the hash. The inputs of the
 * capacity model in docs/scale.md.
 */
import { leasedScripts } from '../../src/redis/leased-scripts.js';
import { startRedis } from '../lib/redis-server.js';
import { connectResp } from '../lib/resp.js';

export interface ScriptCost {
  processes: number;
  /** A refresh that does not walk the entries (all but a few per interval). */
  usecPerRefresh: number;
  /** A refresh that walks them (a few per interval per gate, whatever the fleet size). */
  usecPerWalk: number;
  /** Bytes of the block hash. */
  hashBytes: number;
  /** Bytes sent and received per refresh (both directions, one process's call). */
  wireBytes: number;
}

export async function scriptCost(sizes: readonly number[], calls: number): Promise<ScriptCost[]> {
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
      await conn.command('SCRIPT', 'LOAD', leasedScripts.refresh.source);
      const run = async (scanMs: number): Promise<{ usec: number; bytes: number }> => {
        const args = [100, 3000, 2000, 'probe0000000000', 2, 3, 1, 0, scanMs];
        await conn.command('EVALSHA', leasedScripts.refresh.sha, 4, ...keys, ...args);
        await conn.command('CONFIG', 'RESETSTAT');
        const bytes0 = await netBytes(conn);
        for (let i = 0; i < calls; i++) {
          await conn.command('EVALSHA', leasedScripts.refresh.sha, 4, ...keys, ...args);
        }
        const bytes = (await netBytes(conn)) - bytes0;
        const info = String(await conn.command('INFO', 'commandstats'));
        const usec = Number(
          /cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(info)?.[1],
        );
        return { usec, bytes };
      };
      const walk = await run(0);
      const refresh = await run(3_600_000);
      const hashBytes = Number(await conn.command('MEMORY', 'USAGE', keys[1]!, 'SAMPLES', 0));
      out.push({
        processes: n + 1,
        usecPerRefresh: refresh.usec,
        usecPerWalk: walk.usec,
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

async function netBytes(conn: { command(...a: (string | number)[]): Promise<unknown> }) {
  const info = String(await conn.command('INFO', 'stats'));
  const read = (k: string) => Number(new RegExp(`${k}:(\\d+)`).exec(info)?.[1] ?? 0);
  return read('total_net_input_bytes') + read('total_net_output_bytes');
}
