-- +goose Up
-- Cancellation, deadlines and refunds (issue 4). Every corner of the payment
-- saga is a row here, so a restart resumes from the tables:
--
-- payments
--   status: widened for 'needs_attention' and 'cancelled_before_charge' (23
--     characters; the marker a cancel leaves when it overtakes
--     inventory.reserved, or a cancelled order the PSP never charged).
--   cancel_requested_at, cancel_reason: order.cancelled arrived; a succeeded
--     payment with it set owes a refund.
--   deadline_at: when an unknown charge outcome stops being retried and is
--     parked (set when the payment is created: PAYMENT_DEADLINE).
--   next_attempt_at, sweep_rounds: the sweep's schedule for a payment still
--     pending (backoff between rounds); claimed by moving next_attempt_at.
--   attempts, last_error, parked_at, parked_reason: the evidence.
ALTER TABLE payments
  MODIFY status VARCHAR(32) CHARACTER SET ascii NOT NULL,
  ADD COLUMN cancel_requested_at DATETIME(6) NULL AFTER failure_reason,
  ADD COLUMN cancel_reason VARCHAR(255) NOT NULL DEFAULT '' AFTER cancel_requested_at,
  ADD COLUMN deadline_at DATETIME(6) NULL AFTER cancel_reason,
  ADD COLUMN next_attempt_at DATETIME(6) NULL AFTER deadline_at,
  ADD COLUMN sweep_rounds INT UNSIGNED NOT NULL DEFAULT 0 AFTER next_attempt_at,
  ADD COLUMN attempts INT UNSIGNED NOT NULL DEFAULT 0 AFTER sweep_rounds,
  ADD COLUMN last_error VARCHAR(1024) NOT NULL DEFAULT '' AFTER attempts,
  ADD COLUMN parked_at DATETIME(6) NULL AFTER last_error,
  ADD COLUMN parked_reason VARCHAR(512) NOT NULL DEFAULT '' AFTER parked_at,
  ADD KEY ix_payments_sweep (status, next_attempt_at);

-- Payments pending before this migration get the default deadline.
UPDATE payments
SET deadline_at = TIMESTAMPADD(MINUTE, 10, created_at), next_attempt_at = created_at
WHERE status = 'pending';

-- One refund per order, of the full amount (the primary key makes a second
-- cancel of the same order a no-op). idempotency_key 'refund-<order_id>' is
-- sent on every refund call and status query. status: requested ->
-- succeeded, or needs_attention after deadline_at (REFUND_DEADLINE) with the
-- evidence; an operator's retry puts it back to requested.
CREATE TABLE refunds (
  order_id BIGINT UNSIGNED PRIMARY KEY,
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  psp_charge_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  amount_cents BIGINT UNSIGNED NOT NULL,
  status VARCHAR(32) CHARACTER SET ascii NOT NULL,
  psp_refund_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  reason VARCHAR(255) NOT NULL DEFAULT '',
  deadline_at DATETIME(6) NOT NULL,
  next_attempt_at DATETIME(6) NOT NULL,
  sweep_rounds INT UNSIGNED NOT NULL DEFAULT 0,
  attempts INT UNSIGNED NOT NULL DEFAULT 0,
  last_error VARCHAR(1024) NOT NULL DEFAULT '',
  parked_at DATETIME(6) NULL,
  parked_reason VARCHAR(512) NOT NULL DEFAULT '',
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  UNIQUE KEY ux_refunds_idempotency_key (idempotency_key),
  KEY ix_refunds_sweep (status, next_attempt_at),
  CONSTRAINT ck_refunds_amount CHECK (amount_cents > 0)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE refunds;
-- Fails while a row holds one of the longer statuses: archive those first.
ALTER TABLE payments
  DROP KEY ix_payments_sweep,
  DROP COLUMN parked_reason,
  DROP COLUMN parked_at,
  DROP COLUMN last_error,
  DROP COLUMN attempts,
  DROP COLUMN sweep_rounds,
  DROP COLUMN next_attempt_at,
  DROP COLUMN deadline_at,
  DROP COLUMN cancel_reason,
  DROP COLUMN cancel_requested_at,
  MODIFY status VARCHAR(16) CHARACTER SET ascii NOT NULL;
