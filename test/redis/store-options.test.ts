import { describe, expect, it } from 'vitest';
import { HostLimiter } from '../../src/index.js';
import { DEFAULT_LEASE_MS, redisStore } from '../../src/redis/index.js';

/** Option checks happen at construction, before any Redis call: this object is never called. */
const client = { duplicate() {}, call() {} };

describe('redisStore options', () => {
  it('rejects what is not a node-redis or ioredis client', () => {
    expect(() => redisStore({ client: {} })).toThrow(/client must be a connected node-redis/);
    expect(() => redisStore({ client: undefined })).toThrow(TypeError);
  });

  it.each([
    [{ prefix: 'a{b' }, /prefix must be a string without/],
    [{ prefix: 'p'.repeat(201) }, /prefix must be at most 200 bytes/],
    [{ leaseMs: 0 }, /leaseMs must be a duration/],
    [{ heartbeatMs: 6000 }, /heartbeatMs must be at most half of leaseMs/],
    [{ commandTimeoutMs: -1 }, /commandTimeoutMs must be a duration/],
    [{ onStoreError: 'ignore' }, /onStoreError must be 'local' or 'reject'/],
    [{ onLeaseLost: 'retake' }, /onLeaseLost must be 'continue' or 'abort'/],
    [{ localLimit: 0 }, /localLimit must be a positive integer/],
    [{ replicas: 1.5 }, /replicas must be a positive integer/],
    [{ firstUseWaitMs: -1 }, /firstUseWaitMs must be a duration in ms .* got -1/],
    [{ leaseMs: 1000, firstUseWaitMs: 2000 }, /firstUseWaitMs must be at most leaseMs \(1000\)/],
    [{ drainMs: -1 }, /drainMs must be a duration in ms .* got -1/],
    [{ drainMs: Number.NaN }, /drainMs must be a duration in ms .* got NaN/],
    [{ leases: 3 }, /unknown option "leases"/],
  ])('names the option and the value: %o', (options, message) => {
    expect(() => redisStore({ client, ...(options as object) })).toThrow(message);
  });

  it('defaults to a 10 s lease renewed every 2 s, local fallback, 1 s per command, 100 ms first-use wait, a 5 s drain at close', () => {
    const store = redisStore({ client });
    expect(store.options).toMatchObject({
      prefix: 'hostgate:',
      leaseMs: DEFAULT_LEASE_MS,
      heartbeatMs: 2000,
      firstUseWaitMs: 100,
      commandTimeoutMs: 1000,
      onStoreError: 'local',
      onLeaseLost: 'continue',
      replicas: 0,
      drainMs: 5000,
    });
    expect(redisStore({ client, drainMs: 0 }).options.drainMs).toBe(0);
  });

  it('checks gate names: no hash-tag braces, no duplicates, validated limits', async () => {
    const store = redisStore({ client });
    expect(() => store.semaphore({ name: 'a}b', limit: 1 })).toThrow(/without \{ or \}/);
    // A name is in every key of every script call: bounded, and the error says so.
    expect(() => store.semaphore({ name: 'n'.repeat(600_000), limit: 1 })).toThrow(
      /name of a shared gate must be at most 200 bytes .* got 600000 bytes/,
    );
    expect(() => store.semaphore({ name: 'é'.repeat(101), limit: 1 })).toThrow(/got 202 bytes/);
    store.semaphore({ name: 'n'.repeat(200), limit: 1 });
    expect(() => store.semaphore({ name: 'x', limit: 0 })).toThrow(/limit must be a positive/);
    const gate = store.semaphore({ name: 'billing', limit: 2 });
    // A promise-returning method rejects, never throws (issue 23), on a shared gate as on a local one.
    // Weights as on a local gate: a positive integer, at most the limit (it could never be granted).
    await expect(gate.acquire({ weight: 3 })).rejects.toThrow(
      new RangeError('weight 3 exceeds the limit 2 of billing: it could never be granted'),
    );
    await expect(gate.acquire({ weight: 0 })).rejects.toThrow(
      /weight must be a positive integer, got 0/,
    );
    await expect(gate.acquire({ weight: 1.5 })).rejects.toBeInstanceOf(TypeError);
    await expect(gate.acquire({ priority: 'batch' })).rejects.toThrow(
      /priority classes are local-only/,
    );
    await expect(gate.run(() => 1, { weight: 3 })).rejects.toBeInstanceOf(RangeError);
    expect(gate.tryAcquire()).toBeUndefined(); // a shared grant is always a round trip
    expect(() => store.semaphore({ name: 'billing', limit: 2 })).toThrow(
      /already has a shared gate/,
    );
    expect(
      () =>
        new HostLimiter({
          store,
          partners: [{ name: 'billing', hosts: ['b.example'], limit: 1, shared: 'yes' as never }],
        }),
    ).toThrow(/shared must be a boolean/);
    return store.close();
  });
});
