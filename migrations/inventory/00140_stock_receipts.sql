-- +goose Up
-- The Idempotency-Key of each goods receipt (POST /stock/{sku}/receipts),
-- written in the receipt's transaction with the stock change: the same key
-- with the same SKU and quantity is a replay that changes nothing, with
-- another SKU or quantity a 422. Rows older than IDEMPOTENCY_KEY_RETENTION
-- are deleted in batches (docs/contract.md, "Idempotency keys"), so a key
-- may be used again after that.
CREATE TABLE stock_receipts (
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  quantity INT NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_stock_receipts_created_at (created_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE stock_receipts;
