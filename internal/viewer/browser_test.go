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
	// duplicate-window crashes the order service as a real process: build
	// the services' binaries now, so a cold build is not counted in the
	// wait for its verdict.
	sagatest.Binary(t, "order")
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

	var confirmed string // the order of the next subtest, for those after it
	t.Run("an order reaches confirmed with its outbox and inbox steps drawn", func(t *testing.T) {
		fillForm(t, b, "c-browser", "SKU-1", "2")
		confirmed = create(t, b)
		confirmedAndDrawn(t, b, confirmed)
	})

	t.Run("the tables as of each step are rebuilt from the story", func(t *testing.T) {
		replayFixture(t, b)
	})

	t.Run("step through an order: buttons, slider, keys, address", func(t *testing.T) {
		if confirmed == "" {
			t.Skip("no confirmed order: its subtest failed")
		}
		stepThrough(t, b, confirmed)
	})

	t.Run("an order's address survives a reload and works for whoever has the token", func(t *testing.T) {
		if confirmed == "" {
			t.Skip("no confirmed order: its subtest failed")
		}
		sharedLink(t, b, chrome, base, confirmed)
	})

	t.Run("the same key twice shows one order", func(t *testing.T) { sameKeyTwiceShowsOneOrder(t, b, s) })

	t.Run("atomic-commit's right way and wrong way side by side, the broken invariant marked", func(t *testing.T) {
		sideBySide(t, b, "atomic-commit")
		b.shot(t, "viewer-lab-side-by-side.png", ".runview")
		b.reload(t)
		b.wait(t, "the same pair after the reload", `document.querySelectorAll("#compare .side .verdict").length === 2 &&
			document.querySelector("#invariant.broken") !== null`)
	})

	t.Run("duplicate-window from the page shows its verdict", func(t *testing.T) { duplicateWindowFromThePage(t, b) })

	t.Run("the decline switch makes the next order cancelled, with the release drawn", func(t *testing.T) { declineSwitch(t, b) })

	t.Run("the language toggle changes the labels", func(t *testing.T) { languageToggle(t, b) })

	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged %d console error(s):\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
}

// sameKeyTwiceShowsOneOrder: the form sent twice with one idempotency key is
// one order, in the page and in the order service.
func sameKeyTwiceShowsOneOrder(t *testing.T, b *browser, s *sagatest.Saga) {
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
}

// duplicateWindowFromThePage runs the experiment from the lab panel: its
// verdict, its address (kept across a reload), and its order's timeline with
// the re-send and the dropped copy.
func duplicateWindowFromThePage(t *testing.T, b *browser) {
	runExperiment(t, b, "duplicate-window")
	b.wait(t, "the crash and restart step", `document.querySelector('#steps li[data-kind="restarted"]') !== null`)
	b.shot(t, "viewer-lab-duplicate-window.png", ".runview")
	// The run has an address, listed among the recent runs; a reload
	// shows the same run.
	run := b.eval(t, `document.querySelector("#run .runhead").dataset.run`, `document.querySelector("#run .runhead[data-run]") !== null`)
	b.wait(t, "the run's address, and its link in the list", `location.hash === "#/lab/runs/`+run+`" &&
		document.querySelector('#runs-list a[href="#/lab/runs/`+run+`"]') !== null`)
	b.reload(t)
	b.wait(t, "the same run and verdict after the reload",
		`document.querySelector('#run .runhead[data-run="`+run+`"][data-experiment="duplicate-window"]') !== null &&
		document.querySelector('#verdict[data-passed="true"]') !== null && document.querySelectorAll("#checks li").length > 0`)
	// The order it used opens in the timeline, with the re-send and the
	// copy the inbox dropped.
	b.clickUntil(t, "open its order", "#open-order", `location.hash.startsWith("#/orders/")`)
	b.wait(t, "the re-sent OrderCreated drawn", `document.querySelector('#diagram g.step[data-kind="outbox.sent"][data-resent="true"]') !== null &&
		document.querySelector('#diagram g.step[data-kind="inbox.duplicate"][data-dropped="true"]') !== null`)
	b.wait(t, "the timeline to settle", `document.querySelector("#live.off") !== null`)
	b.shot(t, "viewer-timeline-duplicate.png", ".timeline")
}

// declineSwitch sets the PSP to decline one call from the switches tab; the
// next order ends cancelled with its stock released.
func declineSwitch(t *testing.T, b *browser) {
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
	fillForm(t, b, "c-declined", "SKU-3", "1")
	create(t, b)
	b.wait(t, "the order cancelled", `document.querySelector("#timeline-head .pill") && document.querySelector("#timeline-head .pill").dataset.status === "cancelled"`)
	b.wait(t, "the declined charge and the release drawn",
		`document.querySelector('#diagram g.step[data-kind="psp.charge"][data-status="declined"]') !== null &&
		 document.querySelector('#diagram g.step[data-kind="reservation.updated"][data-status="released"]') !== null &&
		 document.querySelector('#diagram g.step[data-kind="order.transition"][data-status="cancelled"]') !== null`)
	b.wait(t, "the timeline to settle", `document.querySelector("#live.off") !== null`)
	b.shot(t, "viewer-timeline-cancelled.png", ".timeline")
}

