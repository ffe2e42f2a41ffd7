package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A node kill with a retry in flight: a delivery that failed waits in a
// retry tier of its queue (<queue>.delay.<tier>) after its original was
// acked, so the tier holds its only copy. The tiers are quorum queues that
// dead-letter at least once (pkg/rabbit, topology.go): the node leading
// one may die, and the retry must still come back and be applied once.
// The run makes sure one is waiting: the consumer's failpoint after the
// effect is armed with error until a tier with a second or more left to
// wait holds retries, and that tier's leader is killed. The failpoint is
// disarmed as soon as the signal is sent: the retries come back to a
// consumer that applies them.

// RetryInFlight is what a node kill of a retry tier's leader found there.
type RetryInFlight struct {
	Consumer string `json:"consumer"`
	Tier     string `json:"tier"` // the retry tier, <queue>.delay.<n>
	Node     string `json:"node"`
	Waiting  int    `json:"waiting"` // retries in the tier when its leader was killed
}

// killRetryLeader arms the consumer's failpoint, waits for retries in a
// tier of at least a second (at most 30 s) and kills that tier's leader.
func (in *injector) killRetryLeader(ctx context.Context, consumer string) (*RetryInFlight, string, error) {
	c, ok := consumerNamed(consumer)
	if !ok {
		return nil, "", fmt.Errorf("no consumer %q", consumer)
	}
	cl, ok := in.broker.(Cluster)
	if !ok || in.bus == nil {
		return nil, "", errors.New("node-kill of a retry tier's leader needs a cluster the run owns and the broker over AMQP")
	}
	if err := in.obs.arm(ctx, c.Service, c.Fail, "error", 0); err != nil {
		return nil, "", err
	}
	in.noteArmed(c.Service, c.Fail)
	disarm := func() error { return in.obs.disarm(context.WithoutCancel(ctx), c.Service, c.Fail) }
	stop := in.traffic(ctx) // deliveries to fail, the load on or over
	defer stop()
	r := &RetryInFlight{Consumer: c.Name}
	queue := in.bus.Queue(c.Queue)
	deadline := time.Now().Add(30 * time.Second)
	for {
		node, tier, n, err := cl.RetryLeader(ctx, queue)
		if err == nil && n > 0 {
			r.Node, r.Tier, r.Waiting = node, tier, n
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return r, "", errors.Join(fmt.Errorf("no retry of %s waited a second or more in its tiers within 30s (%v)", c.Name, err), disarm())
		}
		time.Sleep(200 * time.Millisecond)
	}
	var disarmErr error
	killed := false
	detail, err := cl.KillNode(ctx, r.Node, func() { killed, disarmErr = true, disarm() })
	if !killed {
		disarmErr = disarm()
	}
	detail = fmt.Sprintf("%s (leader of %s, %d retries waiting; %s failed meanwhile)", detail, r.Tier, r.Waiting, c.Fail)
	return r, detail, errors.Join(err, disarmErr)
}
