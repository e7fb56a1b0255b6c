import { channel } from 'node:diagnostics_channel';
import { afterAll, beforeAll, vi } from 'vitest';
import { channels } from '../../src/gate/gate-events.js';
import { storeChannels } from '../../src/redis/channels.js';

/**
 * Test files share their worker process (`isolate: false` in vitest.config.ts), so a file must
 * leave behind nothing that changes how the next one's gates behave. Checked after each file
 * (this hook runs after the file's own): fake timers still installed, or a subscriber left on any
 * hostgate channel, which makes every later gate read the clock or build messages (an
 * OpenTelemetry registration never unregistered, a test's listener never removed). hostgate
 * itself subscribes to none of its channels (test/observe/no-internal-subscribers.test.ts).
 */
const CHANNELS = [...Object.values(channels), ...Object.values(storeChannels)].map(
  (c) => c.name as string,
);

const subscribedNow = (): string[] => CHANNELS.filter((name) => channel(name).hasSubscribers);

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
