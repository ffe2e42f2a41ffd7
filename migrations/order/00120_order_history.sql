-- +goose Up
-- Every change of an order, written in the same transaction as the change
-- itself: the creation (from_status ''), each transition and each change of
-- the refund status. It is what the per-order timeline shows for the order
-- service, and the answer to "who moved this order, when, and why".
--   trigger_name      the domain trigger (created, inventory_reserved, cancel_requested, ...)
--   actor             api, consumer, deadline or reconciler
--   event_id          the consumed event that caused the change (consumer), else NULL
--   emitted_event_id  the event the change wrote to the outbox, if any
--   repair_id         the reconciliation_audit row of a reconciler repair
CREATE TABLE order_history (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  order_id BIGINT UNSIGNED NOT NULL,
  from_status VARCHAR(32) CHARACTER SET ascii NOT NULL,
  to_status VARCHAR(32) CHARACTER SET ascii NOT NULL,
  refund_status VARCHAR(16) CHARACTER SET ascii NOT NULL,
  trigger_name VARCHAR(40) CHARACTER SET ascii NOT NULL,
  actor VARCHAR(16) CHARACTER SET ascii NOT NULL,
  reason VARCHAR(255) NOT NULL DEFAULT '',
  event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  emitted_event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  repair_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  changed_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_order_history_order (order_id, id),
  KEY ix_order_history_actor (actor, changed_at),
  CONSTRAINT fk_order_history_order FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE=InnoDB;

-- Orders from before this table: their creation, and their status now.
INSERT INTO order_history (order_id, from_status, to_status, refund_status, trigger_name, actor, changed_at)
SELECT id, '', 'pending_inventory', 'none', 'created', 'api', created_at FROM orders;
INSERT INTO order_history (order_id, from_status, to_status, refund_status, trigger_name, actor, reason, changed_at)
SELECT id, 'pending_inventory', status, refund_status, 'unknown', 'migration', 'recorded before order_history existed', updated_at
FROM orders WHERE status <> 'pending_inventory';

-- +goose Down
DROP TABLE order_history;
