/**
 * What a leased gate's signal costs Redis (issue 35): one SPUBLISH on the gate's channel with N
 * processes subscribed (each a connection of its own, as each process's wake-up connection),
 * Redis's own `usec_per_call` (INFO commandstats). An input of the capacity model
 * (docs/scale.md): a signal is sent only on change, and reaches every process of the gate.
 *
 *   npx tsx bench/fleet/signal-cost.ts [1000]
 */
import { startRedis, stopAllRedis } from '../lib/redis-server.js';
import { connectResp, type RespConnection } from '../lib/resp.js';

const sizes = process.argv.slice(2).map(Number);
const redis = await startRedis();
const subs: RespConnection[] = [];
const channel = 'cost:{g}:wake:give';
const control = await connectResp(redis.port);
for (const n of sizes.length > 0 ? sizes : [50, 200, 1000]) {
  while (subs.length < n) {
    const c = await connectResp(redis.port);
    await c.command('SSUBSCRIBE', channel);
    subs.push(c);
  }
  await control.command('CONFIG', 'RESETSTAT');
  const calls = 200;
  for (let i = 0; i < calls; i++) await control.command('SPUBLISH', channel, 'give 2 ');
  const text = String(await control.command('INFO', 'commandstats'));
  const usec = /cmdstat_spublish:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(text)?.[1];
  console.log(`${n} subscribers: ${usec} µs per SPUBLISH (Redis CPU)`);
}
for (const c of subs) c.close();
control.close();
await stopAllRedis();
