/**
 * Queue discipline at overload: callers arrive at `ratePerSec` (open loop) and each gives up
 * `deadlineMs` after it arrived, wherever it is (queued or in flight): a user-facing request
 * with a latency budget. Served = answered within the deadline.
 */
import { performance } from 'node:perf_hooks';
import { request } from 'undici';
import { findShedError } from '../../src/index.js';
import type { PartnerProcess } from '../overload/partner.js';
import type { AdaptiveContender } from './contenders.js';

export interface DeadlineResult {
  arrivals: number;
  served: number;
  /** Gave up at their deadline (while queued or in flight). */
  expired: number;
  /** Refused by the gate (queue full or its own wait deadline). */
  shed: number;
  errors: number;
  /** Arrival to answer of every served caller, ms, sorted. */
  servedMs: number[];
  /** Requests the partner worked on for callers that had already gone. */
  partnerWasted: number;
  wallMs: number;
}

export async function runDeadlineLoop(
  contender: AdaptiveContender,
  partner: PartnerProcess,
  options: { ratePerSec: number; durationMs: number; deadlineMs: number },
): Promise<DeadlineResult> {
  await partner.reset();
  const result: DeadlineResult = {
    arrivals: 0,
    served: 0,
    expired: 0,
    shed: 0,
    errors: 0,
    servedMs: [],
    partnerWasted: 0,
    wallMs: 0,
  };
  const url = `${partner.origin}/work`;
  const calls: Promise<void>[] = [];
  const call = async () => {
    const start = performance.now();
    const signal = AbortSignal.timeout(options.deadlineMs);
    try {
      const res = await request(url, { dispatcher: contender.dispatcher, signal });
      await res.body.text();
      const ms = performance.now() - start;
      if (res.statusCode === 200 && ms <= options.deadlineMs) {
        result.served++;
        result.servedMs.push(ms);
      } else if (res.statusCode === 200) result.expired++;
      else result.errors++;
    } catch (error) {
      if (findShedError(error) !== undefined) result.shed++;
      else if (signal.aborted) result.expired++;
      else result.errors++;
    }
  };
  const t0 = performance.now();
  const total = Math.floor((options.ratePerSec * options.durationMs) / 1000);
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const due = Math.min(
        total,
        Math.floor(((performance.now() - t0) * options.ratePerSec) / 1000),
      );
      while (result.arrivals < due) {
        result.arrivals++;
        calls.push(call());
      }
      if (result.arrivals >= total || performance.now() - t0 > options.durationMs * 3) {
        clearInterval(timer);
        resolve();
      }
    }, 1);
  });
  await Promise.all(calls);
  result.wallMs = performance.now() - t0;
  result.servedMs.sort((a, b) => a - b);
  result.partnerWasted = (await partner.stats()).servedAbandoned;
  await contender.close();
  await partner.drain(5_000);
  return result;
}
