# shellcheck shell=bash
# Shared helpers for scripts/*.sh. Source it; it runs nothing by itself.
#
#   log MSG...        progress line on stderr, prefixed with the script name
#   die MSG...        log and exit 1
#   load_settings     export the settings of .env, else .env.example
#   ensure_go         put /usr/local/go/bin on PATH when go is not found
#   ensure_mariadb    MariaDB/MySQL answers on MYSQL_HOST:MYSQL_PORT, starting
#                     a local server if it is installed and stopped, and
#                     installing it first if it is not (see below)
#   ensure_rabbitmq   RabbitMQ accepts connections on RABBITMQ_HOST:RABBITMQ_PORT,
#                     the same way
#   ensure_rabbitmq_installed
#                     the RabbitMQ package is installed (its programs start
#                     the private nodes of a local cluster), installing it
#                     the same way; the machine's broker is not started
#   install_packages WHY PKG...   install Debian packages (see below)
#   mysql_root ARGS   the mysql client as the admin user (MYSQL_ROOT_USER,
#                     default root; MYSQL_ROOT_PASSWORD, default empty)
#
# Where the servers are (defaults: the local development servers):
#   MYSQL_HOST=127.0.0.1 MYSQL_PORT=3306 RABBITMQ_HOST=127.0.0.1 RABBITMQ_PORT=5672
#
# Both ensure_* return at once, without starting anything, when the server
# already answers: a ping for MariaDB (about 10 ms), a TCP connect for RabbitMQ
# (rabbitmqctl takes about half a second, so it is only used after a start).
#
# A fresh machine: when a local server is not installed at all, on Debian or
# Ubuntu as root or with password-less sudo, install_packages installs it
# with apt-get (mariadb-server, rabbitmq-server), saying what and why, and
# ensure_* start it; a MariaDB installed so lets root log in over TCP from
# this machine with MYSQL_ROOT_PASSWORD (empty by default), as the setup and
# the tests do. Elsewhere, or without root, they print the exact commands to
# run and stop.

MYSQL_HOST=${MYSQL_HOST:-127.0.0.1}
MYSQL_PORT=${MYSQL_PORT:-3306}
MYSQL_ROOT_USER=${MYSQL_ROOT_USER:-root}
RABBITMQ_HOST=${RABBITMQ_HOST:-127.0.0.1}
RABBITMQ_PORT=${RABBITMQ_PORT:-5672}
MARIADB_START_TIMEOUT=${MARIADB_START_TIMEOUT:-60}
RABBITMQ_START_TIMEOUT=${RABBITMQ_START_TIMEOUT:-90}

LOG_TAG=${LOG_TAG:-$(basename "$0" .sh)}

log() { printf '[%s] %s\n' "$LOG_TAG" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

# load_settings: export the settings of .env, else .env.example, and set
# SETTINGS_FILE to the file read. The file is plain KEY=VALUE lines that
# bash runs as they are (the format .env.example documents, which docker
# compose reads the same way). A variable the environment already exports
# keeps its value, as with docker compose.
load_settings() {
	SETTINGS_FILE=.env
	[[ -f $SETTINGS_FILE ]] || SETTINGS_FILE=.env.example
	local name
	local -A environment=()
	for name in $(compgen -e); do environment[$name]=${!name}; done
	set -a
	# shellcheck source=.env.example
	. "./$SETTINGS_FILE"
	set +a
	for name in "${!environment[@]}"; do
		[[ ${!name-} == "${environment[$name]}" ]] || export "$name=${environment[$name]}"
	done
}

ensure_go() {
	if ! have go; then
		PATH=$PATH:/usr/local/go/bin
		export PATH
	fi
	have go || die "go not found on PATH or in /usr/local/go/bin (install Go, see go.mod for the version)"
}

# tcp_open HOST PORT: true when something accepts a TCP connection there.
# shellcheck disable=SC2016 # $1 and $2 expand in the inner bash
tcp_open() {
	if have timeout; then
		timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
	else
		bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
	fi
}

is_local_host() { [[ $1 == 127.0.0.1 || $1 == localhost || $1 == ::1 ]]; }

# as_root CMD...: run CMD as root: directly when we are root, through
# password-less sudo otherwise; fails when neither is possible.
as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif have sudo && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		return 1
	fi
}

