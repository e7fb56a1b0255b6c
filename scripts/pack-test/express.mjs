// `hostgate/express` with Express only (no Fastify, no fastify-plugin): outbound() and shed() on
// a real app on 127.0.0.1:0, one call through req.outbound.fetch and one shed as a 503.
import assert from 'node:assert/strict';
import express from 'express';
import { HostLimiter } from 'hostgate';
import { outbound, shed } from 'hostgate/express';

const partner = process.env.PARTNER;
const limiter = new HostLimiter({
  partners: [{ name: 'billing', hosts: [partner], limit: 1, maxQueue: 0 }],
});
const app = express();
const middleware = outbound({ limiter });
app.use(middleware);
app.get('/invoices', async (req, res, next) => {
  try {
    const r = await req.outbound.fetch(`${partner}/invoices`);
    res.json(await r.json());
  } catch (error) {
    next(error);
  }
});
app.use(shed());
const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const url = `http://127.0.0.1:${server.address().port}/invoices`;
const ok = await fetch(url);
assert.equal(ok.status, 200);
assert.equal((await ok.json()).ok, true);
const occupying = limiter.gate('billing').tryAcquire();
const shedAnswer = await fetch(url);
occupying.release();
assert.equal(shedAnswer.status, 503);
assert.ok(Number(shedAnswer.headers.get('retry-after')) >= 1);
assert.equal((await shedAnswer.json()).status, 503);
server.closeAllConnections();
await new Promise((resolve) => server.close(resolve));
await middleware.close();
await limiter.close();
console.log('hostgate/express: a call through req.outbound.fetch (200) and a shed (503)');
