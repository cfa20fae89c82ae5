import {
  EntityAddress,
  EntityId,
  Message,
  MessageStorage,
  RunnerHealth,
  Runners,
  RunnerStorage,
  Sharding,
  ShardingConfig
} from "@effect/cluster"
import { EntityNotAssignedToRunner } from "@effect/cluster/ClusterError"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Context, Deferred, Duration, Effect, Fiber, Layer, Metric, Option, TestClock } from "effect"
import type { Change } from "../../src/domain/transition.js"
import { GenerationTask } from "../../src/entities/GenerationTask.js"
import { GenerationTaskLive, keepAliveAfter } from "../../src/entities/GenerationTaskLive.js"
import { sendKeepAlive } from "../../src/entities/inMemoryKeepAlive.js"
import { makeParkedTasks } from "../../src/entities/ParkedTasks.js"
import { makeShardsLeft } from "../../src/entities/shardsLeft.js"
import { TaskClient } from "../../src/entities/TaskClient.js"
import type { TaskHandle } from "../../src/entities/taskHandle.js"
import { TaskLifecycle } from "../../src/entities/TaskLifecycle.js"
import { wakeTask } from "../../src/entities/wakeTasks.js"
import { taskChangeWakesSkipped, taskKeepAlivesHeld } from "../../src/observability/metrics.js"
import type { PollSchedule } from "../../src/persistence/AttemptSchedule.js"
import { LateResults } from "../../src/persistence/LateResults.js"
import { TaskStore } from "../../src/persistence/TaskStore.js"
import { ids, makeAttempt, makeTask, observe } from "../support/fixtures.js"
import { answerKeepAlive, isKeepAlive } from "../support/keepAlives.js"

const POLL_EVERY = 2_000

/** One runner holding every shard (@effect/cluster's TestRunner), messages to its entities not serialized, as on a runner. */
const cluster = Sharding.layer.pipe(
  Layer.provideMerge(Runners.layerNoop),
  Layer.provideMerge(MessageStorage.layerMemory),
  Layer.provide([RunnerStorage.layerMemory, RunnerHealth.layerNoop]),
  Layer.provide(ShardingConfig.layer({ simulateRemoteSerialization: false }))
)

/** The test task's shard. */
const taskShard = (sharding: Sharding.Sharding["Type"]) => sharding.getShardId(EntityId.make(ids.task), "default")

/**
 * The runner's sharding as the task entities see it, except for the keep-alive an entity hands itself
 * (inMemoryKeepAlive.ts, through Sharding.send), which `keepAlive` takes instead; the shard is held while `shardHere`.
 */
const shardingWhereKeepAlives = (
  keepAlive: (message: Message.Incoming<any>) => Effect.Effect<void, EntityNotAssignedToRunner>,
  shardHere: () => boolean = () => true
) =>
  Layer.effect(
    Sharding.Sharding,
    Effect.map(Sharding.Sharding, (inner) =>
      Sharding.Sharding.of({
        ...inner,
        hasShardId: (shardId) => shardHere() && inner.hasShardId(shardId),
        send: (message) => isKeepAlive(message) ? keepAlive(message) : inner.send(message)
      }))
  )

/**
 * A keep-alive that never holds the entity: taken and answered at once, as if the entity had not counted it. As on a
 * runner that had just taken a drained runner's shards, when the keep-alive was a persisted message, where ~10 s
 * later no keep-alive had reached 94 of the 101 entities it had woken (cluster-drain.test.ts). The cluster's
 * EntityReaper then stops such an entity TASK_ENTITY_IDLE_TIME (5 s) after its last message, whatever its lifecycle
 * is doing.
 */
const shardingWithoutKeepAlives = shardingWhereKeepAlives(answerKeepAlive)

/**
 * The task's shard leaves just as its lifecycle starts: its keep-alive is refused (EntityNotAssignedToRunner, as
 * Sharding.send fails for a shard not here), and the shard is no longer here from then on.
 */
const shardLeavingAtHold = () => {
  let gone = false
  return shardingWhereKeepAlives((message) =>
    Effect.suspend(() => {
      gone = true
      return Effect.fail(new EntityNotAssignedToRunner({ address: message.envelope.address }))
    }), () => !gone)
}

/** Handing an entity its keep-alive dies (a defect). */
const keepAliveDying = shardingWhereKeepAlives(() => Effect.dieMessage("keep-alive lost"))

