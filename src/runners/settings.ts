import { BusSettings } from "../bus/NotificationBus.js"
import { OpsCliSettings } from "../cli/ops/AdminClient.js"
import type * as S from "../config/Settings.js"
import { ReconcilerSettings } from "../entities/Reconcilers.js"
import { SweeperSettings } from "../entities/Sweeper.js"
import { LifecycleSettings } from "../entities/TaskLifecycle.js"
import { StreamSettings } from "../gateway/streamSettings.js"
import { ApiSettings } from "../http/apiSettings.js"
import { AuthSettings } from "../http/Auth.js"
import { HealthSettings } from "../http/Health.js"
import { InboxSettings } from "../intake/inboxSettings.js"
import { WebhookSettings } from "../intake/Webhooks.js"
import { MetricsSettings } from "../observability/metricsSettings.js"
import { ObjectStoreSettings } from "../output/objectStoreSettings.js"
import { OutputSettings } from "../output/outputSettings.js"
import { DatabaseSettings } from "../persistence/Database.js"
import { EventRetentionSettings } from "../persistence/EventRetention.js"
import { ProjectSettings } from "../persistence/Projects.js"
import { AdmissionSettings } from "../persistence/TaskAdmission.js"
import { TaskStoreSettings } from "../persistence/TaskStore.js"
import { WriteFenceSettings } from "../persistence/WriteFence.js"
import { DispatcherSettings } from "../propagation/NotificationDispatcher.js"
import { OutboxRelaySettings } from "../propagation/OutboxRelay.js"
import { CallbackTokenSettings, ProviderSettings, ProviderWebhookSettings } from "../providers/ProviderSettings.js"
import { QueueSettings } from "../queue/RocketMQQueue.js"
import { BreakerSettings } from "../quota/breakerSettings.js"
import { QuotaSettings } from "../quota/ProviderQuota.js"
import { RedisSettings } from "../redis/Redis.js"
import { SimulatorSettings } from "../simulator/SimulatorSettings.js"
import { TracingSettings } from "../tracing/Tracing.js"
import { EmbeddedSimulatorSettings } from "./EmbeddedSimulator.js"
import { LoggingSettings } from "./Logging.js"
import { RunnerSettings } from "./RunnerConfig.js"

/**
 * Every settings area of a runner, in the order of the README's settings table. main.ts validates them all before
 * anything starts; `npm run docs:config` writes the table from them. An area added to a service belongs here too.
 */
export const allAreas: ReadonlyArray<S.Area<unknown>> = [
  RunnerSettings,
  LoggingSettings,
  TracingSettings,
  MetricsSettings,
  HealthSettings,
  DatabaseSettings,
  WriteFenceSettings,
  TaskStoreSettings,
  AdmissionSettings,
  ProjectSettings,
  LifecycleSettings,
  SweeperSettings,
  ReconcilerSettings,
  QuotaSettings,
  BreakerSettings,
  OutputSettings,
  ObjectStoreSettings,
  WebhookSettings,
  InboxSettings,
  RedisSettings,
  QueueSettings,
  OutboxRelaySettings,
  DispatcherSettings,
  BusSettings,
  StreamSettings,
  ApiSettings,
  AuthSettings,
  EventRetentionSettings,
  ProviderSettings,
  ProviderWebhookSettings,
  CallbackTokenSettings,
  EmbeddedSimulatorSettings,
  SimulatorSettings,
  OpsCliSettings
]
