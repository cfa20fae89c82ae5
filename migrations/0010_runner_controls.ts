import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * What operators decided about runners (drain, weight), keyed by the runner's address, and what each runner last said
 * it holds. Beside @effect/cluster's own cluster_runners, which its runners rewrite at every registration: a drain
 * kept there would be undone by the runner itself. Every runner reads runner_controls when it computes the shard
 * assignments, so all of them see the same decision, and a restart of the drained runner keeps it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE runner_controls (
      address text PRIMARY KEY,
      draining boolean NOT NULL DEFAULT false,
      weight integer CHECK (weight >= 0),
      updated_at timestamptz NOT NULL DEFAULT now(),
      updated_by text NOT NULL
    )`
  yield* sql`
    CREATE TABLE runner_reports (
      address text PRIMARY KEY,
      shards text[] NOT NULL,
      entities integer NOT NULL,
      singletons text[] NOT NULL,
      reported_at timestamptz NOT NULL DEFAULT now()
    )`
})