/** Keep-alives handed to the entity, counted, and answered at once (the reaper is then not held off). */
const keepAlivesSent = { count: 0 }
const countingKeepAlives = shardingWhereKeepAlives((message) =>
  Effect.suspend(() => {
    keepAlivesSent.count++
    return answerKeepAlive(message)
  })
)

/**
 * A running task polled every POLL_EVERY by a stand-in lifecycle (the entity's real build around it), and the
 * runner's wake-up of parked tasks as ResumeOnAcquire.ts runs it.
 */
const setup = (
  options: {
    readonly loadMs?: number
    readonly keepAlives?: boolean | "refused" | "dying" | "counted"
    readonly finished?: boolean
    /** the attempt's poll schedule as the task's load reads it (none by default) */
    readonly schedule?: PollSchedule
    /** the lifecycle's run in place of the stand-in poll loop */
    readonly drive?: (h: TaskHandle) => Effect.Effect<void>
  } = {}
) =>
  Effect.gen(function*() {
    const polls: Array<number> = []
    let builds = 0
    const state = {
      task: options.finished === true
        ? makeTask({ status: "ready", stage: "done", progress: 100 })
        : makeTask({ status: "running", stage: "generating" }),
      attempt: makeAttempt({ submitState: "RUNNING" }),
      // the poll schedule as a load reads it: none yet unless given (the drive below keeps its own)
      schedule: options.schedule ?? null
    }
    const store = Layer.succeed(
      TaskStore,
      TaskStore.make({
        load: () =>
          Effect.delay(Effect.sync(() => (builds++, Option.some(state))), Duration.millis(options.loadMs ?? 0)),
        fence: () => ({ epoch: 1 }),
        // every change commits: the task is what the change says
        commit: (_: unknown, change: Change) =>
          Effect.succeed({ _tag: "Committed", task: change.task, attempt: change.attempt })
      } as never)
    )
    const parked = makeParkedTasks()
    const shardsLeft = makeShardsLeft()
    const lifecycle = Layer.succeed(
      TaskLifecycle,
      TaskLifecycle.make({
        drive: (h) =>
          options.drive !== undefined ? options.drive(h) : Effect.gen(function*() {
            while (true) {
              const now = yield* Clock.currentTimeMillis
              const due = h.scheduleMemo?.nextPollAt ?? now
              if (due > now) {
                yield* h.waitForChange(due - now)
                continue
              }
              polls.push(now)
              h.scheduleMemo = { attemptId: ids.attempt, nextPollAt: now + POLL_EVERY, failures: 0 }
            }
          }),
        recheck: () => Effect.void,
        parked,
        wakeParked: (wake, stillHere) =>
          parked.run({
            tick: Duration.millis(200),
            lead: Duration.seconds(1),
            acquire: () => Effect.void,
            wake,
            stillHere
          }),
        shardsLeft
      })
    )
    const entities = GenerationTaskLive.pipe(
      Layer.provide(Layer.mergeAll(store, lifecycle, Layer.succeed(LateResults, LateResults.make({} as never)))),
      Layer.provide(
        options.keepAlives === true
          ? Layer.empty
          : options.keepAlives === "refused"
          ? shardLeavingAtHold()
          : options.keepAlives === "dying"
          ? keepAliveDying
          : options.keepAlives === "counted"
          ? countingKeepAlives
          : shardingWithoutKeepAlives
      )
    )
    const context = yield* Layer.build(
      Layer.mergeAll(entities, TaskClient.Default, lifecycle).pipe(Layer.provideMerge(cluster))
    )
    const tasks = Context.get(context, TaskClient)
    const sharding = Context.get(context, Sharding.Sharding)
    yield* Context.get(context, TaskLifecycle).wakeParked(
      (id) => wakeTask(tasks, id, "idle-wake", true),
      (id) => sharding.hasShardId(sharding.getShardId(EntityId.make(id), "default"))
    ).pipe(Effect.forkScoped)
    return {
      polls,
      builds: () => builds,
      start: wakeTask(tasks, ids.task, "test"),
      tasks,
      sharding,
      shardsLeft,
      parked
    }
  })

/** Moves the TestClock on in small steps, so that the cluster's fibers and the lifecycle run as time passes. */
const advance = (ms: number) => Effect.repeatN(TestClock.adjust(Duration.millis(100)), Math.ceil(ms / 100) - 1)

