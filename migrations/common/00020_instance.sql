-- +goose Up
-- Which instance acted (INSTANCE_ID, pkg/instance), for the timeline when
-- several instances share a schema: the dispatcher that claimed an outbox
-- row last (so, once it is sent, the one that sent it) and the consumer
-- instance that applied an event. NULL for rows from before, and for rows
-- written outside a service (tests, tools).
ALTER TABLE outbox_events ADD COLUMN claimed_by VARCHAR(64) NULL;
ALTER TABLE consumer_inbox ADD COLUMN instance VARCHAR(64) NULL;

-- +goose Down
ALTER TABLE consumer_inbox DROP COLUMN instance;
ALTER TABLE outbox_events DROP COLUMN claimed_by;
