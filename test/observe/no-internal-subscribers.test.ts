/**
 * hostgate listens to none of its own diagnostics channels (issue 34 item 1). Partner guards,
 * adaptive controllers and rate rules' `settleCost` are set on their gate and called by the
 * request path, as undici passes a request through its handlers; the channels are for
 * observers. Before, the first guard or adaptive gate of the process subscribed to
 * `hostgate:response`, `hostgate:request-error` and `hostgate:hold-timeout` for good, so every
 * response built and published a message with nobody outside listening.
 */
import { channel, subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { expect, it } from 'vitest';
import { channels } from '../../src/gate/gate-events.js';
import { HostLimiter, limitHosts } from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { storeChannels } from '../../src/redis/channels.js';
import { useLoopback } from '../helpers/loopback.js';

const loop = useLoopback();

/** Every channel hostgate publishes on: the gate's and the shared gates'. */
const NAMES = [...Object.values(channels), ...Object.values(storeChannels)].map(
  (c) => c.name as string,
);
const subscribed = (): string[] => NAMES.filter((name) => channel(name).hasSubscribers);

it('leaves no subscriber on any hostgate:* channel once outside observers leave, while partner guards, adaptive limits and settleCost still see every outcome', async () => {
  expect(NAMES).toContain('hostgate:response');
  expect(NAMES).toContain('hostgate:lease-lost');
  // [] in a process of its own. Files share worker processes (vitest.config.ts): a file before
  // this one that failed may have left a listener, which shared-process.ts reports against it.
  const before = subscribed();
  let settled = 0;
  const limiter = new HostLimiter({
    partners: [
      {
        name: 'billing',
        hosts: [loop.partner.origin],
        limit: 4,
        maxHold: 500,
        adaptive: { min: 1, initial: 4 },
        rateLimitHeaders: { retryAfter: true },
        breaker: { failures: 100 },
        rate: { limit: 1000, per: 1000 },
        settleCost: () => {
          settled++;
          return undefined;
        },
      },
    ],
    unknownHosts: 'reject',
  });
  expect(subscribed(), 'after building guards and an adaptive gate').toEqual(before);

  // An outside observer on every channel, as an APM agent would subscribe.
  // Counted for this test's gate only: the channels are the process's, and a gate another test
  // file left in this worker may still publish on them (the fresh-clone CI's Node 24 leg, with
  // CI=true: 2 and 4 hold timeouts, 1 of them this gate's).
  const ours = limiter.gate('billing');
  const seen = new Map<string, number>();
  const observers = NAMES.map((name) => {
    const observer = (message: unknown) => {
      const gate = (message as { gate?: unknown } | undefined)?.gate;
      if (gate === undefined || gate === ours) seen.set(name, (seen.get(name) ?? 0) + 1);
    };
    subscribe(name, observer);
    return [name, observer] as const;
  });
  const dispatcher = loop.agent.compose(limitHosts(limiter));
  const call = async (path: string) => {
    const { body, statusCode } = await request(`${loop.partner.origin}${path}`, { dispatcher });
    await body.text();
    return statusCode;
  };
  try {
    expect(await call('/ok')).toBe(200);
    await expect(call('/reset')).rejects.toThrow(); // a response head, then the socket destroyed
    await expect(call('/stall')).rejects.toThrow(); // maxHold takes its permit back
    expect(await call('/status?code=503&retryAfter=1')).toBe(503);
  } finally {
    for (const [name, observer] of observers) unsubscribe(name, observer);
  }
  expect(subscribed(), 'after the observers left').toEqual(before);

  // The observer saw each kind of outcome...
  expect(seen.get('hostgate:response')).toBe(4);
  expect(seen.get('hostgate:request-error')).toBe(2); // the reset, and the stall's abort
  expect(seen.get('hostgate:hold-timeout')).toBe(1);
  // ...and the gate's own handlers saw the same ones, with nobody subscribed to tell them.
  expect(settled).toBe(4);
  const stats = limiter.stats().billing!;
  // Samples: the three 200 heads and the 503 (a drop); the hold timeout and the errors came
  // after their request's head was sampled (one sample per request).
  expect(stats.adaptive).toMatchObject({ samples: 4, drops: 1 });
  expect(stats.partnerHold).toMatchObject({ holds: 1, source: 'Retry-After' });
  // Failures in a row since the stall's 200 head: its hold timeout, then the 503 (the stall's
  // own abort is the caller's, not the partner's).
  expect(stats.breaker).toMatchObject({ consecutiveFailures: 2 });

  // Metrics registered on a fresh limiter subscribe to nothing either: read on scrape.
  const registry = new Registry();
  registerMetrics(new HostLimiter({ partners: [{ name: 'x', hosts: ['x.example'], limit: 2 }] }), {
    registry,
  });
  expect(subscribed(), 'after registerMetrics').toEqual(before);
});
