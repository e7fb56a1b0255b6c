import { describe, expect, it } from 'vitest';
import { HostLimiter, type Permit, Semaphore } from '../../src/index.js';

function gate(options: Record<string, unknown> = {}) {
  let t = 0;
  const sem = new Semaphore({ limit: 1, queueTimeout: 60_000, now: () => t, ...options });
  const order: number[] = [];
  const queue = (id: number) =>
    sem.acquire().then((permit) => {
      order.push(id);
      return permit;
    });
  return { sem, order, queue, at: (ms: number) => (t = ms) };
}

async function serveAll(holder: Permit, waiters: Promise<Permit>[]): Promise<void> {
  holder.release();
  for (const w of waiters) (await w).release();
}

describe('queueOrder', () => {
  it('is FIFO by default', async () => {
    const { sem, order, queue, at } = gate();
    const holder = sem.tryAcquire()!;
    const waiters = [1, 2, 3].map(queue);
    at(10_000);
    await serveAll(holder, waiters);
    expect(order).toEqual([1, 2, 3]);
  });

  it("'adaptive-lifo' serves FIFO while the queue is young, newest first once it stands", async () => {
    const { sem, order, queue, at } = gate({ queueOrder: 'adaptive-lifo', lifoAfter: 100 });
    let holder = sem.tryAcquire()!;
    const young = [1, 2, 3].map(queue);
    at(50); // oldest waited 50 ms < 100: FIFO
    holder.release();
    holder = await young[0]!;
    expect(order).toEqual([1]);
    const late = [4, 5].map(queue);
    at(150); // oldest (2) waited 150 ms: the queue stands, newest first
    holder.release();
    holder = await late[1]!;
    holder.release();
    holder = await late[0]!;
    expect(order).toEqual([1, 5, 4]);
    // 2 and 3 are older than lifoAfter, so LIFO still serves 3 before 2
    holder.release();
    (await young[2]!).release();
    (await young[1]!).release();
    expect(order).toEqual([1, 5, 4, 3, 2]);
    // drained: a fresh queue is FIFO again
    holder = sem.tryAcquire()!;
    const fresh = [6, 7].map(queue);
    await serveAll(holder, fresh);
    expect(order.slice(5)).toEqual([6, 7]);
  });

  it.each([
    [{ queueOrder: 'lifo' }, `queueOrder must be 'fifo' or 'adaptive-lifo', got "lifo"`],
    [{ lifoAfter: 50 }, "lifoAfter needs queueOrder: 'adaptive-lifo'"],
    [{ queueOrder: 'adaptive-lifo', lifoAfter: 0 }, 'lifoAfter must be a duration in ms'],
  ])('rejects %j with a TypeError', (options, message) => {
    expect(() => new Semaphore({ limit: 1, ...options } as never)).toThrow(TypeError);
    expect(() => new Semaphore({ limit: 1, ...options } as never)).toThrow(message);
  });

  it('is a partner option of HostLimiter', () => {
    expect(
      () =>
        new HostLimiter({
          partners: [
            {
              name: 'a',
              hosts: ['a.example'],
              limit: 2,
              queueOrder: 'adaptive-lifo',
              lifoAfter: 20,
            },
          ],
          unknownHosts: { limit: 2, queueOrder: 'adaptive-lifo' },
        }),
    ).not.toThrow();
    expect(
      () =>
        new HostLimiter({
          partners: [{ name: 'a', hosts: ['a.example'], limit: 2, queueOrder: 'newest' as never }],
        }),
    ).toThrow(`partner "a": queueOrder must be 'fifo' or 'adaptive-lifo', got "newest"`);
  });
});
