import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  findShedError,
  HostgateError,
  isHostgateError,
  isShedError,
  PermitHoldTimeoutError,
  QueueFullError,
  QueueTimeoutError,
  ShedError,
} from '../../src/common/errors.js';
import {
  DEFAULT_QUEUE_PER_PERMIT,
  DEFAULT_QUEUE_TIMEOUT_MS,
  MAX_RETRY_AFTER_MS,
  type Permit,
  Semaphore,
} from '../../src/gate/semaphore.js';
import { expectInvariant } from '../helpers/invariant.js';

// Captured before any test installs fake timers: a real macrotask turn drains every microtask.
const realSetImmediate = globalThis.setImmediate;
const flush = (): Promise<void> => new Promise((resolve) => realSetImmediate(resolve));

interface Tracked<T> {
  readonly promise: Promise<T>;
  state: 'pending' | 'fulfilled' | 'rejected';
  value: T | undefined;
  reason: unknown;
  settlements: number;
}

/** Observes a promise without awaiting it (and marks its rejection handled). */
function track<T>(promise: Promise<T>): Tracked<T> {
  const t: Tracked<T> = {
    promise,
    state: 'pending',
    value: undefined,
    reason: undefined,
    settlements: 0,
  };
  promise.then(
    (value) => {
      t.settlements++;
      t.state = 'fulfilled';
      t.value = value;
    },
    (reason: unknown) => {
      t.settlements++;
      t.state = 'rejected';
      t.reason = reason;
    },
  );
  return t;
}

function granted<T>(t: Tracked<T>): T {
  expect(t.state).toBe('fulfilled');
  return t.value as T;
}

/** Calls that may throw synchronously or reject: both count as "refused". */
function attempt<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn();
  } catch (error) {
    return Promise.reject(error);
  }
}

function hold(gate: Semaphore): Permit {
  const permit = gate.tryAcquire();
  expect(permit).toBeDefined();
  return permit!;
}

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
});

describe('new Semaphore(options)', () => {
  it('requires an options object', () => {
    expect(() => new Semaphore(undefined as never)).toThrow(
      new TypeError('Semaphore options must be an options object, got undefined'),
    );
    expect(() => new Semaphore(3 as never)).toThrow(TypeError);
    expect(() => new Semaphore([] as never)).toThrow(/got an array/);
  });

  it.each([
    [0, '0'],
    [-1, '-1'],
    [1.5, '1.5'],
    [Number.NaN, 'NaN'],
    [Number.POSITIVE_INFINITY, 'Infinity'],
    ['2', '"2"'],
    [undefined, 'undefined'],
  ])('rejects limit %s with a TypeError naming the option and the value', (limit, shown) => {
    expect(() => new Semaphore({ limit: limit as number })).toThrow(
      new TypeError(`limit must be a positive integer, got ${shown}`),
    );
  });

  it('rejects unknown option keys, naming the key', () => {
    expect(() => new Semaphore({ limit: 1, maxQueu: 3 } as never)).toThrow(
      /^Semaphore: unknown option "maxQueu"; expected one of limit, maxQueue, queueTimeout/,
    );
  });

  it('requires maxQueue to be a non-negative integer', () => {
    expect(() => new Semaphore({ limit: 1, maxQueue: -1 })).toThrow(
      new TypeError('maxQueue must be a non-negative integer, got -1'),
    );
    expect(() => new Semaphore({ limit: 1, maxQueue: 2.5 })).toThrow(
      new TypeError('maxQueue must be a non-negative integer, got 2.5'),
    );
    expect(new Semaphore({ limit: 1, maxQueue: 0 }).stats().maxQueue).toBe(0);
  });

  it.each([0, -5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, '100'])(
    'rejects queueTimeout %s as a duration',
    (queueTimeout) => {
      expect(() => new Semaphore({ limit: 1, queueTimeout: queueTimeout as number })).toThrow(
        /^queueTimeout must be a duration in ms greater than 0 and at most 2147483647, got /,
      );
    },
  );

  it('validates maxHold, name and now up front', () => {
    expect(() => new Semaphore({ limit: 1, maxHold: 0 })).toThrow(
      /^maxHold must be a duration in ms .*, got 0$/,
    );
    expect(() => new Semaphore({ limit: 1, name: '' })).toThrow(
      new TypeError('name must be a non-empty string, got ""'),
    );
    expect(() => new Semaphore({ limit: 1, now: 5 as never })).toThrow(TypeError);
  });

  it('defaults to a queue of 10 per permit and a 1 s wait deadline', () => {
    const s = new Semaphore({ limit: 3 }).stats();
    expect(s.maxQueue).toBe(3 * DEFAULT_QUEUE_PER_PERMIT);
    expect(s.queueTimeout).toBe(DEFAULT_QUEUE_TIMEOUT_MS);
    expect(s).toMatchObject({ limit: 3, held: 0, available: 3, queued: 0, name: undefined });
  });

  it('refuses bad acquire() options with a TypeError', async () => {
    const gate = new Semaphore({ limit: 1 });
    await expect(attempt(() => gate.acquire({ timeout: 0 }))).rejects.toThrow(
      /^timeout must be a duration in ms .*, got 0$/,
    );
    await expect(attempt(() => gate.acquire({ signall: undefined } as never))).rejects.toThrow(
      /^acquire: unknown option "signall"/,
    );
    await expect(attempt(() => gate.acquire({ signal: {} as AbortSignal }))).rejects.toThrow(
      new TypeError('signal must be an AbortSignal, got an object'),
    );
    expect(gate.stats().acquired).toBe(0);
    expectInvariant(gate);
  });
});

