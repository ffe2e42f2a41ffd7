package viewer_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/internal/sagatest"
)

// The page in a real browser: Debian's chromium, headless, driven through
// the DevTools protocol, against its own stack and viewer. The subtests run
// in order on one page, as a reader would use it, and wait for what the
// page shows (never a fixed sleep). Screenshots go to VIEWER_SCREENSHOTS
// when set (docs/img is made that way), else to the test's artifact
// directory (go test -artifacts keeps them).
func TestViewerInTheBrowser(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("integration test (MariaDB, RabbitMQ, chromium): skipped with -short")
	}
	chrome := chromium(t)
	s := sagatest.Start(t,
		// Short lease: the duplicate window's re-send comes within seconds.
		sagatest.WithEnv("order", "OUTBOX_LEASE", "3s"),
	)
	base := startViewer(t, s, "")
	b := newBrowser(t, chrome)

	// The page without its token: it loads, and asks for the token.
	b.do(t, "open the page without its token", chromedp.Navigate(base+"/"))
	b.wait(t, "the page to ask for its token", `document.querySelector("#token-dialog").open === true`)
	// The URL scripts/up.sh prints: the token is traded for a cookie no
	// script can read, and leaves the address bar.
	tok := tokenOf(base)
	b.do(t, "open the URL with the token", chromedp.Navigate(base+"/?token="+tok))
	b.wait(t, "the page to start", `document.body.dataset.ready === "true"`)
	b.wait(t, "the token gone from the address and out of the script's reach",
		`location.search === "" && !document.cookie.includes(`+strconv.Quote(tok)+`) && document.querySelector("#token-dialog").open === false`)

	t.Run("the page loads with every service up", func(t *testing.T) {
		b.wait(t, "three services up in the health strip", `document.querySelectorAll("#health .hcard[data-up=true]").length === 3`)
		b.wait(t, "the SKUs in the create form", `document.querySelectorAll("select.sku option").length >= 6`)
		b.wait(t, "the experiments listed", fmt.Sprintf(`document.querySelectorAll("#experiments li.exp").length === %d`, len(lab.Scenarios)))
	})

	t.Run("an order reaches confirmed with its outbox and inbox steps drawn", func(t *testing.T) {
		b.do(t, "fill the form",
			chromedp.SetValue(chromedp.CSS("#customer"), "c-browser"),
			chromedp.SetValue(chromedp.CSS("select.sku"), "SKU-1"),
			chromedp.SetValue(chromedp.CSS("input.qty"), "2"),
		)
		id := create(t, b)
		b.wait(t, "order "+id+" confirmed in the timeline header",
			`document.querySelector("#timeline-head .pill") && document.querySelector("#timeline-head .pill").dataset.status === "confirmed"`)
		// The saga's whole path: five outbox rows published, six inbox rows
		// (docs/walkthrough.md), the reservation committed.
		b.wait(t, "the timeline to settle", `document.querySelector("#live.off") !== null`)
		steps := func(sel string) string { return `document.querySelectorAll('#diagram g.step` + sel + `').length` }
		b.wait(t, "every step drawn",
			steps(`[data-kind="outbox.written"]`)+` === 5 && `+steps(`[data-kind="outbox.sent"]`)+` === 5 && `+
				steps(`[data-kind="inbox.processed"]`)+` === 6 && `+
				steps(`[data-kind="order.transition"][data-status="confirmed"]`)+` === 1 && `+
				steps(`[data-kind="reservation.updated"][data-status="committed"]`)+` === 1 && `+
				steps(`[data-kind="psp.charge"][data-status="succeeded"]`)+` === 1 && `+
				steps(`[data-kind="outbox.written"][data-status="sent"]`)+` === 5`)
		b.do(t, "pick the first outbox step", chromedp.Click(chromedp.CSS(`#diagram g.step[data-kind="outbox.written"] rect.box`)))
		b.wait(t, "its record and table in the detail panel",
			`document.querySelector("#detail-body code") && document.querySelector("#detail-body code").textContent.includes("outbox_events")`)
		b.shot(t, "viewer-timeline-confirmed.png", "body")
	})

	t.Run("the same key twice shows one order", func(t *testing.T) {
		b.do(t, "fill the form",
			chromedp.SetValue(chromedp.CSS("#customer"), "c-twice"),
			chromedp.SetValue(chromedp.CSS("#idem-key"), "browser-twice-1"),
		)
		first := create(t, b)
		b.do(t, "send it again", chromedp.Click(chromedp.CSS("#send-again")))
		again := b.eval(t, `document.querySelector("#create-result .ok").dataset.orderId`,
			`document.querySelector('#create-result .ok[data-replayed="true"][data-key="browser-twice-1"]')`)
		if again != first {
			t.Errorf("the replay answered order %s, the first create %s", again, first)
		}
		b.wait(t, "one row for the customer in the orders list",
			`Array.from(document.querySelectorAll("#orders-body td.cust")).filter((td) => td.textContent === "c-twice").length === 1 &&
			 document.querySelector('#orders-body tr[data-order-id="`+first+`"]') !== null`)
		// And the service agrees: one order for that customer.
		var list struct {
			Orders []struct {
				CustomerID string `json:"customer_id"`
			} `json:"orders"`
		}
		s.Order.Do("GET", "/orders?limit=500", nil, nil, &list)
		n := 0
		for _, o := range list.Orders {
			if o.CustomerID == "c-twice" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the order service has %d orders for c-twice, want 1", n)
		}
	})

	t.Run("atomic-commit from the page shows its verdict", func(t *testing.T) {
		runExperiment(t, b, "atomic-commit")
		b.wait(t, "the failpoint armed step", `document.querySelector('#steps li[data-kind="armed"]') !== null`)
		b.shot(t, "viewer-lab-atomic-commit.png", ".runview")
	})

	t.Run("duplicate-window from the page shows its verdict", func(t *testing.T) {
		runExperiment(t, b, "duplicate-window")
		b.wait(t, "the crash and restart step", `document.querySelector('#steps li[data-kind="restarted"]') !== null`)
		b.shot(t, "viewer-lab-duplicate-window.png", ".runview")
		// The order it used opens in the timeline, with the re-send and the
		// copy the inbox dropped.
		b.do(t, "open its order", chromedp.Click(chromedp.CSS("#open-order")))
		b.wait(t, "the re-sent OrderCreated drawn", `document.querySelector('#diagram g.step[data-kind="outbox.sent"][data-resent="true"]') !== null &&
			document.querySelector('#diagram g.step[data-kind="inbox.duplicate"][data-dropped="true"]') !== null`)
		b.wait(t, "the timeline to settle", `document.querySelector("#live.off") !== null`)
		b.shot(t, "viewer-timeline-duplicate.png", ".timeline")
	})

	t.Run("the decline switch makes the next order cancelled, with the release drawn", func(t *testing.T) {
		b.do(t, "open the switches", chromedp.Click(chromedp.CSS(`.tab[data-tab="switches"]`)))
		b.wait(t, "the PSP's current mode", `document.querySelector("#psp-mode") !== null`)
		b.do(t, "choose decline for one call",
			chromedp.SetValue(chromedp.CSS("#psp-mode-select"), "decline"),
			chromedp.SetValue(chromedp.CSS("#psp-count"), "1"),
		)
		b.do(t, "set it", chromedp.Click(chromedp.CSS("#psp-set")))
		b.wait(t, "the PSP in decline mode", `document.querySelector("#psp-mode").dataset.mode === "decline"`)
		b.shot(t, "viewer-switches.png", "body")
		b.do(t, "back to the orders", chromedp.Click(chromedp.CSS(`.tab[data-tab="saga"]`)))
		b.do(t, "fill the form",
			chromedp.SetValue(chromedp.CSS("#customer"), "c-declined"),
			chromedp.SetValue(chromedp.CSS("select.sku"), "SKU-3"),
			chromedp.SetValue(chromedp.CSS("input.qty"), "1"),
		)
		create(t, b)
		b.wait(t, "the order cancelled", `document.querySelector("#timeline-head .pill") && document.querySelector("#timeline-head .pill").dataset.status === "cancelled"`)
		b.wait(t, "the declined charge and the release drawn",
			`document.querySelector('#diagram g.step[data-kind="psp.charge"][data-status="declined"]') !== null &&
			 document.querySelector('#diagram g.step[data-kind="reservation.updated"][data-status="released"]') !== null &&
			 document.querySelector('#diagram g.step[data-kind="order.transition"][data-status="cancelled"]') !== null`)
		b.wait(t, "the timeline to settle", `document.querySelector("#live.off") !== null`)
		b.shot(t, "viewer-timeline-cancelled.png", ".timeline")
	})

	t.Run("the language toggle changes the labels", func(t *testing.T) {
		before := b.eval(t, `document.querySelector('.tab[data-tab="lab"]').textContent`, `true`)
		b.do(t, "switch language", chromedp.Click(chromedp.CSS("#lang-toggle")))
		b.wait(t, "Chinese labels", `document.documentElement.lang === "zh-CN" &&
			document.querySelector('.tab[data-tab="lab"]').textContent === "故障实验室" &&
			document.querySelector("#create").textContent === "创建订单" &&
			document.querySelector("#diagram .lanename").textContent === "订单服务"`)
		b.shot(t, "viewer-zh.png", "body")
		b.do(t, "switch back", chromedp.Click(chromedp.CSS("#lang-toggle")))
		b.wait(t, "English labels again", `document.querySelector('.tab[data-tab="lab"]').textContent === `+jsString(before))
	})

	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged %d console error(s):\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
}

