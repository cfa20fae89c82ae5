import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect } from "effect"
import { build } from "esbuild"
import { fileURLToPath } from "node:url"
import { providers } from "../providers/providers.js"
import { ApiSettings } from "./apiSettings.js"

/** One option per provider enabled on this runner, carrying a model that provider accepts. */
const providerOptions = (enabled: ReadonlyArray<string>) =>
  providers.filter((p) => enabled.includes(p.name)).map((p) =>
    `<option value="${p.name}" data-model="${p.exampleModel}">${p.name}</option>`
  ).join("")

const pageWith = (providerOptions: string) =>
  `<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8" />
  <meta name="viewport" content="width=device-width, initial-scale=1" />
  <title>Live tasks</title>
  <style>
    body { font: 14px/1.4 system-ui, sans-serif; margin: 2rem; color: #1d2330; }
    header { display: flex; gap: 1rem; align-items: baseline; }
    #connection { padding: 2px 10px; border-radius: 10px; background: #ddd; }
    #connection[data-state="live"] { background: #c8f2d0; }
    #connection[data-state="reconnecting"] { background: #ffe6a8; }
    #connection[data-state="paused"] { background: #ffc9c9; }
    form { margin: 1rem 0; display: flex; gap: .5rem; flex-wrap: wrap; }
    form[hidden] { display: none; }
    table { border-collapse: collapse; min-width: 720px; }
    td, th { padding: 4px 10px; border-bottom: 1px solid #eee; text-align: left; }
    .id { font-family: monospace; }
    .s-ready { color: #137333; font-weight: 600; }
    .s-failed, .s-canceled, .s-manual_review { color: #b3261e; font-weight: 600; }
    progress { width: 160px; }
    .error { color: #b3261e; }
  </style>
</head>
<body>
  <header>
    <h1>Live tasks</h1>
    <span id="connection" data-state="connecting">connecting…</span>
    <small>project <code id="project"></code></small>
  </header>
  <form id="signin" hidden>
    <input id="token" size="60" placeholder="access token (npm run token -- --tenant <uuid>)" />
    <button>Sign in</button> <span id="signin-error" class="error"></span>
  </form>
  <form id="create">
    <select id="provider">${providerOptions}</select>
    <input id="prompt" size="40" placeholder="a cat surfing at sunset" />
    <label>seconds <input id="duration" type="number" min="1" max="120" value="5" /></label>
    <label>count <input id="count" type="number" min="1" max="50" value="1" /></label>
    <button id="create-button">Create</button> <span id="create-error" class="error"></span>
  </form>
  <table>
    <thead><tr><th>task</th><th>status</th><th>stage</th><th>progress</th><th>version</th></tr></thead>
    <tbody id="tasks"></tbody>
  </table>
  <script type="module" src="/app.js"></script>
</body>
</html>`

/** The live task page at `/` and its script at `/app.js` (src/browser, bundled once when the runner starts). */
export const LivePageLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const bundle = yield* Effect.promise(() =>
      build({
        entryPoints: [fileURLToPath(new URL("../browser/app.ts", import.meta.url))],
        bundle: true,
        write: false,
        format: "esm",
        target: "es2020",
        minify: true
      })
    )
    const script = bundle.outputFiles[0]!.text
    const page = pageWith(providerOptions((yield* ApiSettings.config).providers))
    const headers = { "cache-control": "no-cache", "x-content-type-options": "nosniff" }
    yield* router.get("/", Effect.succeed(HttpServerResponse.html(page).pipe(HttpServerResponse.setHeaders(headers))))
    yield* router.get(
      "/app.js",
      Effect.succeed(HttpServerResponse.text(script, { contentType: "text/javascript; charset=utf-8", headers }))
    )
  })
)
