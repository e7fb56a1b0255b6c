import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import axios from 'axios';
import express from 'express';
import request from 'supertest';
import { beforeEach, describe, expect, it } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import type { RequestErrorMessage, ResponseMessage } from '../../src/gate/diagnostics.js';
import { ClientDisconnectedError, type LimitedHttpAgent } from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { got } from '../helpers/got.js';
import { expectInvariant } from '../helpers/invariant.js';
import { get, useGatedAgent } from '../helpers/node-http.js';
import type { Partner } from '../helpers/partner.js';

describe('LimitedHttpAgent: diagnostics, adaptive signals and the inbound disconnect signal', () => {
  const setup = useGatedAgent({ limit: 2, maxQueue: 5 });
  const gate = () => setup.gate;
  let partner: Partner;
  let agent: LimitedHttpAgent;
  beforeEach(() => {
    ({ partner, agent } = setup);
  });

  it('publishes hostgate:response with the status (adaptive limits learn from it) and hostgate:request-error on a reset', async () => {
    const responses: ResponseMessage[] = [];
    const errors: RequestErrorMessage[] = [];
    const onResponse = (m: unknown) => responses.push(m as ResponseMessage);
    const onError = (m: unknown) => errors.push(m as RequestErrorMessage);
    subscribe('hostgate:response', onResponse);
    subscribe('hostgate:request-error', onError);
    try {
      const answered = await get(`${partner.url}/status?code=503&retryAfter=1`, agent).outcome;
      expect(answered.ok && answered.status).toBe(503);
      await whenIdle(gate());
      const reset = await get(`${partner.url}/reset`, agent).outcome;
      expect(reset.ok).toBe(false);
      await whenIdle(gate());
    } finally {
      unsubscribe('hostgate:response', onResponse);
      unsubscribe('hostgate:request-error', onError);
    }
    expect(responses.map((m) => [m.partner, m.statusCode, m.heldAtGrant])).toEqual([
      ['p', 503, 1],
      ['p', 200, 1],
    ]);
    expect(responses[0]!.headers).toMatchObject({ 'retry-after': '1' });
    expect(errors).toHaveLength(1);
    expect(errors[0]!.partner).toBe('p');
    expectInvariant(gate());
  });

  it("Express's req.outbound.signal handed to axios and got: a client that hangs up cancels them", async () => {
    const app = express();
    app.use(outbound({ limiter: agent.limiter }));
    let failure: unknown;
    const req: { outboundSignalReason?: unknown } = {};
    app.get('/fan-out', async (inbound, res, next) => {
      try {
        const signal = inbound.outbound.signal;
        signal.addEventListener('abort', () => {
          req.outboundSignalReason = signal.reason;
        });
        await Promise.all([
          axios.get(`${partner.url}/held`, { httpAgent: agent, signal }),
          got(`${partner.url}/held`, { agent: { http: agent }, signal, retry: { limit: 0 } }),
          axios.get(`${partner.url}/held`, { httpAgent: agent, signal }), // queued
        ]);
        res.end();
      } catch (error) {
        failure = error;
        next(error);
      }
    });
    app.use(shed());
    const client = request(app).get('/fan-out');
    const answered = client.then(
      () => undefined,
      (e: unknown) => e,
    );
    await partner.waitForActive(2);
    expect(gate().queued).toBe(1);
    client.abort();
    await answered;
    await partner.waitForClosedEarly(2);
    await whenIdle(gate());
    expect(gate().queued).toBe(0);
    expect(partner.arrived).toBe(2);
    expect(gate().stats().released).toBe(2);
    // axios rejects with its CanceledError, got with its AbortError: whichever came first.
    expect(failure).toBeInstanceOf(Error);
    expect(req.outboundSignalReason).toBeInstanceOf(ClientDisconnectedError);
    expectInvariant(gate());
  });
});
