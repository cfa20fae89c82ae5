import { Command, Options } from "@effect/cli"
import { Console, Effect, Option, Schema } from "effect"
import { ProjectId } from "../../schema/ids.js"
import { AdminClient } from "./AdminClient.js"

/**
 * `npm run ops -- streams new-epoch [--project P] --reason …`: after a point-in-time restore, every project's event
 * stream (or P's) gets a new epoch, so a browser resuming with a cursor of the lost timeline gets a reset instead of
 * other events under the same sequence numbers (README: Restoring to a point in time).
 */
const newEpoch = Command.make("new-epoch", {
  project: Options.text("project").pipe(
    Options.optional,
    Options.withDescription("only this project's stream (a UUID); default: every project's")
  ),
  reason: Options.text("reason").pipe(
    Options.withDescription("why: written into the audit row with your operator name (required)")
  )
}, ({ project, reason }) =>
  Effect.gen(function*() {
    const client = yield* AdminClient
    const projectId = yield* Option.match(project, {
      onNone: () => Effect.succeed(undefined),
      onSome: (p) => Schema.decodeUnknown(ProjectId)(p).pipe(Effect.mapError(() => new Error(`not a project id: ${p}`)))
    })
    const r = yield* client.operations.newStreamEpoch({
      payload: { reason, ...(projectId === undefined ? {} : { project_id: projectId }) }
    })
    for (const p of r.projects) yield* Console.log(`${p.project_id}\tepoch ${p.from_epoch} → ${p.to_epoch}`)
    if (r.bumped > r.projects.length) yield* Console.log(`… and ${r.bumped - r.projects.length} more`)
    yield* Console.log(`${r.bumped} project streams have a new epoch: their clients' old cursors are reset`)
  })).pipe(
    Command.withDescription(
      "give project event streams a new epoch (after a point-in-time restore): old cursors get a reset"
    )
  )

export const streams = Command.make("streams").pipe(
  Command.withDescription("project event streams"),
  Command.withSubcommands([newEpoch])
)
