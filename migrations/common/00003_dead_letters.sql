-- +goose Up
-- Dead letters are not a dustbin: every message a consumer gave up on is kept
-- here with the reason, first and last failure time, attempts and the raw
-- payload, searchable, until someone redrives it under its original event_id.
-- event_id is wide enough for a malformed message id (stored as received,
-- cut to 191 characters) because poison messages land here too.
CREATE TABLE dead_letters (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  consumer_name VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_id VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  event_type VARCHAR(80) NOT NULL DEFAULT '',
  routing_key VARCHAR(255) NOT NULL DEFAULT '',
  reason VARCHAR(1000) NOT NULL,
  attempts INT UNSIGNED NOT NULL DEFAULT 1,
  first_failed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  last_failed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  status VARCHAR(16) NOT NULL DEFAULT 'dead',
  redriven_at DATETIME(6) NULL,
  headers JSON NULL,
  payload MEDIUMBLOB NOT NULL,
  UNIQUE KEY ux_dead_letter (consumer_name, event_id),
  KEY ix_dead_status (status, last_failed_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE dead_letters;
