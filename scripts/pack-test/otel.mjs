// `hostgate/otel` with @opentelemetry/api (and the SDK that reads it): a call through the gate,
// then a collection shows it.
import assert from 'node:assert/strict';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { HostLimiter, limitFetch } from 'hostgate';
import { registerOtelMetrics } from 'hostgate/otel';

class OnDemandReader extends MetricReader {
  onForceFlush() {
    return Promise.resolve();
  }
  onShutdown() {
    return Promise.resolve();
  }
}
const reader = new OnDemandReader();
const provider = new MeterProvider({ readers: [reader] });
const partner = process.env.PARTNER;
const limiter = new HostLimiter({ partners: [{ name: 'billing', hosts: [partner], limit: 2 }] });
registerOtelMetrics(limiter, { meter: provider.getMeter('pack-test') });
const res = await limitFetch(fetch, limiter)(`${partner}/invoices`);
await res.json();
const { resourceMetrics } = await reader.collect();
const requests = resourceMetrics.scopeMetrics
  .flatMap((scope) => scope.metrics)
  .find((metric) => metric.descriptor.name === 'hostgate.requests');
const acquired = requests?.dataPoints.find(
  (point) =>
    point.attributes['hostgate.partner'] === 'billing' &&
    point.attributes['hostgate.result'] === 'acquired',
);
assert.equal(acquired?.value, 1);
await provider.shutdown();
await limiter.close();
console.log('hostgate/otel: hostgate.requests{acquired} 1 on collection');
