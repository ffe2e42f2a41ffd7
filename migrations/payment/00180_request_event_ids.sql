-- +goose Up
-- request_event_id: the event_id of the latest request of this step (the
-- payment's payment.charge-requested, the refund's payment.refund-requested),
-- written with the request. When the sweep or an operator asks again, the
-- new request is a correction: a new event with an id of its own whose
-- corrects_event_id is this one, and this column moves to the new id. NULL
-- for rows from before: their next request is written without the link.
ALTER TABLE payments ADD COLUMN request_event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL;
ALTER TABLE refunds ADD COLUMN request_event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL;

-- +goose Down
ALTER TABLE refunds DROP COLUMN request_event_id;
ALTER TABLE payments DROP COLUMN request_event_id;
