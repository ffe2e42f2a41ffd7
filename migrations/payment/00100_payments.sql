-- +goose Up
-- The payment service's own record of each order's charge. The PSP keeps its
-- own books (psp_* tables, touched only by the fake PSP's HTTP handlers);
-- this table is what the payment service believes and has told the others.
-- idempotency_key is sent to the PSP on every charge attempt and status query.
CREATE TABLE payments (
  order_id BIGINT UNSIGNED PRIMARY KEY,
  customer_id VARCHAR(64) NOT NULL,
  amount_cents BIGINT UNSIGNED NOT NULL,
  currency CHAR(3) CHARACTER SET ascii NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL,
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  psp_charge_id VARCHAR(64) NULL,
  failure_reason VARCHAR(255) NOT NULL DEFAULT '',
  aggregate_version BIGINT UNSIGNED NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  UNIQUE KEY ux_payments_idempotency_key (idempotency_key),
  KEY ix_payments_status (status, updated_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE payments;
