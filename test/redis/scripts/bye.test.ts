/**
 * BYE (src/redis/commands/bye-5.lua) alone on crafted state: a process that closes cleanly
 * leaves the process set; the last one takes what no live process owns with it (issue 32, item
 * 8: the campaign's seed 10040, a lease a snapshot brought back after its owner released it,
 * stayed in a lease set without a TTL once every replica had closed).
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import { expectConsistent, inUse, scripts, useLab } from './lab.js';

describeRedis('BYE alone', () => {
  const lab = useLab();
  const bye = (proc: string) => lab.run(scripts.bye, [proc]);

  it('a process that is not the last leaves the set and nothing else: the others keep their leases and tickets', async () => {
    await lab.craft({
      m: inUse(2, { h: 1 }),
      h: { 'pb:1': 5_000 },
      q: { 'pb:2': 1 },
      p: { pa: 4_000, pb: 4_000 },
    });
    const ran = await bye('pa');
    expect(ran.reply).toEqual([1, 1, 1]);
    const state = await lab.state();
    expect([...state.p.keys()]).toEqual(['pb']);
    expect([...state.h.keys()]).toEqual(['pb:1']);
    expect([...state.q.keys()]).toEqual(['pb:2']);
    expectConsistent(state);
  });

  it('the last process to leave takes the leases and tickets nobody live owns with it: no key without a TTL is left', async () => {
    // 'pz:1': a lease a restart from a snapshot brought back after pz released it; 'py:1': the
    // ticket of a process that died.
    await lab.craft({
      m: inUse(2, { h: 1 }),
      h: { 'pz:1': 5_000 },
      q: { 'py:1': 1 },
      p: { pa: 4_000 },
    });
    const ran = await bye('pa');
    expect(ran.reply).toEqual([0, 0, 0]);
    const state = await lab.state();
    expect(state.h.size + state.q.size + state.p.size).toBe(0);
    expect(state.ttl.h).toBe(-2);
    expect(state.ttl.q).toBe(-2);
    expect(state.m.h).toBe('0');
    expectConsistent(state);
  });

  it('a stalled process still in the set (its liveness past, not yet reaped) keeps its leases', async () => {
    await lab.craft({
      m: inUse(2, { h: 1 }),
      h: { 'ps:1': 500 },
      p: { pa: 4_000, ps: -100 },
    });
    const ran = await bye('pa');
    expect(ran.reply.slice(0, 3)).toEqual([1, 0, 1]);
    const state = await lab.state();
    expect([...state.h.keys()]).toEqual(['ps:1']);
    expectConsistent(state);
  });
});
