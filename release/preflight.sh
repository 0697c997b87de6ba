#!/bin/sh
# Install a release folder the way users will, before it is published: serve it on loopback in
# GitHub's layout (<repo>/releases/download/<tag>/<file>), run the release's own install.sh
# against it (signature required), check the installed mux reports the release, then verify
# the folder with `mux-release verify` (every layer, SBOMs included, the smoke test for this
# machine's archive). With immutable releases a broken asset cannot be replaced once
# published, so the release workflow runs this on every runner that can execute a build.
#
#   release/preflight.sh RELEASE_DIR TAG
#
# Environment: MUX_REPO (owner/name, required); MUX_RELEASE, the command that runs mux-release
# (default "uv run --no-sync python -m release", run from the checkout); PYTHON, a Python 3 for the loopback server
# (default python3); MUX_MINISIGN_PUBLIC_KEY and MUX_SIGSTORE_TRUSTED_ROOT as mux-release
# verify reads them. POSIX sh: it runs under bash, dash and BusyBox (Alpine).
set -eu

if [ "$#" -ne 2 ]; then
    echo "usage: release/preflight.sh RELEASE_DIR TAG" >&2
    exit 2
fi
release_dir=$(cd "$1" && pwd)
tag=$2
: "${MUX_REPO:?set MUX_REPO=owner/name}"
python=${PYTHON:-python3}
mux_release=${MUX_RELEASE:-uv run --no-sync python -m release}

work=$(mktemp -d)
server=
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

site=$work/site/$MUX_REPO/releases/download/$tag
mkdir -p "$site"
cp "$release_dir"/* "$site"/

"$python" -u -m http.server 0 --bind 127.0.0.1 --directory "$work/site" >"$work/http.log" 2>&1 &
server=$!
# Wait for the server on a deadline (10 s), not a fixed sleep: it prints its port when ready.
port=
tries=0
while [ -z "$port" ]; do
    port=$(sed -n 's/.* port \([0-9][0-9]*\) .*/\1/p' "$work/http.log" | head -n 1)
    [ -n "$port" ] && break
    tries=$((tries + 1))
    if [ "$tries" -ge 100 ] || ! kill -0 "$server" 2>/dev/null; then
        echo "preflight: the loopback server did not start:" >&2
        cat "$work/http.log" >&2
        exit 1
    fi
    sleep 0.1
done

version=${tag#v}
echo "preflight: installing $MUX_REPO $tag from http://127.0.0.1:$port with its install.sh"
MUX_GITHUB_URL=http://127.0.0.1:$port \
    MUX_VERSION=$version \
    MUX_HOME=$work/home \
    MUX_INSTALL_DIR=$work/bin \
    MUX_NO_MODIFY_PATH=1 \
    MUX_REQUIRE_SIGNATURE=1 \
    sh "$release_dir/install.sh"

reported=$("$work/bin/mux" version --json)
echo "preflight: mux version --json: $reported"
case $reported in
    *"\"version\": \"$version\""*) ;;
    *)
        echo "preflight: the installed mux does not report version $version" >&2
        exit 1
        ;;
esac
case $reported in
    *'"development": false'*) ;;
    *)
        echo "preflight: the installed mux is a development build" >&2
        exit 1
        ;;
esac
notices=$("$work/bin/mux" version --notices)
[ -s "$notices" ] || {
    echo "preflight: the installed mux ships no notices ($notices)" >&2
    exit 1
}

echo "preflight: verifying $release_dir as mux update does"
# shellcheck disable=SC2086 # MUX_RELEASE is a command with its arguments
$mux_release verify "$release_dir" --repo "$MUX_REPO" --tag "$tag"
echo "preflight: $tag installs and verifies on this machine"
