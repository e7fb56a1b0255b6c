/** Regression tests for issue 10's core items, each named after its item. */
import { AsyncLocalStorage } from 'node:async_hooks';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { PermitHoldTimeoutError } from '../../src/common/errors.js';
import { type Permit, Semaphore } from '../../src/gate/semaphore.js';
import * as hostgate from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { prng } from '../helpers/prng.js';

describe('item 6: Permit is a type users hold, never a class they construct', () => {
  it('has no runtime export, and its constructor refuses anyone but a gate', () => {
    expect('Permit' in hostgate).toBe(false);
    const gate = new Semaphore({ limit: 2 });
    const permit = gate.tryAcquire()!;
    const Ctor = permit.constructor as new (...args: unknown[]) => Permit;
    expect(() => new Ctor(gate, 0)).toThrow(TypeError);
    expect(() => new Ctor(Symbol('hostgate.grant'), gate, 0)).toThrow(/not constructible/);
    permit.release();
    expect(gate.stats()).toMatchObject({ held: 0, available: 2, released: 1 });
    expectInvariant(gate);
  });

  it('refuses a permit it never granted, and a reset state cannot release twice', () => {
    const gate = new Semaphore({ limit: 2 });
    const permit = gate.tryAcquire()!;
    const fake = Object.create(Object.getPrototypeOf(permit)) as Permit;
    expect(() => fake.release()).toThrow(TypeError);
    expect(() => Reflect.apply(permit.release, { gate }, [])).toThrow(TypeError);
    const forged = { ...permit, gate } as Permit;
    expect(() => Reflect.apply(Object.getPrototypeOf(permit).release, forged, [])).toThrow(
      TypeError,
    );
    permit.release();
    // Writing what used to be public state changes nothing.
    (permit as unknown as { state: number }).state = 0;
    expect(() => Object.assign(permit, { released: false })).toThrow(TypeError);
    permit.release();
    permit.release();
    expect(gate.stats()).toMatchObject({
      held: 0,
      available: 2,
      acquired: 1,
      released: 1,
      doubleReleases: 2,
    });
    expectInvariant(gate);
  });
});

describe('item 12: queued run() tasks run in their caller async context', () => {
  // Ported from p-limit's test "propagates async execution context properly".
  it('propagates async execution context properly (100 tasks, p-limit port)', async () => {
    const gate = new Semaphore({ limit: 2, maxQueue: 200, queueTimeout: 60_000 });
    const store = new AsyncLocalStorage<{ id: number }>();
    const random = prng(12);
    const checkId = async (id: number) => {
      await new Promise<void>((resolve) => setTimeout(resolve, random() * 5));
      expect(store.getStore()?.id).toBe(id);
    };
    const startContext = async (id: number) => store.run({ id }, () => gate.run(() => checkId(id)));
    await Promise.all(Array.from({ length: 100 }, (_, id) => startContext(id)));
    expect(gate.stats()).toMatchObject({ held: 0, acquired: 100, released: 100 });
  });

  it("runs a queued task in its caller's context, not the releaser's, from its first line", async () => {
    const gate = new Semaphore({ limit: 1 });
    const store = new AsyncLocalStorage<string>();
    const permit = store.run('releaser', () => gate.tryAcquire()!);
    const seen: (string | undefined)[] = [];
    const done = store.run('caller', () =>
      gate.run(async () => {
        seen.push(store.getStore());
        await null;
        seen.push(store.getStore());
      }),
    );
    store.run('releaser', () => permit.release());
    await done;
    expect(seen).toEqual(['caller', 'caller']);
  });

  it('starts a queued task after the releasing call returned, not on its stack', async () => {
    const gate = new Semaphore({ limit: 1 });
    const permit = gate.tryAcquire()!;
    const order: string[] = [];
    const done = gate.run(() => {
      order.push('task');
    });
    permit.release();
    order.push('release returned');
    await done;
    expect(order).toEqual(['release returned', 'task']);
  });

  it('starts fn synchronously when a permit is free', async () => {
    const gate = new Semaphore({ limit: 1 });
    let started = false;
    const done = gate.run(() => {
      started = true;
    });
    expect(started).toBe(true);
    await done;
  });

  it('returns the permit when the signal aborts between the grant and the start', async () => {
    const gate = new Semaphore({ limit: 1 });
    const permit = gate.tryAcquire()!;
    const controller = new AbortController();
    const fn = vi.fn();
    const done = gate.run(fn, { signal: controller.signal });
    permit.release(); // granted now; the task would start a microtask later
    controller.abort(new Error('gone'));
    await expect(done).rejects.toThrow('gone');
    expect(fn).not.toHaveBeenCalled();
    expect(gate.stats()).toMatchObject({ held: 0, released: 2 });
    expectInvariant(gate);
  });
});

