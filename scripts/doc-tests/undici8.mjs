/**
 * `node --import ./scripts/doc-tests/undici8.mjs`: resolves every `undici` import (the doc-test's
 * own and the built package's) to the `undici8` devDependency, as vitest's alias does for the
 * suite under HOSTGATE_UNDICI=8.
 */
import { register } from 'node:module';

const hooks = `
export async function resolve(specifier, context, next) {
  return next(specifier === 'undici' ? 'undici8' : specifier, context);
}
`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`, import.meta.url);
