-- +goose Up
-- A redrive republishes the original message, so a dead letter keeps the
-- two AMQP properties that are not headers: the content type (a message
-- dead-lettered for a wrong one must come back with it) and the timestamp
-- (the event's created_at, set by the outbox), which the consumer's replay
-- window check reads. Rows from before this migration have NULL: a redrive
-- then sends application/json and first_failed_at as the timestamp (the
-- event is at least that old).
ALTER TABLE dead_letters
  ADD COLUMN content_type VARCHAR(255) NULL,
  ADD COLUMN message_timestamp DATETIME(6) NULL;

-- +goose Down
ALTER TABLE dead_letters
  DROP COLUMN message_timestamp,
  DROP COLUMN content_type;
