package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
)

func TestViewerRunsOnDemoStacksOnly(t *testing.T) {
	t.Parallel()
	env := func(k string) string { return map[string]string{"VIEWER_ADDR": "127.0.0.1:0"}[k] }
	err := run(context.Background(), nil, env, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "DEMO_MODE=true") {
		t.Fatalf("run without DEMO_MODE = %v, want a refusal naming DEMO_MODE=true", err)
	}
}

func TestViewerServesThePageUntilStopped(t *testing.T) {
	t.Parallel()
	env := func(k string) string {
		return map[string]string{"VIEWER_ADDR": "127.0.0.1:0", "DEMO_MODE": "true"}[k]
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testutil.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, env, out) }()

	// The start line names the address.
	var url string
	defer func() {
		if url == "" {
			t.Logf("output:\n%s", out.String())
		}
	}()
	testutil.WaitFor(t, 10*time.Second, "the start line", func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			var l struct {
				Msg string `json:"msg"`
				URL string `json:"url"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "saga viewer started" {
				url = l.URL
			}
		}
		return url != ""
	})
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s = %d", url, resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after the stop signal = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the stop signal")
	}
}
