import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

/**
 * The counting gate is one class a reader holds in their head (issue "core whole"): limit,
 * held, weights, the queue discipline, grant and release. What else a gate does lives in
 * collaborators of one job each; a new feature that needs the gate adds a collaborator, not
 * lines here.
 */
it('keeps the CountingGate class within 300 lines, its fields on one screen', () => {
  const lines = readFileSync(
    new URL('../../src/gate/counting-gate.ts', import.meta.url),
    'utf8',
  ).split('\n');
  const start = lines.findIndex((line) => line.startsWith('export class CountingGate '));
  const end = lines.findIndex((line, i) => i > start && line === '}');
  expect(start).toBeGreaterThan(0);
  expect(end - start + 1, 'lines of the CountingGate class').toBeLessThanOrEqual(300);
  const firstMember = lines.findIndex(
    (line, i) => i > start && /^ {2}(static|constructor)/.test(line),
  );
  expect(
    firstMember - start,
    'lines from the class to its static block (its fields)',
  ).toBeLessThanOrEqual(40);
});
