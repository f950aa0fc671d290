#!/usr/bin/env bash
# test/package/package_test.sh: sbqueue's packages, built and installed as a user
# gets them, and the regression suite against what the Debian package installed.
#
#  1. META.json is valid PGXN Meta Spec 1.0.0 (validate_meta.py, with its schema
#     self-test).
#  2. One version everywhere: default_version in sbqueue.control (X.Y) is
#     debian/changelog's upstream version and, as X.Y.0, META.json's version and
#     provides.sbqueue.version. debian/copyright carries LICENSE's text. `make
#     dist` makes the zip PGXN takes, sbqueue-X.Y.Z.zip, META.json at its top.
#  3. The files git knows (tracked and untracked but not ignored, as they are in
#     the working tree, edits included) are copied to a temporary directory;
#     debian/control must be what debian/control.in makes; dpkg-buildpackage
#     -us -uc -b builds postgresql-PG-sbqueue there.
#  4. The .deb holds sbqueue.so, sbqueue.control and exactly the scripts the
#     Makefile installs (sbqueue--X.Y.sql, built from sql/sbqueue.sql, every
#     sql/sbqueue--A--B.sql and sql/sbqueue--0.1.sql), each as in the tree, and
#     depends on the server.
#  5. Installed, a fresh server with sbqueue preloaded (scripts/pgserver.sh, the
#     maintenance worker off as in scripts/test.sh) loads the package's library
#     and control file and passes `make installcheck` from the copied tree
#     (pg_regress, as the Makefile defines it). The isolation specs are left to
#     the suites that run after this one on the package it leaves installed:
#     they mostly wait for locks to run out, and the package's build is the
#     same source.
#  6. The installed files are still the package's afterwards (dpkg --verify).
#
# How the package is installed, SBQ_PACKAGE_INSTALL:
#   apt (default)  apt-get install --reinstall ./postgresql-PG-sbqueue_*.deb into
#                  the system, dependencies resolved (--reinstall: a rerun on the
#                  same version must replace files a `make install` overwrote).
#                  The package stays installed. This is what CI runs.
#   extract        dpkg -x into a private root holding a copy of PostgreSQL's trees
#                  (ROOT/usr/lib/postgresql/PG, ROOT/usr/share/postgresql/PG) from
#                  which any sbqueue already there is removed. PostgreSQL finds its
#                  lib and share directories relative to its binaries, so pg_config
#                  and a server started from ROOT see only the package's files.
#                  Nothing outside the temporary directory changes; step 6 checks
#                  the files against the package's md5sums.
# Only install_package and verify_package differ between the two.
#
# Needs root (apt-get; servers run as the postgres user) and installs the Debian
# packages it needs when they are missing. PG_MAJOR (15) picks the server; the
# server listens on the first free port from SBQ_PACKAGE_PORT (56801). Exits
# non-zero at the first failure and prints its cause last: for make
# installcheck, the regression diffs.
#
# When the version moves (say 0.12 to 0.13): default_version in sbqueue.control is
# the one source. Set "version" and provides.sbqueue.version in META.json to
# 0.13.0, and put an entry for 0.13 on top of debian/changelog (`dch -v 0.13`,
# from devscripts, or by hand); this test fails until the three agree. The
# Makefile derives the rest (sbqueue--0.13.sql, the zip's name), and the checks
# here read the version from sbqueue.control.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

PG_MAJOR=${PG_MAJOR:-15}
mode=${SBQ_PACKAGE_INSTALL:-apt}
# Debian's python3-jsonschema belongs to Debian's python3
PYTHON=/usr/bin/python3
pkg=postgresql-$PG_MAJOR-sbqueue
lib=usr/lib/postgresql/$PG_MAJOR/lib
ext=usr/share/postgresql/$PG_MAJOR/extension

say() { echo "package: [${SECONDS}s] $*"; }
# the cause of the failure, printed last
fail() {
    echo "package: FAILED: $*"
    exit 1
}
# run a command with its output in log $1; on failure show the end of the log
logged() {
    local log=$1
    shift
    if "$@" >"$log" 2>&1; then
        return 0
    fi
    tail -n 40 "$log"
    return 1
}

