-- +goose Up
-- A correction is a new event with an event_id of its own; this column
-- records the event it corrects (the chapter, 有限重试与死信: 应分配新事件 ID，并记录
-- 它与原事件的关系). NULL for every event that is not a correction, and for
-- rows from before. A replay of the same fact (a re-send, a requeue) is the
-- same row and needs no link. The dispatcher sends it as the message
-- header corrects_event_id. No index: it is read with the row, never
-- searched by.
ALTER TABLE outbox_events
  ADD COLUMN corrects_event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN corrects_event_id;
