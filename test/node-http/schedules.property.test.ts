import http from 'node:http';
import net from 'node:net';
import { setImmediate as turn } from 'node:timers/promises';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, LimitedHttpAgent } from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { expectInvariant } from '../helpers/invariant.js';
import { get, type Outcome } from '../helpers/node-http.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

const LIMIT = 2;

type Step =
  | { op: 'start'; route: 'held' | 'ok' | 'stall'; signal: boolean }
  | { op: 'destroy'; pick: number }
  | { op: 'abort'; pick: number }
  | { op: 'answer'; count: number }
  | { op: 'yield' };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    op: fc.constant('start' as const),
    route: fc.constantFrom('held' as const, 'ok' as const, 'stall' as const),
    signal: fc.boolean(),
  }),
  fc.record({ op: fc.constant('destroy' as const), pick: fc.nat() }),
  fc.record({ op: fc.constant('abort' as const), pick: fc.nat() }),
  fc.record({ op: fc.constant('answer' as const), count: fc.integer({ min: 1, max: 3 }) }),
  fc.constant({ op: 'yield' as const }),
);

describe('LimitedHttpAgent under random schedules of requests, destroys, aborts and answers', () => {
  let partner: Partner;
  beforeEach(async () => {
    partner = await startPartner();
  });
  afterEach(async () => {
    await partner.close();
  });

  it('keeps held + available === limit after every step, the cap at the partner, and releases every permit once', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 14 }), async (steps) => {
        const inner = new http.Agent({ keepAlive: true });
        const agent = new LimitedHttpAgent(
          inner,
          new HostLimiter({
            partners: [
              {
                name: 'p',
                hosts: [partner.origin],
                limit: LIMIT,
                maxQueue: 4,
                queueTimeout: 10_000,
              },
            ],
          }),
        );
        const gate = agent.limiter.gate('p')!;
        const calls: {
          req: http.ClientRequest;
          outcome: Promise<Outcome>;
          abort: AbortController;
        }[] = [];
        try {
          for (const s of steps) {
            if (s.op === 'start') {
              const abort = new AbortController();
              const signal = s.signal ? { signal: abort.signal } : {};
              calls.push({ ...get(`${partner.url}/${s.route}`, agent, signal), abort });
            } else if (s.op === 'destroy' && calls.length > 0) {
              calls[s.pick % calls.length]!.req.destroy();
            } else if (s.op === 'abort' && calls.length > 0) {
              const call = calls[s.pick % calls.length]!;
              if (call.req.destroyed) call.abort.abort();
              else call.req.destroy(new Error('abort'));
            } else if (s.op === 'answer') partner.release(s.count);
            else await turn();
            expectInvariant(gate);
            expect(partner.active).toBeLessThanOrEqual(LIMIT);
          }
          partner.openHeld();
          // /stall never ends: whoever is still on one is destroyed.
          for (const call of calls) if (!call.req.destroyed) call.req.destroy();
          await Promise.all(calls.map((c) => c.outcome));
          await whenIdle(gate);
          const stats = gate.stats();
          expect(stats.released).toBe(stats.acquired);
          expect(partner.peak).toBeLessThanOrEqual(LIMIT);
          expectInvariant(gate);
        } finally {
          inner.destroy();
          partner.resetPeak();
        }
      }),
      { seed: 27, numRuns: 25 },
    );
  });
});

describe('LimitedHttpAgent around an agent that makes its own sockets (a proxy, a tunnel)', () => {
  it('gates by the partner origin while the wrapped agent connects through the proxy', async () => {
    const partner = await startPartner();
    const port = Number(new URL(partner.url).port);
    const proxy = await startTcpProxy(port);
    let tunnels = 0;
    class TunnelAgent extends http.Agent {
      override createConnection(): net.Socket {
        tunnels++;
        return net.connect({ host: '127.0.0.1', port: proxy.port });
      }
    }
    const inner = new TunnelAgent({ keepAlive: true });
    const agent = new LimitedHttpAgent(
      inner,
      new HostLimiter({ partners: [{ name: 'p', hosts: [partner.origin], limit: 2 }] }),
    );
    try {
      const outcomes = await Promise.all(
        Array.from({ length: 6 }, () => get(`${partner.url}/ok?delay=3`, agent).outcome),
      );
      expect(outcomes.every((o) => o.ok)).toBe(true);
      expect(tunnels).toBe(2);
      expect(partner.peak).toBe(2);
      await whenIdle(agent.limiter.gate('p')!);
    } finally {
      inner.destroy();
      await proxy.close();
      await partner.close();
    }
  });
});
