import { Entity, type EntityAddress, Envelope, Message, Sharding } from "@effect/cluster"
import * as Headers from "@effect/platform/Headers"
import { Rpc } from "@effect/rpc"
import { Cause, Context, Deferred, Effect, Fiber, Option, type Scope } from "effect"

/**
 * The cluster's keep-alive under its own tag, without its `Persisted` annotation: the entity manager recognises the
 * tag and holds the entity as for `Entity.keepAlive`, but the message goes to the entity in memory, not through
 * the cluster's message table.
 */
const KeepAliveInMemory = Rpc.make(Entity.KeepAliveRpc._tag)

/**
 * Holds an entity in memory the way `Entity.keepAlive` does (the cluster's reaper skips it) without its persisted
 * message: `Entity.keepAlive(true)` INSERTs a self-message into the cluster's message table and `false` writes its
 * reply, two writes per lifecycle run, and the first message to a task (the one that builds its entity) waited for
 * the first. The persisted message also re-activated the entity on the shard's next owner; here that owner's
 * ResumeOnAcquire (and the sweeper behind it) does so from PostgreSQL, and a lifecycle stopped because its shard left
 * notes the shard (shardsLeft.ts), so that this runner resumes its tasks if it holds the shard again by its next look.
 *
 * Built in an entity's build (it needs the entity's own keep-alive latch), given the scope its sends run in. `hold`
 * hands the keep-alive to the entity on this runner only, once, and says whether it was (true may mean a newer entity
 * of the task got it, below): a shard no longer here (moving, or the runner stopping) gets none, and nothing waits for
 * it (its next owner resumes the task); sent on with the library's retries it could wait for a shard that never comes
 * back, holding the entity's scope open, and the shard's release with it. `release` lets the reaper count the entity
 * idle again once the keep-alive is answered: a `hold` right after waits for that answer, else the entity manager,
 * still counting the last one held, would answer the new one at once and then forget both.
 *
 * The keep-alive goes to whatever entity the runner has for the address, and Sharding.send builds one if there is none:
 * so it may reach a newer entity of the same task, when the reaper took this one out of the runner's map while a
 * message in flight started its lifecycle again (this one stops when that message is answered). Two things bound the
 * harm. The send runs in a fiber of `sends` (the entity type's scope on this runner, which closes when the runner
 * stops), not of the lifecycle, so this entity's stop, which interrupts the lifecycle, never cuts the newer entity's
 * build in half. And an entity's latch is open whenever it does not hold itself (it is made closed): a stray keep-alive
 * is answered at once, or, if it comes while the newer entity holds itself, with that entity's own release, instead of
 * holding it in memory with nobody to let it go. What is left (read, not measured): a stray taken while the newer
 * entity's own keep-alive is on its way answers that one at once, so a hold soon after that entity's release may find
 * the entity unheld; the reaper may then stop it mid-run, and it parks its task (GenerationTaskLive's parkIfStillHere):
 * a rebuild, not a lost task.
 */
export const makeInMemoryKeepAlive = Effect.fnUntraced(function*(sends: Scope.Scope) {
  // in every entity's build context on a runner, though not in its type; an entity run by Entity.makeTestClient has
  // none, and no reaper: nothing to hold (as Entity.keepAlive does)
  const maybeLatch = yield* Effect.serviceOption(Entity.KeepAliveLatch)
  if (Option.isNone(maybeLatch)) return { hold: Effect.succeed(true), release: Effect.void } as const
  const latch = maybeLatch.value
  latch.unsafeOpen()
  const sharding = yield* Sharding.Sharding
  const address = yield* Entity.CurrentAddress
  let held = false
  /** The last keep-alive's answer (its entity manager's waiter ran): done at once if it was not delivered. */
  let answered: Deferred.Deferred<void> | null = null

  const hold: Effect.Effect<boolean, never> = Effect.gen(function*() {
    if (held) return true
    if (answered !== null) yield* Deferred.await(answered)
    const done = yield* Deferred.make<void>()
    const answer = Deferred.succeed(done, void 0)
    // not delivered (failed, died, interrupted on its way): not held, and a later hold does not wait for an answer
    // that never comes
    const notDelivered = Effect.zipRight(
      Effect.sync(() => {
        held = false
        latch.unsafeOpen()
      }),
      answer
    )
    return yield* Effect.suspend(() => {
      held = true
      answered = done
      latch.unsafeClose()
      // it waits for the entity type's registration and builds the entity if it is not in memory: in a fiber of
      // `sends`, which an interruption of this one (the entity stopping) leaves to finish, and the runner's stop
      // ends (awaited, not joined: its fiber refs stay its own)
      return Effect.forkIn(sendKeepAlive(sharding, address, answer), sends)
    }).pipe(
      Effect.flatMap((fiber) => Effect.flatten(Fiber.await(fiber))),
      Effect.onExit((exit) => (exit._tag === "Success" ? Effect.void : notDelivered)),
      Effect.as(true),
      // a refusal (the shard is not here) or a defect: not delivered, and the lifecycle ends (its caller parks the
      // task or leaves it to the shard's next owner); an interruption stays one
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause)
          ? Effect.interrupt
          : Effect.logDebug("keep-alive not delivered", cause).pipe(Effect.as(false))
      )
    )
  })
  const release = Effect.suspend(() => {
    held = false
    return latch.open
  })
  return { hold, release } as const
})

/**
 * Hands the keep-alive to the entity at `address` on this runner (building it if it is not in memory), or fails
 * (EntityNotAssignedToRunner): Sharding.send, typed for incoming messages, takes outgoing ones too (as sendOutgoing
 * does for a local volatile one). `answered` runs when the entity manager answers it: its latch opened, or at once
 * when the entity already counts a keep-alive.
 */
export const sendKeepAlive = (
  sharding: Sharding.Sharding["Type"],
  address: EntityAddress.EntityAddress,
  answered: Effect.Effect<unknown>
) =>
  Effect.flatMap(sharding.getSnowflake, (requestId) =>
    sharding.send(
      new Message.OutgoingRequest<typeof KeepAliveInMemory>({
        rpc: KeepAliveInMemory,
        context: Context.empty() as Context.Context<never>,
        envelope: Envelope.makeRequest<typeof KeepAliveInMemory>({
          requestId,
          address,
          tag: KeepAliveInMemory._tag,
          payload: void 0,
          headers: Headers.empty
        }),
        lastReceivedReply: Option.none(),
        respond: () => Effect.asVoid(answered)
      }) as unknown as Message.Incoming<any>
    ))
