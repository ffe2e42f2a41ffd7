-- +goose Up
-- The inbox keeps the chapter's three columns and gains two things:
--
-- payload_sha256: the SHA-256 of the message body the event was processed
-- with, so that "same event_id, different payload" is detected (a dead
-- letter and an alert) instead of being skipped as a duplicate. Rows
-- written before this migration have NULL, which counts as a match.
--
-- ix_inbox_processed_at: the retention job deletes rows older than the
-- replay window in small batches ordered by processed_at; without this
-- index every batch would scan the whole table.
ALTER TABLE consumer_inbox
  ADD COLUMN payload_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  ADD KEY ix_inbox_processed_at (processed_at);

-- +goose Down
ALTER TABLE consumer_inbox
  DROP KEY ix_inbox_processed_at,
  DROP COLUMN payload_sha256;
