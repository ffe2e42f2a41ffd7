-- +goose Up
-- aggregate_version is numbered by the producing service per order (the
-- order's, the reservation's and the payment's versions share the order id
-- and count separately), so the ordering tables were wrong to key a
-- sequence by (consumer, aggregate id) alone: one producer's version 3 made
-- another's version 1 look stale. Both tables now carry the aggregate type,
-- the producer that numbers the versions: the event type's first segment
-- (order, inventory, payment; pkg/ordering).
ALTER TABLE parked_events
  ADD COLUMN aggregate_type VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' AFTER event_type;
UPDATE parked_events SET aggregate_type = SUBSTRING_INDEX(event_type, '.', 1);
ALTER TABLE parked_events
  DROP KEY ix_parked_next,
  ADD KEY ix_parked_next (consumer_name, aggregate_type, aggregate_id, aggregate_version);

-- An existing sequence may have mixed producers. Its type is taken from the
-- events parked for it, or else from everything parked for its consumer,
-- when they name one producer. A row whose producer cannot be told keeps
-- the type '' and is no longer read: the next delta of its aggregate starts
-- a typed sequence, so a version past 1 waits (and is alerted on after
-- PARK_DEADLINE) instead of being applied or skipped on a guess. An operator
-- who knows the producer sets it: UPDATE inbox_sequences SET aggregate_type = ...
ALTER TABLE inbox_sequences
  ADD COLUMN aggregate_type VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' AFTER consumer_name;
UPDATE inbox_sequences s
JOIN (SELECT consumer_name, aggregate_id, MIN(aggregate_type) AS aggregate_type FROM parked_events
      GROUP BY consumer_name, aggregate_id HAVING COUNT(DISTINCT aggregate_type) = 1) p
  ON p.consumer_name = s.consumer_name AND p.aggregate_id = s.aggregate_id
SET s.aggregate_type = p.aggregate_type
WHERE s.aggregate_type = '';
UPDATE inbox_sequences s
JOIN (SELECT consumer_name, MIN(aggregate_type) AS aggregate_type FROM parked_events
      GROUP BY consumer_name HAVING COUNT(DISTINCT aggregate_type) = 1) p
  ON p.consumer_name = s.consumer_name
SET s.aggregate_type = p.aggregate_type
WHERE s.aggregate_type = '';
ALTER TABLE inbox_sequences
  DROP PRIMARY KEY,
  ADD PRIMARY KEY (consumer_name, aggregate_type, aggregate_id);

-- +goose Down
ALTER TABLE inbox_sequences DROP PRIMARY KEY;
-- Back to one sequence per (consumer, aggregate): the highest version of
-- its types, which is what the old key would have held.
DELETE s FROM inbox_sequences s JOIN inbox_sequences t
  ON t.consumer_name = s.consumer_name AND t.aggregate_id = s.aggregate_id
 AND (t.last_version > s.last_version OR (t.last_version = s.last_version AND t.aggregate_type > s.aggregate_type));
ALTER TABLE inbox_sequences ADD PRIMARY KEY (consumer_name, aggregate_id), DROP COLUMN aggregate_type;
ALTER TABLE parked_events
  DROP KEY ix_parked_next,
  ADD KEY ix_parked_next (consumer_name, aggregate_id, aggregate_version),
  DROP COLUMN aggregate_type;