describe('item 13: maxHold bounds the time without progress, maxHoldTotal the whole hold', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('keeps a long stream that makes progress, and takes back a silent one beside it', async () => {
    const gate = new Semaphore({ limit: 2, maxHold: 1000, name: 'sse' });
    const streaming = gate.tryAcquire()!;
    const stalled = gate.tryAcquire()!;
    const errors: PermitHoldTimeoutError[] = [];
    stalled.onHoldTimeout = (error) => errors.push(error);
    streaming.onHoldTimeout = (error) => errors.push(error);
    for (let t = 0; t < 10_000; t += 250) {
      await vi.advanceTimersByTimeAsync(250);
      streaming.noteProgress(); // a chunk every 250 ms, for 10 × maxHold
    }
    expect(streaming.released).toBe(false);
    expect(stalled.released).toBe(true);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ code: 'HOSTGATE_HOLD_TIMEOUT', heldMs: 1000, quietMs: 1000 });
    expect(gate.stats()).toMatchObject({ held: 1, holdTimeouts: 1 });
    streaming.release();
    expectInvariant(gate);
  });

  it('takes a stream back maxHold after its last progress, not after its grant', async () => {
    const gate = new Semaphore({ limit: 1, maxHold: 1000 });
    const permit = gate.tryAcquire()!;
    await vi.advanceTimersByTimeAsync(900);
    permit.noteProgress(); // t = 900
    await vi.advanceTimersByTimeAsync(999);
    expect(permit.released).toBe(false);
    await vi.advanceTimersByTimeAsync(1); // t = 1900
    expect(permit.released).toBe(true);
    expect(gate.stats().holdTimeouts).toBe(1);
  });

  it('bounds the whole hold with maxHoldTotal, progress or not', async () => {
    const gate = new Semaphore({ limit: 1, maxHold: 1000, maxHoldTotal: 3000 });
    expect(gate.maxHoldTotal).toBe(3000);
    const permit = gate.tryAcquire()!;
    const errors: PermitHoldTimeoutError[] = [];
    permit.onHoldTimeout = (error) => errors.push(error);
    for (let t = 0; t < 2900; t += 100) {
      await vi.advanceTimersByTimeAsync(100);
      permit.noteProgress();
    }
    expect(permit.released).toBe(false);
    await vi.advanceTimersByTimeAsync(100); // t = 3000
    expect(permit.released).toBe(true);
    expect(errors).toHaveLength(1);
    expect(errors[0]!.message).toMatch(/maxHoldTotal/);
    expect(errors[0]!.quietMs).toBeUndefined();
    permit.release(); // after a take-back: silent
    expect(gate.stats()).toMatchObject({ held: 0, holdTimeouts: 1, doubleReleases: 0 });
    await vi.advanceTimersByTimeAsync(1000); // the maxHold timer finds nobody and stops
    expect(vi.getTimerCount()).toBe(0);
  });

  it('clears the maxHoldTotal timer of a permit released in time', async () => {
    const gate = new Semaphore({ limit: 1, maxHoldTotal: 3000 });
    gate.tryAcquire()!.release();
    expect(vi.getTimerCount()).toBe(0);
    expect(() => new Semaphore({ limit: 1, maxHoldTotal: 0 })).toThrow(/maxHoldTotal/);
  });
});
