// `hostgate/prometheus` with prom-client: a call through the gate, then the scrape shows it.
import assert from 'node:assert/strict';
import { HostLimiter, limitFetch } from 'hostgate';
import { registerMetrics } from 'hostgate/prometheus';
import { Registry } from 'prom-client';

const partner = process.env.PARTNER;
const limiter = new HostLimiter({ partners: [{ name: 'billing', hosts: [partner], limit: 2 }] });
const registry = new Registry();
registerMetrics(limiter, { registry });
const res = await limitFetch(fetch, limiter)(`${partner}/invoices`);
await res.json();
const text = await registry.metrics();
assert.match(text, /hostgate_acquired_total\{partner="billing"\} 1/);
await limiter.close();
console.log('hostgate/prometheus: hostgate_acquired_total{partner="billing"} 1 on scrape');
