/** The PostgreSQL NOTIFY channels: who writes a row announces it, whoever drains those rows listens. */

/** New provider_callback_inbox rows (payload: how many). */
export const INBOX_CHANNEL = "provider_inbox"

/** New outbox_events rows (a trigger, migrations/0007_propagation.ts). */
export const OUTBOX_CHANNEL = "outbox_events"

/** New token_revocations rows (a trigger, migrations/0017_token_revocations.ts). */
export const REVOCATIONS_CHANNEL = "token_revocations"

/** A runner joined or left the cluster's runner list (src/cluster/RunnerChanges.ts). */
export const RUNNERS_CHANNEL = "cluster_runners"
