-- +goose Up
-- A redrive sends a dead letter again as it was: a replay, the same
-- event_id, and the row becomes 'redriven'. An operator who decides
-- instead to send a corrected event (a fixed payload) makes a new event:
-- a new event_id whose corrects_event_id header names the dead one (the
-- chapter, 有限重试与死信: 如果确实需要发起新的纠正操作，应分配新事件 ID，并记录它与原事件的关系).
-- The row becomes 'corrected' and keeps which event corrected it and why.
ALTER TABLE dead_letters
  ADD COLUMN correction_event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  ADD COLUMN correction_reason VARCHAR(1000) NULL;

-- +goose Down
ALTER TABLE dead_letters
  DROP COLUMN correction_reason,
  DROP COLUMN correction_event_id;
