import { Agent, type Dispatcher, request, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch, limitHosts } from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { prng } from '../helpers/prng.js';

// A randomized soak, bounded in count and time: several partners, both clients, and every
// fault at once. The partners count their own concurrency; the gates must agree at the end.

const CAPS = [2, 3, 5];
const OPERATIONS = 300;
const WAVE = 60;

let partners: Partner[];
let agent: Agent;

beforeAll(async () => {
  partners = await Promise.all(CAPS.map(() => startPartner()));
  agent = new Agent({ keepAliveTimeout: 1000 });
});

afterAll(async () => {
  await agent.destroy();
  await Promise.all(partners.map((p) => p.close()));
});

type Scenario = (
  url: string,
  dispatcher: Dispatcher,
  useFetch: boolean,
  random: () => number,
) => Promise<void>;

const scenarios: Record<string, Scenario> = {
  async ok(url, dispatcher, useFetch, random) {
    const delay = Math.floor(random() * 5);
    if (useFetch) await (await undiciFetch(`${url}/ok?delay=${delay}`, { dispatcher })).text();
    else await (await request(`${url}/ok?delay=${delay}`, { dispatcher })).body.text();
  },
  async serverError(url, dispatcher, useFetch) {
    if (useFetch) await (await undiciFetch(`${url}/status?code=500`, { dispatcher })).text();
    else await (await request(`${url}/status?code=500`, { dispatcher })).body.text();
  },
  async reset(url, dispatcher, useFetch) {
    if (useFetch) await (await undiciFetch(`${url}/reset`, { dispatcher })).text();
    else await (await request(`${url}/reset`, { dispatcher })).body.text();
  },
  async abortAnytime(url, dispatcher, useFetch, random) {
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('gave up')), Math.floor(random() * 15));
    if (useFetch)
      await (await undiciFetch(`${url}/stall`, { dispatcher, signal: ac.signal })).text();
    else await (await request(`${url}/stall`, { dispatcher, signal: ac.signal })).body.text();
  },
  async abortAtOnce(url, dispatcher, useFetch) {
    const ac = new AbortController();
    const pending = useFetch
      ? undiciFetch(`${url}/ok`, { dispatcher, signal: ac.signal })
      : request(`${url}/ok`, { dispatcher, signal: ac.signal });
    ac.abort();
    await pending;
  },
  async unreadBody(url, dispatcher, useFetch) {
    // Never read: only maxHold can give this permit back.
    if (useFetch) await undiciFetch(`${url}/stall`, { dispatcher });
    else await request(`${url}/stall`, { dispatcher });
  },
};

const CANCELLING = new Set(['abortAnytime', 'abortAtOnce', 'unreadBody']);

