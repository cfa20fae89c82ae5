import { Context, Effect, Layer } from "effect"
import * as fs from "node:fs/promises"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { allocatePort } from "./ports.js"

/**
 * s3rver (npm, pure Node): a real S3 REST server (SigV4 auth, PutObject, ranged GetObject, HeadObject, multipart
 * uploads, CopyObject) for the tests, started in the test's own process on a port of its block (ports.ts) with its
 * own temp folder, stopped and removed at the end. Chosen over Adobe's S3Mock because it needs no JVM (a second JVM
 * beside RocketMQ's on a 2-core CI box) and no download: it is a devDependency, so CI has it after `npm ci`.
 */
export interface S3rverInstance {
  run(): Promise<{ port: number }>
  close(): Promise<void>
}
const S3rver = createRequire(import.meta.url)("s3rver") as new(options: {
  address: string
  port: number
  directory: string
  silent: boolean
  configureBuckets: ReadonlyArray<{ name: string }>
}) => S3rverInstance

/** s3rver's fixed credentials: it checks every request's signature against them. */
export const S3RVER_KEY = "S3RVER"

export interface S3Server {
  readonly endpoint: string
  readonly bucket: string
  /** The runner settings that point the object store at this server. */
  readonly settings: Readonly<Record<string, string>>
}

export class TestS3 extends Context.Tag("TestS3")<TestS3, S3Server>() {}

/** The runner settings that point the object store at an s3rver on `endpoint`. */
export const s3rverSettings = (endpoint: string, bucket: string): Readonly<Record<string, string>> => ({
  OBJECT_STORE: "s3",
  S3_BUCKET: bucket,
  S3_ENDPOINT: endpoint,
  S3_REGION: "us-east-1",
  S3_ACCESS_KEY_ID: S3RVER_KEY,
  S3_SECRET_ACCESS_KEY: S3RVER_KEY,
  S3_FORCE_PATH_STYLE: "true"
})

/** An s3rver on `port` keeping its objects in `directory` (the same two again: the same store after a restart). */
export const runS3rver = async (port: number, directory: string, bucket: string): Promise<S3rverInstance> => {
  const server = new S3rver({
    address: "127.0.0.1",
    port,
    directory,
    silent: true,
    configureBuckets: [{ name: bucket }]
  })
  await server.run()
  return server
}

export const startS3rver = (bucket = "outputs") =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const directory = await fs.mkdtemp(path.join(os.tmpdir(), "s3rver-"))
      const port = await allocatePort()
      const server = await runS3rver(port, directory, bucket)
      const endpoint = `http://127.0.0.1:${port}`
      return { server, directory, endpoint, bucket, settings: s3rverSettings(endpoint, bucket) }
    }),
    (s) =>
      Effect.promise(async () => {
        await s.server.close().catch(() => undefined)
        await fs.rm(s.directory, { recursive: true, force: true })
      })
  )

/** An s3rver for the whole file (it.layer). */
export const layerS3rver = (bucket?: string) =>
  Layer.scoped(
    TestS3,
    Effect.map(startS3rver(bucket), ({ bucket, endpoint, settings }) => ({ bucket, endpoint, settings }))
  )

/**
 * A TCP listener that accepts connections and never answers (a store behind a silent network): requests to it can
 * only end by a timeout. Closed, with its sockets, at the end of the scope.
 */
export const silentListener = Effect.acquireRelease(
  Effect.promise(async () => {
    const sockets = new Set<net.Socket>()
    const server = net.createServer((socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
      socket.on("error", () => undefined)
    })
    const port = await allocatePort()
    await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve))
    return { server, sockets, endpoint: `http://127.0.0.1:${port}` }
  }),
  ({ server, sockets }) =>
    Effect.promise(() => {
      for (const s of sockets) s.destroy()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    })
).pipe(Effect.map(({ endpoint }) => endpoint))
