/**
 * node scripts/build.mjs: the runner as plain JavaScript in dist/ (dist/src/…, dist/migrations/…), what `npm start`,
 * `npm run cluster`, the benches and the process-tier tests run. Each file is transformed on its own (no bundle), types
 * stripped, names as written.
 *
 * Why not `node --import tsx` at run time: tsx transforms with esbuild's `keepNames`, which wraps every function our
 * code creates in `__name(fn, "…")`, an Object.defineProperty on the new closure. On Node 20 that gives each closure a
 * properties store of its own: +256 bytes and about 1.4 µs of CPU per closure created (npm run bench:closures), on
 * every step of every hot path. An open SSE stream held 11 such closures (2.8 KiB of its 11 KiB of heap). Without
 * minification the names are JavaScript's own anyway. src/browser is copied as it is: the runner bundles it for the
 * browser when it starts (LivePage, OpsPage).
 */
import { build } from "esbuild"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

const sources = (dir) =>
  fs.readdirSync(path.join(root, dir), { recursive: true })
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
    .map((f) => path.join(dir, f))

/** The runner's program in dist/, relative to the project (what `npm start` runs). */
export const RUNNER_PROGRAM = "dist/src/runners/main.js"

const browser = (file) => file.startsWith(`src${path.sep}browser${path.sep}`)

/**
 * Builds into a folder of its own and then swaps it in for dist/: a runner already started from dist/ (a bench, a test
 * beside it) keeps the files it loaded.
 */
export const buildDist = async () => {
  const started = Date.now()
  const files = [...sources("src"), ...sources("migrations")]
  const out = path.join(root, `dist.build-${process.pid}-${started}`)
  await build({
    absWorkingDir: root,
    entryPoints: files.filter((f) => !browser(f)),
    outdir: out,
    outbase: ".",
    bundle: false,
    format: "esm",
    platform: "node",
    target: `node${process.versions.node.split(".")[0]}`,
    sourcemap: "linked",
    keepNames: false,
    logLevel: "warning"
  })
  for (const file of files.filter(browser)) {
    fs.mkdirSync(path.dirname(path.join(out, file)), { recursive: true })
    fs.copyFileSync(path.join(root, file), path.join(out, file))
  }
  const dist = path.join(root, "dist")
  const old = `${out}.old`
  if (fs.existsSync(dist)) fs.renameSync(dist, old)
  fs.renameSync(out, dist)
  fs.rmSync(old, { recursive: true, force: true })
  return { files: files.length, ms: Date.now() - started }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { files, ms } = await buildDist()
  // quiet under `npm start` and `npm run cluster`: their output is the runner's (a refusal is one line)
  if (!process.argv.includes("--quiet")) console.error(`build: ${files} files into dist/ in ${ms} ms`)
}
