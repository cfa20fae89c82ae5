import { Entity, Envelope, Message, Sharding } from "@effect/cluster"
import * as Headers from "@effect/platform/Headers"
import { Rpc } from "@effect/rpc"
import { Context, Effect, Option } from "effect"

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
 * is parked for a look a second later in case the shard comes back at once (GenerationTaskLive: parkIfStillHere).
 *
 * Built in an entity's build (it needs the entity's own keep-alive latch). `hold` sends the keep-alive to the entity
 * on this runner; if the shard is no longer here the send is retried until the entity is stopped with its shard, as
 * for the persisted one. `release` lets the entity's reaper count it idle again.
 */
export const makeInMemoryKeepAlive = Effect.gen(function*() {
  // in every entity's build context on a runner, though not in its type; an entity run by Entity.makeTestClient has
  // none, and no reaper: nothing to hold (as Entity.keepAlive does)
  const maybeLatch = yield* Effect.serviceOption(Entity.KeepAliveLatch)
  if (Option.isNone(maybeLatch)) return { hold: Effect.void, release: Effect.void } as const
  const latch = maybeLatch.value
  const sharding = yield* Sharding.Sharding
  const address = yield* Entity.CurrentAddress
  const hold = Effect.gen(function*() {
    const requestId = yield* sharding.getSnowflake
    latch.unsafeClose()
    yield* sharding.sendOutgoing(
      new Message.OutgoingRequest({
        rpc: KeepAliveInMemory,
        context: Context.empty() as Context.Context<any>,
        envelope: Envelope.makeRequest({
          requestId,
          address,
          tag: KeepAliveInMemory._tag,
          payload: void 0,
          headers: Headers.empty
        }),
        lastReceivedReply: Option.none(),
        respond: () => Effect.void
      }),
      true
    )
  }).pipe(Effect.orDie)
  return { hold, release: latch.open } as const
})
