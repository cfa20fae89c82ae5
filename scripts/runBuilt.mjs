/**
 * node scripts/runBuilt.mjs <program.ts> [args…]: runs a TypeScript program of ours (a bench that hosts the runner's
 * code in its own process, or a ceiling) as plain JavaScript, as the runner runs (scripts/build.mjs): bundled with
 * esbuild into .scratch/ (our code in one file, packages left to node_modules), names as written, then imported.
 *
 * Why not tsx: its esbuild `keepNames` wraps every function our code creates in an Object.defineProperty, which costs
 * each closure 256 bytes and about 1.4 µs of CPU on Node 20 (npm run bench:closures). A bench under tsx would measure
 * that handicap, not our work. The bundle lives in .scratch/, one folder below the project, so a file that finds the
 * project from its own place (scripts/build.mjs) still does.
 */
import { build } from "esbuild"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/** Bundles `entry` (relative to the project) into .scratch/; resolves with the bundle's path. */
export const bundle = async (entry) => {
  const outfile = path.join(root, ".scratch", `${path.basename(entry).replace(/\.[mc]?ts$/, "")}.built.mjs`)
  await build({
    absWorkingDir: root,
    entryPoints: [entry],
    bundle: true,
    packages: "external",
    format: "esm",
    platform: "node",
    target: `node${process.versions.node.split(".")[0]}`,
    outfile,
    sourcemap: "linked",
    keepNames: false,
    logLevel: "warning"
  })
  return outfile
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [entry, ...args] = process.argv.slice(2)
  if (entry === undefined) {
    console.error("usage: node scripts/runBuilt.mjs <program.ts> [args…]")
    process.exit(2)
  }
  const outfile = await bundle(entry)
  // the program sees its own name and arguments, as under tsx
  process.argv = [process.argv[0], path.join(root, entry), ...args]
  await import(pathToFileURL(outfile).href)
}
