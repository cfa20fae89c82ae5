import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { LateResults } from "../../persistence/LateResults.js"
import { trusted } from "../../schema/task.js"
import { ControlPlaneApi } from "../Api.js"
import { LateResultsView, LateResultView } from "./LateResultsApi.js"

/** The late-results group (src/http/admin/LateResultsApi.ts): newest first, 200 by default. */
export const LateResultsHttpLive = HttpApiBuilder.group(
  ControlPlaneApi,
  "lateResults",
  (handlers) =>
    Effect.map(LateResults, (late) =>
      handlers.handle("list", ({ urlParams }) =>
        Effect.map(
          late.list({
            since: urlParams.since ?? null,
            provider: urlParams.provider ?? null,
            limit: urlParams.limit ?? 200
          }),
          (rows) =>
            new LateResultsView({
              rows: rows.map((r) =>
                new LateResultView({
                  id: r.id,
                  task_id: r.task_id,
                  attempt_id: r.attempt_id,
                  attempt_no: r.attempt_no,
                  provider: r.provider,
                  provider_task_id: r.provider_task_id,
                  model: r.model,
                  status: r.status,
                  error_class: r.error_class,
                  error_code: r.error_code,
                  output_refs_count: r.output_refs.length,
                  source: r.source,
                  received_at: r.received_at,
                  trace_id: r.trace_id
                }, trusted)
              )
            }, trusted)
        )))
)
