import * as undici from 'undici';

/**
 * The undici major the suite runs against: 8 when vitest aliases `undici` to the `undici8`
 * devDependency (`HOSTGATE_UNDICI=8`, Node >= 22.19), else 7. `Dispatcher1Wrapper` is new in 8.
 */
export const undiciMajor: 7 | 8 = 'Dispatcher1Wrapper' in undici ? 8 : 7;

const bundledMajor = Number(process.versions.undici?.split('.')[0] ?? 0);

/**
 * Whether Node's global fetch takes a *plain* dispatcher of the undici under test. Node's fetch
 * (the undici bundled with Node: 6 in Node 20 and 22, 7 in Node 24) hands dispatchers a
 * callback-API handler, which an undici 8 dispatcher refuses ("invalid onRequestStart method").
 * Node 26 bundles undici 8.
 */
export const globalFetchTakesPlainDispatcher = undiciMajor === 7 || bundledMajor >= 8;

/**
 * Whether Node's global fetch takes a hostgate dispatcher (limitHosts-composed, LimitedAgent):
 * always, since hostgate translates a callback-API handler for an undici 8 dispatcher below it.
 */
export const globalFetchTakesDispatcher = true;
