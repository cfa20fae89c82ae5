import * as net from "node:net"

/**
 * A TCP proxy in front of a real service, to cut it off from a runner and bring it back ("PostgreSQL
 * stopped / restarted") without touching the service other test files share.
 */
export const startTcpProxy = async (targetPort: number, targetHost = "127.0.0.1") => {
  let paused = false
  let refused = 0
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    if (paused) {
      refused++
      return client.destroy()
    }
    const upstream = net.connect(targetPort, targetHost)
    sockets.add(client)
    sockets.add(upstream)
    const drop = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on("error", drop).on("close", drop)
    upstream.on("error", drop).on("close", drop)
    client.pipe(upstream).pipe(client)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: (server.address() as net.AddressInfo).port,
    /** Drops every open connection and refuses new ones. */
    pause: () => {
      paused = true
      for (const s of sockets) s.destroy()
      sockets.clear()
    },
    /** Connections refused while paused: a client that noticed the outage and tried to come back. */
    refused: () => refused,
    resume: () => {
      paused = false
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}