// create submits the form as it stands and returns the order id the page
// shows for that submission (its Idempotency-Key).
func create(t *testing.T, b *browser) string {
	t.Helper()
	key := b.eval(t, `document.querySelector("#idem-key").value`, `document.querySelector("#idem-key").value !== ""`)
	b.do(t, "create", chromedp.Click(chromedp.CSS("#create")))
	return b.eval(t, `document.querySelector("#create-result .ok").dataset.orderId`,
		query(`#create-result .ok[data-replayed="false"][data-key="`+key+`"]`))
}

// runExperiment runs one experiment from the lab panel and waits for its
// verdict, which must be PASSED.
func runExperiment(t *testing.T, b *browser, name string) {
	t.Helper()
	b.do(t, "open the lab", chromedp.Click(chromedp.CSS(`.tab[data-tab="lab"]`)))
	b.do(t, "run "+name, chromedp.Click(chromedp.CSS(`#experiments li[data-experiment="`+name+`"] button.run`)))
	b.waitFor(t, 3*time.Minute, name+"'s verdict",
		`document.querySelector('#run .runhead[data-experiment="`+name+`"]') !== null && document.querySelector("#verdict") !== null`)
	passed := b.eval(t, `document.querySelector("#verdict").dataset.passed`, `true`)
	if passed != "true" {
		text := b.eval(t, `document.querySelector("#run").innerText`, `true`)
		t.Fatalf("%s did not pass in the page:\n%s", name, text)
	}
	b.wait(t, "the checks listed, all held", `document.querySelectorAll("#checks li").length > 0 && document.querySelectorAll("#checks li.fail").length === 0`)
	b.wait(t, "the evidence tables", `document.querySelectorAll("#evidence table.data").length > 0`)
}

