import { Clock, Duration, Effect, Either, Option } from "effect"
import { promiseWithin } from "../runtime/timers.js"

/** A state that was degraded warns at most this often while Redis stays away. */
const WARN_EVERY_MS = 30_000

/**
 * The one way a runner-shared state (the provider quotas, the provider breakers) asks Redis: a call on `client`
 * within `timeout`, whose answer `read` accepts. None when there is no Redis, or it fails, is slow or answers
 * something unreadable: the caller then decides with its own local state. Going local is warned about
 * (`degraded`, with the error) at most every 30 s and counted by `onLocal`; the first answer after it is logged
 * once (`recovered`).
 */
export const makeSharedOrLocal = <C>(options: {
  readonly client: Option.Option<C>
  readonly timeout: Duration.Duration
  /** "Redis unavailable: provider quotas fall back to …" */
  readonly degraded: string
  /** "Redis answers again: provider quotas are shared again" */
  readonly recovered: string
  /** more keys of the warning */
  readonly annotations?: Record<string, unknown>
  readonly onLocal?: Effect.Effect<void>
}) => {
  const { client, timeout } = options
  const silent = `no answer from Redis within ${Duration.format(timeout)}`
  let degraded = false
  let lastWarning = Number.NEGATIVE_INFINITY
  return <A, B>(call: (c: C) => Promise<A>, read: (a: A) => Option.Option<B>): Effect.Effect<Option.Option<B>> =>
    Effect.gen(function*() {
      if (Option.isNone(client)) return Option.none<B>()
      const result = yield* promiseWithin(() => call(client.value), {
        timeout,
        onError: String,
        onTimeout: () => silent
      }).pipe(Effect.either)
      const value = Either.isRight(result) ? read(result.right) : Option.none<B>()
      if (Option.isSome(value)) {
        if (degraded) yield* Effect.logInfo(options.recovered)
        degraded = false
        return value
      }
      degraded = true
      if (options.onLocal !== undefined) yield* options.onLocal
      const now = yield* Clock.currentTimeMillis
      if (now - lastWarning >= WARN_EVERY_MS) {
        lastWarning = now
        yield* Effect.logWarning(options.degraded).pipe(Effect.annotateLogs({
          ...options.annotations,
          error: Either.isLeft(result) ? result.left : "an unreadable answer"
        }))
      }
      return Option.none<B>()
    })
}
