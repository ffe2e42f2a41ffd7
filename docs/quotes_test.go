package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/relmsg/ordersaga/internal/lab"
)

// The guides quote the lab's output so a reader can search for it in the
// terminal. Every quote must be something the lab prints today:
//
//   - in a fenced block that holds a lab report (a "[ok  ]" or "[FAIL]"
//     check line, or an "=== <experiment>:" header), every check line, the
//     header, every "--- " section title, every table title and the
//     verdict;
//   - on a line that tells the reader what to look for ("- Look at:",
//     "- Look:", "- 看什么：", "- 观察："), every backticked span that reads
//     as output rather than a name or a command: words with spaces
//     ("the inbox dropped it"), or a before/after detail ("0 -> 1"); such
//     a span may be part of a printed line, as a search in the terminal
//     finds it.
//
// A check line is found among lab.Labels (its claim, then ": " and its
// evidence, with the evidence's values free); everything else among the
// string expressions of internal/lab and cmd/lab, and what the tests of
// experiments/ log, read from their source.
// "..." or "…" in a quote stands for text left out.

// quoted are the files whose quotes are checked: the READMEs and every page
// under docs/.
func quoted(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "README.zh-CN.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// A quote found in a guide, where it is.
type quote struct {
	where string // file:line
	text  string
	kind  string // "check", "header", "section", "verdict", "table", "span"
}

var (
	checkLine   = regexp.MustCompile(`^\s*\[(ok  |FAIL)\] (.+)$`)
	headerLine  = regexp.MustCompile(`^=== ([a-z0-9-]+): (.+)$`)
	sectionLine = regexp.MustCompile(`^--- (.+)$`)
	verdictLine = regexp.MustCompile(`^verdict \((PASSED|FAILED) in [^)]*\): (.+)$`)
	tableTitle  = regexp.MustCompile(`^  ([^ \[].*)$`) // two spaces: a table's title; rows are indented four
	lookLabel   = regexp.MustCompile(`^- (Look at|Look|看什么|观察)[:：]`)
	elision     = regexp.MustCompile(`\.\.\.|…`)
	outputWord  = regexp.MustCompile(`^([a-z][a-z']*|[A-Z]|[A-Z][a-z']+):?$`) // "the", "anomaly:", "B", "The"; not "SELECT"
)

// quotesIn finds the quotes of lab output in one markdown file.
func quotesIn(file, text string) []quote {
	var out []quote
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "```") {
			end := i + 1
			for end < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[end]), "```") {
				end++
			}
			out = append(out, reportQuotes(file, i+1, lines[i+1:min(end, len(lines))])...)
			i = end
			continue
		}
		if lookLabel.MatchString(lines[i]) {
			// The item runs on over its indented continuation lines.
			end := i + 1
			for end < len(lines) && strings.HasPrefix(lines[end], "  ") && !strings.HasPrefix(strings.TrimSpace(lines[end]), "```") {
				end++
			}
			out = append(out, spanQuotes(file, i, lines[i:end])...)
			i = end - 1
		}
	}
	return out
}

// reportQuotes finds the quotes in a fenced block (its lines start at line
// first, 0-based), if the block holds a lab report.
func reportQuotes(file string, first int, block []string) []quote {
	report := false
	for _, l := range block {
		if checkLine.MatchString(l) || headerLine.MatchString(l) {
			report = true
		}
	}
	if !report {
		return nil
	}
	var out []quote
	for k, l := range block {
		where := fmt.Sprintf("%s:%d", file, first+k+1)
		switch {
		case checkLine.MatchString(l):
			out = append(out, quote{where, checkLine.FindStringSubmatch(l)[2], "check"})
		case headerLine.MatchString(l):
			out = append(out, quote{where, strings.TrimPrefix(l, "=== "), "header"})
		case verdictLine.MatchString(l):
			out = append(out, quote{where, verdictLine.FindStringSubmatch(l)[2], "verdict"})
		case sectionLine.MatchString(l):
			out = append(out, quote{where, sectionLine.FindStringSubmatch(l)[1], "section"})
		case tableTitle.MatchString(l) && strings.TrimSpace(l) != "..." && strings.TrimSpace(l) != "…":
			out = append(out, quote{where, strings.TrimSpace(l), "table"})
		}
	}
	return out
}

