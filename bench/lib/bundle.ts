import { readFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import { build, type Plugin } from 'esbuild';

/**
 * The modules of src/redis find their Lua in files beside them (src/redis/lua.ts, by
 * `import.meta.url`): in a bundle each keeps its own URL, so it reads src/redis/commands/ as it
 * does from source, not a directory beside the bundle that holds none.
 */
const OWN_URL: Plugin = {
  name: 'hostgate-own-url',
  setup(builder) {
    builder.onLoad({ filter: /[\\/]src[\\/]redis[\\/][^\\/]+\.ts$/ }, async (args) => {
      const text = await readFile(args.path, 'utf8');
      const url = JSON.stringify(pathToFileURL(args.path).href);
      return { contents: text.replaceAll('import.meta.url', url), loader: 'ts' };
    });
  },
};

/**
 * The TypeScript module `entry` (a path) bundled into one ES module at `outfile`, for forking
 * with plain `node` (packages stay imports, resolved from the bundle's node_modules): through
 * the tsx loader every child would compile each of hostgate's modules again.
 */
export async function bundleForNode(entry: string, outfile: string): Promise<void> {
  await build({
    entryPoints: [entry],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    outfile,
    logLevel: 'error',
    plugins: [OWN_URL],
  });
}