systemd_running() { [[ -d /run/systemd/system ]]; }

# start_log NAME: where the output of a server start goes (never our stdout:
# a daemon holding it open would keep a `scripts/test.sh | tee` pipe open).
start_log() { printf '%s/ordersaga-start-%s-%s.log' "${TMPDIR:-/tmp}" "$1" "$(id -u)"; }

# await_start STARTED TIMEOUT WHAT CHECK...: runs CHECK every half second
# until it succeeds, saying every 5 s that it waits for WHAT; fails once
# TIMEOUT seconds have passed since STARTED (a $SECONDS value).
await_start() {
	local start=$1 timeout=$2 what=$3 waited=0 next_note=5
	shift 3
	while ! "$@"; do
		waited=$((SECONDS - start))
		((waited < timeout)) || return 1
		if ((waited >= next_note)); then
			log "waiting for $what (${waited}s/${timeout}s)"
			next_note=$((next_note + 5))
		fi
		sleep 0.5
	done
}

# ------------------------------------------------------- missing packages

# os_family: how this system installs packages: debian (Debian, Ubuntu and
# their derivatives: apt-get), fedora (Fedora, RHEL: dnf), macos (Homebrew)
# or other. ORDERSAGA_OS_RELEASE names another os-release file (tests).
os_family() {
	local ids
	if [[ $(uname -s) == Darwin ]]; then
		echo macos
		return
	fi
	# shellcheck source=/dev/null
	ids=$(. "${ORDERSAGA_OS_RELEASE:-/etc/os-release}" 2>/dev/null && echo " ${ID:-} ${ID_LIKE:-} ") || ids=
	case $ids in
	*" debian "* | *" ubuntu "*) echo debian ;;
	*" fedora "* | *" rhel "*) echo fedora ;;
	*) echo other ;;
	esac
}

# install_commands FAMILY PKG...: the commands that install the Debian
# packages PKG on FAMILY (and start the servers where that is not done).
install_commands() {
	local family=$1 pkgs=() p
	shift
	for p; do
		case $family:$p in
		fedora:shellcheck) p=ShellCheck ;;
		fedora:libc6-dev) p=glibc-devel ;;
		macos:*-server) p=${p%-server} ;;
		macos:gcc | macos:libc6-dev) p= ;; # the Xcode command line tools
		esac
		if [[ -n $p ]]; then pkgs+=("$p"); fi
	done
	case $family in
	debian) echo "sudo apt-get update && sudo apt-get install -y ${pkgs[*]}" ;;
	fedora) echo "sudo dnf install -y ${pkgs[*]}" ;;
	macos) if ((${#pkgs[@]})); then echo "brew install ${pkgs[*]}"; else echo "xcode-select --install"; fi ;;
	*) echo "install ${pkgs[*]} (their Debian names) with your system's package manager" ;;
	esac
	for p in "${pkgs[@]+"${pkgs[@]}"}"; do
		case $family:$p in
		fedora:mariadb-server) echo "sudo systemctl start mariadb" ;;
		fedora:rabbitmq-server) echo "sudo systemctl start rabbitmq-server" ;;
		macos:mariadb | macos:rabbitmq) echo "brew services start $p" ;;
		esac
	done
}

# install_packages WHY PKG...: install the Debian packages PKG with apt-get,
# saying what and why, on Debian or Ubuntu as root or with password-less
# sudo; elsewhere print the commands that install them, and fail.
install_packages() {
	local why=$1 family
	shift
	family=$(os_family)
	if [[ $family == debian ]] && have apt-get && as_root true; then
		log "installing $* with apt-get: $why"
		# A fresh system (a container image) may have no package lists yet.
		if ! apt-cache show "$@" >/dev/null 2>&1; then
			as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || return 1
		fi
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
		return
	fi
	log "$why, and $* is not installed. Install it with:"
	install_commands "$family" "$@" | sed 's/^/    /' >&2
	if [[ $family == debian ]]; then log "(this script installs it itself when run as root or with password-less sudo)"; fi
	return 1
}

