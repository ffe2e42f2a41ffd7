package paymentsvc

import (
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/pkg/service"
)

func TestLoadPSPConfig(t *testing.T) {
	tests := []struct {
		name     string
		httpAddr string
		env      map[string]string
		wantURL  string
		wantErr  string // substring; "" for none
	}{
		{"default address", ":8083", nil, "http://127.0.0.1:8083/psp", ""},
		{"all interfaces", "0.0.0.0:9000", nil, "http://127.0.0.1:9000/psp", ""},
		{"all interfaces v6", "[::]:9000", nil, "http://127.0.0.1:9000/psp", ""},
		{"loopback", "127.0.0.1:9001", nil, "http://127.0.0.1:9001/psp", ""},
		{"v6 loopback", "[::1]:9002", nil, "http://[::1]:9002/psp", ""},
		{"named host", "payment:8083", nil, "http://payment:8083/psp", ""},
		{"explicit PSP_URL", ":0", map[string]string{"PSP_URL": "http://psp.example:80/v1"}, "http://psp.example:80/v1", ""},
		{"port 0 without PSP_URL", "127.0.0.1:0", nil, "", "set PSP_URL"},
		{"no port", "localhost", nil, "", "HTTP_ADDR"},
		{"bad PSP_URL", ":8083", map[string]string{"PSP_URL": "psp:80"}, "", "PSP_URL"},
		{"bad PSP_TIMEOUT", ":8083", map[string]string{"PSP_TIMEOUT": "soon"}, "", "PSP_TIMEOUT"},
		{"PSP_TIMEOUT too long", ":8083", map[string]string{"PSP_TIMEOUT": "20s"}, "", "PSP_TIMEOUT"},
	}
	for _, tt := range tests {
		env := service.NewEnv(func(k string) string { return tt.env[k] })
		c, err := loadPSPConfig(env, tt.httpAddr)
		if err == nil {
			err = env.Err()
		}
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want one mentioning %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.URL != tt.wantURL {
			t.Errorf("%s: URL = %q, err = %v; want %q", tt.name, c.URL, err, tt.wantURL)
		}
	}
}

// Every bad setting is reported at once, before anything is started.
func TestRunReportsBadConfiguration(t *testing.T) {
	env := map[string]string{"HTTP_ADDR": ":0", "PSP_TIMEOUT": "-1s", "OUTBOX_BATCH": "0"}
	err := Run(t.Context(), func(k string) string { return env[k] }, nil)
	if err == nil {
		t.Fatal("Run = nil, want a configuration error")
	}
	for _, key := range []string{"PSP_URL", "PSP_TIMEOUT", "OUTBOX_BATCH"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not mention %s", err, key)
		}
	}
}
