-- +goose Up
-- One row per reconciler finding that needed a repair or an operator: what
-- was found (classification), what each service said (evidence: the order
-- row, our outbox rows, the reservation and the payment as their HTTP APIs
-- answered, with the time of each answer), what was done (action) and how
-- it ended (outcome). A repair and its audit row commit in one transaction
-- when the repair is local. repair_id is recorded in order_history too.
--   classification  event_not_sent, not_consumed, result_missing, really_failed
--   action          republish_event, resend_event, apply_result, republish_participant_event, report
--   outcome         repaired, state_changed (the order or the event moved between scan and
--                   repair: nothing done), reported, failed
CREATE TABLE reconciliation_audit (
  repair_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  run_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  order_id BIGINT UNSIGNED NOT NULL,
  classification VARCHAR(32) CHARACTER SET ascii NOT NULL,
  action VARCHAR(40) CHARACTER SET ascii NOT NULL,
  outcome VARCHAR(32) CHARACTER SET ascii NOT NULL,
  detail VARCHAR(1000) NOT NULL DEFAULT '',
  evidence JSON NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_reconciliation_audit_order (order_id, created_at),
  KEY ix_reconciliation_audit_created (created_at),
  KEY ix_reconciliation_audit_run (run_id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE reconciliation_audit;
