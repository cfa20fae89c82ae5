import { Clock, Duration, Effect, Either, Metric, Option, Schedule } from "effect"
import * as Steps from "../domain/lifecycleSteps.js"
import type { TaskState } from "../domain/taskState.js"
import { outputFetchDecisions } from "../observability/metrics.js"
import { probeMp4 } from "../output/mp4Probe.js"
import type { ObjectStoreService } from "../output/ObjectStore.js"
import type { OutputDownloader } from "../output/OutputDownloader.js"
import type { OutputWork } from "../output/OutputWork.js"
import type { TaskOperations } from "../persistence/TaskOperations.js"
import type { ProviderClients } from "../providers/ProviderClients.js"
import { commitStep as commit, lifecycleMeta as meta, type TaskHandle } from "./taskHandle.js"

export interface OutputStepsDeps {
  readonly clients: ProviderClients
  readonly operations: TaskOperations
  readonly downloader: OutputDownloader
  readonly objects: ObjectStoreService
  readonly work: OutputWork
  /** OUTPUT_FETCH_LEASE */
  readonly lease: Duration.Duration
  readonly scaled: (seconds: number) => number
  readonly retryDelay: (n: number, capSeconds: number) => number
}

type Decision = "downloaded" | "already_stored" | "leased_elsewhere" | "refetch" | "lost"

const decided = (decision: Decision) => Metric.update(Metric.tagged(outputFetchDecisions, "decision", decision), 1)

export const outputKey = (s: TaskState) => `${s.task.id}/${s.attempt!.id}/output.mp4`

/**
 * The output's steps: fetching_output (download into the object store, once per attempt), processing_media (probe
 * the stored object) and output_at_risk (retry until the provider URL's deadline).
 *
 * Once per attempt, across kills and shard moves: the fetch is claimed in task_operations under a lease its holder
 * renews while it downloads, so a new owner waits for an old one still at work; an object already in the store (a
 * holder killed after its upload, before it recorded it) is taken as the result, not downloaded again. What a kill
 * mid-download cuts off is downloaded again once the lease lapses: at most one download completes per attempt.
 *
 * An object missing at the probe (a filesystem store on another host after a shard move, an object lost or removed)
 * reopens the fetch: output_at_risk, then downloaded again while the provider's URL is valid; past its deadline the
 * task fails with output_unavailable.
 */
