/**
 * A closed loop against the partner: `workers` callers each call again as soon as their last
 * call ended, for `durationMs`, while the partner's capacity follows `phases`. Each call has a
 * timeout armed at dispatch (when its headers go out, as in the overload benchmark); the caller
 * aborts with a `TimeoutError`, which adaptive gates count as a drop.
 */
import diagnostics from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { request } from 'undici';
import type { PartnerConfig, PartnerProcess } from '../overload/partner.js';
import type { AdaptiveContender } from './contenders.js';

export interface Phase {
  /** From the start of the run, ms. */
  atMs: number;
  capacity: number;
}

export interface LoopResult {
  /** Per call: end time (ms from start), 1 ok / 2 timeout / 3 other, latency from dispatch. */
  ends: number[];
  outcomes: number[];
  latencies: number[];
  /** The gate's limit every `sampleMs`. */
  limits: { t: number; limit: number }[];
  partnerPeakOpen: number;
  problems: string[];
}

const onSent = new Map<number, () => void>();
diagnostics.subscribe('undici:client:sendHeaders', (message) => {
  const path = (message as { request: { path: string } }).request.path;
  const at = path.indexOf('?i=');
  if (at < 0) return;
  const id = Number(path.slice(at + 3));
  onSent.get(id)?.();
  onSent.delete(id);
});
let nextId = 0;

export async function runClosedLoop(
  contender: AdaptiveContender,
  partner: PartnerProcess,
  base: PartnerConfig,
  options: { workers: number; durationMs: number; timeoutMs: number; phases: Phase[] },
): Promise<LoopResult> {
  await partner.configure({ ...base, capacity: options.phases[0]?.capacity ?? base.capacity });
  await partner.reset();
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  const result: LoopResult = {
    ends: [],
    outcomes: [],
    latencies: [],
    limits: [],
    partnerPeakOpen: 0,
    problems: [],
  };
  const phaseTimers = options.phases
    .slice(1)
    .map((p) =>
      setTimeout(() => void partner.configure({ ...base, capacity: p.capacity }), p.atMs),
    );
  const sampler = setInterval(() => {
    result.limits.push({ t: now(), limit: contender.gate.limit });
    if (result.problems.length < 10) result.problems.push(...contender.checkNow());
  }, 50);
  const url = `${partner.origin}/work?i=`;
  const worker = async () => {
    while (now() < options.durationMs) {
      const id = nextId++;
      const controller = new AbortController();
      let sentAt = 0;
      let timer: ReturnType<typeof setTimeout> | undefined;
      onSent.set(id, () => {
        sentAt = now();
        timer = setTimeout(
          () => controller.abort(new DOMException('call timeout', 'TimeoutError')),
          options.timeoutMs,
        );
      });
      let outcome = 3;
      try {
        const res = await request(url + id, {
          dispatcher: contender.dispatcher,
          signal: controller.signal,
        });
        await res.body.text();
        outcome = res.statusCode === 200 ? 1 : 3;
      } catch {
        outcome = controller.signal.aborted ? 2 : 3;
      }
      clearTimeout(timer);
      onSent.delete(id);
      const end = now();
      if (outcome === 1 && sentAt > 0 && end - sentAt > options.timeoutMs) outcome = 2;
      result.ends.push(end);
      result.outcomes.push(outcome);
      result.latencies.push(sentAt > 0 ? end - sentAt : Number.NaN);
    }
  };
  await Promise.all(Array.from({ length: options.workers }, worker));
  clearInterval(sampler);
  for (const t of phaseTimers) clearTimeout(t);
  result.partnerPeakOpen = (await partner.stats()).peakOpen;
  await contender.close();
  await partner.drain(5_000);
  return result;
}

/** Successful calls per second in each `bucketMs` bucket. */
export function goodputSeries(r: LoopResult, bucketMs: number, durationMs: number): number[] {
  const buckets = new Array(Math.ceil(durationMs / bucketMs)).fill(0) as number[];
  for (let i = 0; i < r.ends.length; i++) {
    if (r.outcomes[i] !== 1) continue;
    const b = Math.floor(r.ends[i]! / bucketMs);
    if (b < buckets.length) buckets[b]!++;
  }
  return buckets.map((n) => (n * 1000) / bucketMs);
}

/** Calls in [from, to): goodput/s, timeouts, mean latency of successful calls. */
export function window(r: LoopResult, from: number, to: number) {
  let ok = 0;
  let timeouts = 0;
  let sum = 0;
  for (let i = 0; i < r.ends.length; i++) {
    const t = r.ends[i]!;
    if (t < from || t >= to) continue;
    if (r.outcomes[i] === 1) {
      ok++;
      sum += r.latencies[i]!;
    } else if (r.outcomes[i] === 2) timeouts++;
  }
  return { goodput: (ok * 1000) / (to - from), timeouts, meanMs: ok ? sum / ok : Number.NaN };
}

/**
 * ms from `changeAt` until the goodput over a `spanMs` window first reaches `share` × `target`
 * (checked every 50 ms); `undefined` if it never does before `until`.
 */
export function recoveryMs(
  r: LoopResult,
  changeAt: number,
  until: number,
  target: number,
  share = 0.9,
  spanMs = 500,
): number | undefined {
  for (let t = changeAt; t + spanMs <= until; t += 50) {
    if (window(r, t, t + spanMs).goodput >= share * target) return t - changeAt;
  }
  return undefined;
}
