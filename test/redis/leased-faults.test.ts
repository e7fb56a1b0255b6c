/**
 * A leased gate under the faults that matter for its safety: a process killed or stopped while
 * it holds a block, and Redis losing every key. The oracle is Redis's own state (its TIME and
 * the gate's block entries) and the permits each process holds.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { forkWorker, type Worker } from '../../bench/lib/fleet.js';
import type { Permit } from '../../src/gate/semaphore.js';
import type { LeasedSemaphore } from '../../src/redis/index.js';
import { bundled } from '../helpers/bundled.js';
import { describeRedis, type RedisServer } from '../helpers/redis-server.js';
import { until } from '../helpers/until.js';
import { Fleet, privateRedis } from './clients.js';
import type { LeasedChildConfig } from './leased-child.js';

const redis = privateRedis();
const LEASE = { leaseMs: 1500, refreshMs: 150 } as const;

async function redisNow(server: RedisServer): Promise<number> {
  const [s, us] = (await server.command('TIME')) as string[];
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** Block entries as Redis holds them (expired ones included). */
async function entries(server: RedisServer, gate: string) {
  const flat = (await server.command('HGETALL', `test:{${gate}}:l`)) as string[];
  const out: { id: string; expiry: number; block: number; held: number }[] = [];
  for (let i = 0; i < flat.length; i += 2) {
    const [expiry, block, held] = flat[i + 1]!.split(' ').map(Number) as number[];
    out.push({ id: flat[i]!, expiry: expiry!, block: block!, held: held! });
  }
  return out;
}

async function child(name: string, client: LeasedChildConfig['client']): Promise<Worker> {
  const config: LeasedChildConfig = {
    redisPort: redis().port,
    client,
    name,
    limit: 4,
    ...LEASE,
  };
  const script = await bundled(new URL('./leased-child.ts', import.meta.url));
  return forkWorker(script, config, { execArgv: [] });
}

function grab(gate: LeasedSemaphore, n: number, into: Permit[]): Promise<void> {
  return Promise.all(
    Array.from({ length: n }, () =>
      gate.acquire({ timeout: 10_000 }).then((p) => void into.push(p)),
    ),
  ).then(() => undefined);
}

