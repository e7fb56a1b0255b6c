import { afterEach, describe, expect, it, vi } from 'vitest';
import { QueueFullError, QueueTimeoutError } from '../../src/common/errors.js';
import { type Permit, Semaphore, type WaitTarget } from '../../src/gate/semaphore.js';
import { expectInvariant } from '../helpers/invariant.js';

/** A WaitTarget that records what it hears, and can act synchronously on a grant. */
function target(onGrant?: (permit: Permit) => void) {
  const heard: { granted: Permit[]; rejected: unknown[] } = { granted: [], rejected: [] };
  const t: WaitTarget = {
    granted(permit) {
      heard.granted.push(permit);
      onGrant?.(permit);
    },
    rejected(reason) {
      heard.rejected.push(reason);
    },
  };
  return { t, heard };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('Semaphore.wait: the callback form of acquire', () => {
  it('grants synchronously when a permit is free and returns no ticket', () => {
    const gate = new Semaphore({ limit: 1 });
    const { t, heard } = target();
    expect(gate.wait(t)).toBeUndefined();
    expect(heard.granted).toHaveLength(1);
    expectInvariant(gate);
    heard.granted[0]!.release();
    expectInvariant(gate);
  });

  it('rejects synchronously with QueueFullError when the queue is full, scheduling no timer', () => {
    vi.useFakeTimers();
    const gate = new Semaphore({ limit: 1, maxQueue: 0, name: 'p' });
    const held = gate.tryAcquire()!;
    const { t, heard } = target();
    expect(gate.wait(t)).toBeUndefined();
    expect(heard.rejected[0]).toBeInstanceOf(QueueFullError);
    expect(vi.getTimerCount()).toBe(0);
    held.release();
    expectInvariant(gate);
  });

  it('queues behind waiters (no barging) and grants in FIFO order', async () => {
    const gate = new Semaphore({ limit: 1 });
    const held = gate.tryAcquire()!;
    const order: string[] = [];
    const viaPromise = gate.acquire().then((p) => {
      order.push('promise');
      return p;
    });
    const { t, heard } = target(() => order.push('callback'));
    expect(gate.wait(t)).toBeDefined();
    held.release();
    const first = await viaPromise;
    expect(order).toEqual(['promise']);
    first.release();
    expect(order).toEqual(['promise', 'callback']);
    heard.granted[0]!.release();
    expectInvariant(gate);
  });

  it('cancel leaves the queue at once and rejects with the given reason; a second cancel is a no-op', () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 1 });
    const held = gate.tryAcquire()!;
    const { t, heard } = target();
    const ticket = gate.wait(t)!;
    expect(gate.queued).toBe(1);
    ticket.cancel('client left');
    ticket.cancel('again');
    expect(gate.queued).toBe(0);
    expect(heard.rejected).toEqual(['client left']);
    expect(gate.stats().abortedWaiting).toBe(1);
    held.release();
    expect(heard.granted).toHaveLength(0);
    expectInvariant(gate);
  });

  it('a waiter that became its permit: cancel after the grant is a no-op, release is exactly once', () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 1, maxHold: 1000 });
    const held = gate.tryAcquire()!;
    const { t, heard } = target();
    const ticket = gate.wait(t)!;
    expect((ticket as unknown as Permit).released).toBe(true); // not a held permit yet
    held.release();
    const permit = heard.granted[0]!;
    expect(permit.released).toBe(false);
    expect(gate.holders()).toEqual([permit]);
    ticket.cancel('too late');
    expect(heard.rejected).toHaveLength(0);
    expect(gate.held).toBe(1);
    expect(gate.stats().abortedWaiting).toBe(0);
    permit.release();
    permit.release();
    expect(gate.stats()).toMatchObject({ held: 0, released: 2, doubleReleases: 1 });
    expectInvariant(gate);
  });

  it('rejects with QueueTimeoutError at the gate deadline or a per-call one', () => {
    vi.useFakeTimers();
    const gate = new Semaphore({ limit: 1, queueTimeout: 100 });
    const held = gate.tryAcquire()!;
    const byGate = target();
    const byCall = target();
    gate.wait(byGate.t);
    gate.wait(byCall.t, 30);
    vi.advanceTimersByTime(30);
    expect(byCall.heard.rejected[0]).toBeInstanceOf(QueueTimeoutError);
    expect(byGate.heard.rejected).toHaveLength(0);
    vi.advanceTimersByTime(70);
    expect(byGate.heard.rejected[0]).toBeInstanceOf(QueueTimeoutError);
    held.release();
    expectInvariant(gate);
  });

  it('survives 10,000 waiters that each release synchronously inside granted (no stack growth)', () => {
    // The shape of a dispatcher that is gone: every dispatch fails at once and releases.
    const gate = new Semaphore({ limit: 1, maxQueue: 10_000 });
    const held = gate.tryAcquire()!;
    let grants = 0;
    for (let i = 0; i < 10_000; i++) {
      gate.wait(
        target((permit) => {
          grants++;
          permit.release();
        }).t,
      );
    }
    held.release();
    expect(grants).toBe(10_000);
    expect(gate.queued).toBe(0);
    expectInvariant(gate);
  });

  it('a target that acquires again inside granted queues behind the others (no barging from inside)', () => {
    const gate = new Semaphore({ limit: 1 });
    const held = gate.tryAcquire()!;
    const order: string[] = [];
    const second = target(() => order.push('second'));
    const first = target((permit) => {
      order.push('first');
      gate.wait(target(() => order.push('third')).t);
      permit.release();
    });
    gate.wait(first.t);
    gate.wait(second.t);
    held.release();
    expect(order).toEqual(['first', 'second']);
    second.heard.granted[0]!.release();
    expect(order).toEqual(['first', 'second', 'third']);
    expect(gate.held).toBe(1);
  });
});
