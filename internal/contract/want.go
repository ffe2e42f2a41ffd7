package contract

import (
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/relmsg/ordersaga/pkg/rabbit"
)

// WantTopology is the bindings packages' contract test: it fails t with
// each way topo differs from docs/asyncapi.yaml (TopologyMismatches).
func WantTopology(t testing.TB, topo rabbit.Topology) {
	t.Helper()
	diffs, err := TopologyMismatches(topo)
	want(t, diffs, err)
}

// WantRoutes is the HTTP packages' contract test: it fails t with each
// route of service's routers, keyed by where each is mounted ("" or
// "/admin"), that docs/openapi.yaml does not give to service
// (RouteMismatches).
func WantRoutes(t testing.TB, service string, routers map[string]chi.Routes) {
	t.Helper()
	for prefix, routes := range routers {
		diffs, err := RouteMismatches(service, prefix, routes)
		want(t, diffs, err)
	}
}

func want(t testing.TB, diffs []string, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
