/**
 * The rate sweep (issue 32): `npm run chaos:sweep -- [flags]`. Seeded shapes of a fleet sharing
 * one gate with a rate, every process a store of its own in this one process, so that every
 * grant is timed on one clock: no latency spread to allow for, unlike the campaign's partner
 * (test/chaos/oracle.ts), which must take the spread of a request's trip off each window and so
 * cannot see an excess of a few tens of ms. Each shape draws its processes, cap (below and
 * above the process count), rate, burst, costs, lease and callers whose demand starts late and
 * stops early, and in 40% of shapes a rolling deploy (one or two processes closed cleanly and
 * replaced); no Redis faults (the campaign's part).
 *
 * The oracle, per shape: the shortest span of the grants' log (timed as hostgate:acquire
 * publishes them) that holds `limit + burst + 1` cost units, against `per` less 3% of it (at
 * least 10 ms): a leased fleet's shares are paced apart, so a window straddling two of its
 * processes' share changes can run a few ms short of `per` (on a quiet machine 994-1007 ms of
 * 1000 for 20 units at 19 per s; 979-991 with a CPU-heavy neighbour: docs/rates.md), which the
 * line prints; the most callbacks running at once, against the cap; every caller's error one the
 * gate documents (a roll's aborted waiters included). It found a leased rate's shares handed from
 * process to process each sent at once (cap 1 over 2 at 3 per 500 ms: 4 calls in 405 ms), which
 * no campaign schedule had shown.
 *
 * Flags:
 *   --mode fifo|leased|both   modes to run (default leased)
 *   --seed N                  first seed (default 1); shape k of a run has seed N + k
 *   --budget N                shapes per mode (default 20)
 *   --ms N                    how long each shape's callers run (default 3500)
 *   --show                    print each shape's units per window, its first window's grants
 *                             (ms, process, share/burst), and the grants around its shortest
 *                             span when that is under `per`
 */
import { subscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { Agent, request } from 'undici';
import { QueueFullError, QueueTimeoutError, RateLimitedError } from '../../src/common/errors.js';
import { type RedisStore, redisStore } from '../../src/redis/index.js';
import { prng } from '../helpers/prng.js';
import { startRedis } from '../helpers/redis-server.js';

const { values } = parseArgs({
  options: {
    mode: { type: 'string', default: 'leased' },
    seed: { type: 'string', default: '1' },
    budget: { type: 'string', default: '20' },
    ms: { type: 'string', default: '3500' },
    show: { type: 'boolean', default: false },
  },
});
const modes = values.mode === 'both' ? ['fifo', 'leased'] : [values.mode!];
if (!modes.every((m) => m === 'fifo' || m === 'leased'))
  throw new TypeError('--mode fifo|leased|both');
/** A whole-number flag, or a clear error naming it. */
function whole(flag: string, value: string | undefined, least: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < least) {
    throw new TypeError(`--${flag} must be a whole number of at least ${least} (got ${value})`);
  }
  return n;
}
const first = whole('seed', values.seed, 0);
const budget = whole('budget', values.budget, 1);
const runMs = whole('ms', values.ms, 2000);

/** A shape: the fleet, its gate and its callers, drawn from `seed`. */
function shapeOf(seed: number) {
  const r = prng(seed);
  const pick = (a: number, b: number) => a + Math.floor(r() * (b - a + 1));
  const processes = pick(2, 6);
  const cap = r() < 0.5 ? pick(1, processes) : pick(processes, 12);
  const per = [250, 500, 1000][pick(0, 2)]!;
  const limit = pick(2, 40);
  const burst = r() < 0.4 ? 0 : pick(0, Math.floor(limit / 2));
  const leaseMs = r() < 0.5 ? 1500 : 3000;
  // Costs up to 3, and never above what a call may cost (burst + 1).
  const maxCost = r() < 0.3 ? Math.min(3, burst + 1) : 1;
  const callers = Array.from({ length: processes }, () => pick(1, 10));
  const holdMs = pick(2, 40);
  const client = r() < 0.5 ? 'ioredis' : 'node-redis';
  // Rolls from draws of their own: 40% of shapes replace one or two processes, 0.8 s in at the
  // earliest and 0.8 s before the end at the latest.
  const q = prng(seed + 7_000_000);
  const rolls =
    q() < 0.4
      ? Array.from({ length: q() < 0.5 ? 1 : 2 }, () => ({
          slot: Math.floor(q() * processes),
          at: 800 + q() * Math.max(0, runMs - 1600),
        }))
      : [];
  return {
    seed,
    processes,
    cap,
    limit,
    per,
    burst,
    leaseMs,
    maxCost,
    callers,
    holdMs,
    client,
    rolls,
    r,
    pick,
  };
}

