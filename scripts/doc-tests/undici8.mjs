/**
 * `node --import ./scripts/doc-tests/undici8.mjs`: resolves every `undici` import (the doc-test's
 * own and the built package's) to the `undici8` devDependency, as vitest's alias does for the
 * suite under HOSTGATE_UNDICI=8. hostgate loads undici with `require` where it uses it
 * (src/http/undici.ts), so the synchronous hooks (Node >= 22.15, as undici 8 needs anyway) map
 * `require('undici')` and `undici/...` subpaths too.
 */
import module from 'node:module';

const toUndici8 = (specifier) =>
  specifier === 'undici' || specifier.startsWith('undici/')
    ? `undici8${specifier.slice('undici'.length)}`
    : specifier;

if (typeof module.registerHooks === 'function') {
  module.registerHooks({
    resolve: (specifier, context, next) => next(toUndici8(specifier), context),
  });
} else {
  const hooks = `
export async function resolve(specifier, context, next) {
  return next(specifier === 'undici' ? 'undici8' : specifier, context);
}
`;
  module.register(`data:text/javascript,${encodeURIComponent(hooks)}`, import.meta.url);
}
