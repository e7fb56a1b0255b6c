// `hostgate/redis` with node-redis (`redis`) or ioredis (argv[2]), against a private
// redis-server: a shared partner gate carries one call, a shared Semaphore one job.
import assert from 'node:assert/strict';
import { HostLimiter, limitFetch } from 'hostgate';
import { redisStore } from 'hostgate/redis';

const partner = process.env.PARTNER;
const kind = process.argv[2] ?? 'redis';
let client;
let quit;
if (kind === 'ioredis') {
  const { Redis } = await import('ioredis');
  client = new Redis(process.env.REDIS_URL);
  quit = () => client.quit();
} else {
  const { createClient } = await import('redis');
  client = await createClient({ url: process.env.REDIS_URL }).connect();
  quit = () => client.quit();
}
const store = redisStore({ client, prefix: `packtest:${kind}:` });
const limiter = new HostLimiter({
  store,
  partners: [{ name: 'billing', hosts: [partner], limit: 2, shared: true }],
});
const res = await limitFetch(fetch, limiter)(`${partner}/invoices`);
assert.equal(res.status, 200);
await res.json();
const jobs = store.semaphore({ name: 'render', limit: 1 });
assert.equal(await jobs.run(async () => 42), 42);
assert.equal(jobs.stats().acquired, 1);
await limiter.close();
await store.close();
await quit();
console.log(`hostgate/redis (${kind}): a shared partner gate and a shared Semaphore`);