case $mode in
apt | extract) ;;
*) fail "SBQ_PACKAGE_INSTALL is '$mode'; it must be apt or extract" ;;
esac
[ "$(id -u)" = 0 ] || fail "run as root: apt-get, and servers run as the postgres user"

work=$(mktemp -d /tmp/sbqueue-package.XXXXXX)
chmod 755 "$work"
server=$work/pg
prefix=            # where the package's files are: "" (the system) or the private root
pg_config=
cleanup() {
    if [ -n "$pg_config" ]; then
        PG_CONFIG=$pg_config scripts/pgserver.sh stop "$server" >/dev/null 2>&1
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# what the build and the test need, from Debian, when missing
ensure_packages() {
    local p missing=()
    for p in make gcc git dpkg-dev debhelper "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" \
        postgresql-server-dev-all python3 python3-jsonschema; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    logged "$work/apt-deps.log" apt-get update -qq &&
        logged "$work/apt-deps.log" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
ensure_packages || fail "could not install the Debian packages the build needs"

# 1. META.json
"$PYTHON" test/package/validate_meta.py --self-test META.json ||
    fail "META.json is not valid PGXN Meta Spec 1.0.0 (errors above)"

version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" sbqueue.control)
[ -n "$version" ] || fail "sbqueue.control has no default_version"
semver=$version
[[ $semver =~ ^[0-9]+\.[0-9]+$ ]] && semver=$semver.0

# 2. one version, one licence
read -r meta_version meta_ext_version < <("$PYTHON" -c '
import json
m = json.load(open("META.json"))
print(m["version"], m["provides"]["sbqueue"]["version"])')
[ "$meta_version" = "$semver" ] ||
    fail "META.json's version is $meta_version; sbqueue.control's default_version $version makes it $semver"
[ "$meta_ext_version" = "$semver" ] ||
    fail "META.json's provides.sbqueue.version is $meta_ext_version; sbqueue.control's default_version $version makes it $semver"
deb_version=$(dpkg-parsechangelog -l debian/changelog -S Version) || fail "debian/changelog does not parse"
deb_upstream=${deb_version#*:}
[[ $deb_upstream == *-* ]] && deb_upstream=${deb_upstream%-*}
[ "$deb_upstream" = "$version" ] ||
    fail "debian/changelog's version is $deb_version; sbqueue.control's default_version is $version"
diff <(sed -n '/^Permission/,$p' LICENSE) \
    <(sed -n '/^License: PostgreSQL$/,/^[^ ]/{/^ /p}' debian/copyright | sed -e 's/^ //' -e 's/^\.$//') >"$work/licence.diff" ||
    { cat "$work/licence.diff"; fail "debian/copyright's licence text is not LICENSE's (diff above: < LICENSE, > debian/copyright)"; }
say "version $version in sbqueue.control, debian/changelog ($deb_version) and META.json ($semver)"

# and the zip for PGXN
make -s dist DIST_DIR="$work" PG_CONFIG="/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" ||
    fail "make dist failed"
zip_problems=$("$PYTHON" - "$work/sbqueue-$semver.zip" "sbqueue-$semver" <<'EOF'
import json, sys, zipfile
path, top = sys.argv[1], sys.argv[2]
try:
    z = zipfile.ZipFile(path)
except OSError as e:
    sys.exit(f"no {path.rsplit('/', 1)[-1]}: {e.strerror}")
names = set(z.namelist())
for n in sorted(names):
    if not n.startswith(top + "/"):
        print(f"{n} is outside {top}/")
for f in ("META.json", "Makefile", "sbqueue.control", "sql/sbqueue.sql", "README.md", "LICENSE"):
    if f"{top}/{f}" not in names:
        print(f"{top}/{f} is missing (make dist takes the last commit: commit first)")
if f"{top}/META.json" in names:
    v = json.loads(z.read(f"{top}/META.json"))["version"]
    if top != f"sbqueue-{v}":
        print(f"the zip is {top} but its META.json says version {v} (commit first)")
EOF
) || fail "make dist: $zip_problems"
[ -z "$zip_problems" ] || fail "make dist: $zip_problems"
say "make dist made sbqueue-$semver.zip"

# 3. the working tree's files, copied and built
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || fail "$root is not a git work tree"
src=$work/build/sbqueue-$version
mkdir -p "$src"
git ls-files -co --exclude-standard -z |
    while IFS= read -r -d '' f; do
        # tracked but deleted in the working tree: not part of it
        if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
    done |
    tar --null -T - -cf - | tar -xf - -C "$src" || fail "could not copy the working tree"
# the extension files the Makefile installs: the built sbqueue--X.Y.sql and sql/'s others
expected_scripts=$( (cd "$src/sql" && ls sbqueue--*.sql; echo "sbqueue--$version.sql") | sort -u)
(cd "$src" && pg_buildext checkcontrol) >"$work/checkcontrol.log" 2>&1 ||
    { cat "$work/checkcontrol.log"; fail "debian/control is not what debian/control.in makes: run pg_buildext updatecontrol"; }
say "building $pkg with dpkg-buildpackage -us -uc -b"
(cd "$src" && logged "$work/build.log" dpkg-buildpackage -us -uc -b -j"$(nproc)") ||
    fail "dpkg-buildpackage failed (the end of its log above)"
debs=("$work/build/${pkg}_"*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "the build made no single ${pkg}_*.deb: $(ls "$work/build")"
deb=${debs[0]}
say "built $(basename "$deb")"

# 4. what the .deb holds
deb_files=$(dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | sed 's|^\./||' | sort)
[ -n "$deb_files" ] || fail "dpkg-deb cannot list $(basename "$deb")"
grep -qx "$lib/sbqueue.so" <<<"$deb_files" || fail "the package has no $lib/sbqueue.so"
got_scripts=$(sed -n "s|^$ext/||p" <<<"$deb_files" | grep -v '^sbqueue\.control$')
grep -qx "$ext/sbqueue.control" <<<"$deb_files" || fail "the package has no $ext/sbqueue.control"
[ "$got_scripts" = "$expected_scripts" ] ||
    fail "the package's extension scripts are not sbqueue--$version.sql and sql/'s others: $(diff <(echo "$expected_scripts") <(echo "$got_scripts") | grep '^[<>]' | sed 's/^</missing/; s/^>/extra/' | tr '\n' ' ')"
stray=$(grep -v -e "^$lib/" -e "^$ext/" -e "^usr/share/doc/$pkg/" <<<"$deb_files")
[ -z "$stray" ] || fail "the package installs files outside PostgreSQL's directories: $stray"
# each as in the tree: the control file, the built script from sql/sbqueue.sql, the others from sql/
in_deb() { dpkg-deb --fsys-tarfile "$deb" | tar -xOf - "./$1"; }
cmp -s <(in_deb "$ext/sbqueue.control") "$src/sbqueue.control" || fail "the package's sbqueue.control is not the tree's"
for s in $expected_scripts; do
    from=$src/sql/$s
    [ "$s" = "sbqueue--$version.sql" ] && from=$src/sql/sbqueue.sql
    cmp -s <(in_deb "$ext/$s") "$from" || fail "the package's $s is not ${from#"$src"/}"
done
depends=$(dpkg-deb -f "$deb" Depends)
[[ ", $depends," =~ ,\ postgresql-$PG_MAJOR[\ ,] ]] ||
    fail "the package does not depend on postgresql-$PG_MAJOR: Depends: $depends"
say "the package holds sbqueue.so, sbqueue.control and $(wc -w <<<"$expected_scripts") scripts; Depends: $depends"

# 5. installed, and tested
install_package() {
    case $mode in
    apt)
        say "apt-get install --reinstall ./$(basename "$deb")"
        DEBIAN_FRONTEND=noninteractive logged "$work/apt.log" \
            apt-get install -y --reinstall --no-install-recommends "$deb" || return 1
        prefix=
        ;;
    extract)
        prefix=$work/root
        say "dpkg -x $(basename "$deb") into a copy of PostgreSQL $PG_MAJOR's trees"
        mkdir -p "$prefix/usr/lib/postgresql" "$prefix/usr/share/postgresql" &&
            cp -a "/usr/lib/postgresql/$PG_MAJOR" "$prefix/usr/lib/postgresql/" &&
            cp -a "/usr/share/postgresql/$PG_MAJOR" "$prefix/usr/share/postgresql/" || return 1
        # only the package's sbqueue may be found there
        rm -rf "$prefix/$lib/sbqueue.so" "$prefix/$lib/bitcode/sbqueue" "$prefix/$lib/bitcode/sbqueue.index.bc" \
            "$prefix/$ext/sbqueue.control" "$prefix/$ext"/sbqueue--*.sql
        dpkg -x "$deb" "$prefix" || return 1
        ;;
    esac
    pg_config=$prefix/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
}
install_package || fail "installing $(basename "$deb") ($mode) failed"
[ "$("$pg_config" --pkglibdir)" = "$prefix/$lib" ] ||
    fail "$pg_config --pkglibdir is $("$pg_config" --pkglibdir), not $prefix/$lib"
export PG_CONFIG=$pg_config
bindir=$("$pg_config" --bindir)

free_port() {
    local p
    for p in $(seq "$1" $(($1 + 198))); do
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
port=$(free_port "${SBQ_PACKAGE_PORT:-56801}") || fail "no free port from ${SBQ_PACKAGE_PORT:-56801}"
scripts/pgserver.sh start "$server" "$port" --preload >/dev/null || fail "the server did not start"
export PGHOST=$server PGPORT=$port PGUSER=postgres
psql() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -d postgres "$@"; }
# the regression tests count what sbq_maintain() does themselves: no worker in between
psql -c "ALTER SYSTEM SET sbqueue.enable_maintenance_worker = off" -c "SELECT pg_reload_conf()" >/dev/null ||
    fail "could not turn the maintenance worker off"
# the server runs the package's library and sees its control file
postmaster=$(head -n 1 "$server/data/postmaster.pid")
loaded=$(awk '$NF ~ /\/sbqueue\.so$/ { print $NF; exit }' "/proc/$postmaster/maps")
[ "$loaded" = "$prefix/$lib/sbqueue.so" ] ||
    fail "the server loaded '${loaded:-no sbqueue.so}', not the package's $prefix/$lib/sbqueue.so"
available=$(psql -At -c "SELECT default_version FROM pg_available_extensions WHERE name = 'sbqueue'")
[ "$available" = "$version" ] || fail "the server offers sbqueue '$available', not $version"
say "server on port $port runs $loaded (sbqueue $available preloaded)"

say "make installcheck (pg_regress)"
rm -rf "$src/results" "$src/regression.diffs" "$src/regression.out" "$src/output_iso"
if ! (cd "$src" && make -s PG_CONFIG="$pg_config" installcheck ISOLATION=) >"$work/installcheck.log" 2>&1; then
    tail -n 30 "$work/installcheck.log"
    echo "package: FAILED: make installcheck against the installed package; regression.diffs:"
    cat "$src/regression.diffs" "$src/output_iso/regression.diffs" 2>/dev/null
    exit 1
fi
say "make installcheck: $(grep -o 'All [0-9]* tests passed' "$work/installcheck.log" | paste -sd ',' | sed 's/,/, /g')"

PG_CONFIG=$pg_config scripts/pgserver.sh stop "$server" >/dev/null

# 6. the files are still the package's
verify_package() {
    local out
    case $mode in
    apt)
        out=$(dpkg --verify "$pkg" 2>&1) && [ -z "$out" ] || { echo "$out"; return 1; }
        ;;
    extract)
        dpkg-deb -e "$deb" "$work/DEBIAN" || return 1
        out=$(cd "$prefix" && md5sum --quiet -c "$work/DEBIAN/md5sums" 2>&1) || { echo "$out"; return 1; }
        ;;
    esac
}
verify_package || fail "the installed files are not the package's (above)"
say "the installed files match the package ($mode)"
say "ok"
