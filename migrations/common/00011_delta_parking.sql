-- +goose Up
-- Ordering for delta events (pkg/inbox/delta.go). A delta event changes an
-- aggregate relative to its previous version, so a consumer must apply
-- version n+1 only after n. inbox_sequences is the last version a consumer
-- applied per aggregate; an event that arrives ahead of a gap waits in
-- parked_events (not in consumer_inbox: it is not done) until the gap fills,
-- or until its deadline, when it is alerted on and kept as the recovery
-- record. Parked rows are never deleted automatically.
CREATE TABLE inbox_sequences (
  consumer_name VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  aggregate_id BIGINT UNSIGNED NOT NULL,
  last_version BIGINT UNSIGNED NOT NULL,
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (consumer_name, aggregate_id)
) ENGINE=InnoDB;

CREATE TABLE parked_events (
  consumer_name VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_type VARCHAR(80) NOT NULL,
  aggregate_id BIGINT UNSIGNED NOT NULL,
  aggregate_version BIGINT UNSIGNED NOT NULL,
  expected_version BIGINT UNSIGNED NOT NULL,
  schema_version INT UNSIGNED NOT NULL,
  payload JSON NOT NULL,
  traceparent VARCHAR(55) CHARACTER SET ascii NULL,
  parked_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  deadline_at DATETIME(6) NOT NULL,
  applied_at DATETIME(6) NULL,
  alerted_at DATETIME(6) NULL,
  PRIMARY KEY (consumer_name, event_id),
  KEY ix_parked_next (consumer_name, aggregate_id, aggregate_version),
  KEY ix_parked_deadline (applied_at, deadline_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE parked_events;
DROP TABLE inbox_sequences;