describe('FIFO order and no barging', () => {
  it('grants waiters in the order they called acquire()', async () => {
    const gate = new Semaphore({ limit: 1 });
    const first = hold(gate);
    const order: string[] = [];
    const waiters = ['a', 'b', 'c'].map((id) =>
      gate.acquire().then((permit) => {
        order.push(id);
        return permit;
      }),
    );
    expectInvariant(gate);
    first.release();
    for (const waiter of waiters) {
      (await waiter).release();
      expectInvariant(gate);
    }
    expect(order).toEqual(['a', 'b', 'c']);
    expect(gate.stats()).toMatchObject({ held: 0, queued: 0, acquired: 4, released: 4 });
  });

  it('hands a released permit to the waiter, not to an acquire() in the same tick', async () => {
    const gate = new Semaphore({ limit: 1 });
    const first = hold(gate);
    const waiter = track(gate.acquire());
    first.release();
    const latecomer = track(gate.acquire());
    expectInvariant(gate);
    expect(gate.queued).toBe(1);
    await flush();
    expect(waiter.state).toBe('fulfilled');
    expect(latecomer.state).toBe('pending');
    granted(waiter).release();
    await flush();
    expect(latecomer.state).toBe('fulfilled');
    expectInvariant(gate);
  });

  it('never lets tryAcquire() overtake a waiter', async () => {
    const gate = new Semaphore({ limit: 1 });
    const first = hold(gate);
    const waiter = track(gate.acquire());
    expect(gate.tryAcquire()).toBeUndefined();
    first.release();
    expect(gate.tryAcquire()).toBeUndefined();
    expectInvariant(gate);
    await flush();
    granted(waiter).release();
    expect(gate.tryAcquire()).toBeDefined();
  });
});

describe('bounded queue', () => {
  it('rejects with QueueFullError at once when the queue is full, scheduling no timer', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 1, name: 'billing' });
    hold(gate);
    track(gate.acquire());
    const timers = vi.getTimerCount();
    const shed = track(gate.acquire());
    const shedWithOwnDeadline = track(gate.acquire({ timeout: 50 }));
    expect(vi.getTimerCount()).toBe(timers);
    await flush(); // microtasks only: no fake time passes
    expect(shed.state).toBe('rejected');
    expect(shedWithOwnDeadline.state).toBe('rejected');
    expect(shed.reason).toBeInstanceOf(QueueFullError);
    expect(shed.reason).toMatchObject({ code: 'HOSTGATE_QUEUE_FULL', partner: 'billing' });
    expect(gate.stats()).toMatchObject({ queued: 1, shedQueueFull: 2, acquired: 1 });
    expectInvariant(gate);
  });

  it('sheds at once with maxQueue 0 and never queues', async () => {
    const gate = new Semaphore({ limit: 2, maxQueue: 0 });
    hold(gate);
    hold(gate);
    const shed = track(gate.acquire());
    expect(vi.getTimerCount()).toBe(0);
    expect(gate.queued).toBe(0);
    await flush();
    expect(shed.reason).toBeInstanceOf(QueueFullError);
    expect(gate.stats().shedQueueFull).toBe(1);
    expectInvariant(gate);
  });
});

