/**
 * A partner that keeps its own log of arrival times: the oracle of every rate test over HTTP.
 *
 * The promise holds at the gate, on the times it grants; the partner sees those times shifted
 * by the one-way latency of each request, which no client-side limiter controls and which a
 * busy machine stretches. So windows over the partner's own log are measured shorter than
 * `per` by the spread of that latency, measured per request (send time at the fetch below the
 * limiter, arrival time in the partner's log, paired by the request's id), plus the longest
 * event-loop stall seen (and, for shared gates, what separates a grant in Redis from its send).
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fetch as undiciFetch } from 'undici';
import { expect } from 'vitest';
import { maxInWindow } from './windows.js';

export interface Oracle {
  origin: string;
  /** Arrival time (partner's clock, performance.now()) by request id, in arrival order. */
  arrivals: Map<string, number>;
  /** Send time (just below the limiter) by request id. */
  sends: Map<string, number>;
  /** `fetch` that records its send times: wrap it in `limitFetch`. */
  fetch: typeof undiciFetch;
  /** The event loop's delays while the oracle runs (ms = ns / 1e6). */
  loop: ReturnType<typeof monitorEventLoopDelay>;
}

/** A partner that logs arrivals by `?id=` and reports `?used=` in the `x-usage` header. */
export async function oracle(cleanups: (() => unknown)[]): Promise<Oracle> {
  const arrivals = new Map<string, number>();
  const sends = new Map<string, number>();
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    arrivals.set(url.searchParams.get('id') ?? '', performance.now());
    const used = url.searchParams.get('used');
    if (used !== null) res.setHeader('x-usage', used);
    res.end('ok');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  const fetch = ((input: string, init?: RequestInit) => {
    sends.set(new URL(input).searchParams.get('id') ?? '', performance.now());
    return undiciFetch(input, init as never);
  }) as typeof undiciFetch;
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  cleanups.push(() => loop.disable());
  return { origin, arrivals, sends, fetch, loop };
}

/**
 * The partner's log as windows see it: times in arrival order, weights, and the slack to take
 * off a window: the spread of send-to-arrival latency, plus the longest event-loop stall seen
 * (a send is recorded after its grant's continuation ran, and calls granted in one pass send
 * one after another in one turn), plus `extraMs` (a shared gate's grant-to-send spread).
 */
export function partnerLog(o: Oracle, weightOf: (id: string) => number = () => 1, extraMs = 0) {
  const entries = [...o.arrivals].sort((a, b) => a[1] - b[1]);
  const latencies = entries.map(([id, at]) => at - o.sends.get(id)!);
  return {
    times: entries.map(([, at]) => at),
    weights: entries.map(([id]) => weightOf(id)),
    spreadMs: Math.max(...latencies) - Math.min(...latencies) + o.loop.max / 1e6 + extraMs,
  };
}

/**
 * At most `limit + burst` units in any window of `per` ms, less that slack. On a quiet machine
 * it is a few ms; on an overloaded one it grows and the check with it gets weaker, not flaky:
 * the strict check of the gate's own decisions is the fake-clock property test in
 * test/gate/rate.test.ts.
 */
export function expectPromiseKept(
  o: Oracle,
  rate: { limit: number; per: number; burst: number },
  weightOf?: (id: string) => number,
  extraMs = 0,
) {
  const log = partnerLog(o, weightOf, extraMs);
  expect(maxInWindow(log.times, rate.per - log.spreadMs, log.weights)).toBeLessThanOrEqual(
    rate.limit + rate.burst,
  );
  return log;
}
