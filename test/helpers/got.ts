/**
 * got for the Node running the suite: got 16 (the current major, the `got` devDependency) where
 * it supports the Node (its `engines`: Node >= 22, so CI's Node 24 legs), else got 14 (the
 * `got14` devDependency, an npm alias) on Node 20. The types are got 16's; the calls the tests
 * make are the same in both (got 16 dropped the promise's `cancel()`: cancel with `signal`).
 */
import type * as Got from 'got';

const nodeMajor = Number(process.versions.node.split('.')[0]);

/** The got major under test: 16 on Node >= 22, 14 on Node 20. */
export const gotMajor: 14 | 16 = nodeMajor >= 22 ? 16 : 14;

const loaded = (gotMajor === 16
  ? await import('got')
  : await import('got14')) as unknown as typeof Got;

export const got = loaded.default;
export const { AbortError, RequestError } = loaded;
