/**
 * Issue 36 item 3: a retrier cooldown is for that partner only. With `cooldown` on and no gate
 * of a partner for the host, the Retrier kept 256 origin states and folded the rest into one
 * `(other origins)` state: 257 attacker origins answering 429 + Retry-After: 60 shed 10/10 calls
 * to an unrelated internal origin (0 reached it).
 */
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import {
  HostLimiter,
  type HostLimiterOptions,
  limitFetch,
  PartnerCooldownError,
  Retrier,
} from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { startHostileServers } from './servers.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('a cooldown does not spill onto unrelated origins (issue 36 item 3)', () => {
  it.each<[string, HostLimiterOptions | undefined]>([
    ['no limiter', undefined],
    ["unknownHosts: 'unlimited'", { unknownHosts: 'unlimited' }],
    ['per-origin gates, 4 places (the rest in the overflow gate)', { maxHosts: 4 }],
  ])(
    '%s: after 257 attacker origins answer 429 + Retry-After: 60, 10/10 calls reach an internal origin',
    async (_what, options) => {
      const attacker = await startHostileServers(257, (_req, res) => {
        res.writeHead(429, { 'retry-after': '60' }).end('slow down');
      });
      cleanups.push(() => attacker.close());
      const internal: Partner = await startPartner();
      cleanups.push(() => internal.close());
      const agent = new Agent({ keepAliveTimeout: 1000 });
      cleanups.push(() => agent.destroy());
      const limiter = options === undefined ? undefined : new HostLimiter(options);
      const send =
        limiter === undefined
          ? (url: string) => undiciFetch(url, { dispatcher: agent })
          : (url: string) => limitFetch(undiciFetch, limiter)(url, { dispatcher: agent });
      const retrier = new Retrier({ ...(limiter ? { limiter } : {}), cooldown: true, retries: 0 });
      const fetchWithRetry = retrier.wrap(send);

      for (const origin of attacker.origins) {
        const res = await fetchWithRetry(`${origin}/`);
        expect(res.status).toBe(429);
        await res.text();
      }
      // Each attacker origin is cooling down: its own next call is shed (the cooldown works)...
      const last = attacker.origins.at(-1)!;
      await expect(fetchWithRetry(`${last}/`)).rejects.toBeInstanceOf(PartnerCooldownError);
      // ...and nobody else's is.
      const statuses: number[] = [];
      for (let i = 0; i < 10; i++) {
        const res = await fetchWithRetry(`${internal.url}/ok`);
        statuses.push(res.status);
        await res.text();
      }
      expect(statuses).toEqual(Array(10).fill(200));
      expect(internal.arrived).toBe(10);
      // Bounded memory: no more than 256 origin states, and no shared one.
      const keys = Object.keys(retrier.stats());
      expect(keys.length).toBeLessThanOrEqual(256 + (limiter?.gates().size ?? 0));
      expect(keys).not.toContain('(other origins)');
    },
  );
});
