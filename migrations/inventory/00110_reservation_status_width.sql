-- +goose Up
-- A cancel that arrives before its order's create leaves a reservation row in
-- status 'cancelled_before_reserve' (24 characters): the marker that makes a
-- late OrderCreated reserve nothing (the saga's "hanging" protection). The
-- original column holds 16.
ALTER TABLE reservations MODIFY status VARCHAR(32) CHARACTER SET ascii NOT NULL;

-- +goose Down
-- Fails while a marker row exists: delete or archive those rows first.
ALTER TABLE reservations MODIFY status VARCHAR(16) CHARACTER SET ascii NOT NULL;
