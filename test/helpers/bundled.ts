import { fileURLToPath, pathToFileURL } from 'node:url';
import { bundleForNode } from '../../bench/lib/bundle.js';

const bundles = new Map<string, Promise<URL>>();

/**
 * The TypeScript module at `entry` bundled into one ES module (packages stay imports), for
 * forking with plain `node`: through the tsx loader every child compiled each of hostgate's
 * modules again, about a second of CPU per fork, and the multi-process files fork a dozen.
 * Once per test process and entry; the file name carries the pid, so test files running at
 * once never write the same file.
 */
export function bundled(entry: URL): Promise<URL> {
  let bundle = bundles.get(entry.href);
  if (bundle === undefined) {
    const name = fileURLToPath(entry)
      .replace(/^.*[\\/]/, '')
      .replace(/\.ts$/, '');
    const out = new URL(
      `../../node_modules/.cache/hostgate-test/${name}-${process.pid}.mjs`,
      import.meta.url,
    );
    bundle = bundleForNode(fileURLToPath(entry), fileURLToPath(out)).then(() =>
      pathToFileURL(fileURLToPath(out)),
    );
    bundles.set(entry.href, bundle);
  }
  return bundle;
}