export const makeOutputSteps = (
  { clients, downloader, lease, objects, operations, retryDelay, scaled, work }: OutputStepsDeps
) => {
  const leaseMs = Duration.toMillis(lease)

  /** The download, with the lease renewed while it waits for a permit and while it runs. */
  const download = <A, E>(h: TaskHandle, s: TaskState, token: number, run: Effect.Effect<A, E>) => {
    const renew = operations.renew(h.taskId, s.attempt!.id, "fetch_output", token, leaseMs).pipe(
      Effect.flatMap((held) => held ? Effect.void : Effect.logWarning("output fetch lease lost to another runner")),
      Effect.catchAll(() => Effect.void),
      Effect.repeat(Schedule.spaced(Duration.millis(Math.max(100, leaseMs / 3))))
    )
    return Effect.scoped(Effect.zipRight(Effect.forkScoped(renew), run)).pipe(
      // stopped (a shard moving away, a shutdown): the next owner need not wait for the lease to lapse
      Effect.onInterrupt(() =>
        operations.failed(h.taskId, s.attempt!.id, "fetch_output", "interrupted: the runner let the task go", 0).pipe(
          Effect.ignore
        )
      )
    )
  }

  const fetchOutput = (h: TaskHandle, s: TaskState) =>
    Effect.gen(function*() {
      const attempt = s.attempt!
      const deadline = attempt.outputDeadlineAt
      const client = yield* clients.get(attempt.provider)
      const ref = attempt.outputRefs[0]
      const request = ref === undefined ? Option.none() : client.outputRequest(ref)
      if (Option.isNone(request)) {
        yield* Effect.logError("provider output cannot be fetched", { ref: ref ?? "none" })
        return yield* commit(h, (st, now) => Steps.outputLost(st, now, meta(h)))
      }
      const key = outputKey(s)
      const claim = yield* operations.claim(h.taskId, attempt.id, "fetch_output", deadline, leaseMs)
      if (claim._tag === "Leased") {
        yield* decided("leased_elsewhere")
        yield* Effect.logInfo("output fetch held by another runner's lease; waiting for it").pipe(
          Effect.annotateLogs({ object_key: key, retry_in_ms: claim.retryInMs })
        )
        return claim.retryInMs
      }
      if (claim._tag === "Claimed") {
        // a holder killed after its upload and before recording it left the object: it is the result
        const present = yield* Effect.either(objects.head(key))
        if (Either.isRight(present) && Option.isSome(present.right)) {
          yield* decided("already_stored")
          yield* Effect.logInfo("output already in the object store: not downloaded again").pipe(
            Effect.annotateLogs({ object_key: key })
          )
          yield* operations.complete(h.taskId, attempt.id, "fetch_output", present.right.value)
        } else {
          const stored = yield* download(
            h,
            s,
            claim.token,
            work.run(deadline, downloader.download(request.value, key, client.outputHosts))
          ).pipe(Effect.either)
          if (Either.isLeft(stored)) {
            const e = stored.left
            if (e.kind === "refused") {
              // a provider's output elsewhere than its hosts: a moved CDN is fixed in its setting, anything else is
              // an attempt on the network behind this runner
              yield* Effect.logError(
                `provider output refused: ${e.detail} (allowed hosts: ${attempt.provider.toUpperCase()}_OUTPUT_HOSTS)`
              ).pipe(Effect.annotateLogs({ provider: attempt.provider }))
            } else {
              yield* Effect.logWarning("output fetch failed", e)
            }
            const retryIn = retryDelay(h.failures(), 300)
            yield* operations.failed(
              h.taskId,
              attempt.id,
              "fetch_output",
              `${e.kind}: ${e.detail}`,
              e.retryable ? retryIn : null
            )
            if (!e.retryable) return yield* commit(h, (st, now) => Steps.outputLost(st, now, meta(h)))
            h.failed()
            return yield* commit(h, (st, now) => Steps.outputAtRisk(st, now, meta(h)), retryIn)
          }
          yield* decided("downloaded")
          yield* operations.complete(h.taskId, attempt.id, "fetch_output", stored.right)
        }
      }
      h.succeeded()
      return yield* commit(h, (st, now) => Steps.outputStored(st, now, meta(h)))
    })

  /** Probes the stored file's MP4 structure (not a decode): a file that is not a video never becomes ready. */
  const checkMedia = (h: TaskHandle, s: TaskState) =>
    Effect.gen(function*() {
      const key = outputKey(s)
      const head = yield* objects.head(key)
      if (Option.isNone(head)) {
        const reopened = yield* operations.reopen(h.taskId, s.attempt!.id, "fetch_output", "object missing at probe")
        yield* decided("refetch")
        yield* Effect.logWarning("output object missing from the store: it will be downloaded again").pipe(
          Effect.annotateLogs({ object_key: key, fetch_reopened: reopened })
        )
        h.failed()
        return yield* commit(h, (st, now) => Steps.outputAtRisk(st, now, meta(h)), scaled(2))
      }
      const bytes = yield* objects.readRange(key, 1 << 20)
      const probe = probeMp4(bytes, head.value.bytes)
      if (Either.isLeft(probe)) {
        yield* Effect.logError("provider output is not a valid MP4", { reason: probe.left })
        return yield* commit(h, (st, now) => Steps.outputLost(st, now, meta(h)))
      }
      return yield* commit(h, (st, now) => Steps.outputReady(st, key, now, meta(h)))
    })

  /** output_at_risk: fetched again while the provider's URL is valid; past its deadline the output is lost. */
  const retryOutput = (h: TaskHandle, s: TaskState) =>
    Effect.gen(function*() {
      const deadline = s.attempt!.outputDeadlineAt
      const now = yield* Clock.currentTimeMillis
      if (deadline !== null && deadline.getTime() < now) {
        yield* decided("lost")
        yield* Effect.logWarning("output still not stored at its URL's deadline: the task fails (output_unavailable)")
          .pipe(Effect.annotateLogs({ deadline: deadline.toISOString() }))
        return yield* commit(h, (st, at) => Steps.outputLost(st, at, meta(h)))
      }
      return yield* commit(h, (st, at) => Steps.beginOutput(st, deadline ?? at, at, meta(h)))
    })

  return { fetchOutput, checkMedia, retryOutput } as const
}
