import { channel } from 'node:diagnostics_channel';
import { afterAll, beforeAll, vi } from 'vitest';

/**
 * Test files share their worker process (`isolate: false` in vitest.config.ts), so a file must
 * leave behind nothing that changes how the next one's gates behave. Checked after each file
 * (this hook runs after the file's own): fake timers still installed, or a subscriber left on a
 * gate event that makes every later gate read the clock or build messages (an OpenTelemetry
 * registration never unregistered, a test's listener never removed). hostgate itself subscribes
 * for good only to the HTTP outcome channels (response, request-error, hold-timeout: adaptive
 * gates and partner guards), which are not checked.
 */
const GATE_EVENTS = [
  'hostgate:acquire',
  'hostgate:release',
  'hostgate:shed',
  'hostgate:wait-aborted',
  'hostgate:double-release',
  'hostgate:leak',
  'hostgate:lease-lost',
  'hostgate:store-error',
];

const subscribedNow = (): string[] => GATE_EVENTS.filter((name) => channel(name).hasSubscribers);

let before: string[] = [];
beforeAll(() => {
  before = subscribedNow(); // an earlier file's leak is that file's failure, not this one's
});

afterAll(() => {
  const left: string[] = [];
  if (vi.isFakeTimers()) {
    vi.useRealTimers();
    left.push('fake timers (vi.useRealTimers() in an afterEach)');
  }
  const added = subscribedNow().filter((name) => !before.includes(name));
  if (added.length > 0) left.push(`subscribers on ${added.join(', ')}`);
  if (left.length > 0) {
    throw new Error(`this test file left behind, for the files after it: ${left.join('; ')}`);
  }
});
