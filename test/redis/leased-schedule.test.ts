/**
 * The leased mode's own fault schedule (issue 32: attack the fix): a seeded random sequence of
 * faults, shorter and longer than the lease, against a busy fleet (cap 8, 4 processes × 6
 * callers, lease 2 s): Redis SIGSTOPped, answering OOM errors, paused (`CLIENT PAUSE`),
 * flushed, its clock stepped forward or back (emulated, test/redis/leased-clock.ts), a process
 * dying (its client cut, no close) or closing cleanly, each followed by a newcomer. The oracles:
 * the partner never sees more than the cap, and Redis's own state keeps Σ max(block, held) over
 * live entries within the cap after every step. A failure names its seed and schedule; more
 * seeds: HOSTGATE_LEASED_SEEDS=n (default 1 here), a given one: HOSTGATE_LEASED_SEED=s.
 */
import { expect, it } from 'vitest';
import { prng } from '../helpers/prng.js';
import { describeRedis } from '../helpers/redis-server.js';
import { leasedCounted, privateRedis } from './clients.js';
import { emulateClockStep } from './leased-clock.js';
import { leasedFleet } from './leased-fleet.js';

const redis = privateRedis();
const CAP = 8;
const LEASE_MS = 2000;

type Fault =
  | { kind: 'sigstop' | 'oom' | 'pause'; ms: number }
  | { kind: 'step'; ms: number }
  | { kind: 'flush' | 'kill' | 'close' };

function schedule(seed: number, steps: number): { fault: Fault; gapMs: number }[] {
  const rand = prng(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
  const length = () => 300 + Math.floor(rand() * 3200); // shorter and longer than the lease
  return Array.from({ length: steps }, () => {
    const kind = pick(['sigstop', 'oom', 'pause', 'step', 'flush', 'kill', 'close'] as const);
    const fault: Fault =
      kind === 'step'
        ? { kind, ms: (rand() < 0.5 ? -1 : 1) * (1000 + Math.floor(rand() * 4000)) }
        : kind === 'flush' || kind === 'kill' || kind === 'close'
          ? { kind }
          : { kind, ms: length() };
    return { fault, gapMs: 200 + Math.floor(rand() * 1300) };
  });
}

const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

function seeds(): number[] {
  const one = process.env.HOSTGATE_LEASED_SEED;
  if (one !== undefined) return [Number(one)];
  const n = Number(process.env.HOSTGATE_LEASED_SEEDS ?? 1);
  return Array.from({ length: n }, (_, i) => 32_001 + i);
}

describeRedis('the leased mode under a seeded fault schedule (issue 32)', () => {
  for (const seed of seeds()) {
    it(`seed ${seed}: never over the cap at the partner or in Redis`, async () => {
      const steps = schedule(seed, 4);
      const gate = `sched${seed}`;
      const fleet = await leasedFleet(redis, {
        name: gate,
        processes: 4,
        callers: 6,
        cap: CAP,
        leaseMs: LEASE_MS,
        refreshMs: 500,
      });
      const server = redis();
      const done: string[] = [];
      try {
        await fleet.partner.waitForActive(CAP);
        for (const { fault, gapMs } of steps) {
          done.push(JSON.stringify(fault));
          switch (fault.kind) {
            case 'sigstop':
              server.pause();
              await hold(fault.ms);
              server.resume();
              break;
            case 'oom':
              await server.command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
              await server.command('CONFIG', 'SET', 'maxmemory', '1');
              await hold(fault.ms);
              await server.command('CONFIG', 'SET', 'maxmemory', '0');
              break;
            case 'pause':
              await server.command('CLIENT', 'PAUSE', fault.ms, 'ALL');
              await hold(fault.ms);
              break;
            case 'step':
              await emulateClockStep(server, gate, fault.ms);
              break;
            case 'flush':
              await server.command('FLUSHALL');
              await fleet.add();
              break;
            case 'kill': {
              // A process dies: its client cut, its store never closed; its callers stop.
              const dead = fleet.members[0]!;
              dead.running = false;
              await dead.client.close();
              fleet.members.splice(0, 1);
              await fleet.add();
              break;
            }
            case 'close':
              await fleet.close(fleet.members[0]!);
              await fleet.add();
              break;
          }
          await hold(gapMs);
          const sum = await leasedCounted(server, gate);
          expect(sum, `seed ${seed}, after ${done.join(' ')}: Redis counts`).toBeLessThanOrEqual(
            CAP,
          );
          expect(
            fleet.partner.peak,
            `seed ${seed}, after ${done.join(' ')}: the partner saw`,
          ).toBeLessThanOrEqual(CAP);
        }
        await hold(LEASE_MS);
        expect(fleet.partner.peak, `seed ${seed}: ${done.join(' ')}`).toBeLessThanOrEqual(CAP);
      } finally {
        server.resume();
        await server.command('CONFIG', 'SET', 'maxmemory', '0');
        await fleet.stop();
      }
    }, 60_000);
  }
});
