package main

import (
	"fmt"
	"io"
	"strings"
	"unicode"
)

// printer writes the command's messages in one language.
type printer struct {
	out  io.Writer
	lang string
}

func (p printer) t(id string) string {
	m, ok := messages[id]
	if !ok {
		return id
	}
	if p.lang == "zh" {
		return m.zh
	}
	return m.en
}

func (p printer) say(id string, args ...any) { fmt.Fprintf(p.out, p.t(id)+"\n", args...) }

func (p printer) printf(format string, args ...any) { fmt.Fprintf(p.out, format, args...) }

const (
	msgUsage          = "usage"
	msgListHead       = "list.head"
	msgListFoot       = "list.foot"
	msgUnit           = "unit"
	msgDirty          = "start.dirty"
	msgOnExercise     = "start.on-exercise"
	msgBranchExists   = "start.branch-exists"
	msgDoesNotApply   = "start.does-not-apply"
	msgStarted        = "start.done"
	msgStartedLook    = "start.look"
	msgStartedNext    = "start.next"
	msgHintHead       = "hint.head"
	msgGradeHead      = "grade.head"
	msgGradeElsewhere = "grade.elsewhere"
	msgGradeTest      = "grade.test"
	msgGradePass      = "grade.pass"
	msgGradeFail      = "grade.fail"
	msgGradeNoBuild   = "grade.no-build"
	msgNotStarted     = "reset.not-started"
	msgNoOrigin       = "reset.no-origin"
	msgReset          = "reset.done"
	msgResetStashed   = "reset.stashed"
	msgResetKept      = "reset.kept"
	msgResetDeleted   = "reset.deleted"
)

