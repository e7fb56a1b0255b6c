import express from 'express';
import request from 'supertest';
import { afterEach, expect, it } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import { HostLimiter } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { CLIENT_KINDS, privateRedis, useFleet } from './clients.js';

const redis = privateRedis();

for (const kind of CLIENT_KINDS) {
  describeRedis(`hostgate/express through a shared gate on ${kind}`, () => {
    const fleet = useFleet(kind, redis);
    let partner: Partner | undefined;
    afterEach(async () => {
      redis().resume();
      await partner?.close();
    });

    it("serves through a shared gate, and answers 503 + Retry-After while Redis is paused under 'reject'", async () => {
      partner = await startPartner();
      // 500 ms: the first call (subscribe, load the scripts, acquire) can take 200 ms at load 30.
      const store = await fleet.store({ onStoreError: 'reject', commandTimeoutMs: 500 });
      const limiter = new HostLimiter({
        store,
        // A wait deadline past the store's (three command timeouts at most, when its timers
        // fire late on a loaded machine), so the paused Redis is what the caller hears of.
        partners: [
          { name: 'billing', hosts: [partner.origin], limit: 2, shared: true, queueTimeout: 5000 },
        ],
      });
      const app = express();
      app.use(outbound({ limiter }));
      app.get('/call', (req, res, next) => {
        req.outbound
          .fetch(`${partner!.origin}/ok`)
          .then((r) => r.text())
          .then((text) => res.send(text), next);
      });
      app.use(shed());
      const ok = await request(app).get('/call');
      expect(ok.status).toBe(200);
      redis().pause();
      const refused = await request(app).get('/call');
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toMatch(/^[1-9]\d*$/);
      expect(JSON.parse(refused.text)).toMatchObject({
        title: 'Shared capacity store unreachable',
      });
      expect(refused.text).not.toContain('billing'); // a public answer names no upstream
      expect(partner.arrived).toBe(1);
    });
  });
}
