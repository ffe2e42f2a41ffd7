-- +goose Up
-- attempts counts the current round and goes back to 0 when an operator
-- retries a failed event or the reconciler re-sends one; the history is
-- kept beside it, so an operator sees that an event failed ten times
-- before: total_attempts (every attempt, never reset) and requeues (rounds
-- started again by hand or by the reconciler). Existing rows start their
-- history with their current round.
ALTER TABLE outbox_events
  ADD COLUMN total_attempts INT UNSIGNED NOT NULL DEFAULT 0,
  ADD COLUMN requeues INT UNSIGNED NOT NULL DEFAULT 0;
UPDATE outbox_events SET total_attempts = attempts WHERE attempts > 0;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN requeues, DROP COLUMN total_attempts;
