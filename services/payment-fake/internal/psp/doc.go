// Package psp is a fake payment service provider (PSP): the external company
// the payment-fake service charges and refunds through. It runs as a process
// of its own (pspsvc, cmd/psp; :8084, mounted under /psp), one for every
// payment instance, and the payment service treats it as a stranger: it
// talks to it only over HTTP, through Client (PSP_URL), and never reads its
// tables (psp_charges, psp_refunds, in the payment schema), which only this
// package touches, in its own transactions.
//
// # What it teaches
//
// A call to another company cannot join our database transaction, and its
// outcome can be unknown: the request may have been lost before the PSP saw
// it, or the PSP may have charged and the answer got lost on the way back.
// The caller cannot tell the two apart, so it must never read "no answer" as
// "declined". It asks instead: every charge and refund carries an idempotency
// key chosen by the caller, and the PSP
//
//   - charges at most once per key: the INSERT of a second charge with the
//     same key fails on the unique key (MySQL error 1062) and the PSP answers
//     with the stored charge (200 instead of 201), whatever its status;
//   - refuses a key reused with different parameters (409), so a bug in the
//     caller cannot silently turn into a different charge;
//   - answers status queries by key (GET /charges/{key}, GET /refunds/{key}).
//
// The rule for callers: after an error that errors.Is ErrOutcomeUnknown
// (timeout, dropped connection, any 5xx), query the status with the same key
// before retrying or giving up. ErrNotFound right after an unknown outcome
// means "not charged yet", not "never will be" (the first request may still be
// on its way); retrying the charge with the same key is safe either way,
// because the key lets it happen at most once.
//
// # Declines
//
// Declines are answers, not errors: a declined charge is stored (status
// "declined", with a decline code) and is idempotent like any other.
//
//   - customer_id starting with "decline" -> declined, decline_code "card_declined"
//   - amount_cents above 500000 (MaxAmountCents) -> declined, decline_code "amount_limit"
//
// The customer rule is checked first. Everything else is charged.
//
// # Fault switches
//
// Each Server has one switch (PUT /switches, or Server.SetSwitch), in memory,
// shared by every caller of the PSP process,
// that affects the next Count charge and refund calls (0: every call until it
// is set back to normal). A call that fails validation is answered 4xx and
// does not use up the switch. Status queries (every GET) are never affected.
//
//   - normal: answer as usual.
//   - slow: charge (commit), then wait DelayMS before answering; a caller
//     with a shorter timeout gives up although the charge happened.
//   - lose-response: charge (commit), then drop the connection without a
//     byte of answer: the caller cannot know that it was charged.
//   - fail-before-charge: drop the connection without charging anything.
//   - error-5xx: answer 502 without charging anything.
//   - decline: the card network says no: every charge is stored declined
//     with decline_code "card_declined", whatever the customer. Refunds are
//     not affected and do not use up its count. The saga's cancel path
//     (release the stock, cancel the order) on demand, for any order.
//
// Like a real PSP, it finishes a charge it has received even when the caller
// hangs up: the database work runs on a context that the caller's
// disconnection does not cancel.
package psp