describeRedis('a leased gate when a process dies, stalls, or Redis loses its state', () => {
  const fleet = new Fleet('node-redis', redis);
  const workers: Worker[] = [];
  // Forked together up front: a fork costs seconds on a busy machine.
  let killed: Worker;
  let stopped: Worker;
  beforeAll(async () => {
    [killed, stopped] = await Promise.all([
      child('killed', 'node-redis'),
      child('stopped', 'ioredis'),
    ]);
    workers.push(killed, stopped);
    await Promise.all([killed.next('ready'), stopped.next('ready')]);
  }, 90_000); // two forks through the tsx loader: seconds quiet, tens of seconds beside a CPU hog
  afterAll(async () => {
    for (const w of workers) w.kill('SIGKILL');
    await fleet.closeAll();
  });

  it('a SIGKILLed process holding its whole block gives it back when its lease ends, not before', async () => {
    const a = killed;
    a.send({ type: 'hold', n: 4 });
    await a.next('holding');
    const store = await fleet.store();
    const gate = store.semaphore({ name: 'killed', limit: 4, mode: 'leased', ...LEASE });
    const mine: Permit[] = [];
    const granted = grab(gate, 4, mine);
    granted.catch(() => undefined); // awaited below; rejected by close() if the test fails first
    await until(() => gate.stats().shared.processes === 2, 'both processes registered');
    expect(gate.held).toBe(0); // the other process holds every permit
    // Its entry is read while it cannot refresh it (stopped), then it dies: read after the kill,
    // the first script past its expiry may have dropped it already. Redis counts it at
    // max(block, held), the whole cap: its held count is as of its last refresh, and once the
    // other process registered its demand, that refresh may have cut its block to a fair 2
    // while it still held 4.
    a.kill('SIGSTOP');
    const dead = (await entries(redis(), 'killed')).find((e) => e.id !== store.processId);
    expect(dead, 'the holder registered').toBeDefined();
    expect(Math.max(dead!.block, dead!.held), 'Redis counts the whole cap for it').toBe(4);
    a.kill('SIGKILL');
    await a.exited;
    const killedAt = await redisNow(redis());
    await granted;
    const grantedAt = await redisNow(redis());
    expect(grantedAt).toBeGreaterThanOrEqual(dead!.expiry); // never while its lease ran
    // Within its lease, one refresh and the machine's slack.
    expect(grantedAt - killedAt).toBeLessThan(LEASE.leaseMs + LEASE.refreshMs + 1500);
    for (const p of mine) p.release();
  });

  it('a process stopped past its lease grants nothing from its old block when it wakes, before it refreshes', async () => {
    const a = stopped;
    a.send({ type: 'hold', n: 4 });
    await a.next('holding');
    a.send({ type: 'drop', n: 2 });
    await a.next('dropped');
    a.kill('SIGSTOP');
    const store = await fleet.store();
    const gate = store.semaphore({ name: 'stopped', limit: 4, mode: 'leased', ...LEASE });
    const mine: Permit[] = [];
    // Granted once the stopped process's entry expired in Redis.
    await grab(gate, 4, mine);
    a.send({ type: 'try', timeout: 600 }); // waits in the pipe: the first thing it reads on waking
    a.kill('SIGCONT');
    const tried = await a.next<{ granted: boolean }>('tried');
    expect(tried.granted).toBe(false);
    a.send({ type: 'stats' });
    const stats = await a.next<{ block: number; held: number; acquired: number }>('stats');
    expect(stats).toMatchObject({ block: 0, held: 2, acquired: 4 });
    // Its refresh registered the 2 it still holds (their requests still run): never silent.
    const woke = (await entries(redis(), 'stopped')).find((e) => e.held === 2);
    expect(woke?.block).toBe(0);
    for (const p of mine) p.release();
    a.kill('SIGKILL');
  });

  it('a refresh that times out and runs in Redis afterwards: the process grants past nothing Redis counts for it (the late shrink race)', async () => {
    // A refresh that times out may still run when Redis answers again, and shrink the block:
    // Redis then counts max(new block, held at send) for the process, and lets the others take
    // the rest. The process must not go on granting from its old block meanwhile.
    const options = { commandTimeoutMs: 200, onStoreError: 'local' as const };
    const [a, b] = [await fleet.store(options), await fleet.store(options)];
    const gate = {
      name: 'late',
      limit: 6,
      mode: 'leased',
      leaseMs: 4000,
      refreshMs: 1000,
    } as const;
    const [ga, gb] = [a.semaphore(gate), b.semaphore(gate)];
    const held: Permit[] = [];
    await grab(ga, 6, held);
    expect(ga.block).toBe(6);
    redis().pause();
    try {
      for (const p of held.splice(0)) p.release();
      // Its demand falls: it asks Redis for less, and that refresh times out on the paused Redis.
      await until(() => ga.stats().shared.mode !== 'redis', "a's refresh timing out");
    } finally {
      redis().resume();
    }
    // Redis runs the late refresh now; b asks for the cap and gets what a's entry leaves.
    const bHeld: Permit[] = [];
    void grab(gb, 6, bHeld).catch(() => {});
    await until(() => gb.held > 0, 'b granted from the block Redis gave it');
    const mine = (await entries(redis(), 'late')).find((e) => e.id === a.processId)!;
    const extra: Permit[] = [];
    for (let i = 0; i < 6; i++) {
      const p = ga.tryAcquire();
      if (p !== undefined) extra.push(p);
    }
    // The oracle: what Redis counts for a (its entry), and the cap across both processes.
    expect(ga.held).toBeLessThanOrEqual(Math.max(mine.block, mine.held));
    expect(ga.held + gb.held).toBeLessThanOrEqual(6);
    for (const p of [...extra, ...bHeld]) p.release();
  });

  it('Redis losing every key (FLUSHALL) admits nobody past the cap: the state is rebuilt from what is held', async () => {
    const ioFleet = new Fleet('ioredis', redis);
    const [sa, sb] = [await fleet.store(), await ioFleet.store()];
    const ga = sa.semaphore({ name: 'flushed', limit: 6, mode: 'leased', ...LEASE });
    const gb = sb.semaphore({ name: 'flushed', limit: 6, mode: 'leased', ...LEASE });
    const pa: Permit[] = [];
    const pb: Permit[] = [];
    await grab(ga, 3, pa);
    await grab(gb, 3, pb);
    await redis().command('FLUSHALL');
    const sc = await fleet.store();
    const gc = sc.semaphore({ name: 'flushed', limit: 6, mode: 'leased', ...LEASE });
    const pc: Permit[] = [];
    let peak = 0;
    let done = false;
    const sample = () => {
      peak = Math.max(peak, ga.held + gb.held + gc.held);
      return done;
    };
    const sampler = until(sample, 'sampled', 60_000);
    const late = grab(gc, 3, pc);
    // The new process waits: nobody is granted beyond what it holds for a lease after the loss.
    await until(() => ga.stats().shared.processes >= 2, 'the state rebuilt by refreshes');
    expect(gc.held).toBe(0);
    for (const p of pa.splice(0)) p.release();
    await late;
    done = true;
    await sampler;
    expect(peak).toBeLessThanOrEqual(6);
    const after = await entries(redis(), 'flushed');
    const now = await redisNow(redis());
    const live = after.filter((e) => e.expiry > now);
    expect(live.reduce((s, e) => s + Math.max(e.block, e.held), 0)).toBeLessThanOrEqual(6);
    for (const p of [...pb, ...pc]) p.release();
    await ioFleet.closeAll();
  });
});
