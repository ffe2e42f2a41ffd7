-- +goose Up
-- One column beyond the chapter's table: the W3C traceparent of the request
-- or message that wrote the event. The dispatcher copies it into the
-- message's traceparent header, so one order can be followed across the
-- services' logs by its trace_id. NULL when the writer had none.
ALTER TABLE outbox_events ADD COLUMN traceparent VARCHAR(55) CHARACTER SET ascii NULL;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN traceparent;