describe('randomized soak across partners', () => {
  // A cancelled request's permit returns when the client cancels; the partner notices the
  // closed socket a moment later, so only runs without cancellation can hold the partner to
  // its cap exactly. Runs with cancellation check the gates' invariant and that nothing leaks.
  it.each([
    [1, false],
    [2, false],
    [3, true],
    [4, true],
  ])(
    'holds the invariant and leaks nothing (seed %i, cancellation %s)',
    async (seed, cancelling) => {
      const random = prng(seed);
      const limiter = new HostLimiter({
        partners: partners.map((p, i) => ({
          name: `p${i}`,
          hosts: [p.origin],
          limit: CAPS[i]!,
          maxQueue: 15,
          queueTimeout: 150,
          // maxHold cancels: only runs that cancel use it (unread bodies need it). On a loaded
          // machine it also cut ordinary calls, whose closes the partner could read a moment
          // late, and a run without cancellation saw its partner one over the cap.
          maxHold: cancelling ? 150 : undefined,
        })),
        unknownHosts: 'reject',
      });
      const dispatcher = agent.compose(limitHosts(limiter));
      const gates = partners.map((_, i) => limiter.gate(`p${i}`)!);
      for (const p of partners) p.resetPeak();
      const violations: string[] = [];
      const check = () => {
        for (const gate of gates) {
          const s = gate.stats();
          if (s.held > s.limit || s.held + s.available !== s.limit || s.queued > s.maxQueue) {
            violations.push(
              JSON.stringify({
                name: s.name,
                held: s.held,
                available: s.available,
                queued: s.queued,
              }),
            );
          }
        }
      };
      const sampler = setInterval(check, 2);
      const names = Object.keys(scenarios).filter((name) => cancelling || !CANCELLING.has(name));
      let completed = 0;
      for (let start = 0; start < OPERATIONS; start += WAVE) {
        const wave = Array.from({ length: Math.min(WAVE, OPERATIONS - start) }, () => {
          const which = Math.floor(random() * partners.length);
          const scenario = scenarios[names[Math.floor(random() * names.length)]!]!;
          return scenario(partners[which]!.url, dispatcher, random() < 0.5, random)
            .catch(() => undefined)
            .finally(() => {
              completed++;
              check();
            });
        });
        await Promise.all(wave);
      }
      clearInterval(sampler);
      expect(completed).toBe(OPERATIONS);
      expect(violations).toEqual([]);
      // Unread bodies are released by maxHold; wait for their holds to run out.
      await Promise.all(
        gates.map(
          (gate) =>
            new Promise<void>((resolve) => {
              const poll = setInterval(() => {
                if (gate.held === 0) {
                  clearInterval(poll);
                  resolve();
                }
              }, 10);
            }),
        ),
      );
      if (!cancelling) {
        partners.forEach((p, i) => {
          expect(p.peak).toBeLessThanOrEqual(CAPS[i]!);
        });
      }
      for (const gate of gates) {
        const s = gate.stats();
        expect({ name: s.name, held: s.held, queued: s.queued, available: s.available }).toEqual({
          name: s.name,
          held: 0,
          queued: 0,
          available: s.limit,
        });
        expect(s.acquired).toBe(s.released);
        expect(s.doubleReleases).toBe(0);
      }
    },
  );
});

/**
 * Issue 24's soak: every entry point on the same gates, cancelled at seeded points — before the
 * send, at the response headers, after some chunks of the body, or by a seeded timer wherever
 * the call is then — and no partner ever holds more than its cap of requests whose client it has
 * not seen close (`peak`; with the permit back in the microtask after the teardown, 1 over at
 * cap 7 in 1 of 3 runs of 1,200 calls). Short in npm test; HOSTGATE_SOAK_CALLS=20000 (and
 * HOSTGATE_SOAK_SEED) for the long run. Node's global fetch is wrapped by limitFetch without a
 * dispatcher (its bundled undici refuses an undici 8 Agent).
 */
