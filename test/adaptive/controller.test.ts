import { describe, expect, it } from 'vitest';
import type { LimitAlgorithm, LimitSample } from '../../src/adaptive/algorithm.js';
import { AdaptiveController } from '../../src/adaptive/controller.js';
import { parseAdaptive } from '../../src/adaptive/options.js';
import { type Permit, Semaphore } from '../../src/index.js';

/** A controller over a gate of 10 whose algorithm only records what it is fed. */
function recording() {
  const gate = new Semaphore({ limit: 10 });
  const samples: LimitSample[] = [];
  const algorithm: LimitAlgorithm = {
    name: 'recording',
    limit: 10,
    minRttMs: undefined,
    update(sample) {
      samples.push(sample);
      return 10;
    },
  };
  const controller = new AdaptiveController(gate, parseAdaptive('p', true, 10)!, algorithm);
  return { gate, samples, controller };
}

describe('AdaptiveController', () => {
  // Regression: a sample's load was the gate's held at the response only, which falls through a
  // burst of responses as each permit goes back: AIMD took half of a full gate's samples for
  // app-limited ones (inflight × 2 < limit) and grew at half its rate.
  it("samples the load a request saw as the larger of the gate's held at its grant and at its response", () => {
    const { gate, samples, controller } = recording();
    const permits = Array.from({ length: 4 }, () => gate.tryAcquire() as Permit);
    // Granted one by one (held 1, 2, 3, 4 at their grants), answered in one burst, oldest
    // first, each permit back before the next response.
    permits.forEach((permit, i) => {
      controller.onResponse(permit, 200, {}, i + 1);
      permit.release();
    });
    expect(samples.map((s) => s.inflight)).toEqual([4, 3, 3, 4]);
  });

  it("reads the gate's held at the response when a publisher gives no count at the grant", () => {
    const { gate, samples, controller } = recording();
    const [a, b] = [gate.tryAcquire() as Permit, gate.tryAcquire() as Permit];
    controller.onResponse(a, 200, {});
    a.release();
    controller.onResponse(b, 503, {});
    expect(samples.map((s) => [s.inflight, s.dropped])).toEqual([
      [2, false],
      [1, true],
    ]);
  });
});
