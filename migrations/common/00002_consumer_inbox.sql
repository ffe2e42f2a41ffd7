-- +goose Up
-- The chapter's inbox: one row per (consumer, event) processed, inserted in
-- the same transaction as the business change. consumer_name is part of the
-- key so that two different consumers may each process the same event once.
CREATE TABLE consumer_inbox (
  consumer_name VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  processed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (consumer_name, event_id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE consumer_inbox;
