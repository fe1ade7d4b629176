#!/usr/bin/env bash
# A throwaway PostgreSQL server for the journal's tests, on 127.0.0.1 only.
#
#   postgres.sh start    install the server if it is missing, start a fresh cluster on a
#                        free port, create a database, print its SQLAlchemy URL
#   postgres.sh url      print the URL of the running cluster
#   postgres.sh halt     stop the server but keep its data and port (for outage tests)
#   postgres.sh resume   start it again after halt
#   postgres.sh stop     stop it and remove everything start made
#
# State lives in .postgres-test/ at the repository top (git-ignored), or in
# $QC_POSTGRES_DIR, so that a test can run a second cluster beside the first.
# Progress goes to stderr; stdout carries only the URL.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${QC_POSTGRES_DIR:-$ROOT/.postgres-test}
DATABASE=journal_test

say() { echo "postgres.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

# The server refuses to run as root: as root, run it as the `postgres` account that
# Debian's package creates.
as_server() {
    if [[ $(id -u) == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

server_bin() { # the newest installed server's bin/, or nothing
    local dir
    # Debian keeps the server binaries off PATH, one directory per major version.
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x $dir/postgres && -x $dir/initdb && -x $dir/pg_ctl ]]; then
            echo "$dir"
            return
        fi
    done
    if command -v postgres >/dev/null && command -v initdb >/dev/null; then
        dirname "$(readlink -f "$(command -v postgres)")"
    fi
}

install_server() {
    [[ $(id -u) == 0 ]] || die "no PostgreSQL server is installed, and installing one needs root"
    command -v apt-get >/dev/null || die "no PostgreSQL server is installed, and no apt-get"
    say "installing the PostgreSQL server (apt-get install postgresql)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cluster_dir() { cat "$STATE/cluster" 2>/dev/null || true; }

running() {
    local cluster
    cluster=$(cluster_dir)
    [[ -n $cluster && -f $cluster/data/postmaster.pid ]] &&
        as_server "$(cat "$STATE/bin")/pg_ctl" -D "$cluster/data" status >/dev/null 2>&1
}

start_server() {
    local cluster bin
    cluster=$(cluster_dir)
    bin=$(cat "$STATE/bin")
    if ! as_server "$bin/pg_ctl" -D "$cluster/data" -l "$cluster/server.log" -w -t 60 start >/dev/null; then
        tail -n 20 "$cluster/server.log" >&2 || true
        die "the server did not start"
    fi
}

cmd_start() {
    if running && [[ -f $STATE/url ]]; then
        cat "$STATE/url"
        return
    fi
    if [[ -e $STATE ]]; then
        say "removing what an earlier run left in $STATE"
        cmd_stop
    fi
    local bin
    bin=$(server_bin)
    if [[ -z $bin ]]; then
        install_server
        bin=$(server_bin)
        [[ -n $bin ]] || die "the PostgreSQL server is still missing after apt-get install"
    fi
    mkdir -p "$STATE"
    echo "$bin" >"$STATE/bin"

    # The cluster must be a directory the server's account can reach and own, with a
    # socket path short enough for a Unix socket (about 100 bytes): inside $STATE when
    # it can be, otherwise in a temporary directory that $STATE points to.
    local cluster=$STATE/cluster.d
    mkdir -p "$cluster"
    [[ $(id -u) == 0 ]] && chown postgres: "$cluster"
    if ((${#cluster} > 80)) || ! as_server test -w "$cluster"; then
        rmdir "$cluster"
        cluster=$(mktemp -d /tmp/qc-postgres.XXXXXX)
        [[ $(id -u) == 0 ]] && chown postgres: "$cluster"
    fi
    echo "$cluster" >"$STATE/cluster"

    local password port
    password=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    port=$(free_port)
    as_server sh -c 'umask 077; cat >"$1"' sh "$cluster/pwfile" <<<"$password"
    if ! as_server "$bin/initdb" -D "$cluster/data" -U postgres --pwfile="$cluster/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C \
        >"$STATE/initdb.log" 2>&1; then
        cat "$STATE/initdb.log" >&2
        die "initdb failed"
    fi
    as_server rm -f "$cluster/pwfile"
    as_server mkdir -p "$cluster/sock"
    # Durability is worth nothing in a cluster that is thrown away: skip the fsyncs.
    as_server sh -c 'cat >>"$1"' sh "$cluster/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$cluster/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
    start_server
    as_server "$bin/psql" -h "$cluster/sock" -p "$port" -U postgres -d postgres -qAt \
        -c "CREATE DATABASE $DATABASE" >/dev/null
    (
        umask 077
        echo "postgresql+psycopg://postgres:$password@127.0.0.1:$port/$DATABASE" >"$STATE/url"
    )
    say "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $cluster"
    cat "$STATE/url"
}

cmd_stop() {
    local cluster
    cluster=$(cluster_dir)
    if [[ -n $cluster && -f $cluster/data/postmaster.pid && -f $STATE/bin ]]; then
        # Immediate: the data is about to be deleted, so there is nothing to shut down cleanly.
        as_server "$(cat "$STATE/bin")/pg_ctl" -D "$cluster/data" -m immediate -w stop >/dev/null 2>&1 ||
            say "the server in $cluster was not running"
    fi
    [[ -n $cluster ]] && rm -rf "$cluster"
    rm -rf "$STATE"
}

cmd_halt() {
    running || die "no cluster is running in $STATE"
    as_server "$(cat "$STATE/bin")/pg_ctl" -D "$(cluster_dir)/data" -m fast -w stop >/dev/null
}

cmd_resume() {
    [[ -f $STATE/url ]] || die "no cluster in $STATE: run start first"
    running || start_server
}

cmd_url() {
    running && [[ -f $STATE/url ]] || die "no cluster is running in $STATE: run start first"
    cat "$STATE/url"
}

case ${1:-} in
start | stop | url | halt | resume) "cmd_$1" ;;
*) die "usage: $0 start|stop|url|halt|resume" ;;
esac