describe('wait deadline', () => {
  it('rejects with QueueTimeoutError at the gate queueTimeout, not before', async () => {
    const gate = new Semaphore({ limit: 1, queueTimeout: 250, name: 'billing' });
    hold(gate);
    const waiter = track(gate.acquire());
    await vi.advanceTimersByTimeAsync(249);
    expect(waiter.state).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(waiter.state).toBe('rejected');
    expect(waiter.reason).toBeInstanceOf(QueueTimeoutError);
    expect(waiter.reason).toMatchObject({ code: 'HOSTGATE_QUEUE_TIMEOUT', partner: 'billing' });
    expect((waiter.reason as Error).message).toMatch(/^no permit for billing within 250 ms; /);
    expect(gate.stats()).toMatchObject({ queued: 0, shedQueueTimeout: 1 });
    expect(vi.getTimerCount()).toBe(0);
    expectInvariant(gate);
  });

  it('uses a per-call timeout instead of the gate default', async () => {
    const gate = new Semaphore({ limit: 1, queueTimeout: 1000 });
    hold(gate);
    const waiter = track(gate.acquire({ timeout: 40 }));
    await vi.advanceTimersByTimeAsync(39);
    expect(waiter.state).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(waiter.reason).toBeInstanceOf(QueueTimeoutError);
    expect(vi.getTimerCount()).toBe(0);
    expectInvariant(gate);
  });

  it('expires mixed default and per-call waiters each at its own deadline', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 10, queueTimeout: 100 });
    hold(gate);
    const a = track(gate.acquire()); // deadline 100 (gate timer)
    const b = track(gate.acquire({ timeout: 30 })); // 30 (own timer)
    await vi.advanceTimersByTimeAsync(10);
    const c = track(gate.acquire()); // 110 (gate timer)
    const d = track(gate.acquire({ timeout: 500 })); // 510 (own timer)
    const e = track(gate.acquire({ timeout: 100 })); // same as the default: 110
    const outcomes = (...ws: Tracked<Permit>[]) =>
      ws.map((w) => (w.state === 'rejected' ? 'timeout' : w.state));
    await vi.advanceTimersByTimeAsync(20); // t = 30
    expect(outcomes(a, b, c, d, e)).toEqual([
      'pending',
      'timeout',
      'pending',
      'pending',
      'pending',
    ]);
    expect(gate.queued).toBe(4);
    await vi.advanceTimersByTimeAsync(70); // t = 100
    expect(outcomes(a, c, d, e)).toEqual(['timeout', 'pending', 'pending', 'pending']);
    await vi.advanceTimersByTimeAsync(10); // t = 110
    expect(outcomes(c, d, e)).toEqual(['timeout', 'pending', 'timeout']);
    await vi.advanceTimersByTimeAsync(400); // t = 510
    expect(d.state).toBe('rejected');
    expect(gate.stats()).toMatchObject({ queued: 0, shedQueueTimeout: 5 });
    expect(vi.getTimerCount()).toBe(0);
    expectInvariant(gate);
  });

  it('keeps the gate deadline for default waiters after a per-call waiter times out', async () => {
    // Regression: the per-call timer's expiry used to unlink the gate's deadline list and
    // clear its timer, so every default-deadline waiter then waited forever.
    const gate = new Semaphore({ limit: 1, queueTimeout: 1000 });
    hold(gate);
    const byDefault = track(gate.acquire());
    const ownDeadline = track(gate.acquire({ timeout: 100 }));
    await vi.advanceTimersByTimeAsync(100);
    expect(ownDeadline.reason).toBeInstanceOf(QueueTimeoutError);
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(900);
    expect(byDefault.reason).toBeInstanceOf(QueueTimeoutError);
    expect(gate.queued).toBe(0);
    expectInvariant(gate);
  });

  it('keeps default deadlines after the queue empties and refills around a per-call waiter', async () => {
    // A one-class gate reads its default deadlines off the queue itself; a per-call deadline
    // makes it list them, and an empty queue drops the list again.
    const gate = new Semaphore({ limit: 1, queueTimeout: 100 });
    const first = hold(gate);
    const a = track(gate.acquire()); // deadline 100
    const own = track(gate.acquire({ timeout: 500 })); // 500 (own timer): the list is built
    await vi.advanceTimersByTimeAsync(100);
    expect(a.reason).toBeInstanceOf(QueueTimeoutError);
    first.release(); // own served: the queue is empty
    await vi.advanceTimersByTimeAsync(0);
    granted(own).release();
    const holder = hold(gate);
    const b = track(gate.acquire()); // t = 100, deadline 200, no list
    await vi.advanceTimersByTimeAsync(50);
    const c = track(gate.acquire()); // 250
    await vi.advanceTimersByTimeAsync(99); // t = 249
    expect(b.reason).toBeInstanceOf(QueueTimeoutError);
    expect(c.state).toBe('pending');
    await vi.advanceTimersByTimeAsync(1); // t = 250
    expect(c.reason).toBeInstanceOf(QueueTimeoutError);
    expect(vi.getTimerCount()).toBe(0);
    holder.release();
    expectInvariant(gate);
  });

  it('expires the next waiter at its deadline when an expiry queues a new waiter', async () => {
    // Regression: a waiter queued from inside an expiry armed the timer for its own, later
    // deadline, and the waiter behind the expired one waited until then.
    const gate = new Semaphore({ limit: 1, queueTimeout: 100 });
    const first = hold(gate);
    const told: unknown[] = [];
    gate.wait({
      granted: (permit) => permit.release(),
      rejected: () => {
        gate.wait({ granted: (permit) => permit.release(), rejected: (r) => told.push(r) });
      },
    }); // deadline 100; its rejection queues another (deadline 200)
    await vi.advanceTimersByTimeAsync(50);
    const b = track(gate.acquire()); // 150
    await vi.advanceTimersByTimeAsync(100); // t = 150
    expect(b.reason).toBeInstanceOf(QueueTimeoutError);
    expect(told).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(50); // t = 200
    expect(told).toHaveLength(1);
    expect(gate.queued).toBe(0);
    first.release();
    expectInvariant(gate);
  });

  it('moves the gate deadline timer to the next waiter when the head is served', async () => {
    const gate = new Semaphore({ limit: 1, queueTimeout: 100 });
    const first = hold(gate);
    const a = track(gate.acquire());
    await vi.advanceTimersByTimeAsync(50);
    const b = track(gate.acquire()); // deadline 150
    first.release(); // a served at 50
    await vi.advanceTimersByTimeAsync(99); // t = 149
    expect(granted(a).released).toBe(false);
    expect(b.state).toBe('pending');
    await vi.advanceTimersByTimeAsync(1); // t = 150
    expect(b.reason).toBeInstanceOf(QueueTimeoutError);
    expectInvariant(gate);
  });

  it('serves the waiter when a release runs just before its deadline in the same tick', async () => {
    const gate = new Semaphore({ limit: 1, queueTimeout: 100 });
    const first = hold(gate);
    setTimeout(() => first.release(), 100); // due at the same instant, scheduled first
    const waiter = track(gate.acquire());
    await vi.advanceTimersByTimeAsync(100);
    expect(granted(waiter).released).toBe(false);
    expect(gate.stats()).toMatchObject({ held: 1, shedQueueTimeout: 0, acquired: 2 });
    expectInvariant(gate);
  });

  it('keeps the permit free when the deadline fires just before a release in the same tick', async () => {
    for (const timeout of [undefined, 100]) {
      const gate = new Semaphore({ limit: 1, queueTimeout: timeout === undefined ? 100 : 900 });
      const first = hold(gate);
      const waiter = track(gate.acquire(timeout === undefined ? undefined : { timeout }));
      setTimeout(() => first.release(), 100); // same instant, scheduled after the deadline
      await vi.advanceTimersByTimeAsync(100);
      expect(waiter.reason).toBeInstanceOf(QueueTimeoutError);
      expect(gate.stats()).toMatchObject({ held: 0, available: 1, acquired: 1, released: 1 });
      expectInvariant(gate);
    }
  });

  it('runs its default clock on vitest fake timers', async () => {
    // Regression: the clock came from node:perf_hooks, which fake timers do not replace, so
    // deadlines measured real time while their timers ran on fake time and never expired.
    const gate = new Semaphore({ limit: 1, queueTimeout: 5000, maxHold: 8000 });
    const first = hold(gate);
    const waiter = track(gate.acquire());
    await vi.advanceTimersByTimeAsync(5000);
    expect(waiter.reason).toBeInstanceOf(QueueTimeoutError);
    await vi.advanceTimersByTimeAsync(3000);
    expect(first.released).toBe(true);
    expect(gate.stats().hold.maxMs).toBe(8000);
  });
});

