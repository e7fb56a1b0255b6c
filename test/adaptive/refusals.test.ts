/**
 * Issue 33 item 8: an adaptive gate must not let a slot spin on 503s. A partner (its own process)
 * serves 5 at once and answers 503 at once past that; 40 callers loop on it through a contract
 * of 50. AIMD settled at 5–6, and while at 6 the sixth slot got a 503 in well under a ms, again
 * and again: 97% of what the partner answered in the last second was 503.
 */
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitHosts } from '../../src/index.js';
import { startArrivalPartner } from '../helpers/arrival-partner.js';

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('an adaptive gate against a partner that refuses at once past its capacity', () => {
  it.each(['aimd', 'gradient'] as const)(
    '%s: 40 callers, capacity 5, contract 50: well under a quarter of what the partner answers in the last second is 503',
    async (algorithm) => {
      const partner = await startArrivalPartner();
      cleanups.push(() => partner.close());
      const limiter = new HostLimiter({
        partners: [
          {
            name: 'p',
            hosts: [partner.origin],
            limit: 50,
            maxQueue: 1000,
            queueTimeout: 60_000,
            adaptive: { algorithm },
          },
        ],
      });
      cleanups.push(() => limiter.close());
      const agent = new Agent({ connections: 64, keepAliveTimeout: 10_000 });
      cleanups.push(() => agent.close());
      const dispatcher = agent.compose(limitHosts(limiter));
      const runMs = 4000;
      const end = performance.now() + runMs;
      let calls = 0;
      const caller = async () => {
        // Bounded in time and in count.
        while (performance.now() < end && calls < 200_000) {
          calls++;
          const res = await request(`${partner.origin}/work?cap=5&ms=50`, { dispatcher });
          await res.body.dump();
        }
      };
      await Promise.all(Array.from({ length: 40 }, caller));
      const { statuses } = await partner.log();
      const last = statuses[statuses.length - 1]![0];
      const lastSecond = statuses.filter(([at]) => at > last - 1000);
      const refused = lastSecond.filter(([, status]) => status === 503).length;
      const share = refused / lastSecond.length;
      const adaptive = limiter.stats().p?.adaptive;
      expect(
        share,
        `${refused} of ${lastSecond.length} answers 503; ${JSON.stringify(adaptive)}`,
      ).toBeLessThan(0.25);
    },
    30_000,
  );
});
