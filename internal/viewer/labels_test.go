package viewer_test

import (
	"os"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/lab"
	"github.com/relmsg/ordersaga/pkg/aids/failpoint"
	"github.com/relmsg/ordersaga/pkg/aids/wrongway"

	// The services register their own failpoints at init.
	_ "github.com/relmsg/ordersaga/services/inventory/inventorysvc"
	_ "github.com/relmsg/ordersaga/services/order/ordersvc"
	_ "github.com/relmsg/ordersaga/services/payment-fake/paymentsvc"
)

// The lab's page names every experiment, wrong-way switch and failpoint in
// Chinese too: a new one without its label would show in English only.
func TestEveryLabNameHasAChineseLabel(t *testing.T) {
	src, err := os.ReadFile("static/i18n.js")
	if err != nil {
		t.Fatal(err)
	}
	table := func(name string) string {
		start := strings.Index(string(src), "const "+name+" = {")
		if start < 0 {
			t.Fatalf("i18n.js has no %s", name)
		}
		end := strings.Index(string(src[start:]), "\n};")
		return string(src[start : start+end])
	}
	experiments, switches, points := table("ZH_EXPERIMENTS"), table("ZH_WRONG_WAYS"), table("ZH_FAILPOINTS")
	for _, sc := range lab.Scenarios {
		i := strings.Index(experiments, `"`+sc.Name+`": {`)
		if i < 0 {
			t.Errorf("ZH_EXPERIMENTS has no %q", sc.Name)
			continue
		}
		entry, _, _ := strings.Cut(experiments[i:], "\n  },")
		for _, field := range []string{"title: ", "window: ", "holds: ", "held: "} {
			if !strings.Contains(entry, field) {
				t.Errorf("ZH_EXPERIMENTS[%q] has no %s", sc.Name, strings.TrimSuffix(field, ": "))
			}
		}
		if sc.WrongWay != "" && !strings.Contains(entry, "wrong: ") {
			t.Errorf("ZH_EXPERIMENTS[%q] has no wrong-way gist", sc.Name)
		}
	}
	for sw := range wrongway.All {
		if !strings.Contains(switches, `"`+string(sw)+`": `) {
			t.Errorf("ZH_WRONG_WAYS has no %q", sw)
		}
	}
	for _, p := range failpoint.Points {
		if !strings.Contains(points, `"`+p.Name+`": `) {
			t.Errorf("ZH_FAILPOINTS has no %q", p.Name)
		}
	}
}

// The page's Chinese uses the words of docs/zh/glossary.md: one word per
// concept. These are the words it used before, each the glossary's "do not
// use" for something (or a counter the lab no longer reads).
func TestChineseLabelsUseTheGlossaryTerms(t *testing.T) {
	src, err := os.ReadFile("static/i18n.js")
	if err != nil {
		t.Fatal(err)
	}
	zh := string(src[strings.Index(string(src), "\n  zh: {"):])
	for _, tc := range []struct{ drift, glossary string }{
		{"协同式", "事件协作式 Saga (choreography)"},
		{"兜底", "后备轮询 (the fallback poll)"},
		{"暂存", "持久化等待 (parked)"},
		{"发件箱", "outbox 行 (the chapter's outbox, 待发事件表)"},
		{"收件箱", "inbox 行 (the chapter's inbox, 去重表)"},
		{"故障点", "故障注入点 (failpoint)"},
		{"清理", "定时检查任务 (sweep)"},
		{"broker 重投", "重新投递 (the broker's redelivery; 重投 is the redrive of a dead letter)"},
		{"被重投，", "重新投递 (the broker's redelivery)"},
		{"outbox_claims_lost_total", "the order service's log line for A's claim token (what lease-expiry reads)"},
	} {
		if strings.Contains(zh, tc.drift) {
			t.Errorf("i18n.js's Chinese says %q: the glossary's word is %s", tc.drift, tc.glossary)
		}
	}
}
