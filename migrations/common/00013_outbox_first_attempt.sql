-- +goose Up
-- The outbox's total deadline (遵守总期限): retrying an event ends, with
-- 'failed' and an alert, once its attempts are used up or OUTBOX_DEADLINE
-- has passed since its first attempt, whichever comes first. The first
-- attempt is stamped by the claim. Rows already tried before this
-- migration count from their creation; sent rows need no stamp.
ALTER TABLE outbox_events ADD COLUMN first_attempt_at DATETIME(6) NULL;
UPDATE outbox_events SET first_attempt_at = created_at WHERE attempts > 0 AND status <> 'sent';

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN first_attempt_at;
