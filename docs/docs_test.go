// Package docs_test keeps the guides honest. The course maps
// (docs/course-map.md, docs/zh/course-map.md) and the answers to the
// chapter's questions (docs/questions.md, docs/zh/questions.md) send a reader
// from a paragraph of the chapter to a file, a function, a test and a lab
// command; these tests fail as soon as one of them no longer exists, so the
// maps cannot rot while the code moves.
//
// What the maps may cite, and how each kind is checked:
//
//   - a path (`pkg/outbox/store.go`, `pkg/inbox/`): the file or directory
//     exists;
//   - a declaration written right after its path, separated by a space
//     only (`pkg/outbox/store.go` `claim` `markSent`): a func, method
//     (Type.Method), type, const or var of that name in that file, or in
//     the package of that directory; on a "Code" line every name must be
//     written so;
//   - a test (`TestConcurrentDispatchersNeverOverlap`): a func of that name
//     in a _test.go file of the repository;
//   - a lab command (`scripts/experiment.sh -wrong-way lease-expiry`): an
//     experiment internal/lab registers, with a wrong-way switch when the
//     command asks for one;
//   - an exercise command (`scripts/exercise.sh grade 3`): an exercise of
//     that number in exercises/;
//   - a link ([the lab](failure-lab.md#the-experiments)): the target file
//     exists and so does the heading the anchor names.
package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/relmsg/ordersaga/internal/exercise"
	"github.com/relmsg/ordersaga/internal/lab"
)

// root is the repository, seen from this package's directory.
const root = ".."

// The chapter's sections, in its order, with their headings as the chapter
// writes them: each course map has one "## " section per entry, in this
// order.
var chapterSections = []string{
	"先看问题：订单存在，库存却没处理",
	"先分清四种保证",
	"Outbox：把发送意图变成本地数据",
	"事件需要什么字段",
	"多个 dispatcher 怎么认领",
	"什么时候标记 sent",
	"崩溃之后怎么恢复",
	"Inbox：业务修改与去重记录一起提交",
	"三个 ACK 坑",
	"重复、乱序与重试是不同问题",
	"去重解决不了乱序",
	"有限重试与死信",
	"Saga：补偿是一笔新业务",
	"对账：验证业务闭环",
	"本地故障实验：先定义断言",
}

// The chapter's questions: the four its saga section says must be answered
// (必须回答), then its eight interview questions (面试问答). Each answers
// file has one "### " heading per question, in this order, that contains it.
var chapterQuestions = []string{
	"正向操作与补偿操作分别用什么幂等键？",
	"扣款超时结果未知时，如何查询，而不是直接取消？",
	"库存租约到期释放后，迟到的扣款成功如何处理？",
	"补偿失败谁重试，超过业务时限谁接管？",
	"为什么「先写库再发消息」和「先发消息再写库」都不行？",
	"Outbox 表有哪些关键字段？分别防什么问题？",
	"多个 dispatcher 并发扫表，怎么保证不出乱子？",
	"消费端为什么不能「先查去重表，不存在再处理」？正确的幂等怎么写？",
	"重试和死信怎么设计，才不会把消费者拖死？",
	"Outbox 把事件写进队列就万事大吉了吗？为什么消费端还要 inbox？",
	"分布式锁能替代这套机制吗？能不能干脆同步调用？",
	"幂等之后是不是就可以随便重试了？",
}

// A map in one language: its files and the labels of its lines.
type guide struct {
	courseMap, questions string
	rule, code, tests    string // line labels ("- Code:" is "- " + code + sep)
	lab, look, answer    string
}

var guides = []guide{
	{courseMap: "docs/course-map.md", questions: "docs/questions.md",
		rule: "Rule", code: "Code", tests: "Tests", lab: "Lab", look: "Look at", answer: "Answer"},
	{courseMap: "docs/zh/course-map.md", questions: "docs/zh/questions.md",
		rule: "规则", code: "代码", tests: "测试", lab: "实验", look: "看什么", answer: "回答"},
}