describe('abort', () => {
  it('rejects with signal.reason when the signal aborted before acquire(), holding nothing', async () => {
    const gate = new Semaphore({ limit: 1 });
    const reason = new Error('gone');
    const result = track(gate.acquire({ signal: AbortSignal.abort(reason) }));
    await flush();
    expect(result.reason).toBe(reason);
    expect(gate.stats()).toMatchObject({ held: 0, acquired: 0, queued: 0, abortedWaiting: 0 });
    expect(vi.getTimerCount()).toBe(0);
    expectInvariant(gate);
  });

  it('rejects a queued waiter with the signal reason when it aborts', async () => {
    const gate = new Semaphore({ limit: 1 });
    hold(gate);
    const controller = new AbortController();
    const reason = new Error('client went away');
    const waiter = track(gate.acquire({ signal: controller.signal }));
    controller.abort(reason);
    await flush();
    expect(waiter.reason).toBe(reason);
    expect(gate.stats()).toMatchObject({ held: 1, queued: 0, abortedWaiting: 1, acquired: 1 });
    expectInvariant(gate);
  });

  it.each([
    ['a string', 'client gone'],
    ['an object', { code: 499 }],
  ])('rejects with the exact reason when it is %s, not an Error', async (_, reason) => {
    const gate = new Semaphore({ limit: 1 });
    hold(gate);
    const controller = new AbortController();
    const waiter = track(gate.acquire({ signal: controller.signal }));
    controller.abort(reason);
    await flush();
    expect(waiter.state).toBe('rejected');
    expect(waiter.reason).toBe(reason);
  });

  it('frees the queue slot at once when a waiter aborts', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 1 });
    hold(gate);
    const controller = new AbortController();
    track(gate.acquire({ signal: controller.signal }));
    expect(vi.getTimerCount()).toBe(1);
    controller.abort();
    expect(gate.queued).toBe(0); // synchronously, before any microtask
    expect(vi.getTimerCount()).toBe(0); // its deadline timer is gone too
    const next = track(gate.acquire());
    expect(gate.queued).toBe(1);
    await flush();
    expect(next.state).toBe('pending');
    expect(gate.stats().shedQueueFull).toBe(0);
    expectInvariant(gate);
  });

  it('hands the permit to the next waiter when the abort lands in the same tick as the grant (golang/go#63615)', async () => {
    const gate = new Semaphore({ limit: 1 });
    const first = hold(gate);
    const controller = new AbortController();
    const reason = new Error('cancelled');
    const cancelled = track(gate.acquire({ signal: controller.signal }));
    const next = track(gate.acquire());
    first.release(); // grants to `cancelled`...
    controller.abort(reason); // ...which aborts before it can resume
    expectInvariant(gate);
    await flush();
    expect(cancelled.reason).toBe(reason);
    const permit = granted(next);
    expect(gate.holders()).toEqual([permit]);
    expect(gate.stats()).toMatchObject({ held: 1, acquired: 3, released: 2, doubleReleases: 0 });
    expectInvariant(gate);
    permit.release();
    expect(gate.stats()).toMatchObject({ held: 0, available: 1, acquired: 3, released: 3 });
  });

  it('returns the permit to the gate when a same-tick abort leaves no waiter behind', async () => {
    const gate = new Semaphore({ limit: 1 });
    const first = hold(gate);
    const controller = new AbortController();
    const cancelled = track(gate.acquire({ signal: controller.signal }));
    first.release();
    controller.abort();
    await flush();
    expect(cancelled.state).toBe('rejected');
    expect(gate.stats()).toMatchObject({ held: 0, available: 1, acquired: 2, released: 2 });
    expectInvariant(gate);
  });

  it('does not free an extra slot when the signal aborts after the grant (vs-threading#521)', async () => {
    const gate = new Semaphore({ limit: 1 });
    const first = hold(gate);
    const immediateCtl = new AbortController();
    const queuedCtl = new AbortController();
    const queued = track(gate.acquire({ signal: queuedCtl.signal }));
    first.release();
    await flush();
    const permit = granted(queued);
    queuedCtl.abort();
    expect(gate.stats()).toMatchObject({ held: 1, available: 0, abortedWaiting: 0 });
    const other = track(gate.acquire());
    expect(gate.tryAcquire()).toBeUndefined();
    permit.release();
    await flush();
    const otherPermit = granted(other);
    otherPermit.release();

    const immediate = await gate.acquire({ signal: immediateCtl.signal });
    immediateCtl.abort();
    expect(gate.tryAcquire()).toBeUndefined();
    expect(immediate.released).toBe(false);
    immediate.release();
    expect(gate.stats()).toMatchObject({ held: 0, available: 1, acquired: 4, released: 4 });
    expectInvariant(gate);
  });

  it('does not strand a free permit when the head waiter is cancelled as a permit frees (golang/sync#10)', async () => {
    for (const holderListensFirst of [true, false]) {
      const gate = new Semaphore({ limit: 1 });
      const first = hold(gate);
      const controller = new AbortController();
      // One request signal drives both the holder's cleanup and the head waiter.
      const release = () => first.release();
      if (holderListensFirst) controller.signal.addEventListener('abort', release);
      const head = track(gate.acquire({ signal: controller.signal }));
      if (!holderListensFirst) controller.signal.addEventListener('abort', release);
      const next = track(gate.acquire());
      controller.abort();
      expectInvariant(gate);
      await flush();
      expect(head.state).toBe('rejected');
      expect(granted(next).released).toBe(false);
      expect(gate.stats()).toMatchObject({ held: 1, queued: 0 });
      expectInvariant(gate);
    }
  });
});

