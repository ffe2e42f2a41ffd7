-- +goose Up
-- Which instance of the order service made a change (order_history) or a
-- reconciler finding (reconciliation_audit): INSTANCE_ID, pkg/instance.
-- NULL for rows from before.
ALTER TABLE order_history ADD COLUMN instance VARCHAR(64) NULL;
ALTER TABLE reconciliation_audit ADD COLUMN instance VARCHAR(64) NULL;

-- +goose Down
ALTER TABLE reconciliation_audit DROP COLUMN instance;
ALTER TABLE order_history DROP COLUMN instance;
