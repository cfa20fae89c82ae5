import { type KeyObject, sign } from "node:crypto"
import { Webhook } from "standardwebhooks"
import { falSigningString } from "../providers/signatures.js"
import { type Job, type Phase, phaseOf } from "./SimulatorState.js"

/** Where the simulator serves a succeeded job's video (GET /_sim/output/...): a real, small MP4. */
export const outputUrl = (job: Job): string =>
  `${job.outputBase}/_sim/output/${job.provider}/${encodeURIComponent(job.id)}.mp4`

/** What each provider's query API answers for a job, in that provider's own format. */
export const renderJob = (job: Job, now: number): unknown => {
  const phase = phaseOf(job, now)
  const done = phase._tag === "done" ? phase.outcome : null
  const progress = phase._tag === "running" ? phase.progress : done === "succeeded" ? 100 : 0
  switch (job.provider) {
    case "openai":
      return {
        id: job.id,
        object: "video",
        model: job.model,
        status: phase._tag === "queued" ? "queued" : phase._tag === "running" ? "in_progress" : done === "succeeded"
          ? "completed"
          : "failed",
        progress,
        error: done !== null && done !== "succeeded"
          ? { code: done === "canceled" ? "canceled" : "generation_failed" }
          : null,
        completed_at: done ? Math.floor(now / 1000) : null
      }
    case "replicate":
      return replicatePrediction(job, phase)
    case "fal":
      return {
        status: phase._tag === "queued" ? "IN_QUEUE" : phase._tag === "running" ? "IN_PROGRESS" : "COMPLETED",
        request_id: job.id,
        queue_position: phase._tag === "queued" ? 0 : undefined
      }
    case "runway":
      return {
        id: job.id,
        status: phase._tag === "queued" ? "PENDING" : phase._tag === "running" ? "RUNNING" : done === "succeeded"
          ? "SUCCEEDED"
          : done === "failed"
          ? "FAILED"
          : "CANCELLED",
        progress: phase._tag === "running" ? phase.progress / 100 : null,
        output: done === "succeeded" ? [outputUrl(job)] : null,
        failureCode: done === "failed" ? "INTERNAL" : null
      }
    case "luma":
      return lumaGeneration(job, phase)
    case "veo":
      return {
        name: job.id,
        done: done !== null,
        ...(done === "succeeded"
          ? { response: { videos: [{ gcsUri: `gs://sim/${job.provider}-output/${job.id}.mp4` }] } }
          : {}),
        ...(done !== null && done !== "succeeded"
          ? { error: { code: done === "canceled" ? 1 : 13, message: done } }
          : {})
      }
  }
}

/** fal's result endpoint (GET .../requests/{id}) once the request is COMPLETED. */
export const renderFalResult = (job: Job, now: number): { status: number; body: unknown } => {
  const phase = phaseOf(job, now)
  if (phase._tag !== "done") return { status: 400, body: { detail: "Request is still in progress" } }
  return phase.outcome === "succeeded"
    ? { status: 200, body: { video: { url: outputUrl(job) } } }
    : { status: 422, body: { detail: phase.outcome === "canceled" ? "Request was canceled" : "Generation failed" } }
}

const replicatePrediction = (job: Job, phase: Phase) => {
  const done = phase._tag === "done" ? phase.outcome : null
  return {
    id: job.id,
    model: job.model,
    status: phase._tag === "queued" ? "starting" : phase._tag === "running" ? "processing" : done,
    output: done === "succeeded" ? outputUrl(job) : null,
    error: done === "failed" ? "generation failed" : null,
    created_at: new Date(job.createdAt).toISOString(),
    completed_at: done ? new Date().toISOString() : null
  }
}

const lumaGeneration = (job: Job, phase: Phase) => {
  const done = phase._tag === "done" ? phase.outcome : null
  return {
    id: job.id,
    state: phase._tag === "queued" ? "queued" : phase._tag === "running" ? "dreaming" : done === "succeeded"
      ? "completed"
      : "failed",
    failure_reason: done !== null && done !== "succeeded" ? done : null,
    assets: done === "succeeded" ? { video: outputUrl(job) } : null,
    created_at: new Date(job.createdAt).toISOString()
  }
}

export interface Delivery {
  readonly url: string
  readonly body: string
  readonly headers: Record<string, string>
}

export interface Signers {
  readonly openaiSecret: string
  readonly replicateSecret: string
  readonly falKey: KeyObject
}

const standardHeaders = (secret: string, id: string, body: string) => {
  const now = new Date()
  return {
    "content-type": "application/json",
    "webhook-id": id,
    "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign(id, now, body)
  }
}

/**
 * The webhook a provider sends when a job reaches `phase`, signed as that provider signs, or null when the
 * provider sends none for it (OpenAI and fal only report the end; Runway and Veo never push).
 */
export const renderWebhook = (job: Job, phase: Phase, signers: Signers, seq: number): Delivery | null => {
  if (job.webhookUrl === null) return null
  switch (job.provider) {
    case "openai": {
      if (phase._tag !== "done" || phase.outcome === "canceled") return null
      const body = JSON.stringify({
        id: `evt_${job.id}_${phase.outcome}`,
        object: "event",
        created_at: Math.floor(Date.now() / 1000),
        type: phase.outcome === "succeeded" ? "video.completed" : "video.failed",
        data: { id: job.id }
      })
      return { url: job.webhookUrl, body, headers: standardHeaders(signers.openaiSecret, `msg_${job.id}_${seq}`, body) }
    }
    case "replicate": {
      if (phase._tag === "queued") return null
      const body = JSON.stringify(replicatePrediction(job, phase))
      return {
        url: job.webhookUrl,
        body,
        headers: standardHeaders(signers.replicateSecret, `msg_${job.id}_${seq}`, body)
      }
    }
    case "fal": {
      if (phase._tag !== "done" || phase.outcome === "canceled") return null
      const body = JSON.stringify(
        phase.outcome === "succeeded"
          ? { request_id: job.id, status: "OK", payload: { video: { url: outputUrl(job) } } }
          : { request_id: job.id, status: "ERROR", error: "generation failed", payload: null }
      )
      const ts = String(Math.floor(Date.now() / 1000))
      const userId = "sim-user"
      const signature = sign(null, Buffer.from(falSigningString(job.id, userId, ts, Buffer.from(body))), signers.falKey)
      return {
        url: job.webhookUrl,
        body,
        headers: {
          "content-type": "application/json",
          "x-fal-webhook-request-id": job.id,
          "x-fal-webhook-user-id": userId,
          "x-fal-webhook-timestamp": ts,
          "x-fal-webhook-signature": signature.toString("hex")
        }
      }
    }
    case "luma":
      return {
        url: job.webhookUrl,
        body: JSON.stringify(lumaGeneration(job, phase)),
        headers: { "content-type": "application/json" }
      }
    case "runway":
    case "veo":
      return null
  }
}