# ---------------------------------------------------------------- MariaDB

mysql_client() {
	if have mariadb; then echo mariadb; elif have mysql; then echo mysql; else return 1; fi
}

mysql_admin() {
	if have mariadb-admin; then echo mariadb-admin; elif have mysqladmin; then echo mysqladmin; else return 1; fi
}

# mysql_root ARGS...: the mysql client as the admin user over TCP. The password goes
# through an option file on a pipe, never on the command line.
mysql_root() {
	local client
	client=$(mysql_client) || die "the mysql/mariadb client is not installed (apt-get install mariadb-client)"
	local pw=${MYSQL_ROOT_PASSWORD:-}
	pw=${pw//\\/\\\\}
	pw=${pw//\"/\\\"}
	"$client" --defaults-extra-file=<(printf '[client]\npassword="%s"\n' "$pw") \
		--protocol=tcp -h"$MYSQL_HOST" -P"$MYSQL_PORT" -u"$MYSQL_ROOT_USER" --connect-timeout=5 "$@"
}

# mariadb_alive: the server answers (even "access denied" counts as alive).
mariadb_alive() {
	local admin
	if admin=$(mysql_admin); then
		"$admin" --protocol=tcp -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot --connect-timeout=2 ping >/dev/null 2>&1
	else
		tcp_open "$MYSQL_HOST" "$MYSQL_PORT"
	fi
}

mariadb_start() {
	local out
	out=$(start_log mariadb)
	if systemd_running && have systemctl; then
		as_root systemctl start mariadb >"$out" 2>&1 </dev/null
		return
	fi
	# /run is a tmpfs: after a reboot the socket/pid directory is gone and
	# mariadbd refuses to start without it.
	if [[ ! -d /run/mysqld ]] && id mysql >/dev/null 2>&1; then
		as_root install -d -o mysql -g mysql -m 0755 /run/mysqld || return 1
	fi
	as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >"$out" 2>&1 </dev/null
}

ensure_mariadb() {
	mariadb_alive && return 0

	local where="$MYSQL_HOST:$MYSQL_PORT" installed=false
	local laptop="On a laptop without a local server: docker compose up -d mysql rabbitmq"
	is_local_host "$MYSQL_HOST" || die "MariaDB/MySQL does not answer at $where. $laptop"
	if [[ ! -x /usr/sbin/mariadbd && ! -x /usr/sbin/mysqld ]]; then
		install_packages "the services and the tests need a MariaDB/MySQL server at $where" mariadb-server ||
			die "no MariaDB/MySQL server here. $laptop"
		installed=true
	fi
	mariadb_alive || mariadb_start_and_wait
	if [[ $installed == true ]]; then mariadb_allow_root_tcp; fi
}

mariadb_start_and_wait() {
	local where="$MYSQL_HOST:$MYSQL_PORT"
	[[ -x /usr/sbin/mariadbd ]] || die "MySQL does not answer at $where: start it (sudo systemctl start mysql)"
	log "MariaDB does not answer at $where; starting /usr/sbin/mariadbd"
	if ! mariadb_start; then
		local how="sudo start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
		systemd_running && how="sudo systemctl start mariadb"
		die "could not start MariaDB (needs root or password-less sudo; see $(start_log mariadb)). Start it yourself: $how"
	fi
	local start=$SECONDS
	if ! await_start "$start" "$MARIADB_START_TIMEOUT" "MariaDB at $where" mariadb_alive; then
		log "last lines of /var/log/mysql/error.log:"
		tail -n 20 /var/log/mysql/error.log >&2 2>/dev/null || true
		die "MariaDB did not answer at $where within ${MARIADB_START_TIMEOUT}s after starting it"
	fi
	log "MariaDB is up at $where after $((SECONDS - start))s"
}

# mariadb_allow_root_tcp: on a MariaDB installed by ensure_mariadb just now
# (nothing else relies on its root yet), root logs in through the socket
# only; the setup and the tests log in over TCP.
mariadb_allow_root_tcp() {
	log "letting root log in to the new MariaDB over TCP from this machine (password: MYSQL_ROOT_PASSWORD, empty by default), as scripts/up.sh and the tests do"
	bash deploy/provision.sh mysql-root | as_root "$(mysql_client)" --protocol=socket -uroot ||
		log "warning: could not; as root, run: deploy/provision.sh mysql-root | $(mysql_client)"
}

# mariadb_root_ok: we can log in as the admin user (tests and provisioning need it).
mariadb_root_ok() {
	local err
	if ! err=$(mysql_root -N -e 'SELECT 1' 2>&1 >/dev/null); then
		die "MariaDB at $MYSQL_HOST:$MYSQL_PORT answers but $MYSQL_ROOT_USER cannot log in: $err (set MYSQL_ROOT_PASSWORD; a Debian install lets root in through the socket only: as root, run deploy/provision.sh mysql-root | $(mysql_client))"
	fi
}

# --------------------------------------------------------------- RabbitMQ

rabbitmq_start() {
	local out
	out=$(start_log rabbitmq)
	if systemd_running && have systemctl; then
		as_root systemctl start rabbitmq-server >"$out" 2>&1 </dev/null
		return
	fi
	as_root rabbitmq-server -detached >"$out" 2>&1 </dev/null
}

ensure_rabbitmq_installed() {
	have rabbitmq-server && return 0
	install_packages "a local RabbitMQ cluster runs the RabbitMQ package's programs" rabbitmq-server ||
		die "RabbitMQ is not installed"
}

ensure_rabbitmq() {
	tcp_open "$RABBITMQ_HOST" "$RABBITMQ_PORT" && return 0

	local where="$RABBITMQ_HOST:$RABBITMQ_PORT"
	local laptop="On a laptop without a local broker: docker compose up -d mysql rabbitmq"
	is_local_host "$RABBITMQ_HOST" || die "RabbitMQ does not accept connections at $where. $laptop"
	if ! have rabbitmq-server; then
		install_packages "the services and the tests need a RabbitMQ broker at $where" rabbitmq-server ||
			die "no RabbitMQ broker here. $laptop"
	fi
	local start=$SECONDS
	# apt may have started it already.
	if ! tcp_open "$RABBITMQ_HOST" "$RABBITMQ_PORT"; then
		log "RabbitMQ does not accept connections at $where; starting rabbitmq-server"
		if ! rabbitmq_start; then
			local how="sudo rabbitmq-server -detached"
			systemd_running && how="sudo systemctl start rabbitmq-server"
			die "could not start RabbitMQ (needs root or password-less sudo; see $(start_log rabbitmq)). Start it yourself: $how"
		fi
	fi
	if ! await_start "$start" "$RABBITMQ_START_TIMEOUT" "RabbitMQ at $where" tcp_open "$RABBITMQ_HOST" "$RABBITMQ_PORT"; then
		log "last lines of /var/log/rabbitmq/*.log and $(start_log rabbitmq):"
		tail -n 20 "$(start_log rabbitmq)" /var/log/rabbitmq/rabbit@*.log >&2 2>/dev/null || true
		die "RabbitMQ did not accept connections at $where within ${RABBITMQ_START_TIMEOUT}s after starting it"
	fi
	# The listener opens near the end of the boot; await_startup makes sure
	# the boot has finished (it is slow, so only after a start).
	if have rabbitmqctl; then
		local left=$((RABBITMQ_START_TIMEOUT - (SECONDS - start)))
		if ((left < 5)); then left=5; fi
		rabbitmqctl -q await_startup --timeout "$left" >/dev/null 2>&1 ||
			log "warning: rabbitmqctl await_startup failed; the port is open, continuing"
	fi
	log "RabbitMQ is up at $where after $((SECONDS - start))s"
}
