import http from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  HostLimiter,
  LimitedHttpAgent,
  PermitHoldTimeoutError,
  QueueFullError,
  QueueTimeoutError,
  UnknownHostError,
} from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { expectInvariant } from '../helpers/invariant.js';
import { get, watchReleases } from '../helpers/node-http.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { until } from '../helpers/until.js';

describe('LimitedHttpAgent: a gated node:http agent', () => {
  let partner: Partner;
  let inner: http.Agent;
  beforeEach(async () => {
    partner = await startPartner();
    inner = new http.Agent({ keepAlive: true, maxSockets: 50 });
  });
  afterEach(async () => {
    inner.destroy();
    await partner.close();
  });

  const limited = (rule: {
    limit: number;
    maxQueue?: number;
    queueTimeout?: number;
    maxHold?: number;
  }) => {
    const agent = new LimitedHttpAgent(
      inner,
      new HostLimiter({ partners: [{ name: 'p', hosts: [partner.origin], ...rule }] }),
    );
    return { agent, gate: agent.limiter.gate('p')! };
  };

  it('refuses what is not an agent, naming it', () => {
    const limiter = new HostLimiter();
    expect(() => new LimitedHttpAgent({} as http.Agent, limiter)).toThrow(
      /LimitedHttpAgent: agent must be an http.Agent .* got an object/,
    );
    const agent = new LimitedHttpAgent(inner, limiter);
    expect(() => new LimitedHttpAgent(agent, limiter)).toThrow(/already a LimitedHttpAgent/);
    expect(agent.protocol).toBe('http:');
    expect(agent.keepAlive).toBe(true);
    expect(agent.maxSockets).toBe(50);
    expect(agent.limiter).toBe(limiter);
  });

  it('holds the cap at the partner and queues the rest, invariant after every step', async () => {
    const { agent, gate } = limited({ limit: 2, maxQueue: 10, queueTimeout: 10_000 });
    const calls = Array.from({ length: 6 }, () => get(`${partner.url}/held`, agent));
    await partner.waitForActive(2);
    expect(gate.held).toBe(2);
    expect(gate.queued).toBe(4);
    expectInvariant(gate);
    for (let answered = 0; answered < 6; answered += 2) {
      partner.release(2);
      await partner.waitForArrived(Math.min(6, answered + 4));
      expectInvariant(gate);
      expect(partner.active).toBeLessThanOrEqual(2);
    }
    const outcomes = await Promise.all(calls.map((c) => c.outcome));
    expect(outcomes.every((o) => o.ok && o.status === 200)).toBe(true);
    expect(partner.peak).toBe(2);
    await whenIdle(gate);
    expectInvariant(gate);
    expect(gate.stats().released).toBe(6);
  });

  it('reuses keep-alive sockets: a granted request gets the socket its releaser freed', async () => {
    // Regression: a waiter granted and sent inside the releaser's 'close' (before its socket's
    // 'free', same tick) found no free socket in the pool, and the partner saw a third socket.
    const { agent, gate } = limited({ limit: 2, maxQueue: 50, queueTimeout: 10_000 });
    const calls = Array.from({ length: 20 }, () => get(`${partner.url}/ok?delay=2`, agent));
    const outcomes = await Promise.all(calls.map((c) => c.outcome));
    expect(outcomes.every((o) => o.ok)).toBe(true);
    expect(partner.peak).toBe(2);
    expect(partner.peakSockets).toBe(2);
    await whenIdle(gate);
    expectInvariant(gate);
  });

  it('sheds past the queue with QueueFullError and at the deadline with QueueTimeoutError', async () => {
    const { agent, gate } = limited({ limit: 1, maxQueue: 1, queueTimeout: 50 });
    const first = get(`${partner.url}/held`, agent);
    await partner.waitForActive(1);
    const waiting = get(`${partner.url}/ok`, agent);
    const full = await get(`${partner.url}/ok`, agent).outcome;
    expect(full.ok === false && full.error).toBeInstanceOf(QueueFullError);
    expectInvariant(gate);
    const timedOut = await waiting.outcome;
    expect(timedOut.ok === false && timedOut.error).toBeInstanceOf(QueueTimeoutError);
    expect(partner.arrived).toBe(1);
    partner.openHeld();
    expect((await first.outcome).ok).toBe(true);
    await whenIdle(gate);
    expectInvariant(gate);
  });

  it('fails a request to a host the limiter rejects, before any socket', async () => {
    const agent = new LimitedHttpAgent(inner, new HostLimiter({ unknownHosts: 'reject' }));
    const outcome = await get(`${partner.url}/ok`, agent).outcome;
    expect(outcome.ok === false && outcome.error).toBeInstanceOf(UnknownHostError);
    expect(partner.arrived).toBe(0);
  });

  it('fails the request and returns the permit when the wrapped agent throws', async () => {
    class Broken extends http.Agent {
      addRequest(): void {
        throw new Error('no sockets today');
      }
    }
    const broken = new Broken();
    const agent = new LimitedHttpAgent(
      broken,
      new HostLimiter({ partners: [{ name: 'p', hosts: [partner.origin], limit: 1 }] }),
    );
    const outcome = await get(`${partner.url}/ok`, agent).outcome;
    expect(outcome.ok === false && outcome.error.message).toBe('no sockets today');
    expect(agent.limiter.gate('p')!.held).toBe(0);
    expectInvariant(agent.limiter.gate('p')!);
    broken.destroy();
  });

  it('passes hosts of an unlimited limiter straight through', async () => {
    const agent = new LimitedHttpAgent(inner, new HostLimiter({ unknownHosts: 'unlimited' }));
    expect((await get(`${partner.url}/ok`, agent).outcome).ok).toBe(true);
  });

  describe('cancellation: every permit back exactly once', () => {
    it('req.destroy() while queued leaves the queue at once; nothing reaches the partner', async () => {
      const { agent, gate } = limited({ limit: 1, maxQueue: 5, queueTimeout: 10_000 });
      const first = get(`${partner.url}/held`, agent);
      await partner.waitForActive(1);
      const queued = get(`${partner.url}/ok`, agent);
      expect(gate.queued).toBe(1);
      queued.req.destroy(new Error('changed my mind'));
      expect(gate.queued).toBe(0);
      const outcome = await queued.outcome;
      expect(outcome.ok === false && outcome.error.message).toBe('changed my mind');
      expectInvariant(gate);
      partner.openHeld();
      await first.outcome;
      await whenIdle(gate);
      expect(partner.arrived).toBe(1);
      expect(gate.stats().released).toBe(1);
      expectInvariant(gate);
    });

    it('an AbortSignal on http.request cancels a queued request', async () => {
      const { agent, gate } = limited({ limit: 1, maxQueue: 5, queueTimeout: 10_000 });
      const first = get(`${partner.url}/held`, agent);
      await partner.waitForActive(1);
      const controller = new AbortController();
      const queued = get(`${partner.url}/ok`, agent, { signal: controller.signal });
      controller.abort();
      const outcome = await queued.outcome;
      expect(outcome.ok === false && outcome.error.name).toBe('AbortError');
      expect(gate.queued).toBe(0);
      partner.openHeld();
      await first.outcome;
      await whenIdle(gate);
      expect(partner.arrived).toBe(1);
      expectInvariant(gate);
    });

    it('an abort in flight returns the permit once the socket is closed on our side', async () => {
      const { agent, gate } = limited({ limit: 1, maxQueue: 5, queueTimeout: 10_000 });
      const controller = new AbortController();
      const call = get(`${partner.url}/held`, agent, { signal: controller.signal });
      const releases = watchReleases(gate, () => call.req.socket);
      await partner.waitForActive(1);
      const next = get(`${partner.url}/ok`, agent);
      controller.abort();
      const outcome = await call.outcome;
      expect(outcome.ok).toBe(false);
      await partner.waitForClosedEarly(1);
      expect((await next.outcome).ok).toBe(true);
      await whenIdle(gate);
      releases.stop();
      expect(releases.seen[0]).toEqual({ reason: 'aborted', socketClosed: true });
      expect(gate.stats().released).toBe(2);
      expect(partner.peak).toBe(1);
      expectInvariant(gate);
    });

    it("holdAfterAbort keeps an aborted request's permit that long after its socket closed", async () => {
      const agent = new LimitedHttpAgent(
        inner,
        new HostLimiter({
          partners: [{ name: 'p', hosts: [partner.origin], limit: 1, holdAfterAbort: 150 }],
        }),
      );
      const gate = agent.limiter.gate('p')!;
      const call = get(`${partner.url}/held`, agent);
      await partner.waitForActive(1);
      let closedAt = Number.NaN;
      call.req.once('close', () => {
        closedAt = performance.now();
      });
      call.req.destroy();
      await call.outcome;
      expect(gate.held).toBe(1);
      await whenIdle(gate);
      // A lower bound only: a timer never fires early, a busy machine only makes it later.
      expect(performance.now() - closedAt).toBeGreaterThanOrEqual(145);
      expect(gate.stats().released).toBe(1);
      expectInvariant(gate);
    });

    it('res.destroy() while the body streams returns the permit after the socket closes', async () => {
      const { agent, gate } = limited({ limit: 1, maxQueue: 5, queueTimeout: 10_000 });
      let socket: { destroyed: boolean } | undefined;
      const releases = watchReleases(gate, () => socket);
      const req = http.get(`${partner.url}/stall`, { agent }, (res) => {
        socket = res.socket;
        res.once('data', () => res.destroy());
      });
      req.on('error', () => {});
      await partner.waitForClosedEarly(1);
      await whenIdle(gate);
      releases.stop();
      expect(releases.seen).toEqual([{ reason: 'released', socketClosed: true }]);
      expectInvariant(gate);
    });

    it('a response nobody reads loses its permit at maxHold, and the request is destroyed', async () => {
      const { agent, gate } = limited({
        limit: 1,
        maxQueue: 5,
        queueTimeout: 10_000,
        maxHold: 100,
      });
      let error: unknown;
      const req = http.get(`${partner.url}/stall`, { agent }, () => {
        // never read: the permit would be pinned until the partner gave up
      });
      req.on('error', (e) => {
        error = e;
      });
      await partner.waitForActive(1);
      await whenIdle(gate);
      expect(gate.stats().holdTimeouts).toBe(1);
      await partner.waitForClosedEarly(1);
      await until(() => req.destroyed, 'destroyed');
      expect(error === undefined || error instanceof PermitHoldTimeoutError).toBe(true);
      // The next request gets the permit and its answer.
      expect((await get(`${partner.url}/ok`, agent).outcome).ok).toBe(true);
      await whenIdle(gate);
      expectInvariant(gate);
    });

    it('a body that keeps flowing keeps its permit past maxHold (progress resets the clock)', async () => {
      const { agent, gate } = limited({ limit: 1, maxHold: 150 });
      const outcome = await get(`${partner.url}/drip?every=30&count=12`, agent).outcome;
      expect(outcome.ok && outcome.body).toBe('.'.repeat(12));
      await whenIdle(gate);
      expect(gate.stats().holdTimeouts).toBe(0);
      expectInvariant(gate);
    });
  });

  it('a request that sits on an unread body shows in limiter.leaks(), without its query', async () => {
    const { agent, gate } = limited({ limit: 1, maxHold: 10_000 });
    gate.leakWarnAfter = 50;
    const req = http.get(`${partner.url}/stall?token=secret`, { agent }, () => {});
    req.on('error', () => {});
    await until(() => agent.limiter.leaks().length === 1, 'reported');
    const [suspect] = agent.limiter.leaks();
    expect(suspect).toMatchObject({
      partner: 'p',
      method: 'GET',
      origin: partner.origin,
      path: '/stall',
    });
    expect(JSON.stringify(suspect)).not.toContain('secret');
    req.destroy();
    await whenIdle(gate);
    expectInvariant(gate);
  });

  it('leak reports name method, origin and path, never the query', () => {
    const { agent, gate } = limited({ limit: 1 });
    const req = http.get(`${partner.url}/held?token=secret`, { agent });
    req.on('error', () => {});
    const [permit] = gate.holders();
    expect(permit?.request).toEqual({ method: 'GET', origin: partner.origin, path: '/held' });
    req.destroy();
  });
});
