/**
 * The operator page's HTML: structure and style only, no data (every value is filled in by /ops.js from the admin
 * API). Dense and plain on purpose: it is read under stress, at a glance, often on a small laptop screen.
 */
const style = `
  :root { --ink: #1c2230; --muted: #5f6877; --line: #e2e5ea; --bg: #f6f7f9; --ok: #137333; --bad: #b3261e;
    --warn: #a15c00; --accent: #1f5fbf; }
  * { box-sizing: border-box; }
  body { font: 13px/1.35 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: var(--ink);
    background: var(--bg); }
  header { display: flex; gap: 14px; align-items: baseline; padding: 8px 16px; background: #1c2230; color: #fff; }
  header h1 { font-size: 16px; margin: 0; }
  header .who { color: #c9d1de; }
  header .who b { color: #fff; font-weight: 600; }
  header .stamps { margin-left: auto; color: #9aa5b5; font-size: 12px; }
  header button { font-size: 12px; }
  main { padding: 10px 16px 24px; }
  .columns { display: grid; grid-template-columns: minmax(0, 1.5fr) minmax(320px, 1fr); gap: 10px;
    align-items: start; }
  @media (max-width: 1000px) { .columns { grid-template-columns: minmax(0, 1fr); } }
  section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; margin-bottom: 10px; }
  section.stale { border-color: #e7b4ae; background: #fffafa; }
  h2 { font-size: 13px; margin: 0 0 6px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted);
    display: flex; gap: 8px; align-items: baseline; }
  h2 .summary { text-transform: none; letter-spacing: 0; font-weight: 400; }
  .count { color: var(--ink); background: #eceff3; border-radius: 8px; padding: 0 7px; letter-spacing: 0;
    font-weight: 600; }
  .count.nonzero { background: #fde2dd; color: var(--bad); }
  h2 .tools { margin-left: auto; text-transform: none; letter-spacing: 0; font-weight: 400; }
  table { border-collapse: collapse; width: 100%; }
  th { text-align: left; font-weight: 600; color: var(--muted); font-size: 12px; border-bottom: 1px solid var(--line);
    padding: 2px 6px; white-space: nowrap; }
  td { padding: 3px 6px; border-bottom: 1px solid #f0f1f4; vertical-align: middle; }
  tbody:empty::after { content: "none"; display: table-cell; padding: 3px 6px; color: var(--muted); }
  .num { text-align: right; font-variant-numeric: tabular-nums; }
  .mono, code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12px; }
  .error-text { max-width: 360px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; color: var(--muted); }
  .when, .change { white-space: nowrap; color: var(--muted); }
  .change { color: var(--ink); }
  .actions { white-space: nowrap; }
  .actions > * { margin-right: 4px; }
  button { font: inherit; font-size: 12px; padding: 2px 9px; border: 1px solid #b9c0cb; border-radius: 4px;
    background: #fff; cursor: pointer; }
  button:hover { border-color: var(--accent); }
  button:disabled { opacity: .5; cursor: progress; }
  button.drain { border-color: #d9a6a0; color: var(--bad); }
  button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
  input, select { font: inherit; font-size: 12px; padding: 2px 5px; border: 1px solid #b9c0cb; border-radius: 4px; }
  .weight-input { width: 48px; }
  td.singletons { font-size: 11px; color: var(--muted); max-width: 220px; overflow-wrap: anywhere; }
  .weight-control { margin-left: 6px; }
  .badge { display: inline-block; border-radius: 8px; padding: 0 8px; font-size: 12px; font-weight: 600; }
  .badge.healthy { background: #d8f3de; color: var(--ok); }
  .badge.draining { background: #fff0c7; color: var(--warn); }
  .badge.unhealthy { background: #fde2dd; color: var(--bad); }
  .swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; vertical-align: -1px; }
  /* a shard nobody holds (moving between runners): hollow, so it reads as "in flight" rather than as a color */
  .swatch.unassigned, .shard[data-runner=""] { background: #fff; box-shadow: inset 0 0 0 1px #8a94a3; }
  #legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin-bottom: 6px; }
  .legend-item { display: inline-flex; gap: 5px; align-items: center; font-variant-numeric: tabular-nums; }
  .legend-item em { color: var(--warn); font-style: normal; }
  .group { margin-bottom: 6px; }
  .group-name { font-weight: 600; margin-bottom: 2px; }
  .group-name small { color: var(--muted); font-weight: 400; }
  .grid { display: grid; grid-template-columns: repeat(auto-fill, 11px); gap: 2px; }
  .shard { display: block; width: 11px; height: 11px; border-radius: 2px; }
  dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 8px; }
  dl.facts dt { color: var(--muted); }
  dl.facts dd { margin: 0; font-variant-numeric: tabular-nums; }
  #mode-value { font-weight: 700; font-size: 15px; }
  #mode-value[data-mode]:not([data-mode="NORMAL"]) { color: var(--warn); }
  form.inline { display: flex; flex-wrap: wrap; gap: 5px; align-items: center; }
  form.inline input[type=text], form.inline input:not([type]) { flex: 1 1 140px; }
  details { margin-top: 8px; }
  summary { cursor: pointer; color: var(--muted); }
  .big { font-size: 20px; font-weight: 700; font-variant-numeric: tabular-nums; }
  #outbox.warn .big { color: var(--bad); }
  .outbox-figures { display: flex; gap: 28px; }
  .outbox-figures small { display: block; color: var(--muted); }
  #signin { max-width: 760px; margin: 24px auto; }
  #signin .row { display: flex; gap: 6px; }
  #signin input { flex: 1; font-size: 13px; padding: 5px 8px; }
  #signin p { color: var(--muted); margin: 6px 0 0; }
  #signin-note { color: var(--bad); }
  #messages-box { margin-bottom: 10px; }
  #messages { list-style: none; margin: 0; padding: 0; max-height: 122px; overflow: auto; }
  #messages li { padding: 2px 0; border-bottom: 1px solid #f3f4f6; }
  #messages li.error .text { color: var(--bad); }
  #messages li.ok .text { color: var(--ok); }
  #messages .time { color: var(--muted); font-variant-numeric: tabular-nums; margin-right: 4px; }
  #messages .times { color: var(--muted); }
  h3 { font-size: 12px; margin: 8px 0 2px; color: var(--muted); font-weight: 600; }
`