/** One process of the fleet: a store on a client of its own, and its gate. */
interface Proc {
  store: RedisStore;
  gate: {
    run<T>(fn: () => Promise<T>, options: { cost: number; signal: AbortSignal }): Promise<T>;
  };
  closeClient: () => unknown;
  abort: AbortController;
}

/** A partner that counts the calls in flight (its own peak). */
async function partner() {
  let active = 0;
  let peak = 0;
  const server = http.createServer((req, res) => {
    active++;
    peak = Math.max(peak, active);
    const hold = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('hold') ?? 0);
    setTimeout(() => {
      active--;
      res.end('ok');
    }, hold);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    peak: () => peak,
    reset: () => {
      peak = 0;
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** A gate's rate share now (leased: `share/burst`; FIFO: '-'). */
function shareOf(gate: unknown): string {
  const rate = (
    gate as { stats(): { shared?: { rate?: { share?: number; burst?: number } } } }
  ).stats().shared?.rate;
  return rate?.share === undefined ? '-' : `${rate.share}/${rate.burst}`;
}

/** The shortest span of `log` (time, units) that holds `units` cost units (∞: none). */
function shortestSpan(log: readonly (readonly [number, number])[], units: number): number {
  const times = log.flatMap(([t, c]) => Array.from({ length: c }, () => t));
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i + units - 1 < times.length; i++) {
    best = Math.min(best, times[i + units - 1]! - times[i]!);
  }
  return best;
}

// The gate's warnings (a small cap in the leased mode, costs above burst shares) are counted
// by code and listed once at the end, not printed per gate.
const warnings = new Map<string, number>();
process.removeAllListeners('warning');
process.on('warning', (warning) => {
  const code = (warning as { code?: string }).code ?? warning.name;
  warnings.set(code, (warnings.get(code) ?? 0) + 1);
});

/** Grant times by gate, as hostgate:acquire publishes them (its callbacks run in that order). */
const granted = new Map<unknown, number[]>();
subscribe('hostgate:acquire', (message) => {
  granted.get((message as { gate: unknown }).gate)?.push(performance.now());
});

const redis = await startRedis();
const target = await partner();
const agent = new Agent({ connections: 256 });
const failures: string[] = [];
let shapes = 0;
try {
  for (const mode of modes) {
    for (let k = 0; k < budget; k++) {
      const shape = shapeOf(first + k);
      const { processes, cap, limit, per, burst, callers, holdMs, r, pick } = shape;
      const name = `${mode}-${shape.seed}`;
      const grants: [number, number][] = [];
      let running = 0;
      let runningPeak = 0;
      const errors = new Map<string, number>();
      const shares: [number, number, string][] = [];
      /** A process: its store on a client of its own, and its gate. */
      const open = async (): Promise<Proc> => {
        let closeClient: () => unknown;
        let store: RedisStore;
        if (shape.client === 'ioredis') {
          const client = new Redis(redis.port, '127.0.0.1', { lazyConnect: true });
          client.on('error', () => {});
          await client.connect();
          closeClient = () => client.disconnect();
          store = redisStore({ client, prefix: 'sweep:', commandTimeoutMs: 500 });
        } else {
          const client = createClient({ url: redis.url });
          client.on('error', () => {});
          await client.connect();
          closeClient = () => client.destroy();
          store = redisStore({ client, prefix: 'sweep:', commandTimeoutMs: 500 });
        }
        const gate = store.semaphore({
          name,
          limit: cap,
          maxQueue: 256,
          queueTimeout: 2000,
          mode,
          ...(mode === 'leased' ? { leaseMs: shape.leaseMs, refreshMs: shape.leaseMs / 4 } : {}),
          rate: { limit, per, burst },
        } as never) as unknown as Proc['gate'];
        granted.set(gate, []);
        return { store, gate, closeClient, abort: new AbortController() };
      };
      const slots: { current: Proc; ready: Promise<void> }[] = [];
      for (let i = 0; i < processes; i++) {
        slots.push({ current: await open(), ready: Promise.resolve() });
      }
      target.reset();
      const t0 = performance.now();
      // A rolling deploy (its own draws: a seed's shape is the same with or without it): a
      // process closed cleanly, as a shutdown hook does (its waiters aborted, its calls in flight
      // drained), and a new one started in its place, with the same callers.
      const rolls = shape.rolls.map(async ({ slot, at }) => {
        await new Promise((resolve) => setTimeout(resolve, t0 + at - performance.now()));
        const s = slots[slot]!;
        await s.ready; // the same process drawn twice: the second roll after the first
        const old = s.current;
        s.ready = (async () => {
          old.abort.abort();
          await old.store.close();
          await old.closeClient();
          s.current = await open();
        })();
        await s.ready;
      });
      await Promise.all([
        ...rolls,
        ...slots.flatMap((s, p) =>
          Array.from({ length: callers[p]! }, async () => {
            // Demand that moves: some callers start late, some stop early.
            const start = t0 + (r() < 0.3 ? r() * 1500 : 0);
            const stop = r() < 0.3 ? t0 + 1000 + r() * (runMs - 1000) : t0 + runMs;
            await new Promise((resolve) => setTimeout(resolve, start - performance.now()));
            while (performance.now() < stop) {
              const cost = pick(1, shape.maxCost);
              const hold = Math.round(r() * holdMs);
              await s.ready;
              const { gate, abort } = s.current;
              if (abort.signal.aborted) continue;
              try {
                await gate.run(
                  async () => {
                    // Timed at the grant (hostgate:acquire, in grant order), not here: a pass
                    // that grants several runs their callbacks one after another.
                    const at = granted.get(gate)?.shift() ?? performance.now();
                    grants.push([at, cost]);
                    if (values.show) shares.push([at, p, shareOf(gate)]);
                    running++;
                    runningPeak = Math.max(runningPeak, running);
                    try {
                      const response = await request(`${target.origin}/?hold=${hold}`, {
                        dispatcher: agent,
                      });
                      await response.body.text();
                    } finally {
                      running--;
                    }
                  },
                  { cost, signal: abort.signal },
                );
              } catch (error) {
                const known =
                  error instanceof QueueTimeoutError ||
                  error instanceof RateLimitedError ||
                  error instanceof QueueFullError ||
                  (error as Error).name === 'AbortError';
                const key = known ? (error as Error).name : `unexpected ${String(error)}`;
                errors.set(key, (errors.get(key) ?? 0) + 1);
                // A shed caller comes back a little later, as a client would.
                if (!(error instanceof QueueTimeoutError)) {
                  await new Promise((r2) => setTimeout(r2, 20));
                }
              }
            }
          }),
        ),
      ]);
      for (const s of slots) {
        await s.current.store.close();
        await s.current.closeClient();
      }
      grants.sort((a, b) => a[0] - b[0]);
      const promise = limit + burst;
      const span = shortestSpan(grants, promise + 1);
      const units = grants.reduce((sum, [, c]) => sum + c, 0);
      const problems: string[] = [];
      const slack = Math.max(10, 0.03 * per);
      if (span < per - slack) problems.push(`${promise + 1} units in ${Math.round(span)} ms`);
      if (runningPeak > cap) problems.push(`${runningPeak} running at a cap of ${cap}`);
      if (target.peak() > cap) problems.push(`the partner saw ${target.peak()} at a cap of ${cap}`);
      for (const [key, n] of errors)
        if (key.startsWith('unexpected')) problems.push(`${n} × ${key}`);
      const line = `${mode} seed ${shape.seed}: ${processes} processes (${shape.client}), cap ${cap}, rate ${limit}/${per} ms burst ${burst}, costs ≤ ${shape.maxCost}, callers ${callers.join('/')}${shape.rolls.length > 0 ? `, rolls ${shape.rolls.map((x) => `p${x.slot}@${Math.round(x.at)}`).join(' ')}` : ''}: ${units} units (${Math.round((runMs / per) * limit)} at the rate), shortest span of ${promise + 1}: ${Number.isFinite(span) ? Math.round(span) : '-'} ms${problems.length > 0 ? `  VIOLATION: ${problems.join('; ')}` : ''}`;
      console.log(line);
      if (values.show) {
        // Units sent per `per`, from the first grant: where a shape's throughput went.
        const buckets: number[] = [];
        for (const [t, c] of grants) {
          const k = Math.floor((t - t0) / per);
          buckets[k] = (buckets[k] ?? 0) + c;
        }
        console.log(`units per ${per} ms: ${Array.from(buckets, (n) => n ?? 0).join(' ')}`);
        console.log(
          `first window: ${shares
            .filter(([t]) => t - t0 < per)
            .map(([t, q, s2]) => `${Math.round(t - t0)}:p${q}@${s2}`)
            .join(' ')}`,
        );
      }
      if (values.show && span < per) {
        const times = grants.flatMap(([t, c]) => Array.from({ length: c }, () => t));
        for (let i = 0; i + promise < times.length; i++) {
          if (times[i + promise]! - times[i]! === span) {
            const from = times[i]!;
            console.log(
              shares
                .filter(([t]) => t >= from - per / 2 && t <= from + per * 1.5)
                .map(([t, q, s2]) => `${Math.round(t - t0)}:p${q}@${s2}`)
                .join(' '),
            );
            break;
          }
        }
      }
      if (problems.length > 0) failures.push(line);
      shapes++;
    }
  }
} finally {
  await agent.close();
  await target.close();
  await redis.close();
}
console.log(`sweep: ${shapes} shape(s), ${failures.length} violation(s)`);
if (warnings.size > 0) {
  console.log(`warnings: ${[...warnings].map(([code, n]) => `${code} × ${n}`).join(', ')}`);
}
for (const failure of failures) console.log(`  ${failure}`);
process.exit(failures.length > 0 ? 1 : 0);
