/**
 * Time that passed unobserved, in a leased gate's REFRESH alone
 * (src/redis/commands/includes/leasedGap.lua): a gap since the last run `M.lr` seen by a caller
 * whose refreshes failed, by a caller's own clock, or a step back of Redis's clock. Every stored
 * Redis-time timestamp moves by the gap (`lr` after the run less `lr` before: exactly what the
 * script shifted by), so nothing expires on it; without evidence nothing moves.
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import {
  ARGS,
  expectAhead,
  expectBlocksWithinCap,
  expectRateCounted,
  inUse,
  type LeasedState,
  ratedInUse,
  useLeasedLab,
} from './leased-lab.js';

const GAP = 60_000;
/** A walk a moment ago that found the level at 1: the next refresh does not walk. */
const WALKED = { b: 1, e: '', n: 3, k: 2, u: 2 };

describeRedis('leased REFRESH alone: a gap or a clock step', () => {
  const lab = useLeasedLab();

  /** The shift the script applied: the new last run less the crafted one. */
  const shiftOf = (state: LeasedState, at: number, lastRun: number) =>
    Number(state.m.lr) - (at + lastRun);

  it('Redis away (a caller whose refreshes failed, a gap past gapMs): entry expiries, hold ends, tails, M.r, M.t, the last floors met (M.f, M.rf), the slot of a share given back (M.cs) and a learning window of the rate (M.rq) all move by the gap', async () => {
    // The heads' sinces the last floors met are named by (absolute: craft leaves them be).
    const headAt = (await lab.now()) - GAP - 1_000;
    const at = await lab.craft({
      m: inUse(4, {
        ...WALKED,
        lr: -GAP,
        t: -GAP - 200,
        r: -GAP + 20_000 + ARGS.leaseMs,
        rq: -GAP + 10_000,
        f: `${headAt} pb`,
        rf: `${headAt + 1} pb`,
        cs: 400,
      }),
      l: {
        pb: {
          expiry: 2_000,
          block: 1,
          held: 1,
          wants: 1,
          share: 0,
          counted: 0,
          until: 5_000,
          rc: 0,
        },
        // 30 s left at the last run: it expired during the gap, unobserved.
        pc: { expiry: -30_000, block: 1, held: 1, wants: 1 },
        'px~0': { expiry: -50_000, counted: 1, until: -40_000 },
      },
      s: 2,
    });
    const ran = await lab.refresh({ down: 1, wants: 1 });
    const state = await lab.state();
    const shift = shiftOf(state, at, -GAP);
    expect(shift).toBeGreaterThanOrEqual(GAP);
    expect(shift).toBeLessThan(GAP + 1_000);
    expect(state.l.get('pb')).toMatchObject({
      expiry: at + 2_000 + shift,
      until: at + 5_000 + shift,
    });
    expect(state.l.get('pc')!.expiry).toBe(at - 30_000 + shift);
    expect(state.l.get('px~0')).toMatchObject({
      expiry: at - 50_000 + shift,
      until: at - 40_000 + shift,
    });
    expect(Number(state.m.t)).toBe(at - GAP - 200 + shift);
    expect(Number(state.m.r)).toBe(at - GAP + 20_000 + ARGS.leaseMs + shift);
    expect(Number(state.m.rq)).toBe(at - GAP + 10_000 + shift);
    expect({ f: state.m.f, rf: state.m.rf }).toEqual({
      f: `${headAt + shift} pb`,
      rf: `${headAt + 1 + shift} pb`,
    });
    // The latest slot of a share given back (M.cs) with them.
    expect(Number(state.m.cs)).toBe(at + 400 + shift);
    // What an entry adds to `_r` is kept as it was: none (an older writer's) stays none.
    expect(state.l.get('pb')!.rc).toBe(0);
    expect(state.l.get('pc')!.rc).toBeUndefined();
    // No walk (it walked 200 ms before the gap): pc and pb counted, pa gets what is left.
    expect(ran.answer.recoveringMs).toBeGreaterThan(20_000);
    expect(state.s).toBe(2 + state.l.get('pa')!.block);
  });

  // Back from an outage of the same server, its state is what the processes left, each having
  // granted within the block Redis counts for it: nobody learns, unless a process whose fallback
  // grants past its count (M.ll, a lease ahead of its last refresh) was live when it began.
  for (const [what, ll, window] of [
    [
      "nobody's fallback grants past its count (under 'reject', or 'local' with neither a localLimit nor a rate)",
      0,
      false,
    ],
    [
      "a process whose fallback grants past its count ('local' with a localLimit or a rate) was live when it began",
      GAP,
      true,
    ],
    ['such a process was gone a lease before it began', -GAP - 1, false],
  ] as const) {
    it(`back from an outage, ${what}: ${window ? 'a learning window of a lease' : 'no window, a demand is met at once (campaign seed 134065: cap 1 over 4, the partner at 0 for 5.2 s after 2.2 s of OOM)'}`, async () => {
      await lab.craft({
        m: inUse(4, { lr: -GAP, ...(ll !== 0 ? { ll } : {}) }),
        l: { pb: { block: 1, held: 1, wants: 1 } },
        s: 1,
      });
      const ran = await lab.refresh({ down: 1, held: 1, wants: 4 });
      if (window) {
        expect(ran.answer).toMatchObject({ block: 1, target: 1 });
        expectAhead((await lab.state()).m.r, ran, ARGS.leaseMs);
      } else {
        expect(ran.answer).toMatchObject({ block: 3, target: 3, recoveringMs: 0 });
      }
      expectBlocksWithinCap(await lab.state());
    });
  }

  for (const [what, overrun, field, other] of [
    ["the cap's (a localLimit)", 1, 'll', 'lq'],
    ["the rate's ('local' with a rate)", 2, 'lq', 'll'],
  ] as const) {
    it(`a refresh whose fallback grants past its count, ${what}, keeps M.${field} at least a lease ahead, written at most once per lease`, async () => {
      await lab.craft({ m: inUse(4), l: {}, s: 0 });
      const first = await lab.refresh({ overrun, wants: 1 });
      const at = Number((await lab.state()).m[field]);
      expect(at).toBe(first.answer.now + 2 * ARGS.leaseMs);
      await lab.refresh({ overrun, wants: 1 });
      expect(Number((await lab.state()).m[field])).toBe(at);
      await lab.refresh({ overrun: 0, wants: 1 });
      const state = await lab.state();
      expect(Number(state.m[field])).toBe(at);
      expect(state.m[other]).toBeUndefined();
    });
  }

  it("back from an outage, a process whose rate's fallback sends past its count was live when it began: a learning window of the rate alone (M.rq), the cap's blocks grow", async () => {
    const rate = '10:10000:4';
    await lab.craft({
      m: ratedInUse(rate, 4, { lr: -GAP, lq: GAP }),
      l: {
        pa: { block: 1, held: 1, wants: 1, share: 4, rateWants: 4, rc: 4 },
        pb: { block: 1, held: 1, wants: 1, share: 4, rateWants: 4, rc: 4 },
      },
      s: 2,
      r: 8,
    });
    const ran = await lab.refresh({
      rate,
      holdMs: 500,
      had: 1,
      down: 1,
      downMs: GAP,
      held: 1,
      wants: 3,
      rateUsed: 4,
      rateWants: 8,
    });
    // The cap: no window, it grows into what nobody holds. The rate: it keeps what it sent.
    expect(ran.answer).toMatchObject({ block: 3, recoveringMs: 0, share: 4 });
    const state = await lab.state();
    expectAhead(state.m.rq, ran, ARGS.leaseMs);
    // A newcomer gets no share of the rate in the window (2 calls of it are free).
    const pc = await lab.refresh({ rate, processId: 'pc', wants: 1, rateWants: 4 });
    expect(pc.answer.share).toBe(0);
    expectBlocksWithinCap(await lab.state());
  });

  // A restart or a failover: the state may be a dump's, older than what the processes hold, and
  // a process whose last answer predates it sees no sign of its own (stop 52's open race).
  for (const [what, restarted] of [
    ['written under another server (a restart, a failover)', true],
    ['written under this one', false],
  ] as const) {
    it(`the state ${what}: ${restarted ? 'a learning window of a lease, with no refresh failed' : 'nothing'}`, async () => {
      const info = String(await lab.command('INFO', 'server'));
      const runId = /run_id:([0-9a-f]+)/.exec(info)?.[1] ?? '';
      expect(runId).not.toBe('');
      await lab.craft({
        m: inUse(4, { lr: -400, ri: restarted ? 'f'.repeat(40) : runId }),
        l: { pb: { block: 1, held: 1, wants: 1 } },
        s: 1,
      });
      const ran = await lab.refresh({
        held: 1,
        wants: 4,
        had: 1,
        seen: (await lab.now()) - 2_000,
        elapsed: 2_000,
      });
      expect((await lab.state()).m.ri).toBe(runId);
      if (restarted) {
        expect(ran.answer).toMatchObject({ block: 1, target: 1 });
        expectAhead((await lab.state()).m.r, ran, ARGS.leaseMs);
      } else {
        expect(ran.answer).toMatchObject({ block: 3, target: 3, recoveringMs: 0 });
      }
    });
  }

  it('a gate state without M.ri (a first use, an older release): the server is written down, no window', async () => {
    await lab.craft({ m: inUse(4), l: { pb: { block: 1, held: 1, wants: 1 } }, s: 1 });
    const ran = await lab.refresh({ held: 1, wants: 4 });
    expect((await lab.state()).m.ri).toMatch(/^[0-9a-f]{40}$/);
    expect(ran.answer).toMatchObject({ block: 3, recoveringMs: 0 });
  });

  it("the learning window keeps a process's block and rate share whatever it wants now, and lets nobody else grow (the window's ratchet, campaign seed 117042: a rated fleet under 'reject' sent nothing for 3.2 s after Redis answered)", async () => {
    // pa and pb each had 2 units and 4 calls of the rate when Redis went away; pa's lease
    // lapsed, its callers were shed, and it comes back using and wanting nothing. A window is
    // open because a process whose fallback sends past its count was live (M.ll; under 'reject',
    // since stop 53, there is none).
    const rate = '10:10000:4';
    await lab.craft({
      m: ratedInUse(rate, 4, { lr: -GAP, ll: GAP }),
      l: {
        pa: { block: 2, wants: 2, share: 4, rateWants: 4, rc: 4 },
        pb: { block: 2, held: 2, wants: 2, share: 4, rateWants: 4, rc: 4 },
      },
      s: 4,
      r: 8,
    });
    const back = { rate, holdMs: 500, had: 1 as const };
    const first = await lab.refresh({ ...back, down: 1, downMs: GAP });
    expect(first.answer.recoveringMs).toBeGreaterThan(0);
    // Before: block 0 and share 0 (what it held and sent), for the whole window.
    expect(first.answer).toMatchObject({ block: 2, share: 4 });
    // Its callers are back within the window: it has its block and share to serve them.
    const next = await lab.refresh({ ...back, wants: 2, rateWants: 4 });
    expect(next.answer).toMatchObject({ block: 2, share: 4 });
    // A newcomer grows past nothing in the window (the cap's units are all counted; 2 calls of
    // the rate are free).
    const pc = await lab.refresh({ ...back, processId: 'pc', had: 0, wants: 2, rateWants: 4 });
    expect(pc.answer).toMatchObject({ block: 0, share: 0 });
    const state = await lab.state();
    expectBlocksWithinCap(state);
    expectRateCounted(state, rate, pc.answer.now);
  });

  it('a step back of the clock (the last run ahead of now): every stored time moves back with it; an entry that moves into the past is reaped', async () => {
    const at = await lab.craft({
      m: inUse(4, { lr: GAP }),
      l: {
        pb: { expiry: GAP + 10_000, block: 1, held: 1, wants: 1, until: GAP + 5_000 },
        pc: { expiry: 30_000, block: 2, held: 2, wants: 2 },
      },
      s: 3,
    });
    const ran = await lab.refresh({ wants: 4 });
    const state = await lab.state();
    const shift = shiftOf(state, at, GAP);
    expect(shift).toBeLessThanOrEqual(-GAP + 1_000);
    expect(shift).toBeGreaterThanOrEqual(-GAP); // the same ms as the craft: exactly -GAP
    expect(state.l.get('pb')).toMatchObject({
      expiry: at + GAP + 10_000 + shift,
      until: at + GAP + 5_000 + shift,
    });
    expect(state.l.has('pc')).toBe(false);
    expect(ran.answer.block).toBe(3);
    expectBlocksWithinCap(state);
  });

  // The state older than an answer the caller had may be a dump older than the state (stop
  // 52): a learning window too, and a forward step of the clock is none.
  for (const [what, seen, elapsed, learns] of [
    ['its monotonic clock saw less time pass than Redis did (a forward step)', -GAP, 100, false],
    ['it saw a Redis time later than the last run (the state was moved back)', 0, 0, true],
  ] as const) {
    it(`a caller that ${what}: the gap is shifted out${learns ? ', and nobody grows for a lease' : ''}`, async () => {
      const at = await lab.craft({
        m: inUse(4, { ...WALKED, lr: -GAP, t: -GAP - 200 }),
        l: { pb: { expiry: 2_000, block: 1, held: 1, wants: 1 } },
        s: 1,
      });
      const ran = await lab.refresh({ seen: at + seen, elapsed, wants: 1 });
      const state = await lab.state();
      expect(state.l.get('pb')!.expiry).toBe(at + 2_000 + shiftOf(state, at, -GAP));
      expect(shiftOf(state, at, -GAP)).toBeGreaterThanOrEqual(GAP);
      expect(ran.answer.recoveringMs > 0).toBe(learns);
    });
  }

  for (const [what, lastRun, args] of [
    ['a gap nobody has evidence of (no failed refresh, no answer seen)', -GAP, {}],
    ['a caller whose refreshes failed, but a gap within gapMs', -2_000, { down: 1 as const }],
    ['a gap within tol, whatever the caller saw', -500, { seen: -GAP, elapsed: 0 }],
  ] as const) {
    it(`${what}: nothing moves`, async () => {
      const at = await lab.craft({
        m: inUse(4, { ...WALKED, lr: lastRun, t: lastRun - 200 }),
        l: { pb: { expiry: 2_000, block: 1, held: 1, wants: 1, until: 3_000 } },
        s: 1,
      });
      const seen = 'seen' in args ? { seen: at + args.seen, elapsed: args.elapsed } : {};
      // No walk either (it would write M.t): the stored times are as crafted.
      await lab.refresh({ ...args, ...seen, wants: 1, scanMs: 10 * GAP });
      const state = await lab.state();
      expect(state.l.get('pb')).toMatchObject({ expiry: at + 2_000, until: at + 3_000 });
      expect(Number(state.m.t)).toBe(at + lastRun - 200);
      expect(state.m.r).toBe('0');
    });
  }

  // The quiet between a healthy fleet's refreshes (a process refreshes on change, every half
  // lease when idle) is no outage: a process back from its own partition (fault campaign,
  // replica-partition) had failed for seconds while Redis ran the others' refreshes.
  for (const [what, downMs, moved] of [
    ['a process cut off alone: its refreshes failed 20 s, Redis silent 4 s', 20_000, false],
    ['Redis away: its refreshes failed about as long as Redis was silent', 3_500, true],
    ['an older process that says nothing of how long', 0, true],
  ] as const) {
    it(`failed refreshes and a gap past gapMs, ${what}: ${moved ? 'every time moves by the gap' : 'nothing moves'}, no window (the same server, nobody's fallback past its count)`, async () => {
      const at = await lab.craft({
        m: inUse(4, { ...WALKED, lr: -4_000 }),
        l: { pb: { expiry: 2_000, block: 1, held: 1, wants: 1 } },
        s: 1,
      });
      const ran = await lab.refresh({ down: 1, downMs, wants: 1 });
      const state = await lab.state();
      const shift = shiftOf(state, at, -4_000);
      if (moved) {
        expect(shift).toBeGreaterThanOrEqual(4_000);
      } else {
        expect(shift).toBeLessThan(4_000 + 1_000);
        expect(state.l.get('pb')!.expiry).toBe(at + 2_000);
      }
      expect(ran.answer.recoveringMs).toBe(0);
    });
  }

  for (const [what, lastAnswer, moved] of [
    [
      'sent 19 s after its last answer and run 1 s after Redis last ran (its own link held it)',
      20_000,
      false,
    ],
    ['as late as the gap since the last run (a step of the clock)', 3_000, true],
  ] as const) {
    it(`a command run late, ${what}: ${moved ? 'a step, every time moves by the gap' : 'no step, nothing moves'}`, async () => {
      const at = await lab.craft({
        m: inUse(4, { ...WALKED, lr: -2_000 }),
        l: { pb: { expiry: 2_000, block: 1, held: 1, wants: 1 } },
        s: 1,
      });
      // Its last answer `lastAnswer` ms of Redis time ago; it sent this 1 s after that answer.
      await lab.refresh({ seen: at - lastAnswer, elapsed: 1_000, wants: 1 });
      const state = await lab.state();
      const shift = shiftOf(state, at, -2_000);
      if (moved) expect(shift).toBeGreaterThanOrEqual(2_000);
      else expect(state.l.get('pb')!.expiry).toBe(at + 2_000);
    });
  }

  for (const [what, lastAnswer, window] of [
    [
      'more than a lease after the answer that gave it (sent before its process was cut off): its entry lapsed, no loss',
      12_000,
      false,
    ],
    ['within its lease: its state was lost under it', 2_000, true],
  ] as const) {
    it(`a block said valid whose entry is gone, by a command run ${what}: ${window ? 'a recovery window of a lease' : 'no window'} (fault campaign, replica-partition, seed 626: the fleet at 0 for 2.1-2.4 s)`, async () => {
      const at = await lab.craft({
        m: inUse(4, { ...WALKED, lr: -200 }),
        l: { pb: { block: 3, held: 3, wants: 3 } },
        s: 3,
      });
      // It sent this 500 ms after its last answer, `lastAnswer` ms of Redis time ago.
      const ran = await lab.refresh({
        seen: at - lastAnswer,
        elapsed: 500,
        valid: 1,
        had: 1,
        held: 1,
        wants: 1,
      });
      if (window) expectAhead((await lab.state()).m.r, ran, ARGS.leaseMs);
      else expect(ran.answer.recoveringMs).toBe(0);
    });
  }

  it('a gap nobody has evidence of: an entry that expired meanwhile is reaped by the walk', async () => {
    await lab.craft({
      m: inUse(4, { lr: -GAP }),
      l: { pc: { expiry: -30_000, block: 2, held: 2, wants: 2 } },
      s: 2,
    });
    const ran = await lab.refresh({ wants: 4 });
    expect(ran.answer.block).toBe(4);
    expect((await lab.state()).l.has('pc')).toBe(false);
  });
  it('lost writes (the stale dump race, campaign seed 130015): a process whose entry is older than a refresh Redis answered it learns for a lease, keeps no more of the block and share Redis counts for it than it knows', async () => {
    // Redis is back from a dump: pa's entry still has the 2 units and 4 calls it gave back
    // since (refresh 5 wrote it; 7 was answered), pb's has none of what it took (refresh 3; 9).
    const rate = '10:10000:4';
    await lab.craft({
      m: ratedInUse(rate, 4, { lr: -50 }),
      l: {
        pa: { block: 4, held: 0, wants: 4, share: 8, rateWants: 8, rc: 8, sq: 5 },
        pb: { block: 0, held: 0, wants: 0, sq: 3 },
      },
      s: 4,
      r: 8,
    });
    const base = { rate, holdMs: 500, had: 1 as const, valid: 1 as const };
    // pa's demand is back (4 units, 8 calls) before pb reports: before, a block of 4 and a
    // share of 8 on top of pb's 4 and 8 (the stale-dump test: 4-6 at cap 3 at the partner).
    const pa = await lab.refresh({ ...base, wants: 4, rateWants: 8, seq: 8, acked: 7, known: 0 });
    expect(pa.answer.recoveringMs).toBeGreaterThan(0);
    expect(pa.answer).toMatchObject({ block: 0, share: 0, seq: 8 });
    const pb = await lab.refresh({
      ...base,
      processId: 'pb',
      held: 4,
      wants: 4,
      rateUsed: 8,
      rateWants: 8,
      seq: 10,
      acked: 9,
      known: 4,
    });
    // Its block whole; of the rate, what pa's cut leaves (counted for a window: pa may have sent
    // at its old share, as far as Redis can tell).
    expect(pb.answer.block).toBe(4);
    expect(pb.answer.share).toBeGreaterThan(0);
    const state = await lab.state();
    expect(state.l.get('pa')).toMatchObject({ block: 0, sq: 8 });
    expect(state.l.get('pb')).toMatchObject({ block: 4, sq: 10 });
    expectBlocksWithinCap(state);
    // Not Σ counted ≤ limit: pb sends at the share it took after the dump, and pa's cut is
    // counted for a window, as Redis cannot tell it was given back long ago (over-counted, never
    // under: as leases registered again after a FIFO failover).
  });

  it('an entry numbered at or past the last answer (a refresh that timed out and ran) is no lost write', async () => {
    await lab.craft({
      m: inUse(4, { lr: -50 }),
      l: { pa: { block: 1, held: 1, wants: 1, sq: 9 } },
      s: 1,
    });
    const pa = await lab.refresh({
      held: 1,
      wants: 3,
      had: 1,
      valid: 1,
      seq: 10,
      acked: 8,
      known: 1,
    });
    expect(pa.answer).toMatchObject({ recoveringMs: 0, block: 3, seq: 10 });
  });
});
