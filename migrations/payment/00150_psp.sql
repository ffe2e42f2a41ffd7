-- +goose Up
-- The fake payment provider's own books. They sit in the payment schema only
-- for convenience: nothing but services/payment-fake/internal/psp reads or
-- writes them, in its own transactions. The payment service knows the PSP
-- only through its HTTP API, exactly as it would know a real provider.
--
-- The unique idempotency keys are what make a retried call safe: a second
-- INSERT with the same key fails with 1062 and the PSP answers with the
-- stored result instead of charging (or refunding) again.
CREATE TABLE psp_charges (
  charge_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  order_ref VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  customer_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  amount_cents BIGINT UNSIGNED NOT NULL,
  currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  decline_code VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (charge_id),
  UNIQUE KEY ux_psp_charges_idempotency_key (idempotency_key),
  KEY ix_psp_charges_order_ref (order_ref, created_at),
  CONSTRAINT ck_psp_charges_status CHECK (status IN ('succeeded', 'declined')),
  CONSTRAINT ck_psp_charges_amount CHECK (amount_cents > 0)
) ENGINE=InnoDB;

-- A refund belongs to a succeeded charge; the PSP checks that, and that the
-- refunds of a charge never add up to more than it, while holding the
-- charge's row lock (SELECT ... FOR UPDATE), so concurrent refunds of one
-- charge are decided one after the other.
CREATE TABLE psp_refunds (
  refund_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  charge_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  amount_cents BIGINT UNSIGNED NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (refund_id),
  UNIQUE KEY ux_psp_refunds_idempotency_key (idempotency_key),
  KEY ix_psp_refunds_charge_id (charge_id, created_at),
  CONSTRAINT ck_psp_refunds_status CHECK (status IN ('succeeded')),
  CONSTRAINT ck_psp_refunds_amount CHECK (amount_cents > 0)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE psp_refunds;
DROP TABLE psp_charges;