describe('release', () => {
  it('counts a second release() as a no-op in doubleReleases, never an extra permit', async () => {
    const gate = new Semaphore({ limit: 2 });
    const a = hold(gate);
    hold(gate);
    const c = track(gate.acquire());
    const d = track(gate.acquire());
    a.release();
    a.release();
    a[Symbol.dispose]();
    await flush();
    expect(c.state).toBe('fulfilled');
    expect(d.state).toBe('pending');
    expect(gate.stats()).toMatchObject({ held: 2, queued: 1, released: 1, doubleReleases: 2 });
    expectInvariant(gate);
  });

  it('releases a `using` permit at the end of its scope, also when the scope throws', async () => {
    const gate = new Semaphore({ limit: 1 });
    {
      using permit = await gate.acquire();
      expect(permit.released).toBe(false);
      expect(gate.held).toBe(1);
    }
    expect(gate.held).toBe(0);
    const body = async () => {
      using _permit = await gate.acquire();
      throw new Error('boom');
    };
    await expect(body()).rejects.toThrow('boom');
    expect(gate.stats()).toMatchObject({ held: 0, acquired: 2, released: 2, doubleReleases: 0 });
    expectInvariant(gate);
  });
});

describe('run()', () => {
  it('returns what fn returns and releases the permit', async () => {
    const gate = new Semaphore({ limit: 1 });
    const result = await gate.run(() => {
      expect(gate.held).toBe(1);
      return 42;
    });
    expect(result).toBe(42);
    expect(gate.stats()).toMatchObject({ held: 0, acquired: 1, released: 1 });
  });

  it('rethrows what fn throws and releases the permit', async () => {
    const gate = new Semaphore({ limit: 1 });
    await expect(
      gate.run(async () => {
        throw new Error('partner said no');
      }),
    ).rejects.toThrow('partner said no');
    expect(gate.stats()).toMatchObject({ held: 0, released: 1 });
    expectInvariant(gate);
  });

  it('holds the permit until an aborted fn settles, then releases it', async () => {
    const gate = new Semaphore({ limit: 1 });
    const controller = new AbortController();
    let seen: AbortSignal | undefined;
    let settle!: (reason: unknown) => void;
    const result = track(
      gate.run(
        (signal) => {
          seen = signal;
          return new Promise<never>((_, reject) => {
            settle = reject;
          });
        },
        { signal: controller.signal },
      ),
    );
    await flush();
    expect(seen).toBe(controller.signal);
    controller.abort(new Error('stop'));
    await flush();
    expect(gate.held).toBe(1); // fn is still running: the partner still sees the request
    expect(result.state).toBe('pending');
    settle(controller.signal.reason);
    await flush();
    expect((result.reason as Error).message).toBe('stop');
    expect(gate.stats()).toMatchObject({ held: 0, released: 1 });
    expectInvariant(gate);
  });

  it('never calls fn when the signal aborted first or the queue is full', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 0 });
    const fn = vi.fn();
    await expect(gate.run(fn, { signal: AbortSignal.abort('early') })).rejects.toBe('early');
    hold(gate);
    await expect(gate.run(fn)).rejects.toBeInstanceOf(QueueFullError);
    expect(fn).not.toHaveBeenCalled();
    expectInvariant(gate);
  });
});

describe('run() queued behind a held permit', () => {
  it('returns what fn returns, a promise, a plain value or a foreign thenable', async () => {
    const gate = new Semaphore({ limit: 1 });
    const permit = hold(gate);
    const thenable = {
      // biome-ignore lint/suspicious/noThenProperty: a foreign thenable on purpose
      then(resolve: (value: string) => void) {
        resolve('from a thenable');
      },
    } as PromiseLike<string>;
    const results = Promise.all([
      gate.run(async () => 'from a promise'),
      gate.run(() => 'plain'),
      gate.run(() => thenable),
      gate.run(() => undefined),
    ]);
    expect(gate.queued).toBe(4);
    permit.release();
    expect(await results).toEqual(['from a promise', 'plain', 'from a thenable', undefined]);
    expect(gate.stats()).toMatchObject({ held: 0, acquired: 5, released: 5 });
    expectInvariant(gate);
  });

  it('rejects with what fn throws synchronously, rejects with, or a thenable rejects with', async () => {
    const gate = new Semaphore({ limit: 1 });
    const permit = hold(gate);
    const thrown = new Error('thrown');
    const rejected = new Error('rejected');
    const fromThenable = new Error('thenable');
    const outcomes = [
      track(
        gate.run(() => {
          throw thrown;
        }),
      ),
      track(gate.run(() => Promise.reject(rejected))),
      track(
        gate.run(() => ({
          // biome-ignore lint/suspicious/noThenProperty: a foreign thenable on purpose
          then(_: unknown, reject: (reason: unknown) => void) {
            reject(fromThenable);
          },
        })),
      ),
    ];
    const after = gate.run(() => 'still served');
    permit.release();
    expect(await after).toBe('still served');
    expect(outcomes.map((o) => o.reason)).toEqual([thrown, rejected, fromThenable]);
    expect(outcomes.every((o) => o.settlements === 1)).toBe(true);
    expect(gate.stats()).toMatchObject({ held: 0, acquired: 5, released: 5, doubleReleases: 0 });
    expectInvariant(gate);
  });

  it('has released the permit when its caller resumes, on success and on failure', async () => {
    const gate = new Semaphore({ limit: 1 });
    const permit = hold(gate);
    const ok = gate.run(async () => {
      await null;
      return 'ok';
    });
    const bad = gate.run(async () => {
      await null;
      throw new Error('bad');
    });
    permit.release();
    expect(await ok).toBe('ok');
    // The second task holds the permit now; the first one's went back before its caller resumed.
    expect(gate.stats()).toMatchObject({ held: 1, released: 2 });
    await expect(bad).rejects.toThrow('bad');
    expect(gate.stats()).toMatchObject({ held: 0, released: 3 });
    expectInvariant(gate);
  });

  it('starts each task with its own fn and signal, in grant order, across gates', async () => {
    const a = new Semaphore({ limit: 1 });
    const b = new Semaphore({ limit: 1 });
    const pa = hold(a);
    const pb = hold(b);
    const started: string[] = [];
    const signals = [new AbortController().signal, new AbortController().signal];
    const seen: (AbortSignal | undefined)[] = [];
    const task = (name: string) => (signal: AbortSignal | undefined) => {
      started.push(name);
      seen.push(signal);
      return name;
    };
    const done = Promise.all([
      a.run(task('a1'), { signal: signals[0]! }),
      b.run(task('b1'), { signal: signals[1]! }),
      a.run(task('a2')),
      b.run(task('b2')),
    ]);
    pb.release(); // grants b1
    pa.release(); // grants a1
    expect(started).toEqual([]); // a microtask later, never on the releasers' stacks
    expect(await done).toEqual(['a1', 'b1', 'a2', 'b2']);
    expect(started).toEqual(['b1', 'a1', 'b2', 'a2']);
    expect(seen).toEqual([signals[1], signals[0], undefined, undefined]);
    expectInvariant(a);
    expectInvariant(b);
  });

  it('rejects with the error its release throws, as a finally would', async () => {
    const gate = new Semaphore({ limit: 1 });
    const permit = hold(gate);
    const done = track(gate.run(() => 'result'));
    const error = new Error('target threw');
    // Queued behind the run(): its grant happens inside the run()'s release.
    gate.wait({
      granted: (p) => {
        p.release();
        throw error;
      },
      rejected: () => {},
    });
    permit.release();
    await flush();
    expect(done.state).toBe('rejected');
    expect(done.reason).toBe(error);
    expect(gate.stats()).toMatchObject({ held: 0, acquired: 3, released: 3 });
    expectInvariant(gate);
  });
});