// The guides whose every backticked path, test and lab command is checked,
// and whose links are followed.
var checked = []string{
	"README.md", "README.zh-CN.md",
	"docs/course-map.md", "docs/questions.md", "docs/design.md", "docs/failure-lab.md",
	"docs/failure-windows.md", "docs/operations.md", "docs/walkthrough.md",
	"docs/zh/course-map.md", "docs/zh/questions.md", "docs/zh/glossary.md", "docs/zh/departures.md",
	"docs/learning-path.md", "docs/zh/learning-path.md", "docs/alternatives.md", "docs/zh/alternatives.md",
	"docs/security.md", "docs/zh/security.md", "docs/tracing.md", "docs/zh/tracing.md",
	"docs/exercises.md", "docs/zh/exercises.md",
}

// The other documents, whose links are followed too.
var linked = append([]string{"docs/contract.md", "docs/viewer.md", "docs/chaos.md", "docs/performance.md"}, checked...)

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

// section is one "## " (or "### ") part of a markdown file.
type section struct {
	heading string
	lines   []string
}

func sections(text, marker string) []section {
	var out []section
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, marker) {
			out = append(out, section{heading: strings.TrimSpace(strings.TrimPrefix(line, marker))})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].lines = append(out[len(out)-1].lines, line)
		}
	}
	return out
}

// labelled returns the lines of s that start with "- <label>:" (or the
// full-width colon), without the label.
func (s section) labelled(label string) []string {
	var out []string
	for _, line := range s.lines {
		for _, sep := range []string{":", "："} {
			if rest, ok := strings.CutPrefix(line, "- "+label+sep); ok {
				out = append(out, strings.TrimSpace(rest))
			}
		}
	}
	return out
}

var backticked = regexp.MustCompile("`([^`]+)`")

func spans(line string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(line, -1) {
		out = append(out, m[1])
	}
	return out
}

// Each course map has the chapter's sections in order, and each section
// names the rule, the code, the tests, the lab and what to look at.
func TestCourseMapsFollowTheChapter(t *testing.T) {
	for _, g := range guides {
		secs := sections(read(t, g.courseMap), "## ")
		var headings []string
		for _, s := range secs {
			headings = append(headings, s.heading)
		}
		// The map may have parts of its own after the chapter's sections.
		if len(headings) < len(chapterSections) || !slices.Equal(headings[:len(chapterSections)], chapterSections) {
			t.Errorf("%s: the \"## \" headings must be the chapter's %d sections in order, then anything else\n got: %q\nwant: %q",
				g.courseMap, len(chapterSections), headings, chapterSections)
			continue
		}
		for _, s := range secs[:len(chapterSections)] {
			for _, label := range []string{g.rule, g.code, g.tests, g.lab, g.look} {
				if len(s.labelled(label)) == 0 {
					t.Errorf("%s, %s: no \"- %s:\" line", g.courseMap, s.heading, label)
				}
			}
			var tests []string
			for _, l := range s.labelled(g.tests) {
				tests = append(tests, spans(l)...)
			}
			if len(tests) == 0 {
				t.Errorf("%s, %s: the %s line names no test", g.courseMap, s.heading, g.tests)
			}
			var code []string
			for _, l := range s.labelled(g.code) {
				code = append(code, spans(l)...)
			}
			if len(code) == 0 {
				t.Errorf("%s, %s: the %s line names no file", g.courseMap, s.heading, g.code)
			}
		}
	}
}

// Each answers file answers the chapter's twelve questions in order, each
// with something the reader can run: a test or a lab command.
func TestQuestionsAreAnsweredInOrder(t *testing.T) {
	for _, g := range guides {
		secs := sections(read(t, g.questions), "### ")
		if len(secs) != len(chapterQuestions) {
			t.Errorf("%s: %d questions (### headings), want the chapter's %d", g.questions, len(secs), len(chapterQuestions))
			continue
		}
		for i, s := range secs {
			if !strings.Contains(s.heading, chapterQuestions[i]) {
				t.Errorf("%s: question %d is %q, want the chapter's %q", g.questions, i+1, s.heading, chapterQuestions[i])
			}
			if len(s.labelled(g.answer)) == 0 {
				t.Errorf("%s, %s: no \"- %s:\" line", g.questions, chapterQuestions[i], g.answer)
			}
			runnable := 0
			for _, label := range []string{g.tests, g.lab} {
				for _, l := range s.labelled(label) {
					for _, sp := range spans(l) {
						if testName.MatchString(sp) || labCommand.MatchString(sp) {
							runnable++
						}
					}
				}
			}
			if runnable == 0 {
				t.Errorf("%s, %s: no test or lab command to run", g.questions, chapterQuestions[i])
			}
		}
	}
}

