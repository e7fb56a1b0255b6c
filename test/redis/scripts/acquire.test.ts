/**
 * ACQUIRE (src/redis/commands/acquire-5.lua) alone on crafted state: a lease now when its units
 * are free and nobody waits, else a ticket at the tail; refusals that write nothing.
 */
import { expect, it } from 'vitest';
import { LAYOUT, RATE_LAYOUT } from '../../../src/redis/scripts.js';
import { describeRedis } from '../../helpers/redis-server.js';
import {
  COMMON,
  expectAhead,
  expectConsistent,
  inUse,
  META_TTL_FLOOR,
  rateTail,
  scripts,
  unitsOf,
  useLab,
} from './lab.js';

describeRedis('ACQUIRE alone', () => {
  const lab = useLab();
  const acquire = (proc: string, id: string, common = {}, register = 1, deadlineMs = 5_000) =>
    lab.run(scripts.acquire, [proc, id, register, deadlineMs], common);

  it('a first use grants at once when firstUseWaitMs is 0: the lease expires a lease from now, the meta hash holds cap, layout and holders flag under a 30-day TTL', async () => {
    const ran = await acquire('pa', 'pa:1');
    expect(ran.reply.slice(0, 7)).toEqual([1, 1, 0, 1, COMMON.cap, 0, 0]);
    const state = await lab.state();
    expectAhead(state.h.get('pa:1'), ran, COMMON.leaseMs);
    expectAhead(state.p.get('pa'), ran, COMMON.liveMs);
    expect(state.m).toMatchObject({ c: String(COMMON.cap), v: LAYOUT, h: '1' });
    // A recovery window of firstUseWaitMs = 0: it ends as it opens.
    expectAhead(state.m.r, ran, 0);
    expectAhead(state.m.lr, ran, 0);
    expect(state.ttl.m).toBeGreaterThan(META_TTL_FLOOR);
    expectConsistent(state);
  });

  it('a process that used the gate and finds no meta hash queues for a whole lease (Redis lost the state), told on the lost channel', async () => {
    const heard = await lab.listen('lost');
    const ran = await acquire('pa', 'pa:1', { known: 1 });
    const [granted, held, queued, , cap, recoveryMs] = ran.reply as number[];
    expect([granted, held, queued, cap]).toEqual([0, 0, 1, COMMON.cap]);
    expect(recoveryMs).toBeGreaterThan(COMMON.leaseMs - 50);
    expect(recoveryMs).toBeLessThanOrEqual(COMMON.leaseMs);
    const state = await lab.state();
    expect([...state.q.keys()]).toEqual(['pa:1']);
    expectAhead(state.m.r, ran, COMMON.leaseMs);
    expect(heard.get(`lab:{g}:wake:lost`)).toEqual(['lost']);
    expectConsistent(state);
  });

  it('no barging: behind a waiting ticket a new arrival queues even with a unit free, in arrival order', async () => {
    // pc's ticket is at the head; nobody listens for pc, so fill() passes it over (a deaf owner
    // keeps its place) and the unit stays free.
    await lab.craft({
      m: inUse(2),
      h: { 'pb:1': 5_000 },
      q: { 'pc:1': 1 },
      p: { pc: 5_000 },
      s: 1,
    });
    const ran = await acquire('pa', 'pa:1');
    expect(ran.reply.slice(0, 3)).toEqual([0, 1, 2]);
    const state = await lab.state();
    expect([...state.q]).toEqual([
      ['pc:1', 1],
      ['pa:1', 2],
    ]);
    expect([...state.h.keys()]).toEqual(['pb:1']);
    expect(state.s).toBe('2');
    expectConsistent(state);
  });

  it('weights: a weight-2 lease holds two units under one expiry, and a second one on cap 3 queues (held + free = cap)', async () => {
    await lab.craft({ m: inUse(3) });
    const first = await acquire('pa', 'pa:1/2');
    expect(first.reply.slice(0, 3)).toEqual([1, 2, 0]);
    const second = await acquire('pb', 'pb:1/2');
    expect(second.reply.slice(0, 3)).toEqual([0, 2, 1]);
    const state = await lab.state();
    expect([...state.h.keys()].sort()).toEqual(unitsOf('pa:1/2'));
    expect([...state.q.keys()]).toEqual(['pb:1/2']);
    expectConsistent(state);
  });

  it('an id heavier than the cap Redis holds is refused (-1): no ticket, no process recorded', async () => {
    await lab.craft({ m: inUse(2) });
    const ran = await acquire('pa', 'pa:1/3', { cap: 5 }, 0);
    expect(ran.reply.slice(0, 5)).toEqual([-1, 0, 0, -1, 2]);
    const state = await lab.state();
    expect(state.q.size + state.h.size + state.p.size).toBe(0);
    expectConsistent(state);
  });

  it('expired leases are reaped before counting: a lease past its expiry frees its unit', async () => {
    await lab.craft({ m: inUse(1, { h: 1 }), h: { 'pb:1': -100 } });
    const ran = await acquire('pa', 'pa:1');
    expect(ran.reply.slice(0, 3)).toEqual([1, 1, 0]);
    const state = await lab.state();
    expect([...state.h.keys()]).toEqual(['pa:1']);
    expectConsistent(state);
  });

  it('a gate another layout keeps is refused before any write: the error names the layout, and Redis is as it was', async () => {
    await lab.craft({ m: { v: 'leased/1', c: 5 }, h: { 'pb:1': 5_000 } });
    const before = await lab.state();
    await expect(acquire('pa', 'pa:1')).rejects.toThrow(/^HOSTGATE_LAYOUT leased\/1$/);
    const after = await lab.state();
    expect({ ...after, now: 0, ttl: 0 }).toEqual({ ...before, now: 0, ttl: 0 });
  });

  it('rate: a cost above burst + 1 is refused (-3), a slot after the deadline is refused (-2) with the wait, and a lone ticket is told its slot', async () => {
    const rate = '2:1000:0'; // a call every 500 ms, no burst
    await lab.craft({ m: inUse(5, { v: RATE_LAYOUT, rt: rate }) });
    const costly = await acquire('pa', 'pa:1~2', { rate });
    expect(costly.reply.slice(0, 7)).toEqual([-3, 0, 0, 0, 5, 0, 1]);
    const first = await acquire('pa', 'pa:2', { rate });
    expect(first.reply[0]).toBe(1);
    const late = await acquire('pa', 'pa:3', { rate }, 1, 100);
    expect(late.reply[0]).toBe(-2);
    expect(late.reply[6]).toBeGreaterThan(400);
    expect(late.reply[6]).toBeLessThanOrEqual(500);
    const queued = await acquire('pa', 'pa:4', { rate });
    expect(queued.reply.slice(0, 3)).toEqual([0, 1, 1]);
    const [hint, nextSlotMs, backlog, held] = rateTail(queued.reply, 7);
    expect(hint).toMatch(/^pa:4@\d+$/);
    expect(nextSlotMs).toBeGreaterThan(0);
    expect([backlog, held]).toEqual(['1', rate]);
    const state = await lab.state();
    expectAhead(Math.round(Number(state.m.t)), first, 500);
    expect(state.m.n).toMatch(/^pa:4@/);
    expectConsistent(state);
  });
});
