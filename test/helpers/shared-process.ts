import { channel } from 'node:diagnostics_channel';
import { afterAll, beforeAll, vi } from 'vitest';
import { channels } from '../../src/gate/gate-events.js';
import { storeChannels } from '../../src/redis/channels.js';

/**
 * Test files share their worker process (`isolate: false` in vitest.config.ts), so a file must
 * leave behind nothing that changes how the next one's gates behave. Checked after each file
 * (this hook runs after the file's own):
 *
 * - fake timers still installed;
 * - a subscriber left on any hostgate channel, which makes every later gate read the clock or
 *   build messages (an OpenTelemetry registration never unregistered, a test's listener never
 *   removed). hostgate itself subscribes to none of its channels
 *   (test/observe/no-internal-subscribers.test.ts);
 * - the worker's module registry reset (`vi.resetModules()`): every later file then loads a
 *   second instance of hostgate's modules, whose channels are made again by name, and on Node
 *   20 a channel made again can be cut from its name for good (nodejs/node#59910: the
 *   finalizer of the dead first channel deletes the registry entry of the new one). A test
 *   that subscribes by name (`subscribe('hostgate:lease-lost', ...)`) then listens on a third
 *   channel nobody publishes on: weights.test.ts waited 20 s for two lease-lost events so
 *   (docs/development.md, "Shared processes"). A fresh instance of one module is an import
 *   with a query (test/observe/channels.test.ts);
 * - a hostgate channel that its name no longer reaches, however that came about.
 */
const ALL = [...Object.values(channels), ...Object.values(storeChannels)];
const CHANNELS = ALL.map((c) => c.name as string);

const subscribedNow = (): string[] => CHANNELS.filter((name) => channel(name).hasSubscribers);

let before: string[] = [];
beforeAll(() => {
  before = subscribedNow(); // an earlier file's leak is that file's failure, not this one's
});

afterAll(async () => {
  const left: string[] = [];
  if (vi.isFakeTimers()) {
    vi.useRealTimers();
    left.push('fake timers (vi.useRealTimers() in an afterEach)');
  }
  const added = subscribedNow().filter((name) => !before.includes(name));
  if (added.length > 0) left.push(`subscribers on ${added.join(', ')}`);
  // The registry's instances now: the same as this file's setup imported, unless it was reset.
  const [gate, store] = await Promise.all([
    import('../../src/gate/gate-events.js'),
    import('../../src/redis/channels.js'),
  ]);
  if (gate.channels !== channels || store.storeChannels !== storeChannels) {
    left.push(
      "a reset module registry (vi.resetModules(): the files after it load hostgate's modules again; import one module with a query instead)",
    );
  }
  const cut = ALL.filter((c) => channel(c.name) !== c).map((c) => c.name as string);
  if (cut.length > 0) left.push(`channels their name no longer reaches: ${cut.join(', ')}`);
  if (left.length > 0) {
    throw new Error(`this test file left behind, for the files after it: ${left.join('; ')}`);
  }
});