var (
	repoPath   = regexp.MustCompile(`^(pkg|services|internal|cmd|e2e|experiments|exercises|migrations|deploy|scripts|docs|bench)/[^\s*{}<>]*$`)
	testName   = regexp.MustCompile(`^(Test|Example|Benchmark)[A-Za-z0-9_]*$`)
	labCommand = regexp.MustCompile(`^scripts/experiment\.sh (-wrong-way )?([a-z0-9-]+)$`)
	exCommand  = regexp.MustCompile(`^scripts/exercise\.sh (start|hint|grade|reset) ([0-9]+)( -zh)?$`)
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
)

// Every path, test and lab command the guides cite exists, and so does
// every declaration written right after its path.
func TestCitedCodeExists(t *testing.T) {
	tests := testFuncs(t)
	codeLabels := map[string]bool{}
	for _, g := range guides {
		codeLabels[g.code] = true
	}
	for _, file := range checked {
		text := read(t, file)
		for n, line := range strings.Split(text, "\n") {
			where := fmt.Sprintf("%s:%d", file, n+1)
			for _, sp := range spans(line) {
				checkSpan(t, where, sp, tests)
			}
			inRuns := checkDeclarations(t, where, line)
			if label, rest, ok := codeLine(line); ok && codeLabels[label] {
				// On a Code line every name must follow its path.
				for _, sp := range spans(rest) {
					if !repoPath.MatchString(sp) && identifier.MatchString(sp) && !inRuns[sp] {
						t.Errorf("%s: `%s` must come right after the path that declares it", where, sp)
					}
				}
			}
		}
	}
}

func codeLine(line string) (label, rest string, ok bool) {
	body, ok := strings.CutPrefix(line, "- ")
	if !ok {
		return "", "", false
	}
	for _, sep := range []string{":", "："} {
		if label, rest, ok := strings.Cut(body, sep); ok && !strings.Contains(label, "`") {
			return label, rest, true
		}
	}
	return "", "", false
}

func checkSpan(t *testing.T, where, sp string, tests map[string]bool) {
	t.Helper()
	switch {
	case labCommand.MatchString(sp):
		m := labCommand.FindStringSubmatch(sp)
		name, wrong := m[2], m[1] != ""
		if name == "list" || name == "all" {
			return
		}
		s, ok := lab.Find(name)
		switch {
		case !ok:
			t.Errorf("%s: `%s`: internal/lab registers no experiment %q", where, sp, name)
		case wrong && s.WrongWay == "":
			t.Errorf("%s: `%s`: experiment %q has no wrong-way switch", where, sp, name)
		}
	case exCommand.MatchString(sp):
		n, _ := strconv.Atoi(exCommand.FindStringSubmatch(sp)[2])
		if _, err := exercise.Find(root, n); err != nil {
			t.Errorf("%s: `%s`: %v", where, sp, err)
		}
	case strings.HasPrefix(sp, "go test ") || strings.HasPrefix(sp, "scripts/test.sh "):
		for _, f := range strings.Fields(sp) {
			if dir, ok := strings.CutPrefix(f, "./"); ok && !strings.Contains(dir, "<") {
				dir = strings.TrimSuffix(strings.TrimSuffix(dir, "..."), "/")
				if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
					t.Errorf("%s: `%s`: no package %s", where, sp, f)
				}
			}
		}
	case repoPath.MatchString(sp):
		if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(sp, "/..."))); err != nil {
			t.Errorf("%s: `%s`: no such file or directory", where, sp)
		}
	case testName.MatchString(sp) && sp != "Test" && sp != "Example":
		if !tests[sp] {
			t.Errorf("%s: `%s`: no test of that name in the repository", where, sp)
		}
	}
}