// spanQuotes finds the backticked spans of a look item (its lines start at
// line first, 0-based) that read as output.
func spanQuotes(file string, first int, item []string) []quote {
	text := strings.Join(item, "\n")
	var out []quote
	for _, m := range backticked.FindAllStringSubmatchIndex(text, -1) {
		sp := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
		if !readsAsOutput(sp) {
			continue
		}
		line := first + strings.Count(text[:m[0]], "\n") + 1
		out = append(out, quote{fmt.Sprintf("%s:%d", file, line), sp, "span"})
	}
	return out
}

// readsAsOutput tells a quote of output from a name, a value, a command or
// SQL: words with spaces starting with a word of letters, or a before/after
// detail.
func readsAsOutput(sp string) bool {
	if strings.Contains(sp, " -> ") {
		return true
	}
	first, _, spaced := strings.Cut(sp, " ")
	return spaced && outputWord.MatchString(first) && !strings.ContainsAny(sp, "=+{}<>?*/\"")
}

// pattern is a text some of whose parts are free: a fmt verb of the lab's
// source, a value computed at run time, or an elision of a quote.
type pattern struct {
	parts []string // literal, free, literal, free, ...: even indexes literal
}

// skeleton is the text with each free part one wild rune.
func (p pattern) skeleton() string {
	var b strings.Builder
	for i, s := range p.parts {
		if i%2 == 0 {
			b.WriteString(s)
		} else {
			b.WriteRune(wild)
		}
	}
	return b.String()
}

// literal is how much of p is fixed text.
func (p pattern) literal() int {
	n := 0
	for i := 0; i < len(p.parts); i += 2 {
		n += len(strings.TrimSpace(p.parts[i]))
	}
	return n
}

