package main

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestWrapKeepsLinesInsideTheWidth(t *testing.T) {
	for _, text := range []string{
		"Dispatcher A's publish hangs and its lease expires; recovery hands the event to B. A comes back while B is still publishing and marks the row sent.",
		"dispatcher A 发布时卡住，租约过期，恢复任务把事件交给了 B。A 在 B 还在发布时恢复过来，把这一行标记为 sent：A 覆盖了 B 的认领，B 去标记时发现自己的认领没了。",
	} {
		got := wrap(text, "  ", 40)
		var joined strings.Builder
		for _, line := range strings.Split(got, "\n") {
			cols := 0
			for _, r := range line {
				cols++
				if wide(r) {
					cols++
				}
			}
			if cols > 40 || !strings.HasPrefix(line, "  ") {
				t.Errorf("line %q: %d columns, want at most 40 after the indent", line, cols)
			}
			joined.WriteString(strings.TrimPrefix(line, "  "))
		}
		squeeze := func(s string) string { return strings.ReplaceAll(s, " ", "") }
		if squeeze(joined.String()) != squeeze(text) || !utf8.ValidString(got) {
			t.Errorf("wrap lost text:\n%s\nwant %s", got, text)
		}
	}
}

func TestLanguageFollowsTheLocale(t *testing.T) {
	for env, want := range map[string]string{"zh_CN.UTF-8": "zh", "en_US.UTF-8": "en", "C.UTF-8": "en", "": "en"} {
		got := language(func(k string) string {
			if k == "LANG" {
				return env
			}
			return ""
		})
		if got != want {
			t.Errorf("LANG=%q: %s, want %s", env, got, want)
		}
	}
}

// Every message has both languages, with the same verbs in the same
// number, so a reader of either gets the same facts.
func TestMessagesHaveBothLanguages(t *testing.T) {
	for id, m := range messages {
		if m.en == "" || m.zh == "" {
			t.Errorf("message %s: missing a language", id)
		}
		if en, zh := strings.Count(m.en, "%"), strings.Count(m.zh, "%"); en != zh {
			t.Errorf("message %s: %d verbs in English, %d in Chinese", id, en, zh)
		}
	}
}
