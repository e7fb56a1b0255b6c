/**
 * Issue 33 item 4: a rate is promised at the partner, so the partner's own log of arrival times
 * is the oracle, over windows of exactly `per` (no slack taken off for latency), with every
 * connection cold at the start: the calls of the first burst wait for a connection while later
 * ones go on warm ones, so grants bunched by the burst arrive bunched tighter.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_PARTNER_RATE_SLACK_MS } from '../../src/gate/rate.js';
import { HostLimiter, limitFetch } from '../../src/index.js';
import { startArrivalPartner } from '../helpers/arrival-partner.js';
import { maxInWindow } from '../helpers/windows.js';

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("a rate held at the partner's arrivals, cold connections included", () => {
  it('1,000 calls over 50 cold connections at 200/s, burst 20: at most 220 arrive in any second while latencies stay within the slack', async () => {
    const partner = await startArrivalPartner();
    cleanups.push(() => partner.close());
    const rate = { limit: 200, per: 1000, burst: 20 };
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'p',
          hosts: [partner.origin],
          limit: 1000, // the rate binds, not the cap: 50 connections carry them
          maxQueue: 2000,
          queueTimeout: 60_000,
          rate,
        },
      ],
    });
    const agent = new Agent({ connections: 50, keepAliveTimeout: 10_000 });
    cleanups.push(() => agent.close());
    // Send times just below the limiter, on the epoch clock the partner logs arrivals on.
    const sends = new Map<string, number>();
    const loop = monitorEventLoopDelay({ resolution: 1 });
    loop.enable();
    cleanups.push(() => loop.disable());
    const send = ((input: string, init?: RequestInit) => {
      sends.set(new URL(input).searchParams.get('id')!, performance.timeOrigin + performance.now());
      return undiciFetch(input, init as never);
    }) as typeof undiciFetch;
    const fetch = limitFetch(send, limiter);
    // The gate's grants, as published on hostgate:acquire (synchronously with each grant).
    const grants: number[] = [];
    const onAcquire = () => grants.push(performance.now());
    subscribe('hostgate:acquire', onAcquire);
    cleanups.push(() => unsubscribe('hostgate:acquire', onAcquire));
    const calls = 1000;
    const statuses = await Promise.all(
      Array.from({ length: calls }, (_, i) =>
        fetch(`${partner.origin}/?id=${i}`, { dispatcher: agent }).then(async (r) => {
          await r.text();
          return r.status;
        }),
      ),
    );
    expect(statuses.every((s) => s === 200)).toBe(true);
    const log = await partner.log();
    const times = log.arrivals;
    expect(times).toHaveLength(calls);
    const most = maxInWindow(times, rate.per);
    // What the gate decides, exactly: at most limit + burst grants in any window of per + slack
    // (less 5 ms for reading the clock a little after each grant). Before the slack: 240.
    expect(grants).toHaveLength(calls);
    expect(
      maxInWindow(grants, rate.per + DEFAULT_PARTNER_RATE_SLACK_MS - 5),
      `most grants in one window of per + slack`,
    ).toBeLessThanOrEqual(rate.limit + rate.burst);
    // The promise holds for latencies within the rule's slack of each other. The spread is
    // measured (send to arrival, plus the longest event-loop stall between a grant and its
    // send); past the slack, the bound docs/rates.md states: `(spread − slack) × limit / per`
    // more. On this machine, quiet, the spread is 50–100 ms (the bound is then 220, and the
    // partner counted 230–233 before the slack); starved of CPU it grew to 300 ms.
    const latencies = log.ids.map(([id, at]) => at - sends.get(id)!);
    const spreadMs = Math.max(...latencies) - Math.min(...latencies) + loop.max / 1e6;
    const over = Math.max(
      0,
      Math.ceil(((spreadMs - DEFAULT_PARTNER_RATE_SLACK_MS) * rate.limit) / rate.per),
    );
    expect(
      most,
      `most arrivals in one ${rate.per} ms window; latency spread ${spreadMs.toFixed(0)} ms`,
    ).toBeLessThanOrEqual(rate.limit + rate.burst + over);
    // Goodput: the slack came out of the burst, not the pace: 82–98% of 200/s here, quiet. Only
    // loosely bounded (as in rate.test.ts): a busy machine slows the sends, not the promise
    // (77/s during a full npm test at load average 33).
    const span = times[calls - 1]! - times[0]!;
    expect(((calls - 1) / span) * 1000).toBeGreaterThan(200 * 0.15);
  }, 30_000);
});
