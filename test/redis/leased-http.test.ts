import { Registry } from 'prom-client';
import { Agent, request } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { HostLimiter, limitHosts } from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import type { LeasedSemaphore } from '../../src/redis/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { prng } from '../helpers/prng.js';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis, useFleet } from './clients.js';

const redis = privateRedis();
const CAP = 4;

describeRedis('limitHosts through a leased shared gate (shared: { mode: "leased" })', () => {
  const fleet = useFleet('node-redis', redis);
  let partner: Partner;
  const agents: Agent[] = [];
  afterEach(async () => {
    await Promise.all(agents.splice(0).map((a) => a.destroy()));
    await partner?.close();
  });

  async function replica() {
    const store = await fleet.store();
    const limiter = new HostLimiter({
      store,
      partners: [
        {
          name: 'billing',
          hosts: [partner.origin],
          limit: CAP,
          shared: { mode: 'leased', refreshMs: 100, leaseMs: 1000 },
          queueTimeout: 10_000,
          priorities: [
            { name: 'interactive', share: 0.8 },
            { name: 'batch', share: 0.2 },
          ],
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
    const random = prng(25);
    const calls: Promise<unknown>[] = [];
    for (let i = 0; i < 120; i++) {
      const { agent } = replicas[i % replicas.length]!;
      const roll = random();
      const controller = new AbortController();
      const path = roll < 0.1 ? '/status?code=500' : `/ok?delay=${2 + Math.floor(random() * 8)}`;
      const call = request(`${partner.origin}${path}`, {
        dispatcher: agent,
        signal: controller.signal,
      }).then((res) => res.body.text());
      if (roll > 0.9) setImmediate(() => controller.abort());
      calls.push(call);
    }
    const results = await Promise.allSettled(calls);
    expect(results.filter((r) => r.status === 'fulfilled').length).toBeGreaterThan(90);
    expect(partner.peak).toBeLessThanOrEqual(CAP);
    for (const { limiter } of replicas) {
      const gate = limiter.gate('billing') as LeasedSemaphore;
      expect(gate.held).toBe(0);
      expect(gate.stats().shared.sharing).toBe('leased');
    }
    // The block and the demand reach Prometheus beside the cluster's numbers.
    const registry = new Registry();
    registerMetrics(replicas[0]!.limiter, { registry });
    const text = await registry.metrics();
    expect(text).toMatch(/hostgate_shared_block\{partner="billing"\} \d+/);
    expect(text).toMatch(/hostgate_shared_demand\{partner="billing"\} \d+/);
    expect(text).toMatch(/hostgate_shared_store_up\{partner="billing"\} 1/);
    await Promise.all(replicas.map(({ limiter }) => limiter.close()));
  });

  it('rejects a bad shared rule with the option and the value named', async () => {
    const store = await fleet.store();
    const rule = (shared: unknown) => () =>
      new HostLimiter({
        store,
        partners: [{ name: 'p', hosts: ['p.example'], limit: 2, shared: shared as never }],
      });
    expect(rule({ mode: 'lease' })).toThrow(/shared.mode must be 'fifo' or 'leased', got "lease"/);
    expect(rule({ mode: 'fifo', refreshMs: 100 })).toThrow(/options of mode 'leased'/);
    expect(rule({ mode: 'leased', every: 1 })).toThrow(/every/);
    expect(rule({ mode: 'leased', refreshMs: -1 })).toThrow(/refreshMs/);
    expect(rule('yes')).toThrow(/shared must be a boolean or/);
  });
});
