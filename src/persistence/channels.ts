/** The PostgreSQL NOTIFY channels: who writes a row announces it, whoever drains those rows listens. */

/** New provider_callback_inbox rows (payload: how many). */
export const INBOX_CHANNEL = "provider_inbox"

/** New outbox_events rows (a trigger, migrations/0007_propagation.ts). */
export const OUTBOX_CHANNEL = "outbox_events"