var verb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z]`)

// formatPattern is the pattern of a fmt format: each verb is free.
func formatPattern(f string) pattern {
	var p pattern
	rest := strings.ReplaceAll(f, "%%", "\x01")
	last := 0
	for _, loc := range verb.FindAllStringIndex(rest, -1) {
		p.parts = append(p.parts, strings.ReplaceAll(rest[last:loc[0]], "\x01", "%"), "")
		last = loc[1]
	}
	p.parts = append(p.parts, strings.ReplaceAll(rest[last:], "\x01", "%"))
	return p
}

// quotePattern is the pattern of a quote: each elision is free.
func quotePattern(q string) pattern {
	var p pattern
	last := 0
	for _, loc := range elision.FindAllStringIndex(q, -1) {
		p.parts = append(p.parts, q[last:loc[0]], "")
		last = loc[1]
	}
	p.parts = append(p.parts, q[last:])
	return p
}

// concat joins patterns: the free part between two is merged.
func concat(ps ...pattern) pattern {
	var out pattern
	for _, p := range ps {
		if len(out.parts) == 0 {
			out.parts = append(out.parts, p.parts...)
			continue
		}
		out.parts[len(out.parts)-1] += p.parts[0]
		out.parts = append(out.parts, p.parts[1:]...)
	}
	return out
}

var free = pattern{parts: []string{"", "", ""}}

// wild stands for a free part in a skeleton.
const wild = '\x00'

// entry is a pattern made ready for matching: its skeleton, as text and
// as runes, and the words of its fixed text.
type entry struct {
	sk    string
	runes []rune
	words []string
}

var word = regexp.MustCompile(`[A-Za-z_']{4,}`)

func prepare(p pattern) entry {
	sk := p.skeleton()
	return entry{sk: sk, runes: []rune(sk), words: word.FindAllString(sk, -1)}
}

func prepareAll(ps []pattern) []entry {
	out := make([]entry, len(ps))
	for i, p := range ps {
		out[i] = prepare(p)
	}
	return out
}

// agree reports whether quote q can be what pattern p prints: some text
// fits both, each free part of either taking what the other has there.
// With oneWord, a free part of p (a value) takes no space of q's text: a
// quote in prose cannot hide a claim the lab never makes in a value.
func agree(q, p entry, oneWord bool) bool {
	return shareWord(q, p) && intersect(q.runes, p.runes, oneWord)
}

// within reports whether quote q, wrapped in free parts (qw), can be found
// in what p prints, as a reader searches the terminal for it; p's values
// are one word each.
func within(q, qw, p entry) bool {
	return shareWord(q, p) && intersect(qw.runes, p.runes, true)
}

// shareWord is a quick first test: a quote and a pattern that can agree
// share a word of q's fixed text (or q has none).
func shareWord(q, p entry) bool {
	if len(q.words) == 0 {
		return true
	}
	for _, w := range q.words {
		if strings.Contains(p.sk, w) {
			return true
		}
	}
	return false
}

// intersect reports whether some text matches both a and b, two texts in
// which wild stands for any run of characters; with oneWord, a wild of b
// takes no space of a.
func intersect(a, b []rune, oneWord bool) bool {
	la, lb := len(a), len(b)
	// next[j], cur[j]: a[i+1:] (next) or a[i:] (cur) and b[j:] can match
	// the same text; rows from the end of a to its start.
	next, cur := make([]bool, lb+1), make([]bool, lb+1)
	for i := la; i >= 0; i-- {
		for j := lb; j >= 0; j-- {
			if i == la && j == lb {
				cur[j] = true
				continue
			}
			ok := false
			if i < la && a[i] == wild {
				ok = next[j] || (j < lb && cur[j+1])
			}
			if !ok && j < lb && b[j] == wild {
				ok = cur[j+1] || (i < la && !(oneWord && a[i] == ' ') && next[j])
			}
			if !ok && i < la && j < lb && a[i] != wild && b[j] != wild && a[i] == b[j] {
				ok = next[j+1]
			}
			cur[j] = ok
		}
		next, cur = cur, next
	}
	return next[0]
}

// vocabulary is what the lab prints: its checks (claim, claim and
// evidence), its scenarios' headers, and every string expression of its
// source that has enough fixed text to be told apart.
type vocabulary struct {
	checks  []entry // "<what>: <detail>"
	claims  []entry // "<what>"
	headers []entry
	texts   []entry
}

func labVocabulary(t *testing.T) vocabulary {
	t.Helper()
	var claims, checks, headers, texts []pattern
	for _, l := range lab.Labels() {
		what := formatPattern(l.What)
		claims = append(claims, what)
		checks = append(checks, concat(what, formatPattern(": "+l.Detail)))
	}
	for _, s := range lab.Scenarios {
		h := s.Name + ": " + s.Title + ": " + s.Window + " -> " + s.Holds
		headers = append(headers, quotePattern(h))
		if s.WrongWay != "" {
			headers = append(headers, quotePattern(h+"  [wrong way: "+string(s.WrongWay)+"]"))
		}
	}
	for _, dir := range []string{"internal/lab", "cmd/lab"} {
		texts = append(texts, sourceTexts(t, dir, false)...)
	}
	// The tests of experiments/ are run by readers too (the map's three
	// rules): what they log is output a guide may quote.
	texts = append(texts, sourceTexts(t, "experiments", true)...)
	return vocabulary{checks: prepareAll(checks), claims: prepareAll(claims), headers: prepareAll(headers), texts: prepareAll(texts)}
}

// sourceTexts reads the string expressions of a package's source (its
// tests too if tests): string literals, and concatenations of them with
// computed values (free).
func sourceTexts(t *testing.T, dir string, tests bool) []pattern {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
	fset := token.NewFileSet()
	var out []pattern
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") && !tests {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			e, ok := n.(ast.Expr)
			if !ok {
				return true
			}
			p, ok := stringPattern(e)
			if !ok {
				return true
			}
			if p.literal() >= 8 {
				out = append(out, p)
			}
			return false // its parts are in it
		})
	}
	return out
}

