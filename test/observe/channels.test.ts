import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type AcquireMessage,
  channels,
  type DoubleReleaseMessage,
  type HoldTimeoutMessage,
  MetricsCollector,
  PermitHoldTimeoutError,
  QueueFullError,
  QueueTimeoutError,
  type ReleaseMessage,
  Semaphore,
  type ShedMessage,
  type WaitAbortedMessage,
} from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';

const NAMES = {
  acquire: 'hostgate:acquire',
  release: 'hostgate:release',
  shed: 'hostgate:shed',
  waitAborted: 'hostgate:wait-aborted',
  holdTimeout: 'hostgate:hold-timeout',
  doubleRelease: 'hostgate:double-release',
} as const;
type Name = keyof typeof NAMES;

/** Drives one of every event through a gate with a manual clock and fake timers. */
async function everyEvent(): Promise<Semaphore> {
  const gate = new Semaphore({
    limit: 1,
    maxQueue: 1,
    queueTimeout: 50,
    maxHold: 100,
    name: 'billing',
  });
  const first = gate.tryAcquire()!; // acquire
  const waiting = expect(gate.acquire()).rejects.toBeInstanceOf(QueueTimeoutError); // queued
  await expect(gate.acquire()).rejects.toBeInstanceOf(QueueFullError); // shed: queue_full
  await vi.advanceTimersByTimeAsync(60);
  await waiting; // shed: queue_timeout
  const controller = new AbortController();
  const aborted = gate.acquire({ signal: controller.signal });
  controller.abort(new Error('client went away')); // wait-aborted
  await expect(aborted).rejects.toThrow('client went away');
  first.release('aborted'); // release (aborted)
  first.release(); // double-release
  const held = gate.tryAcquire()!;
  held.onHoldTimeout = () => held.release('aborted'); // the hook's abort is the take-back
  await vi.advanceTimersByTimeAsync(150); // hold-timeout, release (hold_timeout)
  expectInvariant(gate);
  return gate;
}

describe('diagnostics channels', () => {
  afterEach(() => {
    vi.restoreAllMocks();
    vi.useRealTimers();
  });

  it('publish nothing without subscribers', async () => {
    vi.useFakeTimers();
    // Channels are process-wide, and test files share a process (vitest.config.ts): this test
    // must not depend on what another file's observers do. Each channel here reports no
    // subscriber (its own getter, removed by restoreAllMocks), which is what the gate consults
    // before it builds a message.
    const spies = Object.keys(NAMES).map((key) => {
      const channel = channels[key as Name];
      vi.spyOn(channel, 'hasSubscribers', 'get').mockReturnValue(false);
      expect(channel.hasSubscribers).toBe(false);
      return vi.spyOn(channel, 'publish');
    });
    const gate = await everyEvent();
    for (const spy of spies) expect(spy).not.toHaveBeenCalled();
    // ...although every event happened:
    const s = gate.stats();
    expect([s.shedQueueFull, s.shedQueueTimeout, s.abortedWaiting]).toEqual([1, 1, 1]);
    expect([s.abortedInFlight, s.doubleReleases, s.holdTimeouts]).toEqual([1, 1, 1]);
  });

  it('publish each event with its gate, partner and details to subscribers', async () => {
    vi.useFakeTimers();
    const seen: { name: Name; message: unknown }[] = [];
    const listeners = Object.entries(NAMES).map(([key, name]) => {
      const listener = (message: unknown) => seen.push({ name: key as Name, message });
      subscribe(name, listener);
      return [name, listener] as const;
    });
    try {
      const gate = await everyEvent();
      const of = <T>(name: Name) => seen.filter((e) => e.name === name).map((e) => e.message as T);

      const acquires = of<AcquireMessage>('acquire');
      expect(acquires).toHaveLength(2);
      expect(acquires[0]).toMatchObject({ gate, partner: 'billing', waitedMs: 0 });

      const sheds = of<ShedMessage>('shed');
      expect(sheds.map((m) => m.reason)).toEqual(['queue_full', 'queue_timeout']);
      expect(sheds[0]!.error).toBeInstanceOf(QueueFullError);
      expect(sheds[1]!.error).toBeInstanceOf(QueueTimeoutError);
      expect(sheds[0]).toMatchObject({ gate, partner: 'billing', queued: 1 });

      const aborts = of<WaitAbortedMessage>('waitAborted');
      expect(aborts).toHaveLength(1);
      expect((aborts[0]!.reason as Error).message).toBe('client went away');

      const releases = of<ReleaseMessage>('release');
      expect(releases.map((m) => m.reason)).toEqual(['aborted', 'hold_timeout']);
      expect(releases[0]!.permit).toBe(acquires[0]!.permit);
      // maxHold 100: its timer counts whole ms on the event loop's clock, so by performance.now()
      // it may end up to 1 ms early (as a partner's 100 ms answer did in CI, 99.95 ms).
      expect(releases[1]!.heldMs).toBeGreaterThanOrEqual(99);

      const doubles = of<DoubleReleaseMessage>('doubleRelease');
      expect(doubles).toHaveLength(1);
      expect(doubles[0]!.permit).toBe(acquires[0]!.permit);

      const timeouts = of<HoldTimeoutMessage>('holdTimeout');
      expect(timeouts).toHaveLength(1);
      expect(timeouts[0]!.error).toBeInstanceOf(PermitHoldTimeoutError);
      expect(timeouts[0]!.permit).toBe(acquires[1]!.permit);

      // The hold timeout's release is not a client abort, though its hook aborted.
      expect(gate.stats().abortedInFlight).toBe(1);
    } finally {
      for (const [name, listener] of listeners) unsubscribe(name, listener);
    }
  });
});

