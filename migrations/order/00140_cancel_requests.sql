-- +goose Up
-- The Idempotency-Key of POST /orders/{id}/cancel: one row per key, written
-- in the cancel's own transaction, with what the request asked (the order
-- and the hash of its reason) and what it did (result: cancelled,
-- already_cancelled, already_rejected). The same key again with the same
-- request gets that result back; with another order or another reason it is
-- refused. The primary key, not a prior SELECT, decides between two requests
-- racing with one key. Kept as long as the order (orders are not deleted).
CREATE TABLE cancel_requests (
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  order_id BIGINT UNSIGNED NOT NULL,
  request_hash CHAR(64) CHARACTER SET ascii NOT NULL,
  result VARCHAR(32) CHARACTER SET ascii NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_cancel_requests_order (order_id),
  CONSTRAINT fk_cancel_requests_order FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE cancel_requests;