describe('setLimit()', () => {
  it('admits waiters at once when the limit grows', async () => {
    const gate = new Semaphore({ limit: 1 });
    hold(gate);
    const waiters = [track(gate.acquire()), track(gate.acquire()), track(gate.acquire())];
    gate.setLimit(3);
    expect(gate.stats()).toMatchObject({ limit: 3, held: 3, queued: 1 });
    expectInvariant(gate);
    await flush();
    expect(waiters.map((w) => w.state)).toEqual(['fulfilled', 'fulfilled', 'pending']);
  });

  it('grants nothing new after a shrink until held drops below the new limit', async () => {
    const gate = new Semaphore({ limit: 3 });
    const permits = [hold(gate), hold(gate), hold(gate)];
    const waiter = track(gate.acquire());
    gate.setLimit(1);
    expect(gate.stats()).toMatchObject({ limit: 1, held: 3, available: 0, queued: 1 });
    expectInvariant(gate);
    permits[0]!.release();
    permits[1]!.release();
    await flush();
    expect(waiter.state).toBe('pending');
    expect(gate.stats()).toMatchObject({ held: 1, available: 0, queued: 1 });
    expectInvariant(gate);
    permits[2]!.release();
    await flush();
    expect(granted(waiter).released).toBe(false);
    expect(gate.stats()).toMatchObject({ held: 1, available: 0, queued: 0 });
    expectInvariant(gate);
  });

  it('rejects a limit that is not a positive integer and keeps the old one', () => {
    const gate = new Semaphore({ limit: 2 });
    expect(() => gate.setLimit(0)).toThrow(
      new TypeError('limit must be a positive integer, got 0'),
    );
    expect(() => gate.setLimit(1.5)).toThrow(TypeError);
    expect(gate.limit).toBe(2);
  });
});

describe('maxHold', () => {
  it('runs onHoldTimeout with a PermitHoldTimeoutError and takes the permit back', async () => {
    const gate = new Semaphore({ limit: 1, maxHold: 500, name: 'billing' });
    const permit = hold(gate);
    const waiter = track(gate.acquire({ timeout: 10_000 }));
    const seen: { error: PermitHoldTimeoutError; heldDuringHook: number }[] = [];
    permit.onHoldTimeout = (error) => {
      seen.push({ error, heldDuringHook: gate.held });
      expect(permit.released).toBe(false); // told to stop before the slot is reused
    };
    await vi.advanceTimersByTimeAsync(499);
    expect(seen).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(seen).toHaveLength(1);
    const { error, heldDuringHook } = seen[0]!;
    expect(heldDuringHook).toBe(1);
    expect(error).toBeInstanceOf(PermitHoldTimeoutError);
    expect(error).toMatchObject({ code: 'HOSTGATE_HOLD_TIMEOUT', partner: 'billing', heldMs: 500 });
    expect(isShedError(error)).toBe(false);
    expect(permit.released).toBe(true);
    expect(granted(waiter).released).toBe(false);
    permit.release(); // the holder's own release afterwards: expected, silent
    expect(gate.stats()).toMatchObject({
      held: 1,
      holdTimeouts: 1,
      doubleReleases: 0,
      acquired: 2,
      released: 1,
    });
    expectInvariant(gate);
  });

  it('still takes the permit back when the hook throws', async () => {
    const gate = new Semaphore({ limit: 1, maxHold: 100 });
    const permit = hold(gate);
    permit.onHoldTimeout = () => {
      throw new Error('hook bug');
    };
    await vi.advanceTimersByTimeAsync(100);
    expect(permit.released).toBe(true);
    expect(gate.stats()).toMatchObject({ held: 0, available: 1, holdTimeouts: 1 });
    expectInvariant(gate);
  });

  it('leaves a permit released before maxHold alone', async () => {
    const gate = new Semaphore({ limit: 1, maxHold: 100 });
    const permit = hold(gate);
    const hook = vi.fn();
    permit.onHoldTimeout = hook;
    await vi.advanceTimersByTimeAsync(60);
    permit.release();
    await vi.advanceTimersByTimeAsync(1000);
    expect(hook).not.toHaveBeenCalled();
    expect(gate.stats()).toMatchObject({ holdTimeouts: 0, released: 1, doubleReleases: 0 });
    expect(vi.getTimerCount()).toBe(0);
  });

  it('takes back each holder at its own maxHold even when a take-back grants to a waiter', async () => {
    // Regression: the grant made inside the hold timer armed the next timer for the new
    // permit (maxHold away), so older holders were taken back up to maxHold late.
    const gate = new Semaphore({ limit: 2, maxHold: 100 });
    const a = hold(gate);
    await vi.advanceTimersByTimeAsync(50);
    const b = hold(gate);
    const heldMs: number[] = [];
    b.onHoldTimeout = (error) => heldMs.push(error.heldMs);
    const c = track(gate.acquire());
    await vi.advanceTimersByTimeAsync(50); // t = 100: a expires, c takes its slot
    expect(a.released).toBe(true);
    expect(granted(c).released).toBe(false);
    await vi.advanceTimersByTimeAsync(50); // t = 150: b expires
    expect(b.released).toBe(true);
    expect(heldMs).toEqual([100]);
    await vi.advanceTimersByTimeAsync(50); // t = 200: c expires
    expect(granted(c).released).toBe(true);
    expect(gate.stats()).toMatchObject({ held: 0, holdTimeouts: 3, released: 3 });
    expectInvariant(gate);
  });

  it('lists holders oldest first', () => {
    const gate = new Semaphore({ limit: 3 });
    const a = hold(gate);
    const b = hold(gate);
    const c = hold(gate);
    b.release();
    expect(gate.holders()).toEqual([a, c]);
    expect(a.gate).toBe(gate);
  });
});