describe('loading the module', () => {
  it('publishes nothing, even to subscribers already listening (its internal gate is silent)', async () => {
    const seen: string[] = [];
    const listeners = Object.values(NAMES).map((name) => {
      const listener = () => seen.push(name);
      subscribe(name, listener);
      return [name, listener] as const;
    });
    try {
      // A second instance of semaphore.ts alone (its URL differs by the query), beside the
      // worker's: vi.resetModules() would reset every module of the worker for the files after
      // this one, and on Node 20 a channel made again can lose its subscribers by name
      // (docs/development.md, "Shared processes"; test/helpers/shared-process.ts checks it).
      const fresh = (await import(
        `${new URL('../../src/gate/semaphore.ts', import.meta.url).href}?load=fresh`
      )) as typeof import('../../src/gate/semaphore.js');
      expect(fresh.Semaphore).not.toBe(Semaphore); // a new instance of the module ran
      await new Promise((resolve) => setImmediate(resolve));
      expect(seen).toEqual([]);
    } finally {
      for (const [name, listener] of listeners) unsubscribe(name, listener);
    }
  });
});

describe('progress clock', () => {
  it("times grants, releases and each permit's progress", () => {
    let now = 0;
    const gate = new Semaphore({ limit: 2, name: 'g', now: () => now });
    const a = gate.tryAcquire()!;
    now = 10;
    const b = gate.tryAcquire()!;
    expect(gate.lastProgressAt).toBe(10);
    expect(gate.holders()).toEqual([a, b]);
    now = 50;
    a.noteProgress();
    expect(gate.lastProgressAt).toBe(50);
    expect(a.aliveAt).toBe(50);
    expect(b.aliveAt).toBe(10);
    expect(gate.holders()).toEqual([b, a]); // least recently alive first
    now = 80;
    b.release();
    expect(gate.lastProgressAt).toBe(80);
  });

  it('bounds the quiet time of an exhausted gate from its reads, never overstating it', () => {
    let now = 0;
    const gate = new Semaphore({ limit: 1, name: 'g', now: () => now });
    const collector = new MetricsCollector(gate, { stallAfter: 100, now: () => now });
    const permit = gate.tryAcquire()!;
    now = 150; // no byte since the grant: the stall is exact on the first read
    expect(collector.collect()[0]).toMatchObject({ quietMs: 150, stalled: true });
    permit.noteProgress(); // a chunk at 150
    now = 200;
    expect(collector.collect()[0]).toMatchObject({ quietMs: 50, stalled: false });
    now = 250;
    expect(collector.collect()[0]).toMatchObject({ quietMs: 100, stalled: true });
  });

  it('item 8: the first look sees a stall that began before it (bytes, then silence)', () => {
    let now = 0;
    const gate = new Semaphore({ limit: 1, name: 'g', now: () => now });
    const permit = gate.tryAcquire()!;
    now = 5;
    permit.noteProgress(); // response headers, then nothing
    now = 5 + 10_000;
    // The collector (and so the status page, the first scrape) is created only now.
    const collector = new MetricsCollector(gate, { stallAfter: 10_000, now: () => now });
    expect(collector.collect()[0]).toMatchObject({ quietMs: 10_000, stalled: true });
  });
});