// A run is backticked spans separated by single spaces: `path` `Name` `Name`.
var run = regexp.MustCompile("`[^`]+`(?: `[^`]+`)*")

// checkDeclarations checks every run of line that starts with a path: the
// names after it must be declared in that file or package. It returns the
// names it checked.
func checkDeclarations(t *testing.T, where, line string) map[string]bool {
	t.Helper()
	checked := map[string]bool{}
	for _, r := range run.FindAllString(line, -1) {
		sps := spans(r)
		if len(sps) < 2 || !repoPath.MatchString(sps[0]) {
			continue
		}
		path := sps[0]
		decls := declarations(t, path)
		for _, sp := range sps[1:] {
			if testName.MatchString(sp) {
				continue // a test of that package: checked as a test
			}
			checked[sp] = true
			switch {
			case !identifier.MatchString(sp):
				t.Errorf("%s: `%s` after `%s` is not a Go name", where, sp, path)
			case decls == nil:
				t.Errorf("%s: `%s` follows `%s`, which holds no Go declarations", where, sp, path)
			case !decls[sp]:
				t.Errorf("%s: `%s` declares no %s", where, path, sp)
			}
		}
	}
	return checked
}

// declarations lists what a Go file, or the package in a directory, declares
// (tests excluded): funcs, Type.Method, types, consts and vars. Nil when the
// path holds no Go code.
func declarations(t *testing.T, rel string) map[string]bool {
	t.Helper()
	full := filepath.Join(root, rel)
	info, err := os.Stat(full)
	if err != nil {
		return nil // reported by checkSpan
	}
	var files []string
	if info.IsDir() {
		files, _ = filepath.Glob(filepath.Join(full, "*.go"))
	} else if strings.HasSuffix(full, ".go") {
		files = []string{full}
	}
	var out map[string]bool
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		if out == nil {
			out = map[string]bool{}
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) > 0 {
					out[receiverName(d.Recv.List[0].Type)+"."+d.Name.Name] = true
				} else {
					out[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						out[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							out[n.Name] = true
						}
					}
				}
			}
		}
	}
	return out
}

// receiverName is the type of a method's receiver without pointer or type
// parameters: *App -> App, keyedCall[T] -> keyedCall.
func receiverName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverName(e.X)
	case *ast.IndexExpr:
		return receiverName(e.X)
	case *ast.IndexListExpr:
		return receiverName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// testFuncs lists every Test, Example and Benchmark func of the repository.
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		af, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range af.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && testName.MatchString(fd.Name.Name) {
				out[fd.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the guides leads to a file that exists and, when
// it names an anchor, to a heading of that file.
func TestLinksResolve(t *testing.T) {
	for _, file := range linked {
		text := read(t, file)
		for n, line := range strings.Split(text, "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				where := fmt.Sprintf("%s:%d", file, n+1)
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
				}
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link to %s: no such file", where, target)
					continue
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: link to %s: an anchor into a file that is not markdown", where, target)
					continue
				}
				if !anchors(read(t, dest))[anchor] {
					t.Errorf("%s: link to %s: %s has no heading with the anchor #%s", where, target, dest, anchor)
				}
			}
		}
	}
}

// anchors lists the anchors GitHub makes for a markdown file's headings:
// lower case, letters, digits, '-' and '_' kept, spaces to '-', the rest
// dropped; a repeated heading gets -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func slug(heading string) string {
	heading = mdLink.ReplaceAllString(strings.TrimSpace(heading), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Outbox：把发送意图变成本地数据", "outbox把发送意图变成本地数据"},
		{"多个 dispatcher 怎么认领", "多个-dispatcher-怎么认领"},
		{"重复、乱序与重试是不同问题", "重复乱序与重试是不同问题"},
		{"The `claim` and its index (in 2 steps)", "the-claim-and-its-index-in-2-steps"},
		{"[Link](x.md) text", "link-text"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}
