package psp

import "net/http"

// routes lists every endpoint of the PSP, relative to where it is mounted
// (the payment-fake service mounts it under /psp).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.handleCreateCharge)   // charge once per idempotency key
	mux.HandleFunc("GET /charges/{key}", s.handleGetCharge) // status query by idempotency key
	mux.HandleFunc("GET /charges", s.handleListCharges)     // ?order_ref=42: every charge of an order
	mux.HandleFunc("POST /refunds", s.handleCreateRefund)   // refund once per idempotency key
	mux.HandleFunc("GET /refunds/{key}", s.handleGetRefund) // status query by idempotency key
	mux.HandleFunc("GET /refunds", s.handleListRefunds)     // ?charge_id=ch_...: every refund of a charge
	mux.HandleFunc("GET /switches", s.handleGetSwitch)      // the fault switch
	mux.HandleFunc("PUT /switches", s.handlePutSwitch)      // {"mode":"lose-response","delay_ms":0,"count":1}
	mux.HandleFunc("/", s.handleNotFound)                   // JSON 404 for everything else
	return mux
}
