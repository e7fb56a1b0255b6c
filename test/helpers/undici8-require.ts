import module from 'node:module';

/**
 * `HOSTGATE_UNDICI=8` (vitest.config.ts): the alias maps `import ... from 'undici'`, which vite
 * resolves; hostgate loads undici at run time with `require` (src/http/undici.ts), which vite
 * never sees. This hook sends those to the `undici8` devDependency too (Node >= 22.15, which the
 * undici 8 leg needs anyway), so src, middleware and tests share one undici.
 */
type ResolveNext = (specifier: string, context: unknown) => unknown;
const { registerHooks } = module as unknown as {
  registerHooks(hooks: {
    resolve(specifier: string, context: unknown, next: ResolveNext): unknown;
  }): void;
};
// Setup files run again before each test file, and test files share their process: one hook.
const registered = Symbol.for('hostgate.test.undici8-require');
const marks = globalThis as { [registered]?: true };
if (marks[registered] === undefined) {
  marks[registered] = true;
  registerHooks({
    resolve(specifier, context, next) {
      if (specifier === 'undici' || specifier.startsWith('undici/')) {
        return next(`undici8${specifier.slice('undici'.length)}`, context);
      }
      return next(specifier, context);
    },
  });
}
