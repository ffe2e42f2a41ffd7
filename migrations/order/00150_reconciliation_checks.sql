-- +goose Up
-- The reconciler's record of finished orders it has compared with the
-- participants (issue 11: 对账 also looks at orders that finished, to find a
-- downstream that recorded the wrong state). One row per order, for the
-- order as it was checked (order_updated_at: a later change, such as a
-- cancel after confirm, makes it due again):
--   result  consistent       every participant recorded what the outcome implies: closed
--           needs_attention  a difference no idempotent entry point repaired: parked for an
--                            operator, with the audit row that says why (repair_id)
-- A finished order without a row for its updated_at is checked by the next
-- run, if it changed within RECONCILE_WINDOW and before RECONCILE_GRACE.
CREATE TABLE reconciliation_checks (
  order_id BIGINT UNSIGNED PRIMARY KEY,
  order_updated_at DATETIME(6) NOT NULL,
  result VARCHAR(32) CHARACTER SET ascii NOT NULL,
  repair_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  checked_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_reconciliation_checks_result (result, checked_at),
  CONSTRAINT fk_reconciliation_checks_order FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE reconciliation_checks;
