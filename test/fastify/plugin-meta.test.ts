import Fastify from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import hostgate from '../../fastify/index.js';
import { HostLimiter } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';

// hostgate/fastify no longer imports fastify-plugin (a devDependency: the subpath failed to
// import in users' projects); it sets fastify-plugin's three properties itself. What they do:
// skip-override applies the plugin's hook and decorations to the app that registers it, not to
// an encapsulated context of its own, and plugin-meta names the plugin and its Fastify range.
describe('hostgate/fastify registers as fastify-plugin would, without depending on it', () => {
  let partner: Partner;
  let limiter: HostLimiter;
  beforeEach(async () => {
    partner = await startPartner();
    limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: [partner.origin], limit: 2 }],
    });
  });
  afterEach(async () => {
    await limiter.close();
    await partner.close();
  });

  it('request.outbound reaches routes in a sibling plugin (skip-override)', async () => {
    const app = Fastify();
    await app.register(hostgate, { limiter });
    await app.register(async (child) => {
      child.get('/report', async (request) => {
        const res = await request.outbound.fetch(`${partner.url}/ok?size=2`);
        return { upstream: await res.text() };
      });
    });
    const res = await app.inject({ method: 'GET', url: '/report' });
    await app.close();
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ upstream: 'xx' });
  });

  it("names itself 'hostgate' for Fastify 5.x (plugin-meta), so plugins can depend on it", async () => {
    const plugin = hostgate as unknown as Record<symbol, unknown>;
    expect(plugin[Symbol.for('plugin-meta')]).toEqual({ fastify: '5.x', name: 'hostgate' });
    expect(plugin[Symbol.for('fastify.display-name')]).toBe('hostgate');
    const app = Fastify();
    await app.register(hostgate, { limiter });
    // A plugin that declares hostgate as a dependency: Fastify refuses it unless a plugin named
    // 'hostgate' was registered before (FST_ERR_PLUGIN_DEPENDENCY_NOT_REGISTERED).
    const dependent = Object.assign(async () => {}, {
      [Symbol.for('plugin-meta')]: { name: 'needs-hostgate', dependencies: ['hostgate'] },
    });
    await app.register(dependent);
    await app.ready();
    expect(app.hasPlugin('hostgate')).toBe(true);
    await app.close();
  });
});
