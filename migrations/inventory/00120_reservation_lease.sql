-- +goose Up
-- A reservation holds stock for a lease, not forever (issue 4 item 4).
-- expires_at is set, in database time, when a reservation becomes
-- 'reserved' (NOW(6) + RESERVATION_TTL) and is NULL for rows that never held
-- anything. The sweep moves a 'reserved' row whose lease ran out to
-- 'expired' with a compare-and-set on (status, expires_at) and stamps
-- expired_at; expired_at stays when the row moves on (committed again,
-- commit_failed, released), so "how many leases ran out" is a count of it.
ALTER TABLE reservations
  ADD COLUMN expires_at DATETIME(6) NULL AFTER aggregate_version,
  ADD COLUMN expired_at DATETIME(6) NULL AFTER expires_at,
  ADD KEY ix_reservations_lease (status, expires_at),
  ADD KEY ix_reservations_expired (expired_at);

-- +goose Down
ALTER TABLE reservations
  DROP KEY ix_reservations_expired,
  DROP KEY ix_reservations_lease,
  DROP COLUMN expired_at,
  DROP COLUMN expires_at;
