package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A fresh machine: scripts/lib.sh installs what is missing (the servers,
// shellcheck, a C compiler) with apt-get on Debian or Ubuntu as root or with
// password-less sudo, and prints the commands to run everywhere else. These
// tests run its decision with stand-ins for the system's commands (uname,
// id, sudo, apt-get, apt-cache) and os-release file: nothing is installed.

// fakeSystem is a PATH holding the stand-ins and the few real tools lib.sh
// needs, and the file where the stand-ins record what they were asked.
func fakeSystem(t *testing.T) (path, calls string) {
	t.Helper()
	bin := t.TempDir()
	calls = filepath.Join(t.TempDir(), "calls")
	fakes := map[string]string{
		"uname": `echo "${FAKE_UNAME:-Linux}"`,
		"id":    `[ "$1" = -u ] && echo "$FAKE_UID"`,
		// sudo -n works only when FAKE_SUDO=1; it runs the command as is.
		"sudo":      `[ "$FAKE_SUDO" = 1 ] || exit 1; [ "$1" = -n ] && shift; [ "$1" = true ] || echo "sudo $*" >>"$CALLS"; exec "$@"`,
		"apt-get":   `echo "apt-get $* ($DEBIAN_FRONTEND)" >>"$CALLS"`,
		"apt-cache": `[ "$FAKE_LISTS" = 1 ]`,
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"sh", "env", "sed", "true", "cat"} {
		real, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(real, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return bin, calls
}

func TestInstallPackages(t *testing.T) {
	releases := map[string]string{
		"debian": "ID=debian\n",
		"ubuntu": "ID=ubuntu\nID_LIKE=debian\n",
		"mint":   "ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n",
		"fedora": "ID=fedora\n",
		"arch":   "ID=arch\n",
	}
	for _, c := range []struct {
		name          string
		os, uid, sudo string // os-release, id -u, whether sudo -n works
		lists         string // whether apt has package lists
		uname         string
		wantOK        bool
		wantCalls     []string // what apt-get was asked, in order
		wantSaid      []string // in what it printed
	}{
		{name: "debian as root", os: "debian", uid: "0", lists: "1", wantOK: true,
			wantCalls: []string{"apt-get install -y -q --no-install-recommends mariadb-server rabbitmq-server (noninteractive)"},
			wantSaid:  []string{"installing mariadb-server rabbitmq-server with apt-get: the tests need servers"}},
		{name: "fresh debian as root: no package lists yet", os: "debian", uid: "0", lists: "0", wantOK: true,
			wantCalls: []string{"apt-get update -q (noninteractive)", "apt-get install -y -q --no-install-recommends mariadb-server rabbitmq-server (noninteractive)"}},
		{name: "ubuntu with password-less sudo", os: "ubuntu", uid: "1000", sudo: "1", lists: "1", wantOK: true,
			wantCalls: []string{"sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mariadb-server rabbitmq-server",
				"apt-get install -y -q --no-install-recommends mariadb-server rabbitmq-server (noninteractive)"}},
		{name: "a derivative of ubuntu, as root", os: "mint", uid: "0", lists: "1", wantOK: true,
			wantCalls: []string{"apt-get install -y -q --no-install-recommends mariadb-server rabbitmq-server (noninteractive)"}},
		{name: "debian without root or sudo", os: "debian", uid: "1000", sudo: "0",
			wantSaid: []string{"the tests need servers, and mariadb-server rabbitmq-server is not installed. Install it with:",
				"    sudo apt-get update && sudo apt-get install -y mariadb-server rabbitmq-server",
				"run as root or with password-less sudo"}},
		{name: "fedora, even as root", os: "fedora", uid: "0",
			wantSaid: []string{"    sudo dnf install -y mariadb-server rabbitmq-server", "    sudo systemctl start mariadb", "    sudo systemctl start rabbitmq-server"}},
		{name: "macos", uname: "Darwin", uid: "501",
			wantSaid: []string{"    brew install mariadb rabbitmq", "    brew services start mariadb", "    brew services start rabbitmq"}},
		{name: "another linux", os: "arch", uid: "0",
			wantSaid: []string{"    install mariadb-server rabbitmq-server (their Debian names) with your system's package manager"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, calls := fakeSystem(t)
			release := filepath.Join(t.TempDir(), "os-release")
			if err := os.WriteFile(release, []byte(releases[c.os]), 0o644); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{
				"PATH": path, "CALLS": calls, "LOG_TAG": "up", "ORDERSAGA_OS_RELEASE": release,
				"FAKE_UID": c.uid, "FAKE_SUDO": c.sudo, "FAKE_LISTS": c.lists, "FAKE_UNAME": c.uname,
			}
			script := `. scripts/lib.sh; install_packages "the tests need servers" mariadb-server rabbitmq-server`
			_, said, err := runBash(t, root, env, []string{"-c", script})
			if ok := err == nil; ok != c.wantOK {
				t.Errorf("install_packages succeeded = %v, want %v (%v)", ok, c.wantOK, err)
			}
			got, _ := os.ReadFile(calls)
			if lines := nonEmptyLines(string(got)); !slices.Equal(lines, c.wantCalls) {
				t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(c.wantCalls, "\n"))
			}
			for _, want := range c.wantSaid {
				if !strings.Contains(said, want) {
					t.Errorf("output does not say %q:\n%s", want, said)
				}
			}
		})
	}
}