// messages are the command's words, in English and in Chinese (the
// chapter's terms, docs/zh/glossary.md). A table of data, so longer than
// a function.
var messages = map[string]struct{ en, zh string }{
	msgUsage: {
		"usage: scripts/exercise.sh list | start N | hint N | grade N | reset N   (-zh: in Chinese)",
		"用法：scripts/exercise.sh list | start N | hint N | grade N | reset N（加 -en 用英文）",
	},
	msgListHead: {
		"The graded exercises (docs/exercises.md). Each plants a defect in the real code, on a new branch of\n" +
			"your clone; you find it, fix it, and grade it with the tests that catch it.\n",
		"可评分的练习（docs/zh/exercises.md）。每个练习在你的克隆里新建一个分支，在真实代码里埋下一个缺陷；\n" +
			"你找到它、修好它，再用能发现它的测试评分。\n",
	},
	msgListFoot: {
		"\nscripts/exercise.sh start N begins one; hint N when stuck; grade N to check; reset N when done.",
		"\nscripts/exercise.sh start N 开始一个练习；卡住时 hint N；grade N 评分；做完 reset N。",
	},
	msgUnit: {"unit", "单元"},
	msgDirty: {
		"Your working tree has uncommitted changes, and exercise %d plants its defect on a new branch from a\n" +
			"clean tree. Commit them, or put them aside with git stash (git stash pop brings them back), then\n" +
			"start again. Nothing was changed. The changes:",
		"工作区有未提交的修改，而练习 %d 要从干净的工作区新建分支、埋下缺陷。请先提交，或者用 git stash\n" +
			"暂存（之后用 git stash pop 取回），再重新开始。什么都没有改动。这些修改是：",
	},
	msgOnExercise: {
		"You are on %s, an exercise in progress. Leave it first with scripts/exercise.sh reset %s\n" +
			"(uncommitted changes are saved in the stash), then start again. Nothing was changed.",
		"你正在 %s 分支上做一个练习。请先用 scripts/exercise.sh reset %s 结束它（未提交的修改会存进\n" +
			"stash），再开始新的练习。什么都没有改动。",
	},
	msgBranchExists: {
		"The branch %s exists from an earlier start. Go on with it (git checkout %s), or leave it with\n" +
			"scripts/exercise.sh reset %d. Nothing was changed.",
		"分支 %s 已经存在，是之前开始的练习。可以继续做（git checkout %s），也可以用\n" +
			"scripts/exercise.sh reset %d 结束它。什么都没有改动。",
	},
	msgDoesNotApply: {
		"Exercise %d's defect does not apply here: the code it changes is not what the exercise was written\n" +
			"for (your branch changed it, or the exercise is out of date, which the suite's test of the\n" +
			"exercises reports). Start it from an unchanged main. Nothing was changed.",
		"练习 %d 的缺陷埋不进这份代码：它要改的代码和编写练习时不一样了（你的分支改过它，或者练习已经\n" +
			"过时，套件里检查练习的测试会报告这一点）。请从没有改动的 main 开始。什么都没有改动。",
	},
	msgStarted: {
		"Exercise %d: %s\n\nOn the new branch %s (from %s) a defect is planted in the real code and committed:\n" +
			"your tree is clean, and the code reads like any other. What goes wrong:",
		"练习 %d：%s\n\n已从 %[4]s 新建分支 %[3]s，在真实代码里埋下一个缺陷并提交：工作区是干净的，\n" +
			"代码读起来和别处一样。出了什么问题：",
	},
	msgStartedLook: {
		"Where to look:   %s\nChapter section: 「%s」\n",
		"去哪里看：%s\n课文章节：「%s」\n",
	},
	msgStartedNext: {
		"Find the defect and fix it; the tests next to the code say how it must behave.\n" +
			"  grade: scripts/exercise.sh grade %d   (runs the tests that catch it: pass or fail)\n" +
			"  hint:  scripts/exercise.sh hint %d\n" +
			"  done:  scripts/exercise.sh reset %d   (back to %s; uncommitted changes are saved in the stash)\n" +
			"The answer is in the last commit (git show) and in exercises/%s/defect.patch: do not look.",
		"找到缺陷并修好它；代码旁边的测试说明了它应当怎样工作。\n" +
			"  评分：scripts/exercise.sh grade %d（运行能发现它的测试：通过或未通过）\n" +
			"  提示：scripts/exercise.sh hint %d\n" +
			"  结束：scripts/exercise.sh reset %d（回到 %s；未提交的修改存进 stash）\n" +
			"答案在最后一个提交（git show）和 exercises/%s/defect.patch 里：先别看。",
	},
	msgHintHead: {
		"Exercise %d: %s\nChapter section: 「%s」 (docs/course-map.md has each section's code, tests and lab command)\n",
		"练习 %d：%s\n课文章节：「%s」（每一节的代码、测试和实验命令见 docs/zh/course-map.md）\n",
	},
	msgGradeHead:       {"Grading exercise %d: %s", "评分：练习 %d，%s"},
	msgGradeElsewhere:  {"  (you are on %s, not %s: grading the code as it is here)", "  （当前在 %s 分支，不在 %s：按这里的代码评分）"},
	msgGradeTest:       {"test", "测试"},
	"status." + "pass": {"passed", "通过"},
	"status." + "fail": {"failed", "失败"},
	"status." + "skip": {
		"skipped: are MariaDB and RabbitMQ running? (a skip is not a pass)",
		"被跳过：MariaDB 和 RabbitMQ 在运行吗？（跳过不算通过）",
	},
	"status." + "missing": {
		"did not run: the code does not build (see below), or the test is gone",
		"没有运行：代码编译不通过（见下文），或者这个测试不存在了",
	},
	msgGradePass: {
		"\nPASS (exercise %d): every test that caught the defect passes; the rule of 「%s」 holds again.\n" +
			"When you are done: scripts/exercise.sh reset %d",
		"\n通过（练习 %d）：发现这个缺陷的测试全部通过，「%s」一节的规则又成立了。\n" +
			"做完之后：scripts/exercise.sh reset %d",
	},
	msgGradeFail: {
		"\nFAIL: the defect is still there. Read the chapter section 「%s」 again;\n" +
			"scripts/exercise.sh hint %d gives a hint.",
		"\n未通过：缺陷还在。请重读课文「%s」一节；scripts/exercise.sh hint %d 给出提示。",
	},
	msgGradeNoBuild: {
		"\nFAIL: the code does not build (go's words above); make it build, then grade again.",
		"\n未通过：代码编译不通过（见上面 go 的输出）；先让它编译通过，再评分。",
	},
	msgNotStarted: {
		"Exercise %d is not started: there is no branch %s. Nothing was changed.",
		"练习 %d 没有开始：没有 %s 分支。什么都没有改动。",
	},
	msgNoOrigin: {
		"The branch %s has no record of the branch it started from (scripts/exercise.sh start did not make\n" +
			"it, or its record is gone). Switch back yourself (git checkout main), then delete it: git branch -D %s",
		"分支 %s 没有记录它是从哪个分支开始的（不是 scripts/exercise.sh start 建的，或者记录已经删除）。\n" +
			"请自己切回去（git checkout main），再删除它：git branch -D %s",
	},
	msgReset: {"Back on %s.", "已回到 %s。"},
	msgResetStashed: {
		"Your uncommitted changes on the exercise's branch are saved in the stash as \"%s\":\n" +
			"git stash list shows them, git stash show -p the diff.",
		"你在练习分支上未提交的修改已存进 stash（\"%s\"）：git stash list 可以看到，\n" +
			"git stash show -p 查看内容。",
	},
	msgResetKept: {
		"Kept the branch %s: it has %d commit(s) of yours. Delete it when you no longer need it: git branch -D %s",
		"保留了分支 %s：上面有你的 %d 个提交。不再需要时删除：git branch -D %s",
	},
	msgResetDeleted: {"The branch %s is deleted.", "分支 %s 已删除。"},
}

// wrap breaks text into lines of at most width columns, each after indent:
// at spaces between words, and between any two wide (CJK) characters,
// which take two columns each and need no space to break.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	col := 0
	space := false // a space is owed before the next word on this line
	var word []rune
	wordCols := 0
	flush := func() {
		if len(word) == 0 {
			return
		}
		gap := 0
		if space && col > 0 {
			gap = 1
		}
		if col > 0 && col+gap+wordCols > width {
			b.WriteString("\n")
			col, gap = 0, 0
		}
		if col == 0 {
			b.WriteString(indent)
			col = len(indent)
		}
		if gap == 1 {
			b.WriteByte(' ')
		}
		b.WriteString(string(word))
		col += gap + wordCols
		word, wordCols, space = word[:0], 0, false
	}
	for _, r := range text {
		switch {
		case r == ' ':
			flush()
			space = true
		case wide(r):
			flush()
			word, wordCols = append(word, r), 2
			flush()
		default:
			word = append(word, r)
			wordCols++
		}
	}
	flush()
	return b.String()
}

// wide: a character that takes two columns in a terminal (CJK, full-width
// punctuation).
func wide(r rune) bool {
	return unicode.Is(unicode.Han, r) || (r >= 0x3000 && r <= 0x303f) || (r >= 0xff00 && r <= 0xffef)
}
