-- +goose Up
-- A gap is the proof that a consumer saw an event whose aggregate_version
-- says an earlier event of the same aggregate had not arrived (the chapter:
-- dedupe does not solve ordering). The row is written in the inbox
-- transaction of the event that revealed the gap, and resolved in the inbox
-- transaction of the missing event when it arrives late. A gap still open
-- after deadline_at is overdue: counted by the metric
-- inventory_event_gaps{state="overdue"}, logged once (alerted_at) and listed
-- by GET /admin/gaps?open=true, until the late event or an operator
-- resolves it. Resolved rows are kept as the recovery record.
CREATE TABLE event_gaps (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  consumer_name VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  aggregate_id BIGINT UNSIGNED NOT NULL,
  -- the event that revealed the gap
  event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_type VARCHAR(80) NOT NULL,
  received_version BIGINT UNSIGNED NOT NULL,
  -- the first version that should have come before it and had not
  expected_version BIGINT UNSIGNED NOT NULL,
  detected_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  deadline_at DATETIME(6) NOT NULL,
  alerted_at DATETIME(6) NULL,
  resolved_at DATETIME(6) NULL,
  resolution VARCHAR(255) NOT NULL DEFAULT '',
  UNIQUE KEY ux_event_gap (consumer_name, aggregate_id, expected_version),
  KEY ix_event_gaps_open (resolved_at, deadline_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE event_gaps;
