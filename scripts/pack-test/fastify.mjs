// `hostgate/fastify` with Fastify only (no Express, and no fastify-plugin: the package must not
// need it): the plugin on a real app, one call through request.outbound.fetch, one shed as a 503.
import assert from 'node:assert/strict';
import Fastify from 'fastify';
import { HostLimiter } from 'hostgate';
import { hostgate } from 'hostgate/fastify';

const partner = process.env.PARTNER;
const limiter = new HostLimiter({
  partners: [{ name: 'billing', hosts: [partner], limit: 1, maxQueue: 0 }],
});
const app = Fastify();
await app.register(hostgate, { limiter });
app.get('/invoices', async (request) => {
  const res = await request.outbound.fetch(`${partner}/invoices`);
  return res.json();
});
await app.listen({ port: 0, host: '127.0.0.1' });
const url = `http://127.0.0.1:${app.server.address().port}/invoices`;
const ok = await fetch(url);
assert.equal(ok.status, 200);
assert.equal((await ok.json()).ok, true);
const occupying = limiter.gate('billing').tryAcquire();
const shedAnswer = await fetch(url);
occupying.release();
assert.equal(shedAnswer.status, 503);
assert.ok(Number(shedAnswer.headers.get('retry-after')) >= 1);
await app.close();
await limiter.close();
console.log('hostgate/fastify: a call through request.outbound.fetch (200) and a shed (503)');
