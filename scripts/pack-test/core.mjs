// `hostgate` with undici only (README's install: npm i hostgate undici): limitHosts on an undici
// Agent, limitFetch on the global fetch, both against the loopback partner.
import assert from 'node:assert/strict';
import { HostLimiter, limitFetch, limitHosts } from 'hostgate';
import { Agent, request } from 'undici';

const partner = process.env.PARTNER;
const limiter = new HostLimiter({ partners: [{ name: 'billing', hosts: [partner], limit: 2 }] });
const dispatcher = new Agent().compose(limitHosts(limiter));
const res = await request(`${partner}/invoices`, { dispatcher });
assert.equal(res.statusCode, 200);
assert.equal((await res.body.json()).ok, true);
const fetchBilling = limitFetch(fetch, limiter);
const answer = await fetchBilling(`${partner}/totals`);
assert.equal(answer.status, 200);
await answer.json();
await limiter.gate('billing').onIdle(); // a permit returns as its response ends
const { acquired, released, held } = limiter.gate('billing').stats();
assert.deepEqual({ acquired, released, held }, { acquired: 2, released: 2, held: 0 });
await dispatcher.close();
await limiter.close();
console.log('hostgate: limitHosts and limitFetch, 2 calls through the gate');
