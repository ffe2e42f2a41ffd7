-- +goose Up
-- The persistent timer of the saga (issue: deadlines). deadline_at is when
-- the order's current waiting state runs out: set by the same UPDATE that
-- moves the order into pending_inventory or awaiting_payment (database time,
-- NOW(6) + PARTICIPANT_DEADLINE or PAYMENT_DEADLINE), cleared (NULL) by every
-- move out of them. A column, not a separate timers table: an order has at
-- most one deadline, tied to its status, so the status and its deadline
-- change in one statement and can never disagree. The deadline sweep reads
-- ix_orders_deadline; terminal orders (NULL) cost it nothing.
--
-- ix_orders_refund serves the reconciler's search for cancelled orders whose
-- refund has been pending for too long.
ALTER TABLE orders
  ADD COLUMN deadline_at DATETIME(6) NULL AFTER updated_at,
  ADD KEY ix_orders_deadline (deadline_at),
  ADD KEY ix_orders_refund (refund_status, updated_at);

-- Orders open before this migration get the default deadlines, counted from
-- their last change.
UPDATE orders SET deadline_at = TIMESTAMPADD(MINUTE, 2, updated_at) WHERE status = 'pending_inventory';
UPDATE orders SET deadline_at = TIMESTAMPADD(MINUTE, 10, updated_at) WHERE status = 'awaiting_payment';

-- +goose Down
ALTER TABLE orders DROP KEY ix_orders_refund, DROP KEY ix_orders_deadline, DROP COLUMN deadline_at;