// stringPattern is the pattern of a string expression: a literal (its fmt
// verbs free), or a + chain with at least one literal (the rest free).
func stringPattern(e ast.Expr) (pattern, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return pattern{}, false
		}
		s, err := strconv.Unquote(e.Value)
		if err != nil {
			return pattern{}, false
		}
		return formatPattern(s), true
	case *ast.ParenExpr:
		return stringPattern(e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return pattern{}, false
		}
		x, okx := stringPattern(e.X)
		y, oky := stringPattern(e.Y)
		switch {
		case okx && oky:
			return concat(x, y), true
		case okx:
			return concat(x, free), true
		case oky:
			return concat(free, y), true
		}
	}
	return pattern{}, false
}

// finds reports whether v holds something that agrees with quote q.
func (v vocabulary) finds(q quote) bool {
	qp := quotePattern(q.text)
	qe, qw := prepare(qp), prepare(concat(free, qp, free))
	var lists [][]entry
	switch q.kind {
	case "check":
		lists = [][]entry{v.checks}
	case "header":
		lists = [][]entry{v.headers}
	case "section":
		if q.text == "checks" {
			return true
		}
		lists = [][]entry{v.texts}
	default: // verdict, table, span
		lists = [][]entry{v.claims, v.checks, v.texts}
	}
	for _, list := range lists {
		for _, p := range list {
			// A quote in prose may be part of a line; a quoted line is whole.
			if agree(qe, p, q.kind == "span") || (q.kind == "span" && within(qe, qw, p)) {
				return true
			}
		}
	}
	return false
}

// Every quote of lab output in the guides is what the lab prints today.
func TestQuotedOutputIsWhatTheLabPrints(t *testing.T) {
	v := labVocabulary(t)
	n := 0
	for _, file := range quoted(t) {
		for _, q := range quotesIn(file, read(t, file)) {
			n++
			if !v.finds(q) {
				t.Errorf("%s: the lab prints no such %s: %q", q.where, kindName(q.kind), q.text)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no quote of lab output at all: the parser is broken")
	}
	t.Logf("%d quotes of lab output checked", n)
}

func kindName(kind string) string {
	switch kind {
	case "check":
		return "check line (internal/lab/labels.go)"
	case "header":
		return "experiment header (lab.Scenarios)"
	case "span":
		return "output (a check, a section, a verdict or a wait of internal/lab)"
	}
	return kind + " (internal/lab, cmd/lab)"
}

// The quote finder and the matcher, on made-up docs.
func TestQuoteMatching(t *testing.T) {
	v := vocabulary{
		checks: prepareAll([]pattern{formatPattern("the inbox dropped it: inventory's log for event %s: processed %d time(s), %d copy(ies) dropped as duplicates"),
			formatPattern("B re-claimed after A's lease expired: claim %s replaced %s, attempt %d")}),
		claims: prepareAll([]pattern{formatPattern("the inbox dropped it"), formatPattern("B re-claimed after A's lease expired")}),
		texts:  prepareAll([]pattern{concat(formatPattern("held: one local transaction ("), free, formatPattern(") rolled back"))}),
	}
	doc := strings.Join([]string{
		"- Look at: `the inbox dropped it` and `B re-claimed after A's lease expired: claim ... replaced ...`,",
		"  then `stock taken once` and `outbox_claims_lost_total 0 -> 1` and `A's lease expired`; not `scripts/experiment.sh ack-lost`,",
		"  `claim_token` or `WHERE status = 'sending'`.",
		"",
		"```",
		"  [ok  ] the inbox dropped it: inventory's log for event 01a2…37b9: processed 1 time(s), 1 copy(ies) dropped as duplicates",
		"  [ok  ] the inbox dropped the second delivery: consumer_duplicates_suppressed_total{inventory} 0 -> 1",
		"verdict (PASSED in 6.12s): held: one local transaction (orders + outbox_events) rolled back",
		"```",
	}, "\n")
	var got []string
	for _, q := range quotesIn("x.md", doc) {
		got = append(got, fmt.Sprintf("%s %s %v", q.where, q.kind, v.finds(q)))
	}
	want := []string{
		"x.md:1 span true", "x.md:1 span true", "x.md:2 span false", "x.md:2 span false", "x.md:2 span true",
		"x.md:6 check true", "x.md:7 check false", "x.md:8 verdict true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("quotes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
