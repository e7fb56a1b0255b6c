/**
 * Time that passed unobserved (src/redis/commands/includes/rebaseGap.lua), run through RELEASE
 * with no ids (a script that changes nothing else), and the recovery windows after a lost state
 * (includes/recovery.lua), through ACQUIRE. The last run's time `lr` is crafted: a gap is `lr`
 * further back than the claim window, a step back of the clock `lr` ahead by as much.
 */
import { expect, it } from 'vitest';
import { RATE_LAYOUT } from '../../../src/redis/scripts.js';
import { describeRedis } from '../../helpers/redis-server.js';
import { COMMON, expectAhead, expectConsistent, inUse, scripts, useLab, WAKE } from './lab.js';

/** What a lease or a liveness is given at least after a gap: max(leaseMs, liveMs). */
const FLOOR = Math.max(COMMON.leaseMs, COMMON.liveMs);

describeRedis('a gap or a clock step, alone', () => {
  const lab = useLab();
  const touch = (common = {}) => lab.run(scripts.release, [], common);

  for (const [what, lastRun] of [
    ['a gap of 60 s (Redis away, or its clock stepped forward)', -60_000],
    ['a step back of the clock by 60 s (the last run is ahead of now)', 60_000],
  ] as const) {
    it(`${what}: every time still ahead at the last run keeps what it had left then, at least a whole lease; what was past is reaped; every process is told`, async () => {
      await lab.craft({
        m: inUse(3, { h: 1, lr: lastRun, r: lastRun + 30_000 }),
        // 2 s left at the last run (less than the floor), 20 s left (more), and one already past.
        h: { 'pa:1': lastRun + 2_000, 'pc:1': lastRun + 20_000, 'pb:1': Math.min(-1, lastRun - 1) },
        p: { pa: lastRun + 3_000, pc: lastRun + 20_000 },
      });
      const heard = await lab.listen('lost');
      const ran = await touch();
      expect(ran.reply.slice(0, 3)).toEqual([2, 0, 3]);
      const state = await lab.state();
      expectAhead(state.h.get('pa:1'), ran, FLOOR);
      expectAhead(state.h.get('pc:1'), ran, 20_000);
      expect(state.h.has('pb:1')).toBe(false);
      expectAhead(state.p.get('pa'), ran, FLOOR);
      expectAhead(state.p.get('pc'), ran, 20_000);
      expectAhead(state.m.r, ran, 30_000);
      expectAhead(state.m.lr, ran, 0);
      expect(heard.get(`${WAKE}lost`)).toEqual(['lost']);
      expectConsistent(state);
    });
  }

  it('no gap: a run within the claim window of the last leaves every stored time as it was', async () => {
    const at = await lab.craft({
      m: inUse(3, { h: 1, lr: -(COMMON.claimMs - 500) }),
      h: { 'pa:1': 2_000 },
      p: { pa: 3_000 },
    });
    const heard = await lab.listen('lost');
    await touch();
    const state = await lab.state();
    expect(state.h.get('pa:1')).toBe(at + 2_000);
    expect(state.p.get('pa')).toBe(at + 3_000);
    expect(heard.get(`${WAKE}lost`)).toEqual([]);
    expectConsistent(state);
  });

  it("a rate's timestamp (GCRA, fractional ms) keeps what it had left at the last run", async () => {
    const rate = '10:1000:0';
    const at = await lab.craft({ m: inUse(3, { v: RATE_LAYOUT, rt: rate, lr: -60_000 }) });
    await lab.server().command('HSET', 'lab:{g}:m', 't', String(at - 60_000 + 500.25));
    const ran = await touch({ rate });
    const state = await lab.state();
    expectAhead(Math.round(Number(state.m.t)), ran, 500);
    expect(Number(state.m.t) % 1).not.toBe(0);
    expectConsistent(state);
  });

  it('a lease set evicted while the meta hash says it held leases: nobody is granted for a whole lease, and every process is told', async () => {
    await lab.craft({ m: inUse(2, { h: 1 }) });
    const heard = await lab.listen('lost');
    const ran = await lab.run(scripts.acquire, ['pa', 'pa:1', 1, 5_000]);
    const [granted, held, queued, , , recoveryMs] = ran.reply as number[];
    expect([granted, held, queued]).toEqual([0, 0, 1]);
    expect(recoveryMs).toBeGreaterThan(COMMON.leaseMs - 50);
    expect(heard.get(`${WAKE}lost`)).toEqual(['lost']);
    const state = await lab.state();
    expectAhead(state.m.r, ran, COMMON.leaseMs);
    expectConsistent(state);
  });

  it("a lost meta hash, for a process that never used the gate: the caller's cap, and firstUseWaitMs without grants", async () => {
    await lab.craft({ h: { 'pb:1': 5_000 } });
    const ran = await lab.run(scripts.acquire, ['pa', 'pa:1', 1, 5_000], {
      cap: 4,
      firstUseWaitMs: 700,
    });
    const [granted, held, queued, , cap, recoveryMs] = ran.reply as number[];
    expect([granted, held, queued, cap]).toEqual([0, 1, 1, 4]);
    expect(recoveryMs).toBeGreaterThan(650);
    expect(recoveryMs).toBeLessThanOrEqual(700);
    expectConsistent(await lab.state());
  });
});
