/**
 * A leased gate's REFRESH (src/redis/commands/leasedRefresh-4.lua) alone on crafted state: the
 * blocks of the cap (max-min fair by demand, never past what the others leave), the walk of `L`
 * (includes/leasedWalk.lua), a clean close (includes/leasedClose.lua), the keys' TTLs, a lost
 * state's recovery window, and the layouts it refuses. Redis's state is read back after each run.
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import {
  ARGS,
  expectAhead,
  expectBlocksWithinCap,
  inUse,
  L,
  M,
  parseEntry,
  silentHeavyHead,
  useLeasedLab,
} from './leased-lab.js';

describeRedis('leased REFRESH alone: the cap', () => {
  const lab = useLeasedLab();

  it('a first use: the meta hash created with the caller cap, a recovery window of windowMs, no block beyond what is held; L lives three leases', async () => {
    const ran = await lab.refresh({ held: 1, wants: 3 });
    expect(ran.answer).toMatchObject({ block: 1, cap: 4, target: 1, processes: 1 });
    expect(ran.answer.recoveringMs).toBeGreaterThan(ARGS.windowMs - 50);
    expect(ran.answer.recoveringMs).toBeLessThanOrEqual(ARGS.windowMs);
    const state = await lab.state();
    expect(state.m).toMatchObject({ v: 'leased/1', c: '4' });
    expectAhead(state.m.r, ran, ARGS.windowMs);
    expectAhead(state.m.lr, ran, 0);
    expect(state.ttl.m).toBeGreaterThan(30 * 86_400_000 - 60_000);
    expect(state.ttl.l).toBeGreaterThan(3 * ARGS.leaseMs - 1_000);
    expect(state.ttl.l).toBeLessThanOrEqual(3 * ARGS.leaseMs);
    const entry = state.l.get('pa')!;
    expectAhead(entry.expiry, ran, ARGS.leaseMs + ARGS.gapMs); // counted a gap past its lease (seed 73144)
    expect(entry).toMatchObject({ block: 1, held: 1, wants: 3 });
    expectBlocksWithinCap(state);
  });

  it('a process that had an entry and finds no meta hash knows it was a loss: the window is a whole lease', async () => {
    const ran = await lab.refresh({ held: 2, wants: 2, had: 1 });
    expect(ran.answer.block).toBe(2);
    expectAhead((await lab.state()).m.r, ran, ARGS.leaseMs);
  });

  it('every demand fits: each gets what it wants; L._s is Σ max(block, held) and stays so', async () => {
    await lab.craft({ m: inUse(), l: { pb: { block: 1, held: 1, wants: 1 } }, s: 1 });
    const ran = await lab.refresh({ wants: 3 });
    expect(ran.answer).toMatchObject({ block: 3, target: 3, processes: 2, free: 0 });
    const state = await lab.state();
    expect(state.m.b).toBe('-1');
    expectBlocksWithinCap(state);
  });

  it('max-min fair by demand: two busy processes split the cap; a block never takes what the other still holds', async () => {
    // pb holds 3 of 4 on a block of 3; pa wants 4: its fair share is 2, but only 1 is left.
    await lab.craft({ m: inUse(), l: { pb: { block: 3, held: 3, wants: 4 } }, s: 3 });
    const first = await lab.refresh({ wants: 4 });
    expect(first.answer).toMatchObject({ block: 1, target: 2, free: 0 });
    expectBlocksWithinCap(await lab.state());
    // pb releases down to its share: pa gets its own at its next refresh.
    const pb = await lab.refresh({ processId: 'pb', held: 2, wants: 4 });
    expect(pb.answer).toMatchObject({ block: 2, target: 2 });
    expect((await lab.refresh({ wants: 4 })).answer).toMatchObject({ block: 2, target: 2 });
    const state = await lab.state();
    expect(state.s).toBe(4);
    expectBlocksWithinCap(state);
  });

  it('units left over at the level go one each to the lowest ids (M.e the highest that gets one)', async () => {
    await lab.craft({
      m: inUse(5),
      l: { pb: { wants: 5 }, pc: { wants: 5 } },
      s: 0,
    });
    const ran = await lab.refresh({ wants: 5, cap: 5 });
    expect(ran.answer).toMatchObject({ target: 2, block: 2 });
    const state = await lab.state();
    expect(state.m).toMatchObject({ b: '1', e: 'pb', n: '3' });
    expect((await lab.refresh({ processId: 'pb', wants: 5 })).answer.target).toBe(2);
    expect((await lab.refresh({ processId: 'pc', wants: 5 })).answer.target).toBe(1);
    expectBlocksWithinCap(await lab.state());
  });

  it("a process's heaviest waiting head is met whole before the level (its floor), while it fits", async () => {
    // cap 4, both want 3: the level is 2 each, but pa's head weighs 3.
    await lab.craft({ m: inUse(), l: { pb: { wants: 3, need: 1 } }, s: 0 });
    const ran = await lab.refresh({ wants: 3, need: 3 });
    expect(ran.answer).toMatchObject({ target: 3, block: 3 });
    expect((await lab.refresh({ processId: 'pb', wants: 3, need: 1 })).answer).toMatchObject({
      target: 1,
      block: 1,
    });
    expectBlocksWithinCap(await lab.state());
  });

  it('floors that do not fit are no minimum: heads of 3 in four processes at cap 4, one is met, the others get the level or a whole head of units nobody counts, so no two hold part of a head each', async () => {
    // A rolling deploy left every process of a weighted gate holding part of its head's need
    // (the campaign's seed 10014: cap 7, heads of 3, the fleet at 0 for 1.5-2 s). Floors are met
    // oldest head first: pb's is; pc, pd and pa's (newest) are not, and their need is no minimum.
    const at = await lab.craft({
      m: inUse(),
      l: {
        pb: { wants: 3, need: 3, since: -300 },
        pc: { wants: 3, need: 3, since: -200 },
        pd: { wants: 3, need: 3, since: -100 },
      },
      s: 0,
    });
    // Nobody counts a unit yet: pa's whole head fits in them, and it takes it.
    const ran = await lab.refresh({ wants: 3, need: 3, head: 1, scanMs: 0 });
    expect(ran.answer).toMatchObject({ target: 3, block: 3 });
    expect((await lab.state()).m.f).toBe(`${at - 300} pb`);
    // pb's floor was met: it gathers its head from what is left, one unit now.
    const pb = await lab.refresh({ processId: 'pb', wants: 3, need: 3 });
    expect(pb.answer).toMatchObject({ target: 3, block: 1 });
    // pc's was not, and no whole head is free: nothing, rather than part of a head.
    const pc = await lab.refresh({ processId: 'pc', wants: 3, need: 3 });
    expect(pc.answer.block).toBe(0);
    expectBlocksWithinCap(await lab.state());
  });

  it('the silent heavy head: a process that stopped refreshing (killed) keeps its block counted but no floor and nothing owed, so a live heavy head is met beside it (seed 82285: the survivors at 0 until its lease lapsed)', async () => {
    // cap 4: pb's head of 3 is the oldest, its floor met at the last walk and owed (it holds 1
    // unit of it), but pb last refreshed half a lease and a gap ago (its entry lives a lease and
    // a gap past that refresh); pa's head of 3 came later.
    await lab.craft({ m: inUse(4, { o: 2 }), l: { pb: silentHeavyHead() }, s: 1 });
    const ran = await lab.refresh({ wants: 3, need: 3, head: 1, scanMs: 0 });
    // Before: pb's floor met again (oldest) and its 2 owed units kept from pa: target 0-1.
    expect(ran.answer).toMatchObject({ target: 3, block: 3 });
    expectBlocksWithinCap(await lab.state());
  });

  it('heavy head starved behind lighter ones: the head waiting longest is met first, though lighter heads that came after it would fill the cap (smallest first met four heads of 1 and never the 3)', async () => {
    // The campaign's seeds 20025, 20038, 20048, 20109: weighted gates whose heavy waiters timed
    // out while lighter heads of other processes took every unit, walk after walk.
    await lab.craft({ m: inUse(4, { t: -1 }), s: 0 });
    await lab.refresh({ wants: 3, need: 3, head: 5 });
    for (const id of ['pb', 'pc', 'pd', 'pe']) {
      await lab.refresh({ processId: id, wants: 1, need: 1, head: 1 });
    }
    const pa = await lab.refresh({ wants: 3, need: 3, head: 5, scanMs: 0 });
    expect(pa.answer.target).toBe(3);
    const state = await lab.state();
    expect(state.m.f).toBe(`${state.l.get('pb')!.since} pb`);
    expect((await lab.refresh({ processId: 'pc', wants: 1, need: 1, head: 1 })).answer.target).toBe(
      0,
    );
    expectBlocksWithinCap(await lab.state());
  });

  it('the cap free and every target 0 between walks: units nobody counts go to a head that fits whole, a slice each, never part of a head', async () => {
    // The trace of seed 20025: the walk met the oldest floors (level 0); their heads were granted
    // at once and moved on, and until the next walk every process had target 0 with the whole
    // cap free (free 9 of 9, queues of 11 and 15).
    await lab.craft({
      m: inUse(4, { t: -1, b: 0, e: '', n: 4, f: '' }),
      l: { pb: { wants: 3, need: 1 }, pc: { wants: 3, need: 1 }, pd: { block: 1, held: 1 } },
      s: 1,
    });
    // 3 units nobody counts, 4 processes: a slice of 1, or the head's 2 whole.
    const pa = await lab.refresh({ wants: 3, need: 2, head: 1 });
    expect(pa.answer).toMatchObject({ target: 2, block: 2 });
    expect((await lab.refresh({ processId: 'pb', wants: 3, need: 1 })).answer.block).toBe(1);
    // None left: a head of 2 gets nothing rather than part of itself.
    const pc = await lab.refresh({ processId: 'pc', wants: 3, need: 2 });
    expect(pc.answer.block).toBe(0);
    expectBlocksWithinCap(await lab.state());
  });

  it('a younger head does not take the units owed to an older met floor (M.o), which gathers them and is owed nothing once whole', async () => {
    // The item 5 test after heads were taken from spare units: process b's releases were its own
    // next refresh, so b took every unit a's met weight-3 head was gathering, and a waited 9 s.
    const at = await lab.craft({
      m: inUse(4, { t: -1, b: 0, e: '', n: 2, o: 2 }),
      l: {
        pa: { block: 1, held: 0, wants: 3, need: 3, since: -500, head: 5, owed: 2 },
        pd: { expiry: -1_000, block: 0, owed: 7 },
      },
      s: 1,
    });
    await lab.command('HSET', M, 'f', `${at - 500} pa`); // pa's floor met at the walk
    // 3 units nobody counts, 2 owed to pa: pb's head of 2 does not fit in the one left.
    const pb = await lab.refresh({ processId: 'pb', wants: 2, need: 2, head: 1 });
    expect(pb.answer.block).toBe(0);
    expect((await lab.state()).l.get('pb')!.owed).toBe(0);
    const pa = await lab.refresh({ wants: 3, need: 3, head: 5 });
    expect(pa.answer).toMatchObject({ target: 3, block: 3 });
    expect((await lab.state()).m.o).toBe('0');
    // A walk sums M.o again over live entries only (pd lapsed with 7 owed).
    await lab.command('HSET', M, 'o', 9);
    await lab.refresh({ wants: 3, need: 3, head: 5, scanMs: 0 });
    expect((await lab.state()).m.o).toBe('0');
    expectBlocksWithinCap(await lab.state());
  });

  it("a share below its head's need serves nothing: none, so the unit is not held idle in its block (a level of 1 beside a head of 2)", async () => {
    // The campaign's seed 20099: blocks of 1 beside heads of 2 and 3 all over a weighted fleet,
    // the cap counted and the partner at 40% of the rate.
    await lab.craft({
      m: inUse(4, { t: -1, b: 1, e: '', n: 4, f: '' }),
      // pa reported its head before (a new head above the level would be met by a walk now).
      l: { pb: { block: 3, held: 3, wants: 3 }, pa: { wants: 3, need: 2, head: 1, since: -100 } },
      s: 3,
    });
    const pa = await lab.refresh({ wants: 3, need: 2, head: 1 });
    expect(pa.answer).toMatchObject({ target: 0, block: 0 });
    // With no head waiting, the level's unit is its share as before.
    expect((await lab.refresh({ processId: 'pc', wants: 3 })).answer.block).toBe(1);
    expectBlocksWithinCap(await lab.state());
  });

  it('the owed no-show: a unit free, owed to a met floor whose process was told and did not come (SIGKILLed at the worst moment), goes to a waiting head once the owner is overdue, not when it falls silent (seed 88263: cap 1 over 6, the survivors at 0 for 3.1 s)', async () => {
    // Cap 1: pb's head of 1 was met at the last walk and is owed the unit (M.o 1); Redis told
    // `owed` 400 ms ago when the unit came free, and pb last refreshed 500 ms ago: it never came.
    const told = -(3 * ARGS.signalMs + 100);
    const craft = (ot: number) =>
      lab.craft({
        m: inUse(1, { t: -200, b: 0, e: '', n: 2, f: '', o: 1, ot }),
        l: {
          pb: {
            wants: 1,
            need: 1,
            since: -5000,
            head: 1,
            owed: 1,
            expiry: ARGS.leaseMs + ARGS.gapMs + told - 100,
          },
          pa: { wants: 1, need: 1, since: -1000, head: 1 },
        },
        s: 0,
      });
    await craft(told);
    await lab.command('HSET', M, 'f', `${(await lab.state()).l.get('pb')!.since} pb`);
    const pa = await lab.refresh({ wants: 1, need: 1, head: 1 });
    // Before: the unit stayed pb's until pb fell silent (half a lease and a gap), target 0.
    expect(pa.answer).toMatchObject({ block: 1 });
    const after = await lab.state();
    expectBlocksWithinCap(after);
    // pb is a no-show until it refreshes; the tell was checked.
    expect([after.m.ns, after.m.ot, after.m.o]).toEqual(['pb', undefined, '0']);
    await lab.refresh({ processId: 'pb', wants: 1, need: 1, head: 1 });
    expect((await lab.state()).m.ns).toBeUndefined();
    // Told just now: pb may be on its way, the unit stays its own.
    await lab.command('FLUSHALL');
    await craft(-10);
    await lab.command('HSET', M, 'f', `${(await lab.state()).l.get('pb')!.since} pb`);
    expect((await lab.refresh({ wants: 1, need: 1, head: 1 })).answer.block).toBe(0);
  });

  it('a new heavy head above the level, no met floor gathering units: the walk comes now and meets it, not at the next scan (seed 86007)', async () => {
    // Cap 4 over 2: pb holds a block of 3; the last walk (1 ms ago) found level 1 and no floor.
    const craft = (o: number) =>
      lab.craft({
        m: inUse(4, { t: -1, b: 1, e: '', n: 2, f: '', o }),
        l: { pb: { block: 3, held: 0, wants: 3 } },
        s: 3,
      });
    await craft(0);
    const pa = await lab.refresh({ wants: 3, need: 3, head: 7 });
    // Before: no walk until the scan, its share below the head's need none (target 0).
    expect(pa.answer.target).toBe(3);
    const state = await lab.state();
    expect(state.m.f).toBe(`${state.l.get('pa')!.since} pa`);
    expect(state.l.get('pa')!.owed).toBe(3 - pa.answer.block);
    expectBlocksWithinCap(state);
    // A floor met at the last walk still lacks units (M.o 2): it is older and gathers first.
    await lab.command('FLUSHALL');
    await craft(2);
    expect((await lab.refresh({ wants: 3, need: 3, head: 7 })).answer.target).toBe(0);
  });

  it('a head met as a floor is served (the process reports another head): the next walk comes now, not a scan later, so the next head in age order is met', async () => {
    // Seed 20025: a heavy head in every process, a few floors met per walk, and a weight-3 head
    // waited walk after walk (1.4-2.5 s).
    const at = await lab.craft({
      m: inUse(4, { t: -1, b: 0, e: '', n: 2 }),
      l: {
        pa: { wants: 3, need: 3, since: -400, head: 5, block: 3 },
        pb: { wants: 3, need: 3, since: -300, head: 1 },
      },
      s: 3,
    });
    await lab.command('HSET', M, 'f', `${at - 400} pa`);
    const walkedBefore = Number((await lab.state()).m.t);
    // The same head again: no walk.
    await lab.refresh({ wants: 3, need: 3, head: 5, held: 3 });
    expect(Number((await lab.state()).m.t)).toBe(walkedBefore);
    // Its head was served, the next one weighs 1: a walk, and pb's floor is met in it.
    const served = await lab.refresh({ wants: 3, need: 1, head: 6, held: 3 });
    const state = await lab.state();
    expect(Number(state.m.t)).toBeGreaterThanOrEqual(served.before);
    // pb's head (older) and pa's new one of 1 fit: both met, pa's last.
    expect(state.m.f).toBe(`${state.l.get('pa')!.since} pa`);
    expect((await lab.refresh({ processId: 'pb', wants: 3, need: 3, head: 1 })).answer.target).toBe(
      3,
    );
  });

  it('a served head of 1 at a level of 1 starts no walk: heads of 1 in a fleet at its cap move at every grant', async () => {
    const at = await lab.craft({
      m: inUse(4, { t: -1, b: 1, e: '', n: 2 }),
      l: { pa: { wants: 3, need: 1, since: -400, head: 5, block: 1 } },
      s: 1,
    });
    await lab.command('HSET', M, 'f', `${at - 400} pa`);
    const walkedBefore = Number((await lab.state()).m.t);
    await lab.refresh({ wants: 3, need: 1, head: 6, held: 1 });
    expect(Number((await lab.state()).m.t)).toBe(walkedBefore);
  });

  it('a head keeps its place while it waits: the same token keeps when Redis first heard of it, a new token (the next head) goes to the back', async () => {
    await lab.craft({ m: inUse(4, { t: -1 }), s: 0 });
    await lab.refresh({ wants: 3, need: 2, head: 7 });
    const first = (await lab.state()).l.get('pa')!;
    expect(first).toMatchObject({ need: 2, head: 7 });
    // Redis's clock past the head's first report, so a new since would differ.
    while ((await lab.now()) <= first.since) await lab.command('PING');
    await lab.refresh({ wants: 3, need: 2, head: 7 });
    expect((await lab.state()).l.get('pa')!.since).toBe(first.since);
    await lab.refresh({ wants: 3, need: 2, head: 8 });
    expect((await lab.state()).l.get('pa')!.since).toBeGreaterThan(first.since);
    await lab.refresh({ wants: 3, need: 0, head: 0 });
    expect((await lab.state()).l.get('pa')).toMatchObject({ need: 0, since: 0, head: 0 });
  });

  it('the walk drops expired entries (until then they stay counted) and sums L._s again', async () => {
    await lab.craft({
      m: inUse(),
      l: {
        pb: { block: 2, held: 2, wants: 2 },
        pc: { block: 2, held: 1, wants: 2, expiry: -1_000 },
      },
      s: 99, // wrong on purpose: the walk sums it again
    });
    const ran = await lab.refresh({ wants: 4 });
    expect(ran.answer).toMatchObject({ block: 2, processes: 2 });
    const state = await lab.state();
    expect(state.l.has('pc')).toBe(false);
    expect(state.m.t).toBe(String(ran.answer.now));
    expectBlocksWithinCap(state);
  });

  it('between walks L._s moves by each refresh difference, and an expired entry is still counted', async () => {
    await lab.craft({
      m: inUse(4, { t: -1, b: -1, n: 3, k: 4, u: 3 }),
      l: {
        pa: { block: 2, held: 1, wants: 2 },
        pc: { block: 2, held: 2, wants: 2, expiry: -1_000 },
      },
      s: 4,
    });
    const ran = await lab.refresh({ wants: 4, held: 1 });
    // Every demand fit at the last walk, and this one grew: it walks now (a fresh fleet).
    expect(ran.answer.block).toBe(4);
    await lab.craft({
      m: inUse(4, { t: -1, b: 3, e: '', n: 2, k: 4, u: 3 }),
      l: {
        pa: { block: 2, held: 1, wants: 4 },
        pc: { block: 2, held: 2, wants: 2, expiry: -1_000 },
      },
      s: 4,
    });
    const between = await lab.refresh({ wants: 4, held: 1 });
    // No walk: pc still counts 2, so pa gets 2 of its target of 3.
    expect(between.answer).toMatchObject({ block: 2, target: 3, processes: 2 });
    const state = await lab.state();
    expect(state.l.has('pc')).toBe(true);
    expect(state.m.t).not.toBe(String(between.answer.now));
    expect(state.s).toBe(4);
  });

  it('setCap changes the cap for everyone; a lower cap takes nothing held back', async () => {
    await lab.craft({ m: inUse(), l: { pb: { block: 3, held: 3, wants: 3 } }, s: 3 });
    const ran = await lab.refresh({ setCap: 2, wants: 2 });
    expect(ran.answer).toMatchObject({ cap: 2, block: 0 });
    const state = await lab.state();
    expect(state.m.c).toBe('2');
    // pb holds 3 of a cap of 2: over, until it releases; nothing more is granted meanwhile.
    expect(state.s).toBe(3);
  });

  it('a clean close deletes the entry at once and keeps L for the others, with _s without it', async () => {
    await lab.craft({
      m: inUse(),
      l: { pa: { block: 2, held: 2, wants: 2 }, pb: { block: 2, held: 1, wants: 2 } },
      s: 4,
    });
    const ran = await lab.refresh({ closing: 1, windowMs: 1, held: 0, wants: 0 });
    expect(ran.answer).toMatchObject({ block: 0, free: 2, processes: 1 });
    const state = await lab.state();
    expect([...state.l.keys()]).toEqual(['pb']);
    expect(state.s).toBe(2);
  });

  it('a clean close of the last live entry deletes the hash (an expired one is reaped with it)', async () => {
    await lab.craft({
      m: inUse(),
      l: { pa: { block: 2, held: 2, wants: 2 }, pb: { block: 1, expiry: -500 } },
      s: 3,
    });
    await lab.refresh({ closing: 1 });
    expect(await lab.command('EXISTS', L)).toBe(0);
    expect(await lab.command('EXISTS', M)).toBe(1);
  });

  it('a refresh renews L to three leases when M.lx says under one and a half are left, or says nothing (a gate nobody uses leaves no key)', async () => {
    await lab.craft({ m: inUse(), l: { pb: { block: 1, held: 1, wants: 1 } }, s: 1 });
    await lab.command('PEXPIRE', L, 500);
    await lab.refresh({ wants: 1, leaseMs: 4_000 });
    const ttl = Number(await lab.command('PTTL', L));
    expect(ttl).toBeGreaterThan(12_000 - 1_000);
    expect(ttl).toBeLessThanOrEqual(12_000);
    const renewed = await lab.state();
    expect(Number(renewed.m.lx) - renewed.now).toBeGreaterThan(12_000 - 1_000);
    await lab.craft({ m: { lx: 5_500 } });
    await lab.command('PEXPIRE', L, 5_500);
    await lab.refresh({ wants: 1, leaseMs: 4_000 });
    expect(Number(await lab.command('PTTL', L))).toBeGreaterThan(12_000 - 1_000);
  });

  it('a refresh with more than one and a half leases of L left (M.lx) leaves its TTL: no write at every refresh', async () => {
    await lab.craft({
      m: inUse(4, { lx: 8_000 }),
      l: { pa: { block: 1, held: 1, wants: 1 }, pb: { block: 1, held: 1, wants: 1 } },
      s: 2,
    });
    await lab.command('PEXPIRE', L, 8_000);
    const lx = (await lab.state()).m.lx;
    await lab.refresh({ held: 1, wants: 1, leaseMs: 4_000 });
    expect(Number(await lab.command('PTTL', L))).toBeLessThanOrEqual(8_000);
    expect((await lab.state()).m.lx).toBe(lx);
  });

  it('a process that registers renews L whatever M.lx says (a close that left only a rate tail set a shorter TTL)', async () => {
    await lab.craft({
      m: inUse(4, { lx: 60_000 }),
      l: { pb: { block: 1, held: 1, wants: 1 } },
      s: 1,
    });
    await lab.command('PEXPIRE', L, 500);
    await lab.refresh({ wants: 1, leaseMs: 4_000 });
    expect(Number(await lab.command('PTTL', L))).toBeGreaterThan(12_000 - 1_000);
    // Its entry lapsed (Redis no longer counted it): the same.
    await lab.craft({
      m: { lx: 60_000 },
      l: { pa: { block: 1, held: 1, wants: 1, expiry: -100 } },
    });
    await lab.command('PEXPIRE', L, 500);
    await lab.refresh({ wants: 1, leaseMs: 4_000 });
    expect(Number(await lab.command('PTTL', L))).toBeGreaterThan(12_000 - 1_000);
  });

  it('a busy gate keeps L while refreshes come every half lease, and loses it three leases after the last (issue 32, item 8)', async () => {
    const leaseMs = 300;
    for (const id of ['pa', 'pb']) await lab.refresh({ processId: id, wants: 1, leaseMs });
    const until = Date.now() + 8 * leaseMs;
    while (Date.now() < until) {
      await new Promise((r) => setTimeout(r, leaseMs / 2));
      for (const id of ['pa', 'pb']) {
        await lab.refresh({ processId: id, held: 1, wants: 1, leaseMs });
        // After any refresh, at least a lease and a half: L outlives every live entry.
        expect(Number(await lab.command('PTTL', L))).toBeGreaterThan(1.5 * leaseMs - 50);
      }
    }
    await new Promise((r) => setTimeout(r, 3 * leaseMs + 100));
    expect(await lab.command('EXISTS', L)).toBe(0);
    expect(Number(await lab.command('PTTL', M))).toBeGreaterThan(0);
  });

  it('a first use whose lost signal was refused (a user allowed SSUBSCRIBE but not SPUBLISH): a lease of recovery, as the holders are not told to refresh', async () => {
    // Issue 35: busy processes that hear the gate's channel refresh once per half lease, and
    // the `lost` signal asks them to report at once; refused, nobody is told.
    await lab.command('ACL', 'SETUSER', 'nopub', 'on', 'nopass', '~*', '&*', '+@all', '-spublish');
    try {
      await lab.command('AUTH', 'nopub', 'x');
      const refused = await lab.refresh({ wants: 2, signal: 'test:{g}:wake:give' });
      expect(refused.answer.recoveringMs).toBeGreaterThan(ARGS.leaseMs - 100);
    } finally {
      await lab.command('AUTH', 'default', 'x');
    }
    await lab.command('FLUSHALL');
    const told = await lab.refresh({ wants: 2, signal: 'test:{g}:wake:give' });
    expect(told.answer.recoveringMs).toBeLessThanOrEqual(ARGS.windowMs);
  });

  it('a lost blocks hash found by a process that had an entry: nobody grows for a lease', async () => {
    await lab.craft({ m: inUse() });
    const ran = await lab.refresh({ had: 1, held: 1, wants: 3 });
    expect(ran.answer).toMatchObject({ block: 1, target: 1 });
    expect(ran.answer.recoveringMs).toBeGreaterThan(ARGS.leaseMs - 100);
    expectAhead((await lab.state()).m.r, ran, ARGS.leaseMs);
  });

  it('a valid block whose entry is gone: its state was lost under it, a lease of recovery', async () => {
    await lab.craft({ m: inUse(), l: { pb: { block: 1, held: 1, wants: 1 } }, s: 1 });
    const ran = await lab.refresh({ valid: 1, held: 2, wants: 3 });
    expect(ran.answer).toMatchObject({ block: 2, target: 2 });
    expectAhead((await lab.state()).m.r, ran, ARGS.leaseMs);
  });

  it('another layout is refused before anything is written; so is a FIFO gate of the release before versions', async () => {
    await lab.craft({ m: { v: 'fifo/1', c: 3 } });
    await expect(lab.refresh({ wants: 1 })).rejects.toThrow('HOSTGATE_LAYOUT fifo/1');
    await lab.command('HDEL', M, 'v');
    await expect(lab.refresh({ wants: 1 })).rejects.toThrow('HOSTGATE_LAYOUT fifo/0');
    expect(await lab.command('HGETALL', M)).toEqual(['c', '3']);
    expect(await lab.command('EXISTS', L)).toBe(0);
  });

  it("a process new to a gate whose FIFO keys are in use is refused (once per process: a registered one isn't asked again)", async () => {
    await lab.craft({ m: inUse(), fifo: true });
    await expect(lab.refresh({ wants: 1 })).rejects.toThrow('HOSTGATE_LAYOUT fifo/0');
    expect(await lab.command('EXISTS', L)).toBe(0);
    await lab.craft({ l: { pa: { block: 1, held: 1, wants: 1 } }, s: 1 });
    expect((await lab.refresh({ wants: 1, held: 1 })).answer.block).toBe(1);
  });

  it('a FIFO gate whose meta hash is gone (evicted, flushed) is refused before anything is written: the FIFO processes keep their gate', async () => {
    await lab.craft({ fifo: true });
    await expect(lab.refresh({ wants: 1 })).rejects.toThrow('HOSTGATE_LAYOUT fifo/0');
    expect(await lab.command('EXISTS', M)).toBe(0);
    expect(await lab.command('EXISTS', L)).toBe(0);
  });

  it('entries of an older writer (no need field) are read with need 0', async () => {
    await lab.craft({ m: inUse() });
    const at = await lab.now();
    await lab.command('HSET', L, 'pb', `${at + 10_000} 2 2 2 0 0 0 0`, '_s', 2);
    const ran = await lab.refresh({ wants: 4 });
    expect(ran.answer).toMatchObject({ block: 2, processes: 2 });
    expect(parseEntry(String(await lab.command('HGET', L, 'pb'))).need).toBe(0);
  });
});
