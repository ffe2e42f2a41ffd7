-- +goose Up
-- available = on_hand - reserved. Every change is one conditional UPDATE
-- (never read, compute, write back); the CHECK is the last line of defence.
CREATE TABLE stock (
  sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  on_hand INT UNSIGNED NOT NULL,
  reserved INT UNSIGNED NOT NULL DEFAULT 0,
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  CONSTRAINT ck_stock_reserved_le_on_hand CHECK (reserved <= on_hand)
) ENGINE=InnoDB;

INSERT INTO stock (sku, on_hand) VALUES
  ('SKU-1', 100),
  ('SKU-2', 500),
  ('SKU-3', 20),
  ('SKU-4', 50),
  ('SKU-LIMITED', 1),
  ('SKU-SOLDOUT', 0);

-- One reservation per order (the order id is the idempotency key of the
-- reserve step). status: reserved -> committed | released; or rejected.
-- aggregate_version numbers the events this reservation emitted.
CREATE TABLE reservations (
  order_id BIGINT UNSIGNED PRIMARY KEY,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL,
  reason VARCHAR(255) NOT NULL DEFAULT '',
  aggregate_version BIGINT UNSIGNED NOT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_reservations_status (status, updated_at)
) ENGINE=InnoDB;

CREATE TABLE reservation_items (
  order_id BIGINT UNSIGNED NOT NULL,
  sku VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  quantity INT UNSIGNED NOT NULL,
  PRIMARY KEY (order_id, sku),
  CONSTRAINT fk_reservation_items FOREIGN KEY (order_id) REFERENCES reservations (order_id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE reservation_items;
DROP TABLE reservations;
DROP TABLE stock;
