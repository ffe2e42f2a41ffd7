package psp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/relmsg/ordersaga/pkg/base/sqldb"
)

// charge records a charge for a valid request, at most once per idempotency
// key. created is false when the key was charged before and c is that stored
// charge (whether it succeeded or was declined).
//
// One plain INSERT decides: 1062 on the idempotency key means "already
// done". There is no read before the write, so twenty concurrent calls with
// one key make one charge and all twenty answer with it. Only a duplicate
// reads: the new charge is answered from the row as written.
func (s *Server) charge(ctx context.Context, r ChargeRequest, declineAll bool) (c Charge, created bool, err error) {
	status, declineCode := decide(r, declineAll)
	row := chargeRow{
		ChargeID:       "ch_" + rand.Text(),
		IdempotencyKey: r.IdempotencyKey,
		OrderRef:       r.OrderRef,
		CustomerID:     r.CustomerID,
		AmountCents:    r.AmountCents,
		Currency:       r.Currency,
		Status:         status,
		DeclineCode:    declineCode,
		CreatedAt:      stamp(),
	}
	err = retryDeadlock(func() error { return insertCharge(ctx, s.db, row) })
	if err == nil {
		return row.charge(), true, nil
	}
	if !sqldb.IsDuplicateKey(err) {
		return Charge{}, false, err
	}
	c, err = chargeByKey(ctx, s.db, r.IdempotencyKey)
	if errors.Is(err, errNoCharge) {
		// Only a charge_id collision could get here: 1062 on the primary key.
		return Charge{}, false, fmt.Errorf("charge %s: duplicate key but no charge with this idempotency key", r.IdempotencyKey)
	}
	if err != nil {
		return Charge{}, false, err
	}
	if !sameCharge(c, r) {
		return Charge{}, false, errKeyReused
	}
	return c, false, nil
}

// refund records a refund of a succeeded charge, at most once per
// idempotency key, in one transaction:
//
//  1. lock the charge row (SELECT ... FOR UPDATE): refunds of one charge are
//     decided one after the other, never from a stale sum;
//  2. INSERT the refund; 1062 on the idempotency key means "already done":
//     answer with the stored refund (checked before the rules below, so a
//     replay of the refund that used up the charge still gets its answer);
//  3. check the rules (known, succeeded charge; refunds not above the charged
//     amount) with the new row counted; breaking one rolls the INSERT back.
//
// A new refund is answered from the row as written, not read back.
func (s *Server) refund(ctx context.Context, r RefundRequest) (f Refund, created bool, err error) {
	row := refundRow{
		RefundID:       "re_" + rand.Text(),
		IdempotencyKey: r.IdempotencyKey,
		ChargeID:       r.ChargeID,
		AmountCents:    r.AmountCents,
		Status:         StatusSucceeded,
		CreatedAt:      stamp(),
	}
	err = retryDeadlock(func() error {
		return sqldb.WithTx(ctx, s.db, func(tx *sqlx.Tx) error {
			f, created = Refund{}, false
			c, err := lockCharge(ctx, tx, r.ChargeID)
			if err != nil && !errors.Is(err, errUnknownCharge) {
				return err
			}
			known := err == nil
			if err := insertRefund(ctx, tx, row); err != nil {
				if !sqldb.IsDuplicateKey(err) {
					return err
				}
				stored, err := refundByKey(ctx, tx, r.IdempotencyKey)
				if errors.Is(err, errNoRefund) {
					return fmt.Errorf("refund %s: duplicate key but no refund with this idempotency key", r.IdempotencyKey)
				}
				if err != nil {
					return err
				}
				if !sameRefund(stored, r) {
					return errKeyReused
				}
				f = stored
				return nil
			}
			if !known {
				return errUnknownCharge
			}
			if c.Status != StatusSucceeded {
				return errChargeDeclined
			}
			sum, err := refundedCents(ctx, tx, r.ChargeID)
			if err != nil {
				return err
			}
			if sum > c.AmountCents {
				return fmt.Errorf("%w: %d cents asked, %d charged, %d already refunded",
					errRefundTooLarge, r.AmountCents, c.AmountCents, sum-r.AmountCents)
			}
			f, created = row.refund(), true
			return nil
		})
	})
	if err != nil {
		return Refund{}, false, err
	}
	return f, created, nil
}

// stamp is the created_at of a new charge or refund: the PSP's own clock,
// as another company's records would carry (nothing of ours decides on
// it), to the microsecond like the DATETIME(6) column, so that the answer
// and the stored row are the same record without a read-back.
func stamp() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// retryDeadlock runs fn again when the server chose it as a deadlock victim
// (1213): the whole transaction was rolled back, so running it again is safe.
func retryDeadlock(fn func() error) error {
	var err error
	for range 3 {
		err = fn()
		if sqldb.MySQLErrorNumber(err) != sqldb.ErLockDeadlock {
			return err
		}
	}
	return err
}