export const opsPageHtml = (development: boolean) =>
  `<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8" />
  <meta name="viewport" content="width=device-width, initial-scale=1" />
  <title>Operations · task control plane</title>
  <style>${style}</style>
</head>
<body data-state="starting">
  <header>
    <h1>Operations</h1>
    <span class="who">operator <b id="operator">not signed in</b></span>
    <span class="stamps">cluster <span id="cluster-updated">–</span> · queues <span id="operations-updated">–</span></span>
    <button id="signout" type="button" hidden>Sign out</button>
  </header>
  <main>
    <section id="messages-box" hidden>
      <h2>Messages <span class="tools"><button id="messages-clear" type="button">Clear</button></span></h2>
      <ul id="messages" aria-live="polite"></ul>
    </section>
    <form id="signin" hidden>
      <section>
        <h2>Operator token</h2>
        <div class="row">
          <input id="token" type="password" autocomplete="off" spellcheck="false"
            placeholder="paste an operator token (npm run token -- --operator NAME)" aria-label="operator token" />
          <button class="primary">Sign in</button>
          ${development ? `<button id="dev-token" type="button">Development token</button>` : ""}
        </div>
        <p>Kept in this tab only (sessionStorage) and sent as a bearer header; a tenant's token is refused.
          <span id="signin-note"></span></p>
      </section>
    </form>
    <div id="views" hidden>
      <div class="columns">
        <div id="cluster">
          <section id="runners-section">
            <h2>Runners <span class="summary" id="runners-summary"></span></h2>
            <table>
              <thead><tr><th></th><th>address</th><th>health</th><th class="num">shards</th>
                <th class="num">entities</th><th class="num">weight</th><th>singletons</th><th></th></tr></thead>
              <tbody id="runners"></tbody>
            </table>
          </section>
          <section id="shards-section">
            <h2>Shard map <span class="summary" id="shards-summary"></span></h2>
            <div id="legend"></div>
            <div id="shard-groups"></div>
          </section>
        </div>
        <div>
          <section id="mode">
            <h2>Mode</h2>
            <dl class="facts">
              <dt>mode</dt><dd id="mode-value">–</dd>
              <dt>active region</dt><dd id="mode-region">–</dd>
              <dt>write epoch</dt><dd id="mode-epoch">–</dd>
              <dt>degraded providers</dt><dd id="mode-providers">–</dd>
              <dt>changed</dt><dd id="mode-updated">–</dd>
            </dl>
            <form id="mode-form" class="inline">
              <select id="mode-select" aria-label="mode"></select>
              <span id="mode-providers-field"><input id="mode-providers-input" size="14"
                placeholder="providers, comma-separated" aria-label="providers" /></span>
              <input id="mode-reason" required placeholder="reason (audited)" aria-label="reason" />
              <button id="mode-submit">Set mode</button>
            </form>
            <details>
              <summary>Bump the write epoch</summary>
              <form id="epoch-form" class="inline">
                <input id="epoch-region" required size="10" placeholder="region" aria-label="region" />
                <input id="epoch-reason" required placeholder="reason (audited)" aria-label="reason" />
                <button id="epoch-submit">Bump epoch</button>
              </form>
            </details>
          </section>
          <section id="outbox">
            <h2>Outbox</h2>
            <div class="outbox-figures">
              <div><span class="big" id="outbox-backlog">–</span><small>unpublished events</small></div>
              <div><span class="big" id="outbox-age">–</span><small>age of the oldest</small></div>
            </div>
          </section>
          <section id="audit">
            <h2>Recent changes</h2>
            <table>
              <thead><tr><th>when</th><th>operator</th><th>what</th><th>change</th><th>reason</th></tr></thead>
              <tbody id="audit-rows"></tbody>
            </table>
          </section>
        </div>
      </div>
      <section id="review">
        <h2>Manual review <span class="count" id="review-count">–</span></h2>
        <table>
          <thead><tr><th>task</th><th>tenant</th><th>provider</th><th>status</th><th>since</th><th>reason</th>
            <th>resolve</th></tr></thead>
          <tbody id="review-rows"></tbody>
        </table>
      </section>
      <section id="dead-letters">
        <h2>Dead letters (notifications) <span class="count" id="dead-letters-count">–</span>
          <span class="tools"><button id="dead-letters-replay-all" type="button">Replay all</button></span></h2>
        <table>
          <thead><tr><th>id</th><th>task</th><th class="num">attempts</th><th>error</th><th>created</th><th></th></tr></thead>
          <tbody id="dead-letters-rows"></tbody>
        </table>
      </section>
      <section id="inbox">
        <h2>Callback inbox <span class="tools"><button id="inbox-replay-all" type="button">Replay all dead</button></span></h2>
        <h3>dead <span class="count" id="inbox-dead-count">–</span></h3>
        <table>
          <thead><tr><th>id</th><th>provider</th><th class="num">attempts</th><th>error</th><th>received</th><th></th></tr></thead>
          <tbody id="inbox-dead-rows"></tbody>
        </table>
        <h3>orphans <span class="count" id="inbox-orphans-count">–</span></h3>
        <table>
          <thead><tr><th>id</th><th>provider</th><th class="num">attempts</th><th>error</th><th>received</th><th></th></tr></thead>
          <tbody id="inbox-orphans-rows"></tbody>
        </table>
      </section>
      <section id="reconciliations">
        <h2>Reconciliations <span class="count" id="reconciliations-count">–</span></h2>
        <table>
          <thead><tr><th>id</th><th>task</th><th>reason</th><th>recorded</th><th>resolve</th></tr></thead>
          <tbody id="reconciliations-rows"></tbody>
        </table>
      </section>
    </div>
  </main>
  <script type="module" src="/ops.js"></script>
</body>
</html>`
