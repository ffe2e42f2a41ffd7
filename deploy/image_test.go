package deploy

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The image docker compose builds for each service: the Dockerfile and its
// build context.

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("%d stage(s): want a multi-stage build (compile, then a small runtime image)", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:1.26") {
		t.Errorf("build stage FROM %s, want golang:1.26 (go.mod's toolchain)", build.from)
	}
	if build.name == "" {
		t.Error("build stage has no name (FROM ... AS build)")
	}
	if !slices.Contains(build.args, "PACKAGE") {
		t.Error("build stage has no ARG PACKAGE selecting the package to build")
	}
	var goBuild string
	for _, r := range build.runs {
		if strings.Contains(r, "go build") {
			goBuild = r
		}
	}
	switch {
	case goBuild == "":
		t.Error("build stage runs no go build")
	case !strings.Contains(goBuild, "CGO_ENABLED=0"):
		t.Errorf("go build without CGO_ENABLED=0 (a static binary for the small image): %s", goBuild)
	case !strings.Contains(goBuild, `"${PACKAGE}"`):
		t.Errorf("go build does not build the package ${PACKAGE}: %s", goBuild)
	}

	if strings.HasPrefix(final.from, "golang") {
		t.Errorf("final stage FROM %s: want a small runtime image", final.from)
	}
	// The compose healthcheck runs wget: busybox has it, distroless not.
	if !strings.HasPrefix(final.from, "alpine:") && !strings.HasPrefix(final.from, "busybox:") {
		t.Errorf("final stage FROM %s: the healthcheck needs wget (alpine or busybox)", final.from)
	}
	switch u := strings.SplitN(final.user, ":", 2)[0]; u {
	case "", "root", "0":
		t.Errorf("final stage USER %q: want a non-root user", final.user)
	}
	if !slices.ContainsFunc(final.copies, func(c string) bool { return strings.Contains(c, "--from="+build.name) }) {
		t.Errorf("final stage copies nothing from the %q stage", build.name)
	}
	// The crash failpoint SIGKILLs its own process, which the kernel
	// ignores for the PID 1 of a namespace: the service must not be PID 1.
	if !strings.Contains(final.entrypoint, "tini") {
		t.Errorf("ENTRYPOINT %s: want an init (tini) as PID 1 so that the crash failpoint can kill the service", final.entrypoint)
	}
}

func TestDockerignore(t *testing.T) {
	patterns := map[string]bool{}
	for _, l := range nonEmptyLines(readFile(t, ".dockerignore")) {
		if !strings.HasPrefix(l, "#") {
			patterns[strings.TrimPrefix(l, "/")] = true
		}
	}
	for _, p := range []string{".git", ".env", "bin", ".run"} {
		if !patterns[p] {
			t.Errorf(".dockerignore does not exclude %s", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "services", "pkg", "migrations", "internal"} {
		for pat := range patterns {
			if ok, _ := filepath.Match(pat, p); ok || pat == p {
				t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", pat, p)
			}
		}
	}
}

type stage struct {
	from, name string
	args       []string
	runs       []string
	copies     []string
	user       string
	entrypoint string
}

// parseDockerfile splits a Dockerfile into stages (continuation lines
// joined, comments dropped).
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var lines []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") || (l == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	var stages []stage
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			f := strings.Fields(rest)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			continue // ARG before the first FROM
		}
		s := &stages[len(stages)-1]
		switch instr {
		case "ARG":
			name, _, _ := strings.Cut(strings.TrimSpace(rest), "=")
			s.args = append(s.args, name)
		case "RUN":
			s.runs = append(s.runs, rest)
		case "COPY":
			s.copies = append(s.copies, rest)
		case "USER":
			s.user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			s.entrypoint = rest
		}
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	return stages
}
