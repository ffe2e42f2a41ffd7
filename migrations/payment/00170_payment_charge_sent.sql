-- +goose Up
-- charge_sent_at: when the charge consumer last sent the charge to the PSP
-- (set just before each send, by a compare-and-set that only a pending
-- payment whose order is not cancelled passes). NULL: the charge was never
-- sent, so a cancel closes the payment at once as 'withdrawn' (terminal:
-- nothing charged, and nothing will be). Set: the charge may be at the PSP,
-- so a cancel is settled by a status query with the key.
ALTER TABLE payments ADD COLUMN charge_sent_at DATETIME(6) NULL AFTER failure_reason;

-- Payments from before this column may have been sent: count them as sent.
UPDATE payments SET charge_sent_at = created_at WHERE status = 'pending';

-- +goose Down
ALTER TABLE payments DROP COLUMN charge_sent_at;
