import { Agent, request, fetch as undiciFetch } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { HostLimiter, limitFetch, limitHosts, Retrier } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { prng } from '../helpers/prng.js';
import { describeRedis } from '../helpers/redis-server.js';
import { CLIENT_KINDS, privateRedis, useFleet, zcard } from './clients.js';

const redis = privateRedis();

const CAP = 3;

for (const kind of CLIENT_KINDS) {
  describeRedis(`limitHosts and limitFetch through a shared gate on ${kind}`, () => {
    const fleet = useFleet(kind, redis);
    let partner: Partner;
    const agents: Agent[] = [];
    afterEach(async () => {
      await Promise.all(agents.splice(0).map((a) => a.destroy()));
      await partner?.close();
    });

    /** One "replica": its own store, limiter and agent, sharing billing's cap through Redis. */
    async function replica() {
      const store = await fleet.store();
      const limiter = new HostLimiter({
        store,
        partners: [
          {
            name: 'billing',
            hosts: [partner.origin],
            limit: CAP,
            shared: true,
            queueTimeout: 10_000,
          },
        ],
      });
      const agent = new Agent({ keepAliveTimeout: 10_000 }).compose(limitHosts(limiter));
      agents.push(agent as unknown as Agent);
      return { store, limiter, agent };
    }

    it('keeps the partner at or under the cap across replicas, with aborts and errors', async () => {
      partner = await startPartner();
      const replicas = [await replica(), await replica(), await replica()];
      const random = prng(11);
      const calls: Promise<unknown>[] = [];
      for (let i = 0; i < 90; i++) {
        const { agent } = replicas[i % replicas.length]!;
        const roll = random();
        const controller = new AbortController();
        const path = roll < 0.1 ? '/status?code=500' : `/ok?delay=${1 + Math.floor(random() * 4)}`;
        const call = request(`${partner.origin}${path}`, {
          dispatcher: agent,
          signal: controller.signal,
        }).then((res) => res.body.text());
        if (roll > 0.85) setImmediate(() => controller.abort());
        calls.push(call);
      }
      const results = await Promise.allSettled(calls);
      expect(results.some((r) => r.status === 'fulfilled')).toBe(true);
      expect(partner.peak).toBeLessThanOrEqual(CAP);
      expect(partner.peak).toBe(CAP); // the cap was reached: the test exercised waiting
      for (const { store } of replicas) await store.settled();
      await Promise.all(replicas.map(({ limiter }) => limiter.close()));
      expect(await zcard(redis(), 'billing', 'h')).toBe(0);
      for (const { limiter } of replicas) expect(limiter.gate('billing')!.held).toBe(0);
    });

    it('limitFetch waits for a permit held by another replica', async () => {
      partner = await startPartner();
      const [a, b] = [await replica(), await replica()];
      const held = Array.from({ length: CAP }, () =>
        request(`${partner.origin}/held`, { dispatcher: a.agent }).then((r) => r.body.text()),
      );
      await partner.waitForActive(CAP);
      const fetchB = limitFetch(undiciFetch as unknown as typeof fetch, b.limiter);
      const late = fetchB(`${partner.origin}/ok`).then((r) => r.text());
      await b.store.settled();
      expect(b.limiter.gate('billing')!.stats()).toMatchObject({
        queued: 1,
        shared: { held: CAP, queued: 1 },
      });
      partner.release(1);
      await late;
      partner.openHeld();
      await Promise.all(held);
      expect(partner.peak).toBe(CAP);
    });

    it('retries take a fresh shared permit per attempt and hold none while backing off', async () => {
      partner = await startPartner();
      const { limiter, store } = await replica();
      const gate = limiter.gate('billing')!;
      const heldWhileSleeping: number[] = [];
      const retrier = new Retrier({
        limiter,
        random: () => 0.5,
        sleep: async () => {
          heldWhileSleeping.push(gate.held);
        },
      });
      const fetchWithRetry = retrier.wrap(
        limitFetch(undiciFetch as unknown as typeof fetch, limiter),
      );
      const res = await fetchWithRetry(`${partner.origin}/flaky?id=r&fails=2&code=503`);
      expect(res.status).toBe(200);
      await res.text();
      await store.settled();
      expect(partner.arrived).toBe(3);
      expect(heldWhileSleeping).toEqual([0, 0]);
      expect(gate.stats()).toMatchObject({ acquired: 3, released: 3, held: 0 });
      expect(await zcard(redis(), 'billing', 'h')).toBe(0);
    });

    it('rejects shared: true without a store, and unknown store shapes', () => {
      expect(
        () =>
          new HostLimiter({
            partners: [{ name: 'x', hosts: ['x.example'], limit: 1, shared: true }],
          }),
      ).toThrow(/shared: true needs the limiter's store/);
      expect(() => new HostLimiter({ store: {} as never })).toThrow(TypeError);
    });
  });
}
