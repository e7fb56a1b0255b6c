import { afterAll, expect, it } from 'vitest';
import {
  connectResp,
  describeRedis,
  respCommand,
  startRedis,
  stopAllRedis,
} from '../helpers/redis-server.js';

afterAll(stopAllRedis);

describeRedis('the private redis-server helper', () => {
  it('starts, pauses, resumes, restarts empty on the same port, and fails over to a replica', async () => {
    const primary = await startRedis();
    expect(await primary.command('SET', 'k', 'v')).toBe('OK');

    const replica = await primary.startReplica();
    // WAIT returns once the replica acknowledged the write: an event, not a sleep.
    expect(await primary.command('WAIT', 1, 5000)).toBe(1);
    expect(await replica.command('GET', 'k')).toBe('v');

    primary.pause();
    const paused = await connectResp(primary.port);
    const answer = paused.command('PING');
    const outcome = await Promise.race([
      answer.then(() => 'answered'),
      new Promise<string>((resolve) => setTimeout(() => resolve('silent'), 200)),
    ]);
    expect(outcome).toBe('silent');
    primary.resume();
    expect(await answer).toBe('PONG');
    paused.close();

    await replica.promote();
    expect(await replica.command('SET', 'k2', 'v2')).toBe('OK');

    const pid = primary.pid;
    await primary.restart();
    expect(primary.pid).not.toBe(pid);
    expect(await respCommand(primary.port, 'GET', 'k')).toBeNull();

    await primary.kill();
    expect(primary.running).toBe(false);
    await replica.stop();
    expect(replica.running).toBe(false);
  });
});