describe('retryAfterMs', () => {
  it('grows with the queue length', async () => {
    const gate = new Semaphore({ limit: 2, maxQueue: 10, queueTimeout: 1000, observe: true });
    hold(gate);
    hold(gate);
    await vi.advanceTimersByTimeAsync(40);
    const estimates = [gate.retryAfterMs()];
    for (let i = 0; i < 3; i++) {
      track(gate.acquire());
      estimates.push(gate.retryAfterMs());
    }
    // No hold measured: the calls in flight have held 40 ms, so a hold is at least that (issue
    // 33; not the hold the bounds were sized for, 1000 ms × 2 / 10, which follows the deadline).
    expect(estimates).toEqual([20, 40, 60, 80]);
  });

  it('with no hold measured, follows the ages of the calls in flight, not the wait deadline', async () => {
    // Issue 33: limit 4, maxQueue 8, queueTimeout 10 s; sized for its bounds the first sheds said
    // "retry after 10 s" while the 100 ms calls drained the queue in 0.32 s.
    const gate = new Semaphore({ limit: 4, maxQueue: 8, queueTimeout: 10_000, observe: true });
    for (let i = 0; i < 4; i++) hold(gate);
    for (let i = 0; i < 8; i++) track(gate.acquire());
    await vi.advanceTimersByTimeAsync(30);
    const shed = track(gate.acquire());
    await flush();
    expect((shed.reason as QueueFullError).retryAfterMs).toBe(Math.ceil((9 / 4) * 30));
  });

  it('follows observed hold times once permits come back', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 10, observe: true });
    const permit = hold(gate);
    await vi.advanceTimersByTimeAsync(40);
    permit.release();
    hold(gate);
    track(gate.acquire());
    track(gate.acquire());
    expect(gate.retryAfterMs()).toBe(3 * 40);
  });

  it('is clamped to [1 ms, 60 s]', async () => {
    const fast = new Semaphore({ limit: 1, observe: true });
    hold(fast).release(); // held for 0 ms
    expect(fast.retryAfterMs()).toBe(1);

    const slow = new Semaphore({ limit: 1, maxQueue: 100, queueTimeout: 10_000, observe: true });
    const first = hold(slow);
    await vi.advanceTimersByTimeAsync(1000); // a measured hold of 1 s, 101 positions
    first.release();
    hold(slow);
    for (let i = 0; i < 100; i++) track(slow.acquire());
    expect(slow.retryAfterMs()).toBe(MAX_RETRY_AFTER_MS);
    const shed = track(slow.acquire());
    await flush();
    expect((shed.reason as QueueFullError).retryAfterMs).toBe(MAX_RETRY_AFTER_MS);
  });

  it('is carried by QueueFullError and QueueTimeoutError as a positive estimate', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 2, queueTimeout: 300 });
    hold(gate);
    const first = track(gate.acquire());
    const second = track(gate.acquire());
    const expected = gate.retryAfterMs();
    const full = track(gate.acquire());
    await vi.advanceTimersByTimeAsync(300);
    const errors = [full.reason, first.reason, second.reason] as ShedError[];
    expect(errors[0]).toBeInstanceOf(QueueFullError);
    expect(errors[0]!.retryAfterMs).toBe(expected);
    expect(errors[1]).toBeInstanceOf(QueueTimeoutError);
    expect(errors[1]!.retryAfterMs).toBeGreaterThanOrEqual(errors[2]!.retryAfterMs);
    for (const error of errors) {
      expect(error.retryAfterMs).toBeGreaterThanOrEqual(1);
      expect(error.retryAfterMs).toBeLessThanOrEqual(MAX_RETRY_AFTER_MS);
    }
  });
});

