import type { Role } from "../../runners/Roles.js"
import type { Member } from "./plan.js"

/**
 * nginx in front of the cluster's processes (README, "Production", says why nginx rather than node:cluster). Paths go
 * to the processes whose role serves them: the event streams (SSE and WebSocket, the gateway regex of
 * src/http/StreamAuth.ts) to `gateway`, `/webhooks/` to `webhooks`, everything else (the API, the pages, and the
 * probes and /metrics of whichever process answers) to `api`. Each process keeps its own port for its own /readyz
 * and /metrics.
 *
 * - Pools: round-robin, but the gateways by project (a consistent hash of the project id in the path): every stream
 *   of a project reaches the same gateway, which then keeps one feed for it (one Redis channel, one PostgreSQL tail,
 *   one copy of each event). Spread stream by stream, a project's streams were on every gateway and each gateway
 *   followed almost every project (bench:sse, 19,500 streams at fan-out 4 on 2 gateways: 13.9–15.6 KiB of RSS per
 *   idle stream against 11.2 on one). A gateway that goes moves only its own projects' streams, which resume by
 *   Last-Event-ID.
 * - Streams: `proxy_buffering off` (each event is flushed as the runner writes it), an hour of read timeout (the
 *   stream's heartbeats keep it alive, a reconnect resumes by Last-Event-ID), and the Upgrade/Connection headers a
 *   WebSocket needs.
 * - Bodies: no size limit here and no buffering to disk: the runners enforce their own limits (WEBHOOK_MAX_BYTES,
 *   API_MAX_BODY_BYTES) and answer 413 themselves.
 * - A process that refuses connections (stopping, restarting) is skipped for the next in its pool
 *   (`proxy_next_upstream error`, idempotent requests only, nginx's default), and rested for 2 s.
 */
export interface NginxInput {
  readonly listenHost: string
  readonly listenPort: number
  readonly members: ReadonlyArray<Member>
  /** A directory of the command's own: the pid file and nginx's temporary files. */
  readonly dir: string
}

const pool = (name: Role, members: ReadonlyArray<Member>, balance: ReadonlyArray<string> = []) =>
  [
    `  upstream ${name} {`,
    ...balance.map((l) => `    ${l}`),
    ...members.filter((m) => m.roles.has(name)).map((m) =>
      `    server 127.0.0.1:${m.httpPort} max_fails=1 fail_timeout=2s;`
    ),
    "    keepalive 64;",
    "  }"
  ].join("\n")

// proxy_set_header in a location replaces the server's list: every location states all of its headers
const forwarded = [
  "proxy_set_header Host $http_host;",
  "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
  "proxy_set_header X-Forwarded-Proto $scheme;"
]

const location = (match: string, upstream: Role, lines: ReadonlyArray<string>) =>
  [`    location ${match} {`, `      proxy_pass http://${upstream};`, ...lines.map((l) => `      ${l}`), "    }"].join(
    "\n"
  )

export const nginxConf = (input: NginxInput): string =>
  `# written by npm run cluster (src/cli/cluster/nginx.ts); removed when it stops
daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile 20000;
pid ${input.dir}/nginx.pid;
error_log stderr warn;
events {
  worker_connections 10000;
}
http {
  access_log off;
  client_body_temp_path ${input.dir}/client_body;
  proxy_temp_path ${input.dir}/proxy;
  fastcgi_temp_path ${input.dir}/fastcgi;
  uwsgi_temp_path ${input.dir}/uwsgi;
  scgi_temp_path ${input.dir}/scgi;
  map $http_upgrade $connection_upgrade {
    default upgrade;
    "" "";
  }
${pool("api", input.members)}
${pool("webhooks", input.members)}
${pool("gateway", input.members, ["hash $stream_project consistent;"])}
  server {
    listen ${input.listenHost.includes(":") ? `[${input.listenHost}]` : input.listenHost}:${input.listenPort};
    client_max_body_size 0;
    proxy_request_buffering off;
    proxy_http_version 1.1;
${
    location("~ ^/v1/projects/(?<stream_project>[^/]+)/events(/ws)?$", "gateway", [
      ...forwarded,
      "proxy_set_header Upgrade $http_upgrade;",
      "proxy_set_header Connection $connection_upgrade;",
      "proxy_buffering off;",
      "proxy_cache off;",
      "proxy_read_timeout 1h;",
      "proxy_send_timeout 1h;"
    ])
  }
${location("/webhooks/", "webhooks", [...forwarded, "proxy_set_header Connection \"\";"])}
${location("/", "api", [...forwarded, "proxy_set_header Connection \"\";"])}
  }
}
`