describe('issue 24: cancels at random points across entry points never put a partner over its cap', () => {
  const LIMITS = [3, 7, 16];
  const CALLS = Number(process.env.HOSTGATE_SOAK_CALLS ?? 600);
  const SEED = Number(process.env.HOSTGATE_SOAK_SEED ?? 0x24c0);
  const WORKERS = 40; // more than the caps together (26): every gate has a queue to feed
  const CLIENTS = [
    'undici.request',
    'undici.fetch',
    'limitFetch(undici.fetch)',
    'limitFetch(global fetch)',
  ] as const;
  const CANCELS = ['none', 'beforeSend', 'atHeaders', 'midBody', 'timer'] as const;
  type Client = (typeof CLIENTS)[number];
  type Cancel = (typeof CANCELS)[number];

  it(
    `${CALLS} calls, seed ${SEED}: partner peaks within 3, 7, 16; every permit back once`,
    async () => {
      const random = prng(SEED);
      const soakPartners = await Promise.all(LIMITS.map(() => startPartner()));
      const soakAgent = new Agent({ keepAliveTimeout: 5000 });
      try {
        const limiter = new HostLimiter({
          partners: soakPartners.map((p, i) => ({
            name: `s${i}`,
            hosts: [p.origin],
            limit: LIMITS[i]!,
            maxQueue: 1000,
            queueTimeout: 30_000,
          })),
          unknownHosts: 'reject',
        });
        const gates = LIMITS.map((_, i) => limiter.gate(`s${i}`)!);
        const limited = soakAgent.compose(limitHosts(limiter));
        const viaUndici = limitFetch(undiciFetch, limiter);
        const viaGlobal = limitFetch(globalThis.fetch, limiter);
        const violations: string[] = [];
        const check = () => {
          for (const gate of gates) {
            const s = gate.stats();
            if (s.held > s.limit || s.held + s.available !== s.limit) {
              violations.push(
                JSON.stringify({ name: s.name, held: s.held, available: s.available }),
              );
            }
          }
        };
        const counts: Record<string, number> = {};

        /** One call: resolves with the body's chunks as an async iterator, read or cancelled. */
        async function call(
          client: Client,
          url: string,
          cancel: Cancel,
          chunks: number,
          delayMs: number,
        ) {
          const controller = new AbortController();
          if (cancel === 'timer') setTimeout(() => controller.abort(new Error('timer')), delayMs);
          const signal = controller.signal;
          if (client === 'undici.request') {
            const pending = request(url, { dispatcher: limited, signal });
            if (cancel === 'beforeSend') controller.abort(new Error('before send'));
            const res = await pending;
            if (cancel === 'atHeaders') controller.abort(new Error('at headers'));
            let seen = 0;
            for await (const _ of res.body) {
              if (cancel === 'midBody' && ++seen >= chunks) {
                res.body.destroy();
                return;
              }
            }
            return;
          }
          const pending =
            client === 'undici.fetch'
              ? undiciFetch(url, { dispatcher: limited, signal })
              : client === 'limitFetch(undici.fetch)'
                ? viaUndici(url, { dispatcher: soakAgent, signal })
                : viaGlobal(url, { signal });
          if (cancel === 'beforeSend') controller.abort(new Error('before send'));
          const res = (await pending) as Response;
          if (cancel === 'atHeaders') controller.abort(new Error('at headers'));
          const reader = res.body!.getReader();
          let seen = 0;
          for (;;) {
            const { done } = await reader.read();
            if (done) return;
            if (cancel === 'midBody' && ++seen >= chunks) {
              await reader.cancel();
              return;
            }
          }
        }

        // Every choice is drawn up front, in order, so the seed alone fixes the schedule's shape.
        const plan = Array.from({ length: CALLS }, () => ({
          partner: Math.floor(random() * LIMITS.length),
          client: CLIENTS[Math.floor(random() * CLIENTS.length)]!,
          cancel: CANCELS[Math.floor(random() * CANCELS.length)]!,
          n: 1 + Math.floor(random() * 12),
          ms: 1 + Math.floor(random() * 3),
          chunks: 1 + Math.floor(random() * 3),
          delayMs: Math.floor(random() * 20),
        }));
        let next = 0;
        await Promise.all(
          Array.from({ length: WORKERS }, async () => {
            while (next < plan.length) {
              const step = plan[next++]!;
              const url = `${soakPartners[step.partner]!.url}/tick?n=${step.n}&ms=${step.ms}&size=512`;
              const key = `${step.client}/${step.cancel}`;
              counts[key] = (counts[key] ?? 0) + 1;
              await call(step.client, url, step.cancel, step.chunks, step.delayMs).catch(
                () => undefined,
              );
              check();
            }
          }),
        );
        await Promise.all(gates.map((gate) => whenIdle(gate)));
        expect(violations).toEqual([]);
        expect(Object.keys(counts)).toHaveLength(CLIENTS.length * CANCELS.length);
        // `peakOpen` (until each response closes) is not asserted: after the partner has read a
        // FIN, its graceful shutdown can close the response a turn after the next request
        // arrived, which nothing on the client can see (see src/http/teardown.ts).
        soakPartners.forEach((p, i) => {
          const what = `partner s${i} (cap ${LIMITS[i]}, responses open at most ${p.peakOpen})`;
          expect(p.peak, what).toBeLessThanOrEqual(LIMITS[i]!);
        });
        for (const gate of gates) {
          const s = gate.stats();
          expect({ held: s.held, queued: s.queued, available: s.available }).toEqual({
            held: 0,
            queued: 0,
            available: s.limit,
          });
          expect(s.acquired).toBe(s.released);
          expect(s.doubleReleases).toBe(0);
          expect(s.abortedInFlight).toBeGreaterThan(0);
        }
      } finally {
        await soakAgent.destroy();
        await Promise.all(soakPartners.map((p) => p.close()));
      }
    },
    Math.max(60_000, CALLS * 25), // a bound for a hung run, not a speed
  );
});
