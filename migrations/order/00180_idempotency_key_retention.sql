-- +goose Up
-- Idempotency keys are kept for IDEMPOTENCY_KEY_RETENTION (24h by default,
-- docs/contract.md "Idempotency keys"), then forgotten in batches: a
-- create's key is set to NULL on its order (the order stays; a later
-- request with that key is a new request), a cancel's row is deleted.
-- ix_orders_key_age lets the batch read only the keys still held, in
-- the index, never the orders whose keys are gone (NULL sorts first).
ALTER TABLE orders
  MODIFY idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL,
  ADD KEY ix_orders_key_age (idempotency_key, created_at);
ALTER TABLE cancel_requests ADD KEY ix_cancel_requests_created_at (created_at);

-- +goose Down
ALTER TABLE cancel_requests DROP KEY ix_cancel_requests_created_at;
UPDATE orders SET idempotency_key = CONCAT('forgotten-', id) WHERE idempotency_key IS NULL;
ALTER TABLE orders
  DROP KEY ix_orders_key_age,
  MODIFY idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