// languageToggle switches the page to Chinese and back.
func languageToggle(t *testing.T, b *browser) {
	before := b.eval(t, `document.querySelector('.tab[data-tab="lab"]').textContent`, `true`)
	b.do(t, "switch language", chromedp.Click(chromedp.CSS("#lang-toggle")))
	b.wait(t, "Chinese labels", `document.documentElement.lang === "zh-CN" &&
		document.querySelector('.tab[data-tab="lab"]').textContent === "故障实验室" &&
		document.querySelector("#create").textContent === "创建订单" &&
		document.querySelector("#diagram .lanename").textContent === "订单服务" &&
		document.querySelector("#step-label").textContent.startsWith("第 ") &&
		document.querySelector("#asof > summary").textContent === "这一步之后的表和队列"`)
	b.shot(t, "viewer-zh.png", "body")
	b.do(t, "switch back", chromedp.Click(chromedp.CSS("#lang-toggle")))
	b.wait(t, "English labels again", `document.querySelector('.tab[data-tab="lab"]').textContent === `+jsString(before))
}

// confirmedAndDrawn waits for order id to end confirmed with the whole
// saga drawn in the timeline, and looks at one step's record.
func confirmedAndDrawn(t *testing.T, b *browser, id string) {
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
	// A click moved the step-through to that step; back to the last.
	b.do(t, "back to the last step", chromedp.Click(chromedp.CSS("#step-last")))
	b.wait(t, "no step faded", `document.querySelectorAll("#diagram g.step.future").length === 0`)
	b.shot(t, "viewer-timeline-confirmed.png", "body")
}

// fillForm fills the create form with one line.
func fillForm(t *testing.T, b *browser, customer, sku, qty string) {
	t.Helper()
	b.do(t, "fill the form",
		chromedp.SetValue(chromedp.CSS("#customer"), customer),
		chromedp.SetValue(chromedp.CSS("select.sku"), sku),
		chromedp.SetValue(chromedp.CSS("input.qty"), qty),
	)
}

// sideBySide runs an experiment's right way and wrong way as a pair from
// the lab panel and waits for both verdicts: the right way held, the wrong
// way showed its anomaly, and the page marks the invariant it broke.
func sideBySide(t *testing.T, b *browser, name string) {
	t.Helper()
	b.do(t, "open the lab", chromedp.Click(chromedp.CSS(`.tab[data-tab="lab"]`)))
	b.do(t, "run "+name+" both ways", chromedp.Click(chromedp.CSS(`#experiments li[data-experiment="`+name+`"] button.both`)))
	b.waitFor(t, 4*time.Minute, name+"'s two verdicts",
		`document.querySelector('#run .comparehead[data-experiment="`+name+`"]') !== null && document.querySelectorAll("#compare .side .verdict").length === 2`)
	for _, side := range []string{"right", "wrong"} {
		if passed := b.eval(t, `document.querySelector("#compare .side.`+side+` .verdict").dataset.passed`, `true`); passed != "true" {
			t.Fatalf("%s's %s way did not pass in the page:\n%s", name, side, b.eval(t, `document.querySelector("#run").innerText`, `true`))
		}
	}
	b.wait(t, "the address of the pair", `/^#\/lab\/compare\/\d+\/\d+$/.test(location.hash)`)
	b.wait(t, "the invariant held by the right way and broken by the wrong way",
		`document.querySelector('#invariant.broken[data-held="true"][data-broken="true"]') !== null &&
		 document.querySelectorAll("#compare .side.wrong .checks li.broken").length > 0 &&
		 document.querySelectorAll("#compare .side.right .checks li.invariant").length > 0 &&
		 document.querySelectorAll("#compare .side.right .checks li.fail").length === 0`)
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
	if err := b.poll(d, cond); err != nil {
		t.Fatalf("waiting for %s: %v\npage: %s", what, err, b.pageText())
	}
}

// poll returns nil once cond holds, or the error of the last try after d.
func (b *browser) poll(d time.Duration, cond string) error {
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(d)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void]("(() => { try { return "+cond+"; } catch (e) { return false; } })()",
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil || !navigated(err) || !time.Now().Before(deadline) {
			return err
		}
		// A page that navigates (a form that reloads it) takes its
		// JavaScript context with it: poll the next one.
		time.Sleep(100 * time.Millisecond)
	}
}

// navigated tells the errors of a poll that met a page on its way to the
// next document (a form that reloads it, a new address).
func navigated(err error) bool {
	for _, s := range []string{"Cannot find context", "Inspected target navigated or closed", "Execution context was destroyed"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// clickUntil clicks sel until cond holds: the page redraws a lab run while
// it polls it, and a click that lands on the element being replaced is
// lost. Up to a minute in all.
func (b *browser) clickUntil(t *testing.T, what, sel, cond string) {
	t.Helper()
	var err error
	for range 6 {
		b.do(t, what, chromedp.Click(chromedp.CSS(sel)))
		if err = b.poll(10*time.Second, cond); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v\npage: %s", what, err, b.pageText())
}

// reload reloads the page and waits for it to start again, at the same
// address.
func (b *browser) reload(t *testing.T) {
	t.Helper()
	addr := b.eval(t, `location.href`, `true`)
	b.do(t, "reload", chromedp.Evaluate[chromedp.Void](`window.beforeReload = true`), chromedp.Reload())
	b.wait(t, "the page again after the reload, at "+addr, `window.beforeReload === undefined && document.body.dataset.ready === "true" &&
		location.href === `+jsString(addr))
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
	// What the tab on screen says first (a lab run's steps and checks,
	// the timeline), then the rest of the page.
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		if (!document.body) return "";
		const first = ["#lab-message", "#run", "#create-result", "#timeline-head", "#step-label"]
			.map((s) => document.querySelector(s)).filter((e) => e && e.offsetParent !== null).map((e) => e.innerText).join("\n");
		return ("address: " + location.hash + "\n" + first + "\n---\n" + document.body.innerText).slice(0, 5000);
	})()`))
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
