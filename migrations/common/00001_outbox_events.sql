-- +goose Up
-- The chapter's outbox table, column for column. pkg/outbox/doc.go explains
-- why the claim orders by (next_attempt_at, created_at): that is the order of
-- ix_dispatch itself, so the claim reads the index in order and stops at LIMIT.
CREATE TABLE outbox_events (
  event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  aggregate_id BIGINT UNSIGNED NOT NULL,
  aggregate_version BIGINT UNSIGNED NOT NULL,
  event_type VARCHAR(80) NOT NULL,
  schema_version INT UNSIGNED NOT NULL DEFAULT 1,
  payload JSON NOT NULL,
  status VARCHAR(16) NOT NULL DEFAULT 'pending',
  attempts INT UNSIGNED NOT NULL DEFAULT 0,
  next_attempt_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  claim_token CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  lease_until DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  sent_at DATETIME(6) NULL,
  KEY ix_dispatch (status, next_attempt_at, created_at),
  KEY ix_expired (status, lease_until)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE outbox_events;