describe("a task whose entity the cluster stops while its lifecycle runs", () => {
  it.scoped("is woken again on its runner at its next poll, and keeps polling", () =>
    Effect.gen(function*() {
      const { builds, polls, start } = yield* setup()
      const started = yield* Effect.fork(start)
      yield* advance(1_000)
      expect(started.unsafePoll()).toBeDefined()
      yield* advance(40_000)

      // every poll came on time, though the entity was stopped several times (no keep-alive reached it): none later
      // than its interval after the one before, for the whole 40 s
      const gaps = polls.slice(1).map((at, i) => at - polls[i]!)
      expect(polls.length).toBeGreaterThanOrEqual(18)
      expect(Math.max(...gaps)).toBeLessThanOrEqual(POLL_EVERY + 200)
      expect(builds()).toBeGreaterThanOrEqual(3)
    }))

  it.scoped("an entity built with its poll schedule (the task's load reads it) polls when it says, not at once", () =>
    Effect.gen(function*() {
      const { polls, start } = yield* setup({
        keepAlives: true,
        schedule: { nextPollAt: new Date(3_000), pollFailures: 0, pollLeaseUntil: null, cancelSentAt: null }
      })
      yield* Effect.fork(start)
      yield* advance(2_000)
      expect(polls).toEqual([])
      yield* advance(2_000)
      expect(polls[0]).toBeGreaterThanOrEqual(3_000)
    }))

  it.scoped("its keep-alive, in memory, reaches it a second in: it is not stopped while its lifecycle runs", () =>
    Effect.gen(function*() {
      const { builds, polls, start } = yield* setup({ keepAlives: true })
      yield* Effect.fork(start)
      yield* advance(41_000)
      const gaps = polls.slice(1).map((at, i) => at - polls[i]!)
      expect(polls.length).toBeGreaterThanOrEqual(18)
      expect(Math.max(...gaps)).toBeLessThanOrEqual(POLL_EVERY + 200)
      // one build for the whole 40 s: the reaper (5 s idle) skipped the entity
      expect(builds()).toBe(1)
    }))

  it.scoped("a wake that stops waiting for the entity does not cut its build in half", () =>
    Effect.gen(function*() {
      // the entity's build takes 8 s (its first read waits for a pooled connection on a loaded runner, say)
      const { polls, start } = yield* setup({ loadMs: 8_000 })
      const woke = yield* Effect.fork(start)
      yield* advance(6_000)
      // the wake gave up waiting after 5 s (the sweeper or the runner tries again) ...
      expect(yield* Fiber.join(woke)).toBe(false)
      yield* advance(6_000)
      // ... and the build went on: the lifecycle drives the task (an interrupted build left neither entity nor poll)
      expect(polls.length).toBeGreaterThan(0)
    }))

  it.scoped("a keep-alive sent by an entity the reaper took out does not hold the one built after it", () =>
    Effect.gen(function*() {
      // the newer entity: a finished task, which starts no lifecycle and so never holds or releases itself
      const { builds, sharding, start } = yield* setup({ keepAlives: true, finished: true })
      yield* Effect.fork(start)
      yield* advance(1_000)
      expect(builds()).toBe(1)
      // the older entity's keep-alive, sent as its lifecycle restarted while the reaper stopped it, reaches this one
      const address = EntityAddress.make({
        entityType: GenerationTask.type,
        entityId: EntityId.make(ids.task),
        shardId: taskShard(sharding)
      })
      yield* sendKeepAlive(sharding, address, Effect.void)
      // answered at once, not counted as held: the reaper stops the entity once idle (5 s), as any finished one
      yield* advance(12_000)
      expect(yield* sharding.activeEntityCount).toBe(0)
    }))

  it.scoped("a lifecycle run that settles within a second hands its entity no keep-alive; a longer one, one", () =>
    Effect.gen(function*() {
      keepAlivesSent.count = 0
      const held = (yield* Metric.value(taskKeepAlivesHeld)).count
      const runs = { short: 0, long: 0 }
      let long = false
      const { start } = yield* setup({
        keepAlives: "counted",
        // short runs settle at once (a parked task's poll); a long one goes on for 3 s (a wait for its next poll)
        drive: (h) =>
          Effect.gen(function*() {
            if (long) {
              runs.long++
              yield* Effect.sleep("3 seconds")
            } else {
              runs.short++
            }
            yield* h.settle
          })
      })
      yield* Effect.fork(start)
      yield* advance(3_000)
      expect(runs.short).toBeGreaterThan(0)
      expect(keepAlivesSent.count).toBe(0)
      // another Start runs the lifecycle again, on the same entity
      long = true
      yield* Effect.fork(start)
      yield* advance(4_000)
      expect(runs.long).toBe(1)
      // TASK_ENTITY_IDLE_TIME is 5 s: the keep-alive goes a fifth of it in
      expect(keepAliveAfter(Duration.seconds(5))).toEqual(Duration.seconds(1))
      expect(keepAlivesSent.count).toBe(1)
      expect((yield* Metric.value(taskKeepAlivesHeld)).count).toBe(held + 1)
    }))

  it.scoped("a lifecycle whose keep-alive is refused (its shard left) ends there: it polls no more, nor parks", () =>
    Effect.gen(function*() {
      const { parked, polls, sharding, shardsLeft, start } = yield* setup({ keepAlives: "refused" })
      yield* Effect.fork(start)
      yield* advance(1_500)
      // its first poll, due at once, came before its keep-alive (a second in)
      expect(polls.length).toBe(1)
      yield* advance(4_000)
      expect(polls.length).toBe(1)
      // the task is its shard's next owner's to resume (ResumeOnAcquire); this runner notes the shard as left, so it
      // resumes the task too if it holds the shard again by its next look
      expect(parked.holds(ids.task, yield* Clock.currentTimeMillis)).toBe(false)
      expect(shardsLeft.take()).toEqual([taskShard(sharding).toString()])
    }))

  it.scoped("a lifecycle whose keep-alive died on its way ends there, the task parked here (its shard still is)", () =>
    Effect.gen(function*() {
      const { parked, polls, shardsLeft, start } = yield* setup({ keepAlives: "dying" })
      yield* Effect.fork(start)
      yield* advance(1_100)
      expect(polls.length).toBe(1)
      // parked due at its next poll (POLL_EVERY after the first): the runner's wake of parked tasks brings it
      expect(parked.holds(ids.task, yield* Clock.currentTimeMillis)).toBe(true)
      expect(shardsLeft.take()).toEqual([])
    }))
})

