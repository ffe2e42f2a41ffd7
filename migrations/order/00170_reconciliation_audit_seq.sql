-- +goose Up
-- One audit row per repair, whatever the number of runs (issue 20). A run
-- can outlive its lease (its session killed: the server frees the lock) and
-- meet a second run on the same order; both would write a row for the same
-- finding. audit_seq numbers an order's audit rows: a run writes 1 + the
-- highest its scan of the order saw, so two runs that scanned the same
-- point of the order's audit trail collide on the key, and the second's
-- repair rolls back with its row. A later run, which scans the first row,
-- writes the next number: repeated repairs of an order stay possible.
-- Rows from before are numbered in the order they were written.
ALTER TABLE reconciliation_audit ADD COLUMN audit_seq INT UNSIGNED NULL AFTER order_id;
UPDATE reconciliation_audit a
JOIN (SELECT repair_id, ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY created_at, repair_id) AS n
      FROM reconciliation_audit) r USING (repair_id)
SET a.audit_seq = r.n;
ALTER TABLE reconciliation_audit MODIFY audit_seq INT UNSIGNED NOT NULL,
  ADD UNIQUE KEY uq_reconciliation_audit_order_seq (order_id, audit_seq);

-- +goose Down
ALTER TABLE reconciliation_audit DROP KEY uq_reconciliation_audit_order_seq, DROP COLUMN audit_seq;
