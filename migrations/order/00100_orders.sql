-- +goose Up
-- The order service's catalogue: the price an order is charged comes from
-- here, never from the client.
CREATE TABLE products (
  sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  name VARCHAR(200) NOT NULL,
  price_cents BIGINT UNSIGNED NOT NULL,
  currency CHAR(3) CHARACTER SET ascii NOT NULL
) ENGINE=InnoDB;

INSERT INTO products (sku, name, price_cents, currency) VALUES
  ('SKU-1', 'Mechanical keyboard', 8900, 'EUR'),
  ('SKU-2', 'USB-C cable', 1200, 'EUR'),
  ('SKU-3', '27-inch monitor', 24900, 'EUR'),
  ('SKU-4', 'Laptop stand', 3900, 'EUR'),
  ('SKU-LIMITED', 'Signed poster (one in stock)', 5000, 'EUR'),
  ('SKU-SOLDOUT', 'Sold-out mug', 1500, 'EUR');

-- One row per order. idempotency_key is the request-level dedupe of the
-- chapter (a retried POST returns the existing order); request_hash tells a
-- retry of the same request from a different request reusing the key.
-- aggregate_version is the sequence number of the last event this order
-- emitted: events of one order are numbered 1, 2, 3 without gaps.
CREATE TABLE orders (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  request_hash CHAR(64) CHARACTER SET ascii NOT NULL,
  customer_id VARCHAR(64) NOT NULL,
  status VARCHAR(32) CHARACTER SET ascii NOT NULL,
  status_reason VARCHAR(255) NOT NULL DEFAULT '',
  refund_status VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'none',
  total_cents BIGINT UNSIGNED NOT NULL,
  currency CHAR(3) CHARACTER SET ascii NOT NULL,
  aggregate_version BIGINT UNSIGNED NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  UNIQUE KEY ux_orders_idempotency_key (idempotency_key),
  KEY ix_orders_status (status, updated_at)
) ENGINE=InnoDB;

CREATE TABLE order_items (
  order_id BIGINT UNSIGNED NOT NULL,
  sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  quantity INT UNSIGNED NOT NULL,
  unit_price_cents BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (order_id, sku),
  CONSTRAINT fk_order_items_order FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE order_items;
DROP TABLE orders;
DROP TABLE products;