// chromium finds the browser. A missing browser fails the test: the page
// is part of the product, and a skipped browser test proves nothing.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VIEWER_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found (chromium, chromium-browser, google-chrome; or set VIEWER_CHROME): " +
		"install it with `apt-get install -y chromium` (scripts/test.sh does)")
	return ""
}

// browser is one headless tab and what it logged.
type browser struct {
	ctx context.Context
	dir string // where screenshots go

	mu      sync.Mutex
	console []string
}

func newBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// This network is closed: without these the browser's own
		// connections are refused and slow it down.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("lang", "en-US"),
		chromedp.Flag("accept-lang", "en-US"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1600, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx, dir: os.Getenv("VIEWER_SCREENSHOTS")}
	if b.dir == "" {
		b.dir = t.ArtifactDir()
	}
	// Start the browser now: a failure to start is the first thing to see.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			// Errors and exceptions of the page's own code. Network entries
			// are the answers the page shows on purpose (a 422 is an answer).
			if (m.Type == chromedp.ConsoleError || m.IsException()) && m.Source != "network" {
				b.mu.Lock()
				b.console = append(b.console, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v\npage: %s", what, err, b.pageText())
	}
}

// wait polls a JavaScript condition until it holds (up to a minute).
func (b *browser) wait(t *testing.T, what, cond string) {
	t.Helper()
	b.waitFor(t, time.Minute, what, cond)
}

func (b *browser) waitFor(t *testing.T, d time.Duration, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void]("(() => { try { return "+cond+"; } catch (e) { return false; } })()",
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		t.Fatalf("waiting for %s: %v\npage: %s", what, err, b.pageText())
	}
}

// eval waits for ready to hold, then returns expr as a string.
func (b *browser) eval(t *testing.T, expr, ready string) string {
	t.Helper()
	b.wait(t, "the page to show "+expr, ready)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string]("String("+expr+")"))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// pageText is what the page says, for failure messages.
func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 3000) : ""`))
	if err != nil {
		return "(could not read the page: " + err.Error() + ")"
	}
	return v
}

// shot saves a PNG of the element (the whole page for "body").
func (b *browser) shot(t *testing.T, name, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	var png []byte
	var err error
	if sel == "body" {
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	} else {
		png, err = chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	}
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// query is document.querySelector(sel) in JavaScript.
func query(sel string) string { return "document.querySelector(" + strconv.Quote(sel) + ")" }

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}