describe("a task entity's change signal and the lifecycle's own poll", () => {
  it.scoped(
    "the lifecycle's own observation does not wake it, nor a webhook's that leaves it polling; one that changes its " +
      "step, meanwhile, keeps it from settling",
    () =>
      Effect.gen(function*() {
        const settled: Array<boolean> = []
        const outcomes: Array<string> = []
        // each later run waits for its webhook to be in before it settles
        const webhookIn = [yield* Deferred.make<void>(), yield* Deferred.make<void>()]
        let runs = 0
        const { start, tasks } = yield* setup({
          keepAlives: true,
          drive: (h) =>
            Effect.gen(function*() {
              if (++runs === 1) {
                // its poll's answer moves the task (its progress): the change is its own
                outcomes.push((yield* h.observe(observe("running", { progress: 40, seq: 1 }))).outcome)
              } else {
                // started again (below): a webhook moves the task while this run goes on
                yield* Deferred.await(webhookIn[runs - 2]!)
              }
              settled.push(yield* h.settle)
            }).pipe(Effect.orDie)
        })
        const runWith = (status: "running" | "succeeded", seq: number, progress?: number) =>
          Effect.gen(function*() {
            yield* Effect.fork(start)
            yield* advance(1_000)
            const webhook = yield* tasks.send(
              ids.task,
              (c) => c.Observe(observe(status, progress === undefined ? { seq } : { seq, progress }))
            )
            expect(webhook.outcome).toBe("changed")
            yield* Deferred.succeed(webhookIn[seq - 2]!, undefined)
            yield* advance(1_000)
          })
        yield* Effect.fork(start)
        yield* advance(1_000)
        // before: its own change raised the signal, so it did not settle and ran on (two more steps a moved poll)
        expect(outcomes).toEqual(["changed"])
        expect(settled).toEqual([true])
        const skipped = (yield* Metric.value(taskChangeWakesSkipped)).count
        // a webhook's progress leaves the task polling, its next step the poll already scheduled: it settles
        yield* runWith("running", 2, 60)
        expect(settled).toEqual([true, true])
        expect((yield* Metric.value(taskChangeWakesSkipped)).count).toBe(skipped + 1)
        // a webhook's success is a step of its own (the output): the lifecycle runs on for it
        yield* runWith("succeeded", 3)
        expect(settled).toEqual([true, true, false])
        expect((yield* Metric.value(taskChangeWakesSkipped)).count).toBe(skipped + 1)
      })
  )
})