describe('stats()', () => {
  it('counts every outcome exactly', async () => {
    const gate = new Semaphore({
      limit: 1,
      maxQueue: 2,
      queueTimeout: 100,
      maxHold: 1000,
      name: 'billing',
    });
    const a = hold(gate);
    const timedOut = track(gate.acquire());
    const controller = new AbortController();
    const aborted = track(gate.acquire({ signal: controller.signal }));
    const full = track(gate.acquire());
    controller.abort();
    expectInvariant(gate);
    await vi.advanceTimersByTimeAsync(100);
    a.release();
    a.release();
    const e = await gate.acquire();
    await vi.advanceTimersByTimeAsync(1000);
    e.release();
    expect([timedOut, aborted, full].map((t) => t.state)).toEqual([
      'rejected',
      'rejected',
      'rejected',
    ]);
    const s = gate.stats();
    expect(s).toMatchObject({
      name: 'billing',
      limit: 1,
      held: 0,
      available: 1,
      queued: 0,
      maxQueue: 2,
      queueTimeout: 100,
      acquired: 2,
      released: 2,
      shedQueueFull: 1,
      shedQueueTimeout: 1,
      abortedWaiting: 1,
      holdTimeouts: 1,
      doubleReleases: 1,
    });
    expect(s.wait).toMatchObject({ count: 2, sumMs: 0, maxMs: 0 });
    expect(s.hold).toMatchObject({ count: 2, sumMs: 1100, maxMs: 1000 });
    expectInvariant(gate);
  });

  it('records how long granted waiters waited', async () => {
    const gate = new Semaphore({ limit: 1, observe: true });
    const permit = hold(gate);
    const waiter = track(gate.acquire());
    await vi.advanceTimersByTimeAsync(30);
    permit.release();
    await flush();
    expect(waiter.state).toBe('fulfilled');
    expect(gate.stats().wait).toMatchObject({ count: 2, sumMs: 30, maxMs: 30 });
  });
});

describe('observation', () => {
  it('reads no clock per permit until observed, then measures from its first stats()', () => {
    let t = 0;
    const now = vi.fn(() => t);
    const gate = new Semaphore({ limit: 2, now });
    for (let i = 0; i < 10; i++) hold(gate).release();
    const a = hold(gate);
    expect(now).not.toHaveBeenCalled();
    expect(gate.observed).toBe(false);
    expect(a.acquiredAt).toBeNaN();

    t = 5;
    const s = gate.stats();
    expect(gate.observed).toBe(true);
    expect(s).toMatchObject({ acquired: 11, released: 10 });
    expect(s.wait.count).toBe(0);
    expect(s.hold.count).toBe(0);
    // A permit held across the first look is stamped with that moment.
    expect(a.acquiredAt).toBe(5);
    t = 12;
    a.release();
    const b = hold(gate);
    expect(b.acquiredAt).toBe(12);
    expect(gate.stats().hold).toMatchObject({ count: 1, sumMs: 7 });
    expect(gate.stats().wait.count).toBe(1);
    b.release();
    expectInvariant(gate);
  });

  it('is observed from the first noteProgress(): its permits carry requests', () => {
    let t = 0;
    const gate = new Semaphore({ limit: 1, now: () => t });
    const permit = gate.tryAcquire()!;
    t = 3;
    permit.noteProgress();
    expect(gate.observed).toBe(true);
    expect(permit.aliveAt).toBe(3);
    expect(gate.lastProgressAt).toBe(3);
  });

  it('is observed from construction with observe, maxHold or leakWarnAfter', () => {
    expect(new Semaphore({ limit: 1, observe: true }).observed).toBe(true);
    expect(new Semaphore({ limit: 1, maxHold: 1000 }).observed).toBe(true);
    expect(new Semaphore({ limit: 1, leakWarnAfter: 1000 }).observed).toBe(true);
    expect(new Semaphore({ limit: 1 }).observed).toBe(false);
    expect(new Semaphore({ limit: 1 }).holdTimes.count).toBe(0);
    expect(() => new Semaphore({ limit: 1, observe: 'yes' as never })).toThrow(TypeError);
  });

  it('starts observing at its first shed, so later Retry-After hints follow hold times', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 0 });
    const permit = hold(gate);
    const shed = track(gate.acquire());
    await flush();
    expect(shed.reason).toBeInstanceOf(QueueFullError);
    expect(gate.observed).toBe(true);
    await vi.advanceTimersByTimeAsync(40);
    permit.release();
    hold(gate);
    expect(gate.retryAfterMs()).toBe(40);
  });
});

describe('errors', () => {
  it('supports instanceof, a stable code and the gate name as partner', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 0, name: 'billing' });
    hold(gate);
    const error = await gate.acquire().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QueueFullError);
    expect(error).toBeInstanceOf(ShedError);
    expect(error).toBeInstanceOf(HostgateError);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(QueueTimeoutError);
    expect(error).toMatchObject({
      name: 'QueueFullError',
      code: QueueFullError.CODE,
      partner: 'billing',
    });
    expect(QueueFullError.CODE).toBe('HOSTGATE_QUEUE_FULL');
    expect(QueueTimeoutError.CODE).toBe('HOSTGATE_QUEUE_TIMEOUT');
    expect(isHostgateError(error)).toBe(true);
    expect((error as Error).message).toMatch(
      /^queue for billing is full \(0 waiting, maxQueue 0\)/,
    );
  });

  it('names "this gate" and has no partner when the gate is unnamed', async () => {
    const gate = new Semaphore({ limit: 1, maxQueue: 0 });
    hold(gate);
    const error = (await gate.acquire().catch((e: unknown) => e)) as QueueFullError;
    expect(error.partner).toBeUndefined();
    expect(error.message).toMatch(/^queue for this gate is full/);
  });

  it('finds the shed error itself or along a cause chain, and nothing else', () => {
    const shed = new QueueTimeoutError('billing', 250, 500);
    expect(isShedError(shed)).toBe(true);
    expect(isShedError(new PermitHoldTimeoutError('billing', 1))).toBe(false);
    expect(isShedError(new Error('x'))).toBe(false);
    expect(isShedError('HOSTGATE_QUEUE_FULL')).toBe(false);
    expect(findShedError(shed)).toBe(shed);
    const fetchFailed = new TypeError('fetch failed', { cause: shed });
    expect(findShedError(fetchFailed)).toBe(shed);
    expect(findShedError(new Error('outer', { cause: fetchFailed }))).toBe(shed);
    expect(findShedError(new TypeError('fetch failed', { cause: new Error('ECONNRESET') }))).toBe(
      undefined,
    );
    expect(findShedError(undefined)).toBeUndefined();
  });
});
