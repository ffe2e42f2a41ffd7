package rabbit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relmsg/ordersaga/internal/testutil"
)

// The failover order: the first address first; after a loss, the address
// after the lost one, wrapping around past the last.
func TestFailoverOrder(t *testing.T) {
	t.Parallel()
	f := failover{n: 3}
	steps := []struct {
		lost int // -1: none, look at the start
		want []int
	}{
		{-1, []int{0, 1, 2}}, // at the start: the first that answers
		{0, []int{1, 2, 0}},  // lost the first: the second next
		{1, []int{2, 0, 1}},  // lost the second: the third
		{2, []int{0, 1, 2}},  // lost the last: wraps around to the first
		{0, []int{1, 2, 0}},
	}
	for i, s := range steps {
		if s.lost >= 0 {
			f.lost(s.lost)
		}
		if got := f.round(); !slices.Equal(got, s.want) {
			t.Errorf("step %d (lost %d): round %v, want %v", i, s.lost, got, s.want)
		}
	}
	one := failover{n: 1}
	one.lost(0)
	if got := one.round(); !slices.Equal(got, []int{0}) {
		t.Errorf("one address after a loss: %v, want [0]", got)
	}
}

func TestParseURLs(t *testing.T) {
	t.Parallel()
	got, err := ParseURLs(" amqp://u:p@a:5701/ , amqp://u:p@b:5702/,amqp://u:p@c:5703/")
	if err != nil || !slices.Equal(got, []string{"amqp://u:p@a:5701/", "amqp://u:p@b:5702/", "amqp://u:p@c:5703/"}) {
		t.Errorf("three addresses: %q, %v", got, err)
	}
	_, err = ParseURLs("amqp://u:secret@a:5701/,http://u:secret@b:5702/,amqp://u:secret@c:port/,amqp://u:secret@d:5704/")
	if err == nil {
		t.Fatal("two bad addresses: no error")
	}
	msg := err.Error()
	for _, want := range []string{"address 2 (b:5702)", "address 3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if strings.Contains(msg, "address 1") || strings.Contains(msg, "address 4") {
		t.Errorf("error %q blames a good address", msg)
	}
	if strings.Contains(msg, "secret") {
		t.Errorf("error %q shows a password", msg)
	}
	if _, err := ParseURLs(" , "); err == nil {
		t.Error("no address: no error")
	}
}

// Run dials the addresses in order, each once per round, and starts the
// next round after a backoff; here no address answers AMQP (each listener
// takes the TCP connection and closes it), so the dials show the order.
func TestRunDialsEveryAddressInTurn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var dialed []string
	var addrs []string
	for _, name := range []string{"a", "b", "c"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				dialed = append(dialed, name)
				mu.Unlock()
				c.Close()
			}
		}()
		addrs = append(addrs, fmt.Sprintf("amqp://guest:guest@%s/", l.Addr()))
	}
	c := New(strings.Join(addrs, ","), Topology{}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testutil.WaitFor(t, 10*time.Second, "six dials", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dialed) >= 6
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a", "b", "c", "a", "b", "c"}; !slices.Equal(dialed[:6], want) {
		t.Errorf("dials %v, want two rounds %v", dialed, want)
	}
	if c.Connected() {
		t.Error("connected to listeners that speak no AMQP")
	}
}
