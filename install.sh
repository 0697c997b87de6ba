#!/bin/sh
# Install mux, the terminal multiplexer:
#
#   curl -fsSL https://raw.githubusercontent.com/OWNER/mux/main/install.sh | sh
#   curl -fsSL .../install.sh | sh -s -- --help
#
# What it does: finds the release (a feed's signed, unexpired release list, or GitHub's
# latest), downloads the build for this machine into MUX_HOME, verifies it (SHA-256 from
# SHA256SUMS and manifest.json, minisign signature of SHA256SUMS: always for a feed, else
# when minisign is installed), runs it once, moves it into MUX_HOME/versions/<version> and
# points <bin dir>/mux at it. `mux update` keeps it up to date from there
# (docs/contracts.md, "Installed layout"). Nothing runs as root, nothing runs from /tmp.
# Everything read from the network is bounded in size and time, and shown escaped.
#
# Every line of this file is inside a function except these settings; the last line
# calls main, so a download cut short anywhere runs nothing.

set -eu

# ---------------------------------------------------------------------------------------
# Release settings. The release process writes the real values into the copy it publishes.
#
# The GitHub repository (owner/name) releases come from; MUX_REPO overrides it.
MUX_DEFAULT_REPO='OWNER/mux'
# Trusted minisign public keys (the base64 line of a minisign .pub file), separated by
# spaces: the current key and the next one, for rotation. SHA256SUMS.minisig must verify
# with one of them whenever minisign is installed. On purpose there is no environment
# override: the keys are part of the script you chose to run, so nothing in the
# environment (a CI variable, a copied snippet) can silently swap the trust root.
MUX_MINISIGN_KEYS=''
# The machine policy (docs/contracts.md, "Machine policy"): a root-owned file with which an
# administrator decides for every mux and every install.sh on the machine. A release may
# name another path; nothing in the environment can.
MUX_POLICY_FILE_PATH='/etc/mux/policy.toml'
# The schema of install.json (docs/contracts.md), shared with mux: written from mux's own
# definition (updater/core/retention.py, RECORD_SCHEMA) into every copy mux-release makes.
MUX_RECORD_SCHEMA='1'
# ---------------------------------------------------------------------------------------

# shellcheck disable=SC2016 # the help text shows variable names, unexpanded
usage() {
    printf '%s\n' \
        'Install mux into your home directory (no root needed).' \
        '' \
        'Usage: sh install.sh [options]      (or: curl -fsSL <url>/install.sh | sh -s -- [options])' \
        '' \
        'Options:' \
        '  --version VERSION   install this version (e.g. 0.2.0) instead of the latest' \
        '  --no-modify-path    do not edit shell startup files; print the line to add instead' \
        '  --require-signature fail unless the minisign signature of SHA256SUMS verifies' \
        '                      (always required for a feed: MUX_UPDATE_SOURCE)' \
        '  --allow-expired-feed  install from a feed whose signed release list has expired' \
        '                      (an air-gapped mirror synced on purpose); warns loudly' \
        '  --allow-downgrade   install a release older (by version or signed time) than the installed one' \
        '  --dry-run           print the plan (target, URLs, checks, paths, files to edit); change nothing' \
        '  --uninstall         remove the installed versions, the mux link, the install record' \
        '                      and the PATH blocks this script added; nothing else' \
        '  -q, --quiet         print errors only' \
        '  -v, --verbose       say more, including how to verify a release by hand' \
        '  -h, --help          show this help' \
        '' \
        'Environment:' \
        '  MUX_VERSION            same as --version' \
        '  MUX_HOME               where versions live (default: $XDG_DATA_HOME/mux or ~/.local/share/mux)' \
        '  MUX_INSTALL_DIR        where the mux link goes (default: $XDG_BIN_HOME or ~/.local/bin)' \
        '  MUX_TARGET             build to install (default: detected), e.g. x86_64-unknown-linux-musl' \
        '  MUX_REPO               GitHub repository owner/name to install from' \
        '  MUX_UPDATE_SOURCE      a mirror or static feed (releases.json + v<version>/ folders), as' \
        '                         mux update --source takes it; mux update keeps using it.' \
        '                         MUX_DOWNLOAD_URL, its older name, works too' \
        '  MUX_GITHUB_URL         GitHub web address (default https://github.com)' \
        '  MUX_GITHUB_TOKEN       token sent to the GitHub host only, via curl (GITHUB_TOKEN works too)' \
        '  MUX_NO_MODIFY_PATH=1   same as --no-modify-path' \
        '  MUX_REQUIRE_SIGNATURE=1  same as --require-signature' \
        '  MUX_INSTALL_PRINT=target print the detected target and exit' \
        '  MUX_ALLOW_EXPIRED_FEED=1  same as --allow-expired-feed' \
        '  MUX_LOCK_TIMEOUT       seconds to wait for another install or update (default 10)' \
        '  MUX_HTTP_DEADLINE      seconds for each small document, tries and redirects included (default 30)' \
        '  MUX_HTTP_MIN_SPEED     the archive download gives up below this many bytes/s (default 1024; 0: never)' \
        '  MUX_HTTP_SPEED_WINDOW  ... averaged over this many seconds (default 30)' \
        '  NO_COLOR               no colours' \
        '  HTTPS_PROXY, HTTP_PROXY, NO_PROXY  proxies, for curl and wget alike (lower-case names too)' \
        '' \
        'Limits: each small document (release list, manifest, checksums, signatures) at most' \
        '1 MiB; the archive at most the size its signed manifest gives.' \
        'A feed'"'"'s release list must be signed (releases.json.minisig), not expired, and not older' \
        '(by its sequence number) than one this machine saw: see <state dir>/mux/feed-seq.' \
        '' \
        'The machine policy (an administrator'"'"'s root-owned '"$MUX_POLICY_FILE_PATH"') decides for' \
        'every user: it may turn installs off, name the one source, add keys, or refuse' \
        'options; no option or variable can loosen it.' \
        '' \
        'Exit status: 0 done, 1 error, 2 usage error, 3 verification failed,' \
        '4 the machine policy does not allow it.'
}

# ---- talking ----------------------------------------------------------------------------

setup_colours() {
    c_red='' c_yellow='' c_bold='' c_reset=''
    if [ -t 2 ] && [ -z "${NO_COLOR:-}" ] && [ "${TERM:-dumb}" != dumb ]; then
        c_red=$(printf '\033[31m') c_yellow=$(printf '\033[33m')
        c_bold=$(printf '\033[1m') c_reset=$(printf '\033[0m')
    fi
}

say() {
    [ "$opt_quiet" = 1 ] || printf '%s\n' "$(printable "$*")" >&2
}

# A line in bold (on a terminal): the values in it are escaped like any message.
headline() {
    [ "$opt_quiet" = 1 ] || printf '%s%s%s%s\n' "$c_bold" "$(printable "$1")" "$c_reset" "$(printable "${2:-}")" >&2
}


verbose() {
    [ "$opt_verbose" != 1 ] || printf '%s\n' "$(printable "$*")" >&2
}


warn() {
    [ "$opt_quiet" = 1 ] || printf '%swarning:%s %s\n' "$c_yellow" "$c_reset" "$(printable "$*")" >&2
}


# die CODE MESSAGE [HINT]: one error line (what failed, with its URL), one line on what to do.
die() {
    die_code=$1
    printf '%serror:%s %s\n' "$c_red" "$c_reset" "$(printable "$2")" >&2
    if [ $# -ge 3 ] && [ -n "$3" ]; then
        printf '  to fix: %s\n' "$(printable "$3")" >&2
    fi
    exit "$die_code"
}


# Messages carry values from the network (versions, tags, URLs, a server's error text),
# which may hold terminal control sequences. Every message is shown with its control
# characters (C0, DEL, and C1 as UTF-8) written as \xNN, so no ESC byte reaches the
# terminal, and cut at 2000 bytes. A message of fewer than 2000 letters, digits, spaces and
# /.,:=_+@%- (most of them) has nothing to escape or cut: shown as it is, without an awk.
printable() {
    case $1 in
        *[!ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789\ /.,:=_+@%-]*) ;;
        *)
            if [ "${#1}" -lt 2000 ]; then
                printf '%s' "$1"
                return 0
            fi
            ;;
    esac
    printf '%s\n' "$1" | LC_ALL=C awk '
        BEGIN { for (i = 1; i < 256; i++) code[sprintf("%c", i)] = i; left = 2000 }
        left > 0 {
            line = substr($0, 1, left); left -= length(line) + 1
            out = (NR > 1) ? "\\x0a" : ""
            n = length(line)
            for (i = 1; i <= n; i++) {
                c = substr(line, i, 1); k = code[c]
                if (k < 32 || k == 127) { out = out sprintf("\\x%02x", k); continue }
                if (k < 128) { out = out c; continue }
                # Only well-formed UTF-8 passes: a lone byte >= 0x80 (0x9b is CSI on an 8-bit
                # terminal) and a C1 character encoded as UTF-8 are written as \xNN.
                more = (k >= 194 && k <= 223) ? 1 : (k >= 224 && k <= 239) ? 2 : (k >= 240 && k <= 244) ? 3 : 0
                ok = more > 0 && i + more <= n
                for (j = 1; ok && j <= more; j++) {
                    kj = code[substr(line, i + j, 1)]
                    if (kj < 128 || kj > 191) ok = 0
                }
                if (ok && k == 194 && code[substr(line, i + 1, 1)] < 160) {
                    out = out sprintf("\\xc2\\x%02x", code[substr(line, i + 1, 1)]); i++; continue
                }
                if (!ok) { out = out sprintf("\\x%02x", k); continue }
                out = out substr(line, i, more + 1); i += more
            }
            printf "%s", out
        }
        END { if (left < 0) printf "..." }'
}

usage_error() {
    die 2 "$1" 'run with --help to see the options'
}

# ---- small helpers ------------------------------------------------------------------------

has() {
    command -v "$1" >/dev/null 2>&1
}

# Quote a string for POSIX sh (and fish) single quotes.
sh_quote() {
    printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

fish_quote() {
    printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g")"
}

json_escape() {
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
}

json_unescape() {
    printf '%s' "$1" | sed -e 's/\\"/"/g' -e 's/\\\//\//g' -e 's/\\\\/\\/g'
}

is_version() {
    printf '%s\n' "$1" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+([-.+]?[0-9A-Za-z.]+)?$' &&
        [ "${#1}" -le 64 ] || return 1
    # And valid by PEP 440, as mux reads it (1.2.3-foo matches the pattern, but is not).
    iv_line=$(printf '%s\n' "$1" | version_keys)
    case $iv_line in "	"*) return 1 ;; esac
}

is_sha256() {
    [ "${#1}" = 64 ] || return 1
    case $1 in *[!0123456789abcdef]*) return 1 ;; esac
}

# A decimal integer of at most 1000 digits (mux's rule, docs/contracts.md): far beyond any
# time, size or counter, and a longer one (signed with a stolen key) would be recorded in
# feed-seq or install.json where mux could not read it.
is_decimal() {
    case $1 in '' | *[!0-9]*) return 1 ;; esac
    [ "${#1}" -le 1000 ]
}

# A decimal number without leading zeros (sh arithmetic reads 010 as octal).
strip_zeros() {
    sz_value=$1
    while :; do
        case $sz_value in
            0?*) sz_value=${sz_value#0} ;;
            *) break ;;
        esac
    done
    printf '%s' "$sz_value"
}


# dec_lt A B: decimal integers of any length, A < B. Never sh arithmetic: mksh's is 32-bit,
# and a signed sequence number or time may be larger than any machine integer.
dec_lt() {
    LC_ALL=C awk -v a="$1" -v b="$2" 'BEGIN {
        a = a ""; b = b ""; sub(/^0+/, "", a); sub(/^0+/, "", b)
        if (length(a) != length(b)) exit !(length(a) < length(b))
        exit !(a < b)
    }'
}


# Seconds since the epoch: date +%s (GNU, BusyBox, BSD), else POSIX awk's srand(), which
# seeds from the time of day and returns the previous seed.
now_unix() {
    nu_now=$(date +%s 2>/dev/null) || nu_now=
    is_decimal "$nu_now" || nu_now=$(awk 'BEGIN { srand(); print srand() }')
    printf '%s' "$nu_now"
}


# A Unix time as "YYYY-MM-DD HH:MM:SS UTC" (civil-from-days arithmetic; no date -d or -r,
# which differ between GNU and BSD).
utc_text() {
    LC_ALL=C awk -v t="$1" 'BEGIN {
        if (t !~ /^[0-9]+$/ || length(t) > 12) { print "Unix time " t; exit }
        t += 0; s = t % 86400; z = (t - s) / 86400 + 719468
        era = int(z / 146097); doe = z - era * 146097
        yoe = int((doe - int(doe / 1460) + int(doe / 36524) - int(doe / 146096)) / 365)
        y = yoe + era * 400; doy = doe - (365 * yoe + int(yoe / 4) - int(yoe / 100))
        mp = int((5 * doy + 2) / 153); d = doy - int((153 * mp + 2) / 5) + 1
        m = (mp < 10) ? mp + 3 : mp - 9; if (m <= 2) y++
        printf "%04d-%02d-%02d %02d:%02d:%02d UTC\n", y, m, d, int(s / 3600), int(s % 3600 / 60), s % 60
    }'
}


# The key id of a minisign public key (its base64 line) as minisign prints it: bytes 2-9
# of the decoded key, a little-endian integer, in upper-case hex without leading zeros.
key_id_of() {
    LC_ALL=C awk -v k="$1" 'BEGIN {
        a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        nb = 0
        for (i = 1; i <= 16; i += 4) {
            v = 0
            for (j = 0; j < 4; j++) {
                c = index(a, substr(k, i + j, 1)); if (c == 0) exit 1
                v = v * 64 + c - 1
            }
            b[nb++] = int(v / 65536); b[nb++] = int(v / 256) % 256; b[nb++] = v % 256
        }
        s = ""; for (i = 9; i >= 2; i--) s = s sprintf("%02X", b[i])
        sub(/^0+/, "", s); print (s == "") ? "0" : s
    }'
}


# comment_value COMMENT KEY: the value of KEY in a minisign trusted comment, whose tokens are
# tab-separated "key:value" or a bare word ("hashed"); empty when absent. Fails on a
# comment of more than one line, an empty key, or KEY given twice (two readers could
# otherwise disagree about what was signed).
comment_value() {
    printf '%s\n' "$1" | LC_ALL=C awk -F '\t' -v key="$2" '
        NR > 1 { bad = 1; exit }
        {
            for (i = 1; i <= NF; i++) {
                p = index($i, ":"); k = p ? substr($i, 1, p - 1) : $i
                if (k == "") bad = 1
                if (k == key) { n++; v = p ? substr($i, p + 1) : "" }
            }
        }
        END { if (bad || n > 1) exit 1; print v }'
}


file_size() {
    fs_size=$(wc -c <"$1" 2>/dev/null) || fs_size=
    # (BSD wc pads the number with spaces; GNU and BusyBox wc do not, and need no tr.)
    case $fs_size in *' '*) fs_size=$(printf '%s' "$fs_size" | tr -d ' ') ;; esac
    is_decimal "$fs_size" || return 1
    printf '%s' "$fs_size"
}


# PEP 440 for the versions tags take (what packaging.version, and so mux, does): vkey(v) is a
# string whose byte order (LC_ALL=C) is the order of the versions, "" for an invalid one;
# after a call, vkey_pre tells a pre-release (an a, b, rc or dev segment). Release numbers
# lose trailing zeros (1.2.0 == 1.2); a missing pre-release sorts above every pre-release
# but a dev-only one below (1.0.dev1 < 1.0a1 < 1.0 < 1.0.post1); local versions sort above
# their public one, numeric parts above alphanumeric ones. Numbers are compared by length,
# then digits, so they may be longer than any machine integer.
version_awk() {
    printf '%s\n' '
    function vnum(d) { sub(/^0+/, "", d); return sprintf("%02d", length(d)) d }
    function vkey(v,   s, n, i, parts, k, m, lab, num, has_pre, has_post, has_dev, pre, post, dev, loc) {
        vkey_pre = 0
        s = tolower(v)
        if (!match(s, /^[0-9]+(\.[0-9]+)*/)) return ""
        n = split(substr(s, 1, RLENGTH), parts, ".")
        s = substr(s, RLENGTH + 1)
        while (n > 0 && parts[n] ~ /^0+$/) n--
        k = "v"
        for (i = 1; i <= n; i++) k = k "1" vnum(parts[i])
        k = k "0"
        if (match(s, /^[-_.]?(alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*/)) {
            m = substr(s, 1, RLENGTH); s = substr(s, RLENGTH + 1)
            match(m, /[a-z]+/); lab = substr(m, RSTART, RLENGTH)
            num = substr(m, RSTART + RLENGTH); sub(/^[-_.]/, "", num)
            if (lab == "alpha" || lab == "a") lab = "a"
            else if (lab == "beta" || lab == "b") lab = "b"
            else lab = "c"
            has_pre = 1; pre = "1" lab vnum(num)
        }
        if (match(s, /^-[0-9]+/)) {
            has_post = 1; post = "1" vnum(substr(s, 2, RLENGTH - 1)); s = substr(s, RLENGTH + 1)
        } else if (match(s, /^[-_.]?(post|rev|r)[-_.]?[0-9]*/)) {
            m = substr(s, 1, RLENGTH); s = substr(s, RLENGTH + 1)
            sub(/^[-_.]?[a-z]+[-_.]?/, "", m)
            has_post = 1; post = "1" vnum(m)
        }
        if (match(s, /^[-_.]?dev[-_.]?[0-9]*/)) {
            m = substr(s, 1, RLENGTH); s = substr(s, RLENGTH + 1)
            sub(/^[-_.]?dev[-_.]?/, "", m)
            has_dev = 1; dev = "1" vnum(m)
        }
        loc = "0"
        if (match(s, /^\+[a-z0-9]+([-_.][a-z0-9]+)*/)) {
            m = substr(s, 2, RLENGTH - 1); s = substr(s, RLENGTH + 1)
            n = split(m, parts, /[-_.]/); loc = "1"
            for (i = 1; i <= n; i++) loc = loc ((parts[i] ~ /^[0-9]+$/) ? "2" vnum(parts[i]) : "1" parts[i] "!")
            loc = loc "0"
        }
        if (s != "") return ""
        if (!has_pre) pre = (!has_post && has_dev) ? "0" : "2"
        if (!has_post) post = "0"
        if (!has_dev) dev = "2"
        vkey_pre = has_pre || has_dev
        return k pre post dev loc
    }'
}


# Versions on standard input, one a line, to "key<TAB>pre<TAB>version" (key empty when the
# version is invalid, pre 1 for a pre-release): the order and channel rules in one place.
version_keys() {
    LC_ALL=C awk "$(version_awk)"'
        { k = vkey($0); printf "%s\t%d\t%s\n", k, vkey_pre, $0 }'
}


# A pre-release by its version string (the only thing that decides it: flags in a feed's
# list and GitHub's "latest" are not signed).
is_prerelease() {
    ip_line=$(printf '%s\n' "$1" | version_keys)
    case $ip_line in
        *"	1	"*) return 0 ;;
    esac
    return 1
}

# The authority of a URL (user info, host, port), lower-cased: what follows "scheme://" up
# to the first "/", "?" or "#", as curl and wget read it.
url_authority() {
    ua_rest=${1#*://}
    ua_rest=${ua_rest%%[/?#]*}
    case $ua_rest in
        *[ABCDEFGHIJKLMNOPQRSTUVWXYZ]*) printf '%s' "$ua_rest" | tr 'ABCDEFGHIJKLMNOPQRSTUVWXYZ' 'abcdefghijklmnopqrstuvwxyz' ;;
        *) printf '%s' "$ua_rest" ;;
    esac
}

# The host of a URL without brackets, lower-cased (for matching NO_PROXY).
url_host() {
    uh_auth=$(url_authority "$1")
    uh_auth=${uh_auth##*@}
    case $uh_auth in
        \[*) uh_auth=${uh_auth#\[} && uh_auth=${uh_auth%%]*} ;;
        *) uh_auth=${uh_auth%%:*} ;;
    esac
    printf '%s' "$uh_auth"
}

# Loopback is exactly localhost, a dotted quad 127.d.d.d (each part a decimal 0-255) or
# [::1], with at most a numeric port: no user info ("http://127.0.0.1@example.com" goes to
# example.com), and nothing that only starts like one ("127.0.0.1.example.com", "127.1",
# "localhost.example.com"), which name other machines or leave the answer to a resolver.
is_loopback_url() {
    case $1 in http://* | https://*) ;; *) return 1 ;; esac
    il_auth=$(url_authority "$1")
    case $il_auth in
        '[::1]' | '[::1]:'*) il_host='[::1]' ;;
        *) il_host=${il_auth%%:*} ;;
    esac
    il_port=${il_auth#"$il_host"}
    case $il_port in
        '') ;;
        : | :*[!0-9]*) return 1 ;;
        :*) ;;
        *) return 1 ;;
    esac
    case $il_host in
        localhost | '[::1]') return 0 ;;
        127.*) ;;
        *) return 1 ;;
    esac
    il_rest=${il_host#127.}.
    il_parts=0
    while [ -n "$il_rest" ]; do
        il_part=${il_rest%%.*}
        il_rest=${il_rest#*.}
        # No leading zeros: resolvers read 010 as octal, and 0999 as a host name.
        case $il_part in '' | *[!0-9]* | 0?* | ????*) return 1 ;; esac
        [ "$il_part" -le 255 ] || return 1
        il_parts=$((il_parts + 1))
    done
    [ "$il_parts" = 3 ]
}

# https anywhere, plain http only to this machine.
check_url_scheme() {
    case $1 in
        https://*) return 0 ;;
        http://*) is_loopback_url "$1" && return 0 ;;
    esac
    return 1
}

# Turn a path into an absolute one without resolving symlinks (the link must name the
# path the user chose, as mux update computes it).
absolute_path() {
    case $1 in
        /*) printf '%s' "$1" ;;
        *) printf '%s/%s' "$(pwd)" "$1" ;;
    esac
}


# A JSON document flattened to one line per scalar: "path<TAB>type<TAB>value", where path
# joins object keys and array indexes with "/" (a "/" inside a key is written "\/"), type is
# s (string, raw: escapes kept as written) or l (number, true, false, null). Fails on
# anything that is not valid JSON, so no value is ever read from a broken document, and on a
# document larger than json_limit, before reading it. Plain POSIX awk, no jq or python.
#
# Linear in the input, whatever its shape: no token of JSON spans lines (a raw newline in a
# string is invalid), so each line is split at its quotes once (split is linear) and the
# parser's state (a stack of open containers) carries over from line to line. Nothing is
# ever cut from the front of a string or appended to a growing one.
json_flatten() {
    jf_size=$(file_size "$1") || return 1
    [ "$jf_size" -le "$json_limit" ] || return 1
    LC_ALL=C awk '
    function fail() { bad = 1; exit 1 }
    # A value starts: where it goes (its path), and whether one may come here.
    function begin_value(   kind) {
        if (d == 0) { if (done) fail(); vpath = ""; done = 1; return }
        kind = ctype[d]
        if (kind == "o") {
            if (state[d] != "value") fail()
            vpath = (cpath[d] == "" ? "" : cpath[d] "/") ckey[d]
        } else {
            if (state[d] != "first" && state[d] != "value") fail()
            vpath = (cpath[d] == "" ? "" : cpath[d] "/") cidx[d]
            cidx[d]++
        }
        state[d] = "after"
    }
    function open_container(kind) {
        begin_value()
        if (d >= 32) fail()
        d++; ctype[d] = kind; cpath[d] = vpath; state[d] = "first"; cidx[d] = 0
    }
    function close_container(kind) {
        if (d == 0 || ctype[d] != kind) fail()
        if (state[d] != "first" && state[d] != "after") fail()
        d--
    }
    function literal(text) {
        if (text !~ /^(true|false|null|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?)$/) fail()
        begin_value()
        print vpath "\tl\t" text
    }
    function string(text,   copy) {
        if (text ~ ctl) fail()
        copy = text
        gsub(/\\(["\\\/bfnrt]|u[0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f][0-9A-Fa-f])/, "", copy)
        if (index(copy, "\\")) fail()
        if (d > 0 && ctype[d] == "o" && (state[d] == "first" || state[d] == "key")) {
            # A "/" in a key would forge a path: such keys get a byte no lookup names.
            gsub(/\//, sep, text)
            ckey[d] = text; state[d] = "colon"
            return
        }
        begin_value()
        print vpath "\ts\t" text
    }
    # The text between strings: punctuation, white space, numbers and literals.
    function outside(seg,   n, i, j, c) {
        n = length(seg)
        for (i = 1; i <= n; i++) {
            c = substr(seg, i, 1)
            if (index(word, c)) {
                for (j = i + 1; j <= n && index(word, substr(seg, j, 1)); j++) ;
                literal(substr(seg, i, j - i))
                i = j - 1
                continue
            }
            if (c == " " || c == "\t" || c == "\r") continue
            if (c == "{") open_container("o")
            else if (c == "[") open_container("a")
            else if (c == "}") close_container("o")
            else if (c == "]") close_container("a")
            else if (c == ":") {
                if (d == 0 || ctype[d] != "o" || state[d] != "colon") fail()
                state[d] = "value"
            } else if (c == ",") {
                if (d == 0 || state[d] != "after") fail()
                state[d] = (ctype[d] == "o") ? "key" : "value"
            } else fail()
        }
    }
    BEGIN {
        ctl = "[" sprintf("%c", 1) "-" sprintf("%c", 31) "]"; sep = sprintf("%c", 1)
        word = "-+.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"; d = 0
    }
    {
        n = split($0, part, "\"")
        # Where each part starts in the line: a string is cut from the line in one piece.
        at[1] = 1
        for (i = 2; i <= n; i++) at[i] = at[i - 1] + length(part[i - 1]) + 1
        outside(part[1])
        i = 2
        while (i <= n) {
            first = i
            # A quote after an odd number of backslashes is inside the string.
            while (i < n) {
                m = length(part[i]); b = 0
                while (m > 0 && substr(part[i], m, 1) == "\\") { b++; m-- }
                if (b % 2 == 0) break
                i++
            }
            if (i >= n) fail()
            string(substr($0, at[first], at[i] + length(part[i]) - at[first]))
            outside(part[i + 1])
            i += 2
        }
    }
    END {
        if (bad) exit 1
        if (d != 0 || !done) exit 1
    }' "$1"
}


# json_get FLATFILE PATH: the value at PATH (empty when absent; the last one when a key is
# repeated, as Python reads it).
json_get() {
    awk -F '\t' -v key="$2" '$1 == key { v = $3 } END { print v }' "$1"
}


# json_type FLATFILE PATH: s, l, or empty when absent.
json_type() {
    awk -F '\t' -v key="$2" '$1 == key { t = $2 } END { print t }' "$1"
}

# ---- platform -----------------------------------------------------------------------------

published_targets() {
    printf '%s' 'x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl x86_64-apple-darwin aarch64-apple-darwin'
}

is_published_target() {
    for is_pt_t in $(published_targets); do
        [ "$is_pt_t" = "$1" ] && return 0
    done
    return 1
}

# 1 when this x86_64 process runs under Rosetta 2 on Apple silicon.
rosetta_translated() {
    if has sysctl; then
        rosetta_out=$(sysctl -n sysctl.proc_translated 2>/dev/null) || rosetta_out=
    elif [ -x /usr/sbin/sysctl ]; then
        rosetta_out=$(/usr/sbin/sysctl -n sysctl.proc_translated 2>/dev/null) || rosetta_out=
    else
        rosetta_out=
    fi
    [ "$rosetta_out" = 1 ]
}

# musl or gnu: ask the C library, never guess from files that may be lying around (a glibc
# system with the musl package installed has /lib/ld-musl-*). musl's ldd names itself in
# its --version text (on stderr, with a non-zero exit, hence 2>&1 and || true); glibc
# answers GNU_LIBC_VERSION through getconf or names itself in ldd's text.
detect_libc() {
    libc_ldd=
    if has ldd; then
        libc_ldd=$(ldd --version 2>&1) || true
    fi
    case $libc_ldd in
        *musl*) printf musl; return 0 ;;
    esac
    if has getconf && libc_conf=$(getconf GNU_LIBC_VERSION 2>/dev/null); then
        case $libc_conf in
            glibc*) printf gnu; return 0 ;;
        esac
    fi
    case $libc_ldd in
        *GLIBC* | *'GNU libc'* | *glibc* | *'GNU C Library'*) printf gnu; return 0 ;;
    esac
    return 1
}

detect_target() {
    if [ -n "${MUX_TARGET:-}" ]; then
        is_published_target "$MUX_TARGET" ||
            usage_error "MUX_TARGET=$MUX_TARGET is not a published target (published: $(published_targets | sed 's/ /, /g'))"
        target=$MUX_TARGET
        return 0
    fi
    dt_os=$(uname -s 2>/dev/null) || dt_os=unknown
    dt_machine=$(uname -m 2>/dev/null) || dt_machine=unknown
    case $dt_machine in
        x86_64 | amd64 | x64) dt_arch=x86_64 ;;
        aarch64 | arm64 | armv8l) dt_arch=aarch64 ;;
        *) dt_arch= ;;
    esac
    case $dt_os in
        Linux)
            [ -n "$dt_arch" ] || unsupported_platform "$dt_os" "$dt_machine"
            dt_libc=$(detect_libc) || die 1 "could not tell whether this Linux uses glibc or musl (ldd --version and getconf GNU_LIBC_VERSION gave no answer)" \
                "set MUX_TARGET=$dt_arch-unknown-linux-gnu or MUX_TARGET=$dt_arch-unknown-linux-musl"
            target=$dt_arch-unknown-linux-$dt_libc
            ;;
        Darwin)
            [ -n "$dt_arch" ] || unsupported_platform "$dt_os" "$dt_machine"
            if [ "$dt_arch" = x86_64 ] && rosetta_translated; then
                # An x86_64 shell on Apple silicon: the native build is the right one.
                say "Rosetta 2 detected: installing the native Apple silicon (arm64) build."
                dt_arch=aarch64
            fi
            target=$dt_arch-apple-darwin
            ;;
        *) unsupported_platform "$dt_os" "$dt_machine" ;;
    esac
}

unsupported_platform() {
    die 1 "no mux build for $1 $2; published targets: $(published_targets | sed 's/ /, /g')" \
        "set MUX_TARGET to one of them if it runs here, or build mux from source"
}

# ---- tools --------------------------------------------------------------------------------

pick_downloader() {
    downloader=
    if has curl; then
        case $(command -v curl) in
            /snap/*) verbose "ignoring the snap curl (it cannot write outside its sandbox)" ;;
            *) downloader=curl ;;
        esac
    fi
    if [ -z "$downloader" ] && has wget; then
        if wget --version 2>/dev/null | grep -q 'GNU Wget'; then
            downloader=wget
        else
            downloader=busybox-wget
        fi
    fi
    [ -n "$downloader" ] || die 1 "neither curl nor wget was found, so nothing can be downloaded" \
        "install curl (apt-get install curl, apk add curl, dnf install curl) and run this again"
}

# Any of these computes the same SHA-256; when several are there the fastest goes first
# (OpenSSL's is several times faster than coreutils' sha256sum without SHA extensions, and
# macOS's shasum is Perl). A tool is used only after it hashed the empty input correctly.
pick_hasher() {
    hasher=
    for ph_tool in openssl sha256sum shasum busybox; do
        has "$ph_tool" || continue
        hasher=$ph_tool
        ph_empty=$(hash_files /dev/null 2>/dev/null) || ph_empty=
        case $ph_empty in
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855*) return 0 ;;
        esac
        hasher=
    done
    die 1 "no SHA-256 tool found (looked for sha256sum, shasum, openssl and busybox), so the download could not be verified" \
        "install coreutils (sha256sum) or openssl and run this again; mux is never installed unverified"
}

# sha256 of files: "<hex>  <name>" lines, in the order given, whatever the tool.
hash_files() {
    case $hasher in
        sha256sum) sha256sum -- "$@" ;;
        shasum) shasum -a 256 -- "$@" ;;
        busybox) busybox sha256sum "$@" ;;
        openssl) openssl dgst -sha256 "$@" | openssl_to_sums ;;
    esac
}

# "SHA2-256(name)= hex" (OpenSSL 3), "SHA256(name)= hex" (OpenSSL 1, LibreSSL) -> "hex  name".
openssl_to_sums() {
    sed -n 's/^[^(]*(\(.*\))= *\([0-9a-fA-F]\{64\}\)$/\2  \1/p'
}

sha256_of() {
    sha256_of_line=$(hash_files "$1") || return 1
    sha256_of_hex=${sha256_of_line%% *}
    case $sha256_of_hex in *[ABCDEF]*) sha256_of_hex=$(printf '%s' "$sha256_of_hex" | tr 'A-F' 'a-f') ;; esac
    is_sha256 "$sha256_of_hex" || return 1
    printf '%s' "$sha256_of_hex"
}

hash_tool_name() {
    case $hasher in
        sha256sum) printf 'sha256sum' ;;
        shasum) printf 'shasum -a 256' ;;
        busybox) printf 'busybox sha256sum' ;;
        openssl) printf 'openssl dgst -sha256' ;;
    esac
}

# ---- downloads ----------------------------------------------------------------------------
#
# No download tool follows a redirect by itself. GNU and BusyBox wget follow https to plain
# http (--https-only applies to recursive downloads only), and curl's --proto-redir cannot
# say "plain http, but only to this machine". So a download is a chain of single requests
# (at most 5 redirects), and each hop's URL must pass check_url_scheme before it is
# requested. BusyBox wget has no option not to follow: its hops are checked from its -S
# output afterwards, and what it fetched is thrown away when one was refused.

# curl reads https_proxy and no_proxy in either case but http_proxy only in lower case;
# GNU and BusyBox wget read lower case only. The lower-case names get the upper-case values
# when only those are set, so every tool sees the same proxies; a lower-case one that is
# set always wins. (curl skips HTTP_PROXY because a CGI request can set it; nothing here
# runs as CGI.)
proxy_from_environment() {
    if [ -z "${https_proxy+set}" ] && [ -n "${HTTPS_PROXY:-}" ]; then
        https_proxy=$HTTPS_PROXY
        export https_proxy
    fi
    if [ -z "${http_proxy+set}" ] && [ -n "${HTTP_PROXY:-}" ]; then
        http_proxy=$HTTP_PROXY
        export http_proxy
    fi
    if [ -z "${no_proxy+set}" ] && [ -n "${NO_PROXY:-}" ]; then
        no_proxy=$NO_PROXY
        export no_proxy
    fi
}

# BusyBox wget ignores no_proxy, so it is matched here: an entry names a host and its
# subdomains (".example.com" and "*.example.com" too), "*" every host.
proxy_bypassed() {
    pb_host=$(url_host "$1")
    pb_rest=$(printf '%s' "${no_proxy:-}" | tr -d ' \t' | tr 'ABCDEFGHIJKLMNOPQRSTUVWXYZ' 'abcdefghijklmnopqrstuvwxyz'),
    while [ -n "$pb_rest" ]; do
        pb_entry=${pb_rest%%,*}
        pb_rest=${pb_rest#*,}
        case $pb_entry in
            '') ;;
            \*) return 0 ;;
            *)
                pb_entry=${pb_entry#\*}
                pb_entry=${pb_entry#.}
                case $pb_host in "$pb_entry" | *."$pb_entry") return 0 ;; esac
                ;;
        esac
    done
    return 1
}

# The GitHub token for a request: only to the configured GitHub web host (github.com
# unless MUX_GITHUB_URL says otherwise), the same scheme, host and port as written,
# decided hop by hop (GitHub sends downloads to
# other hosts, which never see it), and only through curl, which reads it from standard
# input: wget would need it on its command line, where ps shows it.
token_for() {
    [ "$downloader" = curl ] && [ -n "${MUX_GITHUB_TOKEN:-${GITHUB_TOKEN:-}}" ] || return 0
    [ "${1%%://*}" = "${github_url%%://*}" ] || return 0
    [ "$(url_authority "$1")" = "$(url_authority "$github_url")" ] || return 0
    printf '%s' "${MUX_GITHUB_TOKEN:-${GITHUB_TOKEN:-}}"
}

# The token must be a bearer token (RFC 6750's b64token: A-Z a-z 0-9 - . _ ~ + /, then =
# padding), as mux requires: anything else (a trailing newline from a file or a CI secret,
# a quote) could end the header line curl reads from its config and add options of its own.
# Refused with the variable's name, never its value.
check_token() {
    if [ -n "${MUX_GITHUB_TOKEN:-}" ]; then
        ct_name=MUX_GITHUB_TOKEN
    elif [ -n "${GITHUB_TOKEN:-}" ]; then
        ct_name=GITHUB_TOKEN
    else
        return 0
    fi
    ct_body=${MUX_GITHUB_TOKEN:-${GITHUB_TOKEN:-}}
    while [ "${ct_body%=}" != "$ct_body" ]; do ct_body=${ct_body%=}; done
    case $ct_body in
        '' | *[!ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~+/-]*)
            usage_error "$ct_name is not a token HTTP can carry: it holds a line break, white space or another character outside A-Z a-z 0-9 - . _ ~ + / (and = at its end); nothing was sent, and its value is never shown"
            ;;
    esac
}

curl_scheme_options() {
    if is_loopback_url "$1"; then
        printf '%s\n' --proto =http,https
    else
        printf '%s\n' --proto =https --tlsv1.2
    fi
}

# resolve_location URL LOCATION: the absolute URL a Location header sent for URL names.
resolve_location() {
    rl_scheme=${1%%://*}
    case $2 in
        *://*) printf '%s' "$2" ;;
        //*) printf '%s:%s' "$rl_scheme" "$2" ;;
        /*)
            rl_auth=${1#*://}
            printf '%s://%s%s' "$rl_scheme" "${rl_auth%%[/?#]*}" "$2"
            ;;
        *)
            rl_path=${1#*://}
            rl_path=${rl_path%%[?#]*}
            case $rl_path in
                */*) printf '%s://%s/%s' "$rl_scheme" "${rl_path%/*}" "$2" ;;
                *) printf '%s://%s/%s' "$rl_scheme" "$rl_path" "$2" ;;
            esac
            ;;
    esac
}

# remove_path PATH: rm -f PATH, without starting rm when nothing is there (the usual case
# for a download's reason file, and for its pipe but after a retry).
remove_path() {
    if [ -e "$1" ] || [ -L "$1" ]; then rm -f "$1"; fi
}

# A download tool runs in the background and is waited for, so that when a background
# download is cancelled (TERM, see download_start) the trap can stop the tool: a shell
# runs its traps only after a foreground command ends, but `wait` is interrupted.
#
# Its body never goes straight to a file: it goes through a pipe to `head -c LIMIT+1`, so
# no server can write more than the limit to disk, chunked or not, whatever the tool.
# capture_start FILE opens the pipe (the tool is then started with >"$FILE.fifo" and its
# pid put in tool_pid); capture_end FILE LIMIT waits for both and fails with status 99
# ("too large", never retried) when more than LIMIT bytes came.
capture_start() {
    remove_path "$1.fifo"
    mkfifo "$1.fifo" || {
        printf 'could not create a pipe in %s\n' "${1%/*}" >&2
        return 1
    }
    head -c "$(($2 + 1))" <"$1.fifo" >"$1" &
    head_pid=$!
}


capture_end() {
    ce_status=0
    wait "$tool_pid" || ce_status=$?
    tool_pid=
    wait "$head_pid" || :
    head_pid=
    rm -f "$1.fifo"
    ce_size=$(file_size "$1") || ce_size=0
    if [ "$ce_size" -gt "$2" ]; then
        rm -f "$1"
        printf 'the server sent more than %s bytes, more than this file can be\n' "$2" >&2
        return 99
    fi
    return "$ce_status"
}


# request URL FILE LIMIT: one GET of URL into FILE (at most LIMIT bytes); a redirect is not
# followed. 0 with next_url set to the redirect's absolute target (empty for a final
# answer; followed_url is the first hop BusyBox wget followed itself), else non-zero with
# the reason as the last line on standard error. A failure with no answer, or a 408, 429 or
# 5xx answer, is tried again (three tries in all, a second apart); the download's deadline
# (see watchdog) bounds them all.
request() {
    rq_try=1
    while :; do
        next_url=
        followed_url=
        rq_status=
        rq_rc=0
        case $downloader in
            curl) request_curl "$1" "$2" "$3" || rq_rc=$? ;;
            wget) request_wget "$1" "$2" "$3" || rq_rc=$? ;;
            busybox-wget) request_busybox "$1" "$2" "$3" || rq_rc=$? ;;
        esac
        [ "$rq_rc" != 0 ] || return 0
        [ "$rq_rc" != 99 ] || return 99
        case $rq_status in
            '' | 408 | 429 | 5??) ;;
            *) return "$rq_rc" ;;
        esac
        [ "$rq_try" -lt 3 ] || return "$rq_rc"
        rq_try=$((rq_try + 1))
        sleep 1
    done
}


# The status and Location of the last answer in a file of HTTP headers (curl -D, or wget -S
# output, whose header lines are indented): "<code> <location>".
last_answer() {
    LC_ALL=C awk '
        { line = $0; sub(/\r$/, "", line); sub(/^[ \t]+/, "", line) }
        line ~ /^HTTP\/[0-9.]+ [0-9][0-9][0-9]/ { split(line, f, " "); code = f[2]; loc = ""; next }
        tolower(line) ~ /^location:/ { loc = line; sub(/^[^:]*:[ \t]*/, "", loc) }
        END { print code " " loc }' "$1"
}


request_curl() {
    rc_url=$1
    rc_out=$2
    rc_limit=$3
    rc_token=$(token_for "$rc_url")
    # shellcheck disable=SC2046 # one option per line, no spaces in them
    set -- -fsS --connect-timeout 15 $(curl_scheme_options "$rc_url") \
        -D "$rc_out.hdr" -o - -- "$rc_url"
    capture_start "$rc_out" "$rc_limit" || return 1
    if [ -n "$rc_token" ]; then
        # Read from standard input (-K -), never put on the command line.
        printf 'header = "Authorization: Bearer %s"\n' "$rc_token" | curl -K - "$@" >"$rc_out.fifo" &
    else
        curl "$@" </dev/null >"$rc_out.fifo" &
    fi
    tool_pid=$!
    rc_status=0
    capture_end "$rc_out" "$rc_limit" || rc_status=$?
    rc_answer=$(last_answer "$rc_out.hdr" 2>/dev/null) || rc_answer=
    rm -f "$rc_out.hdr"
    rq_status=${rc_answer%% *}
    [ "$rc_status" = 0 ] || return "$rc_status"
    case $rc_answer in
        3[0-9][0-9]' '?*) next_url=$(resolve_location "$rc_url" "${rc_answer#* }") ;;
        2[0-9][0-9]' '*) ;;
        *)
            printf 'the server answered HTTP %s without a usable redirect\n' "${rc_answer%% *}" >&2
            return 98
            ;;
    esac
}


request_wget() {
    rw_url=$1
    rw_out=$2
    rw_limit=$3
    set -- -nv -S --max-redirect=0 --tries=1 --timeout=30
    is_loopback_url "$rw_url" || set -- "$@" --secure-protocol=TLSv1_2 --https-only
    capture_start "$rw_out" "$rw_limit" || return 1
    wget "$@" -O - -- "$rw_url" </dev/null 2>"$rw_out.log" >"$rw_out.fifo" &
    tool_pid=$!
    rw_status=0
    capture_end "$rw_out" "$rw_limit" || rw_status=$?
    rw_answer=$(last_answer "$rw_out.log") || rw_answer=
    rq_status=${rw_answer%% *}
    if [ "$rw_status" = 8 ]; then
        # Exit status 8 is any error answer; a redirect is one when it names a Location.
        case $rw_answer in
            30[12378]' '?*)
                next_url=$(resolve_location "$rw_url" "${rw_answer#* }")
                rw_status=0
                ;;
        esac
    fi
    # (without any URL's query: a pre-signed storage link's signature is in it)
    [ "$rw_status" = 0 ] || [ "$rw_status" = 99 ] || LC_ALL=C grep -v '^ ' "$rw_out.log" | LC_ALL=C sed 's/[?][^[:space:]]*//g' >&2
    rm -f "$rw_out.log"
    return "$rw_status"
}


request_busybox() {
    rb_url=$1
    rb_out=$2
    rb_limit=$3
    set -- -q -S -O -
    if proxy_bypassed "$rb_url"; then set -- -Y off "$@"; fi
    capture_start "$rb_out" "$rb_limit" || return 1
    wget "$@" "$rb_url" </dev/null 2>"$rb_out.log" >"$rb_out.fifo" &
    tool_pid=$!
    rb_status=0
    capture_end "$rb_out" "$rb_limit" || rb_status=$?
    rb_answer=$(last_answer "$rb_out.log") || rb_answer=
    rq_status=${rb_answer%% *}
    # The redirects it followed, checked now: a refused one voids the download.
    rb_hop=$rb_url
    rb_refused=
    sed -n 's/^ *[Ll]ocation: *//p' "$rb_out.log" | tr -d '\r' >"$rb_out.hops"
    while IFS= read -r rb_location; do
        rb_hop=$(resolve_location "$rb_hop" "$rb_location")
        [ -n "$followed_url" ] || followed_url=$rb_hop
        check_url_scheme "$rb_hop" || {
            rb_refused=$rb_hop
            break
        }
    done <"$rb_out.hops"
    rm -f "$rb_out.hops"
    if [ -n "$rb_refused" ]; then
        rm -f "$rb_out" "$rb_out.log"
        printf 'refused the redirect to %s (plain http is allowed only to this machine; BusyBox wget had followed it, and nothing it fetched is used)\n' "$rb_refused" >&2
        return 98
    fi
    # (without any URL's query: a pre-signed storage link's signature is in it)
    [ "$rb_status" = 0 ] || [ "$rb_status" = 99 ] || LC_ALL=C grep -v '^ ' "$rb_out.log" | LC_ALL=C sed 's/[?][^[:space:]]*//g' >&2
    rm -f "$rb_out.log"
    return "$rb_status"
}


# fetch_hops URL FILE LIMIT FOLLOW: URL into FILE, its redirects followed here (FOLLOW=1),
# each checked first, or (FOLLOW=0) the redirect's target written to FILE.location. Runs
# as a background job: the reason for a failure is the last line on standard error, and a
# TERM stops the running download tool too.
fetch_hops() {
    tool_pid=
    head_pid=
    trap '[ -z "$tool_pid$head_pid" ] || kill $tool_pid $head_pid 2>/dev/null; exit 143' TERM
    fh_url=$1
    fh_hops=0
    fh_max=5
    while :; do
        fh_rc=0
        request "$fh_url" "$2" "$3" || fh_rc=$?
        [ "$fh_rc" = 0 ] || return "$fh_rc"
        if [ "$4" = 0 ]; then
            printf '%s\n' "${next_url:-$followed_url}" >"$2.location"
            return 0
        fi
        [ -n "$next_url" ] || return 0
        if ! check_url_scheme "$next_url"; then
            printf 'refused the redirect to %s (plain http is allowed only to this machine)\n' "${next_url%%[?#]*}" >&2
            return 1
        fi
        fh_hops=$((fh_hops + 1))
        if [ "$fh_hops" -gt "$fh_max" ]; then
            printf 'more than %s redirects\n' "$fh_max" >&2
            return 1
        fi
        fh_url=$next_url
    done
}


# watchdog PID FILE KIND: stop the download PID (TERM) when it runs past the deadline
# (KIND doc: a small document, all tries and redirects included) or, for the archive
# (KIND archive), when less than the minimum speed times the window arrived in a window.
# wget has no overall time limit and no speed limit of its own, curl's apply per try: one
# watchdog, the same for every tool. The reason goes to FILE.why.
watchdog() {
    wd_t=0
    wd_mark=0
    wd_why=
    wd_sleep=
    wd_stop=
    # download_finish stops the watchdog with TERM. mksh and posh act on a signal only once
    # the foreground command has ended, which cost every download up to a second there; a
    # sleep in the background is waited for, and `wait` is interrupted in every shell. A TERM
    # between starting that sleep and noting its pid is acted on once the pid is noted.
    trap 'wd_stop=1; [ -z "$wd_sleep" ] || { kill "$wd_sleep" 2>/dev/null; exit 0; }' TERM
    while kill -0 "$1" 2>/dev/null; do
        sleep 1 &
        wd_sleep=$!
        [ -z "$wd_stop" ] || { kill "$wd_sleep" 2>/dev/null; exit 0; }
        wait "$wd_sleep" || :
        wd_sleep=
        wd_t=$((wd_t + 1))
        if [ "$3" = doc ]; then
            if [ "$wd_t" -ge "$http_deadline" ]; then
                wd_why="no answer within $http_deadline s (MUX_HTTP_DEADLINE)"
                break
            fi
        elif [ "$min_speed" -gt 0 ] && [ $((wd_t % speed_window)) = 0 ]; then
            # shellcheck disable=SC2012 # a file this script named; ls -l is the portable stat
            wd_size=$(ls -ln "$2" 2>/dev/null | awk '{ print $5 }') || wd_size=
            is_decimal "$wd_size" || wd_size=0
            if [ $((wd_size - wd_mark)) -lt $((min_speed * speed_window)) ]; then
                wd_why="slower than $min_speed bytes/s over $speed_window s (MUX_HTTP_MIN_SPEED, MUX_HTTP_SPEED_WINDOW)"
                break
            fi
            wd_mark=$wd_size
        fi
    done
    if [ -n "$wd_why" ] && kill -0 "$1" 2>/dev/null; then
        printf '%s\n' "$wd_why" >"$2.why"
        kill -TERM "$1" 2>/dev/null || :
    fi
}


# download_start URL FILE LIMIT KIND [FOLLOW]: start a download in the background (dl_pid,
# its watchdog dl_watch), or refuse its URL (dl_rc, dl_reason). KIND is doc or archive
# (see watchdog); FOLLOW 0 reads a redirect instead of following it (FILE.location).
download_start() {
    dl_url=$1
    dl_out=$2
    dl_pid=
    dl_watch=
    dl_rc=0
    dl_reason=
    check_url_scheme "$dl_url" || {
        dl_rc=1
        dl_reason="refusing a plain-http URL (https is required outside this machine)"
        return 0
    }
    verbose "GET $dl_url"
    remove_path "$dl_out.why"
    fetch_hops "$dl_url" "$dl_out" "$3" "${5:-1}" </dev/null >/dev/null 2>"$dl_out.err" 9>&- &
    dl_pid=$!
    watchdog "$dl_pid" "$dl_out" "$4" </dev/null >/dev/null 2>&1 9>&- &
    dl_watch=$!
}


# download_finish PID WATCHDOG RC FILE: wait for a started download; 0 when FILE arrived,
# else sets dl_reason (the watchdog's, else the last line of its error output) and
# dl_too_large (1 when the server sent more than the limit).
download_finish() {
    df_rc=$3
    dl_too_large=0
    if [ -n "$1" ]; then
        df_rc=0
        wait "$1" || df_rc=$?
    fi
    if [ -n "$2" ]; then
        kill "$2" 2>/dev/null || :
        wait "$2" 2>/dev/null || :
    fi
    if [ "$df_rc" -ne 0 ]; then
        [ "$df_rc" != 99 ] || dl_too_large=1
        if [ -z "$dl_reason" ]; then
            dl_reason=$(cat "$4.why" 2>/dev/null) || dl_reason=
            [ -n "$dl_reason" ] || dl_reason=$(LC_ALL=C grep -v '^[[:space:]]*$' "$4.err" 2>/dev/null | tail -n 1) || dl_reason=
            [ -n "$dl_reason" ] || dl_reason="$downloader exited with status $df_rc"
        fi
        rm -f "$4" "$4.err" "$4.why" "$4.fifo" "$4.hdr" "$4.log" "$4.location"
        return 1
    fi
    rm -f "$4.err" "$4.why"
    return 0
}


# download URL FILE LIMIT KIND: 0 on success; else sets dl_reason.
download() {
    download_start "$1" "$2" "$3" "$4"
    download_finish "$dl_pid" "$dl_watch" "$dl_rc" "$2"
}


# fetch URL FILE WHAT: a small document (at most doc_limit bytes, within the deadline), or
# stop with an error naming the URL.
fetch() {
    download "$1" "$2" "$doc_limit" doc || die 1 "could not download $3 from $1: $dl_reason" \
        "check the network and proxy settings (HTTPS_PROXY, NO_PROXY) and that this release exists, then run again"
}

# ---- where things go ----------------------------------------------------------------------

resolve_paths() {
    home=${HOME:-}
    if [ -n "${MUX_HOME:-}" ]; then
        mux_home=$(absolute_path "$MUX_HOME")
    elif [ -n "${XDG_DATA_HOME:-}" ]; then
        mux_home=$(absolute_path "$XDG_DATA_HOME")/mux
    elif [ -n "$home" ]; then
        mux_home=$home/.local/share/mux
    else
        die 1 "HOME is not set, so there is no default place to install mux" "set MUX_HOME and MUX_INSTALL_DIR"
    fi
    if [ -n "${MUX_INSTALL_DIR:-}" ]; then
        bin_dir=$(absolute_path "$MUX_INSTALL_DIR")
    elif [ -n "${XDG_BIN_HOME:-}" ]; then
        bin_dir=$(absolute_path "$XDG_BIN_HOME")
    elif [ -n "$home" ]; then
        bin_dir=$home/.local/bin
    else
        die 1 "HOME is not set, so there is no default bin directory" "set MUX_INSTALL_DIR"
    fi
    mux_home=${mux_home%/}
    bin_dir=${bin_dir%/}
    versions_dir=$mux_home/versions
    link_path=$bin_dir/mux
    record_path=$mux_home/install.json
    created_record=$mux_home/.install-sh-created
}

# mkdir -p that remembers which directories it made, so a failed first install (and
# --uninstall) can take them away again. make_dirs DIR private: every folder it makes is
# 0700 (MUX_HOME and versions/, as mux makes them: nobody else may open, so lock, anything
# in them).
make_dirs() {
    md_dir=$1
    while [ -n "$md_dir" ] && [ ! -d "$md_dir" ]; do
        created="${created}dir	$md_dir$nl"
        md_dir=${md_dir%/*}
    done
    if [ "${2:-}" = private ]; then
        (umask 077 && mkdir -p "$1")
    else
        mkdir -p "$1"
    fi || die 1 "could not create the directory $1" "check that you own its parent directory"
}

note_created() {
    created="${created}$1	$2$nl"
}

# Append this run's created paths to the record in MUX_HOME (read by --uninstall).
flush_created() {
    [ -n "$created" ] || return 0
    [ -d "$mux_home" ] || return 0
    printf '%s' "$created" >>"$created_record" || return 0
    created=
}

# ---- lock ---------------------------------------------------------------------------------

# The lock is MUX_HOME/.lock held with flock(2) for the whole run, the same lock mux update
# takes (fcntl.flock in Python). The shell keeps the file open on descriptor 9; the locking
# tool gets it as descriptor 8 (8>&9): ksh93 and mksh open `exec 9>>file` close-on-exec, so
# a tool never sees descriptor 9 itself, while a redirection made for one command is
# inherited. Both descriptors share one open file description, which holds the lock until
# the shell exits. The file is never removed (not after a failed first install, not by
# --uninstall): a waiter holds the old inode, so a new file would let two runs both hold
# "the" lock.
take_lock() {
    lock_path=$mux_home/.lock
    # flock works on any descriptor, a read-only one too: the file is 0600 (made so when it
    # is an older one of this user's), so that no other user can open it, and hold it.
    [ ! -L "$lock_path" ] || die 1 "the lock file $lock_path is a symbolic link" "remove it (it holds nothing) and run this again"
    [ -e "$lock_path" ] || (umask 077 && : >>"$lock_path") 2>/dev/null || :
    chmod 600 "$lock_path" 2>/dev/null || :
    exec 9>>"$lock_path" || die 1 "could not open the lock file $lock_path" "check the permissions of $mux_home"
    if has flock; then
        set -- flock -n 8
    elif has perl; then
        # shellcheck disable=SC2016 # perl code
        set -- perl -MFcntl=:flock -e 'open(my $f, ">&=", 8) or exit 2; flock($f, LOCK_EX | LOCK_NB) or exit 1; exit 0'
    else
        warn "neither flock nor perl is installed: not locking $lock_path (do not run two installs at once)"
        return 0
    fi
    tl_limit=${MUX_LOCK_TIMEOUT:-10}
    tl_limit=${tl_limit%%.*}
    case $tl_limit in '' | *[!0-9]*) tl_limit=10 ;; esac
    tl_waited=0
    until "$@" 8>&9; do
        if [ "$tl_waited" -ge "$tl_limit" ]; then
            die 1 "another mux install or update is running (it holds $lock_path)" \
                "wait for it to finish, then run this again"
        fi
        [ "$tl_waited" != 0 ] || say "waiting for another mux install or update to finish..."
        sleep 1
        tl_waited=$((tl_waited + 1))
    done
}

# ---- clean-up -----------------------------------------------------------------------------


on_exit() {
    oe_rc=$?
    trap - EXIT
    for oe_pid in $prefetch_pid $prefetch_watch; do
        kill "$oe_pid" 2>/dev/null || true
        wait "$oe_pid" 2>/dev/null || true
    done
    [ -z "$work_dir" ] || rm -rf "$work_dir"
    [ -z "$partial_dir" ] || rm -rf "$partial_dir"
    [ -z "$tmp_link" ] || rm -f "$tmp_link"
    [ -z "$tmp_record" ] || rm -f "$tmp_record"
    [ -z "$tmp_state" ] || rm -f "$tmp_state"
    if [ "$oe_rc" -ne 0 ] && [ "$installing" = 1 ]; then
        # A failed run leaves nothing it created but the lock file (and the folders that
        # hold it): empty directories go.
        printf '%s' "$created" | awk -F '\t' '$1 == "dir" { print $2 }' | sort -r |
            while IFS= read -r oe_dir; do rmdir "$oe_dir" 2>/dev/null || true; done
    fi
    exit "$oe_rc"
}

# Leftovers of a killed run (the names are reserved for staging; we hold the lock).
remove_garbage() {
    for rg_path in "$mux_home"/.download-* "$versions_dir"/*.partial-* "$versions_dir"/.trash-* "$mux_home"/.install.json-* "$bin_dir"/.mux.tmp-*; do
        [ -e "$rg_path" ] || [ -L "$rg_path" ] || continue
        verbose "removing $rg_path (left by an interrupted run)"
        rm -rf "$rg_path"
    done
}

# ---- the installed state ------------------------------------------------------------------

# Sets active_version from the bin-dir link (the truth), or empty when there is no link.
# A mux there that this layout does not own is never overwritten.
read_active() {
    active_version=
    if [ -L "$link_path" ]; then
        ra_target=$(readlink "$link_path") || ra_target=
        case $ra_target in
            "$versions_dir"/*/mux)
                ra_v=${ra_target#"$versions_dir"/}
                active_version=${ra_v%/mux}
                case $active_version in */*) active_version= ;; esac
                ;;
        esac
        [ -n "$active_version" ] || die 1 "$link_path is a link to $ra_target, which is not a mux installed in $mux_home" \
            "remove that link (or set MUX_INSTALL_DIR to another directory) and run this again"
    elif [ -e "$link_path" ]; then
        die 1 "$link_path exists and was not installed by this script" \
            "remove it, or set MUX_INSTALL_DIR to another directory, and run this again"
    fi
}

# Flatten install.json (when there is one) into $work_dir/install.flat.
read_record() {
    record_flat=$work_dir/install.flat
    : >"$record_flat"
    if [ -f "$record_path" ]; then
        json_flatten "$record_path" >"$record_flat" 2>/dev/null || {
            warn "$record_path is not valid JSON; it will be rewritten"
            : >"$record_flat"
        }
    fi
}

# An installed version is intact and is this release's build: the record names the same
# target and archive, and its files still match its .mux-files list.
version_intact() {
    vi_dir=$versions_dir/$1
    [ -x "$vi_dir/mux" ] && [ -f "$vi_dir/.mux-files" ] || return 1
    [ "$(json_get "$record_flat" "versions/$1/target")" = "$target" ] || return 1
    [ "$(json_get "$record_flat" "versions/$1/archive_sha256")" = "$archive_expected" ] || return 1
    vi_files=$(sha256_of "$vi_dir/.mux-files") || return 1
    [ "$(json_get "$record_flat" "versions/$1/files_sha256")" = "$vi_files" ] || return 1
    vi_list=$work_dir/intact.list
    (cd "$vi_dir" && list_files) >"$vi_list" || return 1
    cmp -s "$vi_list" "$vi_dir/.mux-files" || return 1
    files_sha256=$vi_files
}

# "<sha256>  ./path" for every regular file below the current directory except
# ./.mux-files, sorted bytewise by path (the .mux-files format of docs/contracts.md).
list_files() {
    set -- find . -type f ! -path ./.mux-files -exec
    case $hasher in
        sha256sum) "$@" sha256sum {} + ;;
        shasum) "$@" shasum -a 256 {} + ;;
        busybox) "$@" busybox sha256sum {} + ;;
        openssl) "$@" openssl dgst -sha256 {} + | openssl_to_sums ;;
    esac | LC_ALL=C sort -k 2
}

# ---- release discovery --------------------------------------------------------------------

# The latest release's version from GitHub's <repo>/releases/latest redirect to
# .../releases/tag/<tag>: no API call, so no rate limit. One request, with the same TLS
# options, limits and checks as every download; the redirect is read, not followed. Sets
# version. GitHub's "latest" is not signed, so a tag that is a pre-release by its version
# string is refused here (the signed version: in SHA256SUMS.minisig must then equal it).
latest_github_version() {
    lg_url=$github_url/$repo/releases/latest
    lg_file=$work_dir/latest.html
    download_start "$lg_url" "$lg_file" "$doc_limit" doc 0
    lg_location=
    lg_why=
    if download_finish "$dl_pid" "$dl_watch" "$dl_rc" "$lg_file"; then
        IFS= read -r lg_location <"$lg_file.location" || lg_location=
    else
        lg_why=$dl_reason
    fi
    rm -f "$lg_file" "$lg_file.location"
    case $lg_location in
        */releases/tag/v*) ;;
        '') die 1 "could not find the latest mux release: $lg_url did not answer with a redirect${lg_why:+ ($lg_why)}" \
            "check the network and proxy settings (HTTPS_PROXY, NO_PROXY), or set MUX_VERSION" ;;
        *) die 1 "$repo has no published release yet ($lg_url leads to $lg_location)" \
            "set MUX_VERSION, or check MUX_REPO" ;;
    esac
    lg_tag=${lg_location%/}
    lg_tag=${lg_tag##*/}
    is_version "${lg_tag#v}" || die 1 "the latest release of $repo has an unexpected tag: $lg_tag" "set MUX_VERSION"
    version=${lg_tag#v}
    if is_prerelease "$version"; then
        die 3 "GitHub's latest release of $repo is v$version, a pre-release by its version (GitHub's latest flag is not signed)" \
            "install it on purpose with --version $version, or wait for a stable release"
    fi
}


# Where mux keeps the state mux update and install.sh share: platformdirs'
# user_state_dir("mux"), that is $XDG_STATE_HOME/mux when that is an absolute path, else
# ~/.local/state/mux (Linux) or ~/Library/Application Support/mux (macOS).
state_dir() {
    case ${XDG_STATE_HOME:-} in
        /*)
            printf '%s/mux' "${XDG_STATE_HOME%/}"
            return 0
            ;;
    esac
    case $home in /*) ;; *) return 1 ;; esac
    if [ "$(uname -s 2>/dev/null)" = Darwin ]; then
        printf '%s/Library/Application Support/mux' "$home"
    else
        printf '%s/.local/state/mux' "$home"
    fi
}


# The highest sequence number seen for a key id (docs/contracts.md, "Feed sequence state":
# "<KEYID> <seq>" lines), empty when none.
recorded_seq() {
    [ -f "$seq_file" ] || return 0
    LC_ALL=C awk -v id="$1" '
        $1 == id && NF == 2 && $2 ~ /^[0-9]+$/ {
            v = $2; sub(/^0+/, "", v); if (v == "") v = "0"
            if (best == "" || length(v) > length(best) || (length(v) == length(best) && v > best)) best = v
        }
        END { if (best != "") print best }' "$seq_file"
}


# Record index_seq for index_key_id after a successful install from a feed. The file is
# re-read just before a temp file in its folder is renamed over it, keeping the maximum of
# every key, so two writers (install.sh, mux) never lower a counter; unreadable lines go.
# A failure here is a warning: the install itself is done.
record_feed_seq() {
    [ -n "$index_key_id" ] || return 0
    rs_seen=$(recorded_seq "$index_key_id") || rs_seen=
    [ "$rs_seen" != "$index_seq" ] || return 0
    rs_dir=${seq_file%/*}
    if [ ! -d "$rs_dir" ]; then
        rs_new=$rs_dir
        while [ -n "$rs_new" ] && [ ! -d "$rs_new" ]; do
            note_created dir "$rs_new"
            rs_new=${rs_new%/*}
        done
        (umask 077 && mkdir -p "$rs_dir") 2>/dev/null || {
            warn "could not create $rs_dir, so the feed's sequence number $index_seq was not recorded"
            return 0
        }
    fi
    chmod go-rwx "$rs_dir" 2>/dev/null || : # as mux makes it: nobody else may lock it
    tmp_state=$(mktemp "$rs_dir/.feed-seq.XXXXXX") || {
        warn "could not write in $rs_dir, so the feed's sequence number $index_seq was not recorded"
        return 0
    }
    if { [ ! -f "$seq_file" ] || cat "$seq_file"; } 2>/dev/null | {
        cat
        printf '%s %s\n' "$index_key_id" "$index_seq"
    } | LC_ALL=C awk '
        NF == 2 && $1 ~ /^[0-9A-F]+$/ && $2 ~ /^[0-9]+$/ {
            v = $2; sub(/^0+/, "", v); if (v == "") v = "0"
            if (!($1 in best) || length(v) > length(best[$1]) || (length(v) == length(best[$1]) && v > best[$1])) best[$1] = v
        }
        END { for (k in best) print k " " best[k] }' | LC_ALL=C sort >"$tmp_state" &&
        mv -f "$tmp_state" "$seq_file"; then
        tmp_state=
        verbose "recorded sequence number $index_seq of key $index_key_id in $seq_file"
    else
        warn "could not update $seq_file, so the feed's sequence number $index_seq was not recorded"
    fi
}


# The feed's release list, verified (docs/contracts.md, "Signed feed index"):
# releases.json.minisig must verify with a key of this script, its signed comment must be
# for releases.json, not expired (unless --allow-expired-feed), and carry a seq no lower
# than the highest this machine saw for that key. Sets index_flat, index_seq, index_key_id.
verify_feed_index() {
    vi_index=$work_dir/releases.json
    vi_sig=$work_dir/releases.json.minisig
    fetch "$feed_url/releases.json" "$vi_index" "the release list"
    download "$feed_url/releases.json.minisig" "$vi_sig" "$doc_limit" doc ||
        die 3 "could not download the signature of the release list, $feed_url/releases.json.minisig: $dl_reason" \
            "a mux feed signs its release list (mux-release feed); use a complete, up-to-date mirror"
    vi_comment=
    vi_key=
    for vi_try in $MUX_MINISIGN_KEYS; do
        if vi_out=$(minisign -V -H -Q -m "$vi_index" -x "$vi_sig" -P "$vi_try" </dev/null 2>/dev/null); then
            vi_comment=$vi_out
            vi_key=$vi_try
            break
        fi
    done
    [ -n "$vi_key" ] || die 3 "the release list $feed_url/releases.json is not signed by a key this script trusts (releases.json.minisig does not verify)" \
        "the list was altered or made up: do not install from this mirror, and report it"
    vi_file=$(comment_value "$vi_comment" file) || vi_file=
    index_seq=$(comment_value "$vi_comment" seq) || index_seq=
    vi_expires=$(comment_value "$vi_comment" expires) || vi_expires=
    vi_time=$(comment_value "$vi_comment" timestamp) || vi_time=
    if [ "$vi_file" != releases.json ] || ! is_decimal "$index_seq" || ! is_decimal "$vi_expires" || ! is_decimal "$vi_time"; then
        die 3 "the signature of $feed_url/releases.json does not say file:releases.json, seq, expires and timestamp (its trusted comment: $vi_comment)" \
            "the feed's release list must be signed with mux-release feed"
    fi
    if ! dec_lt "$(now_unix)" "$vi_expires"; then
        if [ "$opt_allow_expired_feed" != 1 ]; then
            die 3 "the feed $feed_url expired at $(utc_text "$vi_expires") (a mirror that stopped updating, or a replay)" \
                "use an up-to-date mirror; to install from a mirror synced rarely on purpose (air-gapped), pass --allow-expired-feed or set MUX_ALLOW_EXPIRED_FEED=1"
        fi
        warn "THE FEED $feed_url EXPIRED at $(utc_text "$vi_expires"). Installing from it anyway because --allow-expired-feed (or MUX_ALLOW_EXPIRED_FEED=1) says so: an expired list can hide newer releases and their fixes."
    fi
    index_key_id=$(key_id_of "$vi_key") || die 1 "could not read the key id of a trusted key in this script" \
        "use the install.sh published with a mux release"
    vi_seen=$(recorded_seq "$index_key_id") || vi_seen=
    if [ -n "$vi_seen" ] && dec_lt "$index_seq" "$vi_seen"; then
        die 3 "the release list from $feed_url has sequence number $index_seq, lower than $vi_seen, which this machine already saw for key $index_key_id (a rollback to an older list)" \
            "use an up-to-date mirror (what was seen is in $seq_file)"
    fi
    verbose "release list signed by key $index_key_id: seq $index_seq, expires $(utc_text "$vi_expires")"
    index_flat=$work_dir/releases.flat
    json_flatten "$vi_index" >"$index_flat" 2>/dev/null ||
        die 3 "the release list $feed_url/releases.json is not valid JSON" "report it to whoever runs the feed"
}


# The awk functions that read a lifecycle time (2026-12-01T12:00:00Z, UTC, whole seconds):
# epoch(t) is its Unix time, -1 for any other form (docs/contracts.md, "Release lifecycle").
time_awk() {
    printf '%s\n' '
        # days from 1970-01-01 to a civil date (proleptic Gregorian)
        function days(y, m, d,   era, yoe, doy, doe) {
            y -= (m <= 2); era = int((y >= 0 ? y : y - 399) / 400); yoe = y - era * 400
            doy = int((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1
            doe = yoe * 365 + int(yoe / 4) - int(yoe / 100) + doy
            return era * 146097 + doe - 719468
        }
        function epoch(t) {
            if (t !~ /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z$/) return -1
            return days(substr(t, 1, 4) + 0, substr(t, 6, 2) + 0, substr(t, 9, 2) + 0) * 86400 + substr(t, 12, 2) * 3600 + substr(t, 15, 2) * 60 + substr(t, 18, 2)
        }'
}


# utc_epoch TIME: its Unix time, or -1.
utc_epoch() {
    LC_ALL=C awk -v t="$1" "$(time_awk)"' BEGIN { print epoch(t) }'
}


# From a flattened releases.json ({"releases": [{"tag", "draft", "lifecycle"}...]} or a bare
# list): a "listed<TAB>version<TAB>state<TAB>reason" line per release (drafts are never
# offered; state: ok, halted, withdrawn, pin (outside the policy's pin) or young (inside its
# minimum_release_age, or of unknown age then)), then "latest<TAB>version" for the highest
# stable version whose state is ok (by PEP 440, never list order; "prerelease" flags are not
# read: the version string decides), or a single "bad<TAB>tag" when a tag is invalid. A fresh
# install takes the newest release that is neither halted nor withdrawn whatever its rollout
# stage (docs/contracts.md, "Release lifecycle"), so stages are not read here.
pick_from_index() {
    LC_ALL=C awk -F '\t' -v pin="${policy_pin-}" -v age="${policy_min_age-}" -v now="$(now_unix)" "$(version_awk)$(time_awk)"'
        function index_of(p) { sub(/\/.*/, "", p); return p }
        { p = $1; sub(/^releases\//, "", p) }
        p ~ /^[0-9]+\/tag$/ {
            i = index_of(p)
            if (!(i in tag)) order[++count] = i
            tag[i] = ($2 == "s") ? $3 : ""
        }
        p ~ /^[0-9]+\/draft$/ && $3 == "true" { draft[index_of(p)] = 1 }
        p ~ /^[0-9]+\/lifecycle\/halted$/ && $3 == "true" { halted[index_of(p)] = 1 }
        p ~ /^[0-9]+\/lifecycle\/critical$/ && $3 == "true" { critical[index_of(p)] = 1 }
        p ~ /^[0-9]+\/lifecycle\/withdrawn\/reason$/ && $2 == "s" { withdrawn[index_of(p)] = $3 }
        p ~ /^[0-9]+\/lifecycle\/released_at$/ && $2 == "s" { released[index_of(p)] = $3 }
        END {
            npin = (pin == "") ? 0 : split(pin, pins, ".")
            for (c = 1; c <= count; c++) {
                i = order[c]; t = tag[i]; v = substr(t, 2)
                k = (t ~ /^v[0-9]+\.[0-9]+\.[0-9]+([-.+]?[0-9A-Za-z.]+)?$/ && length(v) <= 64) ? vkey(v) : ""
                if (k == "") { print "bad\t" t; exit }
                if (i in draft) continue
                pre = vkey_pre
                state = "ok"; why = ""
                if (npin) {
                    split(v, nums, ".")
                    for (j = 1; j <= npin; j++) {
                        n = nums[j]; sub(/[^0-9].*/, "", n)
                        if (n == "" || n + 0 != pins[j] + 0) state = "pin"
                    }
                }
                if (state == "ok" && age != "" && !(i in critical)) {
                    e = (i in released) ? epoch(released[i]) : -1
                    if (e < 0 || e + age > now + 0) state = "young"
                }
                if (i in halted) state = "halted"
                if (i in withdrawn) { state = "withdrawn"; why = withdrawn[i] }
                print "listed\t" v "\t" state "\t" why
                if (state == "ok" && !pre && (best == "" || k > best)) { best = k; latest = v }
            }
            if (best != "") print "latest\t" latest
        }' "$1"
}


# Sets version (no "v") and release_url (the folder or GitHub download URL of that tag). A
# feed's signed release list decides (a version asked for must be listed in it); a dry run
# for a version asked for makes no request at all.
resolve_release() {
    if [ -z "$feed_url" ]; then
        if [ -n "$requested_version" ]; then
            version=$requested_version
        else
            latest_github_version
        fi
        release_url=$github_url/$repo/releases/download/v$version
        return 0
    fi
    if [ -n "$requested_version" ] && [ "$opt_dry_run" = 1 ]; then
        version=$requested_version
    else
        verify_feed_index
        rr_pick=$(pick_from_index "$index_flat") || rr_pick=
        case $rr_pick in
            bad*) die 3 "the release list $feed_url/releases.json names an invalid version: ${rr_pick#bad	}" \
                "report it to whoever runs the feed" ;;
        esac
        if [ -n "$requested_version" ]; then
            version=$requested_version
            rr_line=$(printf '%s\n' "$rr_pick" | awk -F '\t' -v v="$version" '$1 == "listed" && $2 == v { print; exit }')
            [ -n "$rr_line" ] ||
                die 1 "the signed release list of $feed_url does not list v$version" \
                    "choose a version it lists (run without --version for the newest), or check $source_variable"
            rr_state=$(printf '%s\n' "$rr_line" | awk -F '\t' '{ print $3 }')
            case $rr_state in
                withdrawn) die 1 "mux $version was withdrawn by its publisher: $(printf '%s\n' "$rr_line" | awk -F '\t' '{ print $4 }')" \
                    "install.sh never installs a withdrawn release: run without MUX_VERSION for the newest" ;;
                halted) die 1 "mux $version was halted by its publisher (its rollout was stopped)" \
                    "install.sh never installs a halted release: run without MUX_VERSION for the newest" ;;
                pin) policy_refuses "pin = \"$policy_pin\"" "mux $version is not a $policy_pin.x release" ;;
                young) policy_refuses "minimum_release_age = \"$policy_min_age_text\"" "mux $version is younger than that (or its age is not signed)" ;;
            esac
        else
            version=$(printf '%s\n' "$rr_pick" | sed -n 's/^latest	//p')
            [ -n "$version" ] || die 1 "the release list $feed_url/releases.json names no stable release this machine may install" \
                "set MUX_VERSION to install a pre-release, or check the feed (halted and withdrawn releases, and those the machine policy's pin or minimum_release_age holds back, are never installed)"
        fi
    fi
    release_url=$feed_url/v$version
}


# The small documents of the release, and (when this version is not on disk yet) the
# archive, fetched in the background while the rest is fetched and verified. The archive is
# capped at the size the manifest gives for it (the manifest is verified against the signed
# SHA256SUMS before the archive is used, so a larger download is refused, and stopped at
# the cap, whatever the server sends).
fetch_release_documents() {
    manifest=$work_dir/manifest.json
    fetch "$release_url/manifest.json" "$manifest" "the release manifest"
    archive_name=mux-$target.tar.gz
    if [ "$want_archive" = 1 ] && json_flatten "$manifest" >"$work_dir/manifest.flat" 2>/dev/null; then
        fr_size=$(asset_field size)
        if is_decimal "$fr_size" && ! dec_lt "$archive_limit" "$fr_size"; then
            download_start "$release_url/$archive_name" "$archive" "$fr_size" archive
            prefetch_pid=$dl_pid prefetch_watch=$dl_watch prefetch_rc=$dl_rc prefetch_reason=$dl_reason prefetch=1
        fi
    fi
    sums=$work_dir/SHA256SUMS
    fetch "$release_url/SHA256SUMS" "$sums" "the checksum list"
    sums_sig=$work_dir/SHA256SUMS.minisig
    if [ "$verify_signature" = 1 ]; then
        download "$release_url/SHA256SUMS.minisig" "$sums_sig" "$doc_limit" doc ||
            die 3 "could not download the signature $release_url/SHA256SUMS.minisig: $dl_reason" \
                "every mux release is signed; check the URL or mirror, and try again"
    fi
}


# asset_field FIELD: the FIELD of this target's asset in the flattened manifest.
asset_field() {
    af_index=$(awk -F '\t' -v t="$target" '$1 ~ /^assets\/[0-9]+\/target$/ && $2 == "s" && $3 == t { i = $1; sub(/^assets\//, "", i); sub(/\/.*/, "", i); print i; exit }' "$work_dir/manifest.flat")
    [ -n "$af_index" ] || return 0
    json_get "$work_dir/manifest.flat" "assets/$af_index/$1"
}

# sum_for NAME: the digest SHA256SUMS lists for NAME; exactly one line must name it.
sum_for() {
    awk -v name="$1" '
        (NF == 2) && ($2 == name || $2 == "*" name) { n++; d = tolower($1) }
        END { if (n == 1) print d; else if (n > 1) print "duplicate" }' "$sums"
}


# The signed (trusted) comment of SHA256SUMS.minisig names the release's version and time:
# the version must be this one (a signature moved onto another release is a mix of
# releases), and the time is recorded (signed_at) and compared with the installed one's.
verify_signature_of_sums() {
    signed_at=
    if [ "$verify_signature" != 1 ]; then
        return 0
    fi
    for vs_key in $MUX_MINISIGN_KEYS; do
        if vs_comment=$(minisign -V -H -Q -m "$sums" -x "$sums_sig" -P "$vs_key" </dev/null 2>/dev/null); then
            vs_version=$(comment_value "$vs_comment" version) || vs_version=
            [ "$vs_version" = "$version" ] ||
                die 3 "the signature $release_url/SHA256SUMS.minisig is for another version (${vs_version:-none named}, not $version; its trusted comment: $vs_comment)" \
                    "the mirror serves files of different releases together; do not install from it"
            signed_at=$(comment_value "$vs_comment" timestamp) || signed_at=
            is_decimal "$signed_at" || die 3 "the signature $release_url/SHA256SUMS.minisig has no signed timestamp (its trusted comment: $vs_comment)" \
                "the release was not signed by mux-release; report it"
            signature_status="verified with minisign key ${vs_key%"${vs_key#????????????}"}..."
            say "Verified the minisign signature of SHA256SUMS (mux $version, signed $(utc_text "$signed_at"))."
            return 0
        fi
    done
    die 3 "the minisign signature $release_url/SHA256SUMS.minisig does not verify with the keys in this script" \
        "the checksum list was altered or signed by someone else; do not install it, and report it"
}


verify_documents() {
    verify_signature_of_sums
    # manifest.json is listed in SHA256SUMS: it is exactly what was published.
    vd_expected=$(sum_for manifest.json)
    is_sha256 "$vd_expected" || die 3 "the checksum list $release_url/SHA256SUMS has no (or more than one) line for manifest.json" \
        "the release is incomplete or altered; try again later, and report it if it persists"
    vd_actual=$(sha256_of "$manifest") || die 1 "could not hash $manifest with $(hash_tool_name)" ""
    [ "$vd_actual" = "$vd_expected" ] || die 3 "manifest.json from $release_url does not match its SHA256SUMS line (expected $vd_expected, got $vd_actual)" \
        "the download was altered; try again, and report it if it persists"
    json_flatten "$manifest" >"$work_dir/manifest.flat" 2>/dev/null ||
        die 3 "the manifest $release_url/manifest.json is not valid JSON" "report it"
    mf=$work_dir/manifest.flat
    [ "$(json_get "$mf" schema)" = 1 ] || die 3 "the manifest $release_url/manifest.json has an unsupported schema" \
        "this installer is too old for the release; download the newest install.sh"
    vd_version=$(json_get "$mf" version)
    [ "$vd_version" = "$version" ] || die 3 "the manifest at $release_url says version ${vd_version:-(none)}, expected $version" \
        "the mirror serves files of different releases together; do not install from it"
    if [ -z "$feed_url" ]; then
        # GitHub's release pages carry no signed lifecycle (until the TUF repository): the
        # policy's pin and minimum_release_age are held to the signed manifest itself.
        if [ -n "${policy_pin-}" ]; then
            case $version. in
                "$policy_pin".*) ;;
                *) policy_refuses "pin = \"$policy_pin\"" "mux $version (GitHub's newest) is not a $policy_pin.x release, and GitHub's source cannot list older ones" ;;
            esac
        fi
        if [ -n "${policy_min_age-}" ]; then
            vd_released=$(utc_epoch "$(json_get "$mf" released_at)")
            if [ "$vd_released" -lt 0 ] || [ $((vd_released + policy_min_age)) -gt "$(now_unix)" ]; then
                policy_refuses "minimum_release_age = \"$policy_min_age_text\"" "mux $version is younger than that (or its signed manifest gives no release time)"
            fi
        fi
    fi
    manifest_protocol=$(json_get "$mf" protocol_version)
    # The asset for our target: name, size, sha256.
    if [ -z "$(asset_field target)" ]; then
        vd_targets=$(awk -F '\t' '$1 ~ /^assets\/[0-9]+\/target$/ { printf "%s%s", sep, $3; sep = ", " }' "$mf")
        die 1 "release v$version has no build for $target (it has: ${vd_targets:-none})" \
            "choose another version with MUX_VERSION, or set MUX_TARGET to a build that runs here"
    fi
    [ "$(asset_field name)" = "$archive_name" ] ||
        die 3 "the manifest at $release_url names an unexpected file for $target" "report it"
    asset_sha256=$(asset_field sha256)
    asset_size=$(asset_field size)
    if ! is_decimal "$asset_size" || dec_lt "$archive_limit" "$asset_size"; then
        die 3 "the manifest at $release_url gives no valid size for $archive_name (${asset_size:-none}; at most $archive_limit bytes)" "report it"
    fi
    archive_expected=$(sum_for "$archive_name")
    is_sha256 "$archive_expected" || die 3 "the checksum list $release_url/SHA256SUMS has no (or more than one) line for $archive_name" \
        "the release is incomplete or altered; report it"
    [ "$asset_sha256" = "$archive_expected" ] || die 3 "manifest.json and SHA256SUMS at $release_url disagree about $archive_name" \
        "the release is inconsistent or altered; do not install it, and report it"
    check_attestation_bundle
    check_downgrade
}


# install.sh cannot verify a Sigstore attestation (that takes a Sigstore client; mux update
# and `gh attestation verify` do it). What it can do, it does: when the signed SHA256SUMS
# lists the release's bundle, the bundle must be there and match its line, so a mirror
# cannot strip or swap it and `mux update`, `mux-release verify` or `gh attestation verify`
# can still check it.
check_attestation_bundle() {
    ca_name=mux-$version.sigstore.json
    ca_expected=$(sum_for "$ca_name")
    [ -n "$ca_expected" ] || return 0
    is_sha256 "$ca_expected" || die 3 "the checksum list $release_url/SHA256SUMS lists $ca_name more than once" \
        "the release is altered; do not install it, and report it"
    download "$release_url/$ca_name" "$work_dir/$ca_name" "$doc_limit" doc ||
        die 3 "the Sigstore bundle $release_url/$ca_name, listed in the signed SHA256SUMS, could not be downloaded: $dl_reason" \
            "a mirror must serve every file of a release; use a complete one"
    ca_actual=$(sha256_of "$work_dir/$ca_name") || die 1 "could not hash $ca_name with $(hash_tool_name)" ""
    [ "$ca_actual" = "$ca_expected" ] || die 3 "the Sigstore bundle $release_url/$ca_name does not match its SHA256SUMS line (expected $ca_expected, got $ca_actual)" \
        "the mirror altered or swapped it; do not install from it, and report it"
    say "The Sigstore bundle $ca_name matches SHA256SUMS (install.sh does not verify attestations: gh attestation verify and mux update do)."
}


# A release older than the installed one is a downgrade, or an old release replayed: older by
# version, or signed (SHA256SUMS.minisig's timestamp) before the installed one when both times
# are known; mux update applies the same rule. Only --allow-downgrade installs it.
check_downgrade() {
    [ -n "$active_version" ] && [ "$active_version" != "$version" ] || return 0
    [ "$opt_allow_downgrade" != 1 ] || return 0
    cd_why=
    cd_active_at=$(json_get "$record_flat" "versions/$active_version/signed_at")
    if [ "$(json_type "$record_flat" "versions/$active_version/signed_at")" = l ] && is_decimal "$cd_active_at" && [ -n "$signed_at" ] \
        && dec_lt "$signed_at" "$cd_active_at"; then
        cd_why="mux $version was signed $(utc_text "$signed_at"), before the installed mux $active_version ($(utc_text "$cd_active_at"))"
    else
        cd_order=$(printf '%s\n%s\n' "$version" "$active_version" | version_keys | LC_ALL=C awk -F '\t' '
            NR == 1 { new = $1 } NR == 2 { old = $1 }
            END { if (new != "" && old != "" && new < old) print "older" }')
        [ "$cd_order" != older ] || cd_why="mux $version is older than the installed mux $active_version"
    fi
    [ -n "$cd_why" ] || return 0
    die 3 "$cd_why: installing it would be a downgrade (or an old release replayed)" \
        "to go back on purpose, run again with --version $version --allow-downgrade ('mux update --rollback' returns to the previous version)"
}


verify_archive() {
    va_size=$(file_size "$archive") || va_size=
    [ "$va_size" = "$asset_size" ] || die 3 "$release_url/$archive_name is ${va_size:-an unknown number of} bytes, its signed manifest says $asset_size" \
        "the download was corrupted or altered; run this again, and report it if it persists"
    va_actual=$(sha256_of "$archive") || die 1 "could not hash $archive with $(hash_tool_name)" ""
    [ "$va_actual" = "$archive_expected" ] || die 3 "checksum mismatch for $release_url/$archive_name: expected $archive_expected, got $va_actual" \
        "the download was corrupted or altered; run this again, and report it if it persists"
    archive_sha256=$va_actual
    say "Verified $archive_name (SHA-256 $archive_expected, $(hash_tool_name))."
}

# Symbolic links in the unpacked build must stay inside it.
check_links() {
    (cd "$1" && find . -type l -print) | while IFS= read -r cl_link; do
        cl_target=$(readlink "$1/$cl_link") || return 1
        printf '%s\t%s\n' "$cl_link" "$cl_target"
    done | awk -F '\t' '
        {
            if ($2 ~ /^\//) { print $1; exit }
            n = split($1, parts, "/"); depth = n - 2   # "./a/link": the link sits at depth 1
            m = split($2, t, "/")
            for (i = 1; i <= m; i++) {
                if (t[i] == "..") depth--; else if (t[i] != "." && t[i] != "") depth++
                if (depth < 0) { print $1; exit }
            }
        }'
}

# Run the new build once, from its staging folder inside MUX_HOME (never from /tmp): it
# must report the version, target and protocol the manifest promised. This catches a build
# for the wrong machine that still passed its checksum.
smoke_test() {
    st_dir=$1
    st_out=$work_dir/version.json
    st_err=$work_dir/version.err
    set -- "$st_dir/mux" version --json
    has timeout && set -- timeout 60 "$@"
    "$@" </dev/null >"$st_out" 2>"$st_err" 9>&- || {
        st_rc=$?
        st_why=$(LC_ALL=C grep -v '^[[:space:]]*$' "$st_err" | tail -n 1) || st_why=
        die 3 "the build in $release_url/$archive_name does not run here ('mux version --json' exited with status $st_rc${st_why:+: $st_why})" \
            "set MUX_TARGET to the build for this machine (published: $(published_targets | sed 's/ /, /g'))"
    }
    json_flatten "$st_out" >"$work_dir/version.flat" 2>/dev/null ||
        die 3 "the build in $release_url/$archive_name printed something other than JSON for 'mux version --json'" "report it"
    st_version=$(json_get "$work_dir/version.flat" version)
    st_target=$(json_get "$work_dir/version.flat" target)
    st_protocol=$(json_get "$work_dir/version.flat" protocol_version)
    build_repo=$(json_get "$work_dir/version.flat" repo)
    [ "$st_version" = "$version" ] || die 3 "the build in $release_url/$archive_name says it is mux ${st_version:-(nothing)}, but v$version was expected" \
        "the release is inconsistent; do not install it, and report it"
    [ "$st_target" = "$target" ] || die 3 "the build in $release_url/$archive_name says it is for ${st_target:-(nothing)}, but $target was expected" \
        "the release is inconsistent; do not install it, and report it"
    [ -z "$manifest_protocol" ] || [ "$st_protocol" = "$manifest_protocol" ] ||
        die 3 "the build in $release_url/$archive_name speaks protocol ${st_protocol:-(none)}, its manifest says $manifest_protocol" "report it"
}

# The archive is unpacked only after its checksum (and the signature of the checksums)
# verified. tar keeps members inside the staging folder (GNU tar and bsdtar refuse "..",
# BusyBox strips it, all strip a leading "/"); what arrives must be exactly mux-<target>/
# with links that stay inside it. A listing pass before unpacking would add nothing: a
# release that passed verification is run by the smoke test anyway.
unpack() {
    partial_dir=$(mktemp -d "$versions_dir/$version.partial-XXXXXX") ||
        die 1 "could not create a staging folder in $versions_dir" "check the free space and permissions of $mux_home"
    tar -xzof "$archive" -C "$partial_dir" ||
        die 1 "could not unpack $archive_name into $partial_dir" "check the free space in $mux_home and run this again"
    staged=$partial_dir/mux-$target
    un_top=$(cd "$partial_dir" && printf '%s\n' * .*) || un_top=
    [ "$un_top" = "mux-$target$nl.$nl.." ] || [ "$un_top" = "mux-$target$nl.*" ] ||
        die 3 "$release_url/$archive_name holds more than the folder mux-$target/" "the archive is malformed; report it"
    [ -d "$staged" ] && [ ! -L "$staged" ] && [ -f "$staged/mux" ] ||
        die 3 "$release_url/$archive_name has no mux-$target/mux executable" "report it"
    un_escape=$(check_links "$staged") || un_escape="(unreadable link)"
    [ -z "$un_escape" ] || die 3 "$release_url/$archive_name holds a link that leaves the build folder: $un_escape" "report it"
    chmod 755 "$staged" "$staged/mux"
    smoke_test "$staged"
    (umask 077 && cd "$staged" && list_files >"$partial_dir/.mux-files") ||
        die 1 "could not hash the unpacked files in $staged" ""
    mv "$partial_dir/.mux-files" "$staged/.mux-files"
    files_sha256=$(sha256_of "$staged/.mux-files")
}

# Move the staged build to versions/<version>: a rename in the same file system.
place_version() {
    pv_final=$versions_dir/$version
    if [ -e "$pv_final" ] || [ -L "$pv_final" ]; then
        # Not the active one (or a damaged active one, being repaired): move it aside first,
        # under a name a later run cleans up, because mv onto a directory moves into it.
        pv_old=$(mktemp -d "$versions_dir/$version.partial-XXXXXX")
        mv "$pv_final" "$pv_old/old"
        mv "$staged" "$pv_final"
        rm -rf "$pv_old"
    else
        mv "$staged" "$pv_final"
    fi
    rm -rf "$partial_dir"
    partial_dir=
}

# Point <bin>/mux at versions/<version>/mux by renaming a new link over it: at every moment
# the link names an old or a new complete version.
switch_link() {
    sl_target=$versions_dir/$version/mux
    if [ -d "$link_path" ]; then
        # mv would move our link *into* that directory instead of replacing it.
        die 1 "$link_path is a directory" "remove it and run this again"
    fi
    tmp_link=$bin_dir/.mux.tmp-$$
    rm -f "$tmp_link"
    ln -s "$sl_target" "$tmp_link" || die 1 "could not create a link in $bin_dir" "check that you can write to $bin_dir"
    mv -f "$tmp_link" "$link_path" || die 1 "could not replace $link_path" "check that you can write to $bin_dir"
    tmp_link=
}

# install.json, written to a temporary file and renamed over the old one. The previous
# version's entry is carried over from the old record (every scalar field of it). signed_at
# is the signed timestamp of the release's SHA256SUMS.minisig (absent when unchecked).
write_record() {
    tmp_record=$(mktemp "$mux_home/.install.json-XXXXXX")
    wr_source=$(json_escape "$source_label")
    {
        printf '{\n  "schema": %s,\n' "$MUX_RECORD_SCHEMA"
        printf '  "bin_dir": "%s",\n' "$(json_escape "$bin_dir")"
        printf '  "target": "%s",\n' "$target"
        printf '  "source": "%s",\n' "$wr_source"
        printf '  "active": "%s",\n' "$version"
        if [ -n "$previous_version" ]; then
            printf '  "previous": "%s",\n' "$previous_version"
        else
            printf '  "previous": null,\n'
        fi
        printf '  "versions": {\n'
        if [ -n "$previous_version" ]; then
            printf '    "%s": {' "$previous_version"
            wr_prev=$(awk -F '\t' -v p="versions/$previous_version/" '
                index($1, p) == 1 {
                    k = substr($1, length(p) + 1)
                    if (k ~ /\//) next
                    v = ($2 == "s") ? "\"" $3 "\"" : $3
                    printf "%s\"%s\": %s", sep, k, v; sep = ", "
                }' "$record_flat")
            if [ -z "$wr_prev" ]; then
                # No record of it (install.json lost): what can be told from the disk.
                wr_files=$(sha256_of "$versions_dir/$previous_version/.mux-files" 2>/dev/null) || wr_files=
                wr_prev="\"files_sha256\": \"$wr_files\", \"installed_by\": \"install.sh\""
            fi
            printf '%s},\n' "$wr_prev"
        fi
        printf '    "%s": {"archive_sha256": "%s", "files_sha256": "%s", "target": "%s", "source": "%s", "installed_by": "install.sh"%s}\n' \
            "$version" "$archive_sha256" "$files_sha256" "$target" "$wr_source" "${signed_at:+, \"signed_at\": $signed_at}"
        printf '  }\n}\n'
    } >"$tmp_record" || die 1 "could not write $tmp_record" "check the free space in $mux_home"
    mv -f "$tmp_record" "$record_path" || die 1 "could not write $record_path" "check the permissions of $mux_home"
    tmp_record=
}

# Keep the active and the previous version, and every version a running mux uses: when there
# is anything else, the new mux prunes (`mux update --prune` keeps what running mux processes,
# servers above all, hold or run from; docs/contracts.md) and its report is shown. It takes
# the install lock itself, so this runs last, once nothing else of this run needs the lock,
# and lets go of it first. A mux that cannot prune leaves the old versions for the next
# `mux update` to remove.
prune_versions() {
    for pr_dir in "$versions_dir"/*; do
        [ -e "$pr_dir" ] || continue
        pr_name=${pr_dir##*/}
        [ "$pr_name" = "$version" ] || [ "$pr_name" = "$previous_version" ] && continue
        exec 9>&-
        verbose "removing old versions nothing uses (mux update --prune)"
        if pr_out=$("$versions_dir/$version/mux" update --prune --home "$mux_home" 2>/dev/null); then
            printf '%s\n' "$pr_out" | while IFS= read -r pr_line; do say "$pr_line"; done
        else
            say "old versions stay in $versions_dir until the next mux update"
        fi
        return 0
    done
}

# ---- PATH ---------------------------------------------------------------------------------

bin_on_path() {
    case ":${PATH:-}:" in
        *":$bin_dir:"* | *":$bin_dir/:"*) return 0 ;;
    esac
    return 1
}

# The bin dir as shell text: $HOME stays late-bound when the dir is below it.
# shellcheck disable=SC2016 # "$HOME" is written out for the startup file to expand
bin_dir_for_shell() {
    case $bin_dir in
        "$home"/*) printf '"$HOME"%s' "$(sh_quote "${bin_dir#"$home"}")" ;;
        *) sh_quote "$bin_dir" ;;
    esac
}

# shellcheck disable=SC2016 # as above
bin_dir_for_fish() {
    case $bin_dir in
        "$home"/*) printf '"$HOME"%s' "$(fish_quote "${bin_dir#"$home"}")" ;;
        *) fish_quote "$bin_dir" ;;
    esac
}

# shellcheck disable=SC2016 # the comment line quotes a command
sh_block() {
    bs_dir=$(bin_dir_for_shell)
    printf '%s\n' '# >>> mux >>>' \
        '# Added by the mux installer; `sh install.sh --uninstall` removes this block.' \
        "case \":\${PATH}:\" in *:$bs_dir:*) ;; *) export PATH=$bs_dir\":\${PATH}\" ;; esac" \
        '# <<< mux <<<'
}

# shellcheck disable=SC2016 # the comment line quotes a command
fish_block() {
    fb_dir=$(bin_dir_for_fish)
    printf '%s\n' '# >>> mux >>>' \
        '# Added by the mux installer; `sh install.sh --uninstall` removes this block.' \
        "if not contains -- $fb_dir \$PATH" \
        "    set -gx PATH $fb_dir \$PATH" \
        'end' \
        '# <<< mux <<<'
}

# The startup files to edit, as "kind<TAB>path" lines: existing sh/bash files (.profile is
# created), zsh's .zshrc when it exists or zsh is the login shell, and fish's conf.d file
# when fish is around. `all` lists every candidate (for --uninstall).
rc_files() {
    [ -n "$home" ] || return 0
    printf 'sh\t%s\n' "$home/.profile"
    for rf_name in .bashrc .bash_profile .bash_login; do
        if [ "$1" = all ] || [ -f "$home/$rf_name" ]; then
            printf 'sh\t%s\n' "$home/$rf_name"
        fi
    done
    rf_zsh=${ZDOTDIR:-$home}/.zshrc
    case ${SHELL:-} in */zsh) rf_zsh_login=1 ;; *) rf_zsh_login=0 ;; esac
    if [ "$1" = all ] || [ -f "$rf_zsh" ] || [ "$rf_zsh_login" = 1 ]; then
        printf 'sh\t%s\n' "$rf_zsh"
    fi
    if [ "$1" = all ] && [ -n "${ZDOTDIR:-}" ] && [ "$ZDOTDIR" != "$home" ]; then
        printf 'sh\t%s\n' "$home/.zshrc"
    fi
    rf_fish_dir=${XDG_CONFIG_HOME:-$home/.config}/fish
    case ${SHELL:-} in */fish) rf_fish_login=1 ;; *) rf_fish_login=0 ;; esac
    if [ "$1" = all ] || [ -d "$rf_fish_dir" ] || [ "$rf_fish_login" = 1 ] || has fish; then
        printf 'fish\t%s\n' "$rf_fish_dir/conf.d/mux.fish"
    fi
}

# Print the file without our block ($2 = 1: the block was appended to a file that had no
# final newline, so take back the one added before it).
strip_block() {
    awk -v noeol="$2" '
        $0 == "# >>> mux >>>" { skipping = 1; next }
        skipping && $0 == "# <<< mux <<<" { skipping = 0; next }
        skipping { next }
        { lines[++n] = $0 }
        END {
            for (i = 1; i <= n; i++) {
                if (i < n || !noeol) print lines[i]; else printf "%s", lines[i]
            }
        }' "$1"
}

# How many complete blocks the file has (0 when it has none or an unmatched marker).
block_state() {
    bs_open=$(grep -c '^# >>> mux >>>$' "$1" 2>/dev/null) || bs_open=0
    bs_close=$(grep -c '^# <<< mux <<<$' "$1" 2>/dev/null) || bs_close=0
    if [ "$bs_open" != "$bs_close" ]; then
        printf 'broken'
    else
        printf '%s' "$bs_open"
    fi
}

# Replace a file's content in place (keeps its inode, mode and any symlink to it).
rewrite_file() {
    rw_dir=$mux_home
    [ -d "$rw_dir" ] || rw_dir=${1%/*}
    rw_tmp=$(mktemp "$rw_dir/.mux-rc-XXXXXX") || return 1
    if cat >"$rw_tmp" && cat "$rw_tmp" >"$1"; then
        rm -f "$rw_tmp"
        return 0
    fi
    rm -f "$rw_tmp"
    return 1
}

add_block() {
    ab_kind=$1
    ab_file=$2
    if [ "$ab_kind" = fish ]; then ab_block=$(fish_block); else ab_block=$(sh_block); fi
    if [ -f "$ab_file" ]; then
        case $(block_state "$ab_file") in
            broken)
                warn "$ab_file has an unmatched '# >>> mux >>>' marker; not editing it"
                return 0
                ;;
            0) ;;
            *)
                if [ "$(awk '$0 == "# >>> mux >>>" { on = 1 } on { print } $0 == "# <<< mux <<<" { on = 0 }' "$ab_file")" = "$ab_block" ]; then
                    verbose "$ab_file already adds $bin_dir to PATH"
                    return 0
                fi
                # A block for another bin dir: replace it.
                { strip_block "$ab_file" 0 && printf '%s\n' "$ab_block"; } | rewrite_file "$ab_file" ||
                    warn "could not update $ab_file"
                say "Updated the mux PATH block in $ab_file"
                edited_files="$edited_files $ab_file"
                return 0
                ;;
        esac
        if [ -s "$ab_file" ] && [ -n "$(tail -c 1 "$ab_file")" ]; then
            # No final newline: add one first, and remember to take it back on uninstall.
            printf '\n' >>"$ab_file"
            note_created noeol "$ab_file"
        fi
        printf '%s\n' "$ab_block" >>"$ab_file" || {
            warn "could not edit $ab_file"
            return 0
        }
    else
        make_dirs "${ab_file%/*}"
        printf '%s\n' "$ab_block" >"$ab_file" || {
            warn "could not create $ab_file"
            return 0
        }
        note_created file "$ab_file"
    fi
    say "Added $bin_dir to PATH in $ab_file"
    edited_files="$edited_files $ab_file"
}

setup_path() {
    edited_files=
    if bin_on_path; then
        verbose "$bin_dir is already on PATH"
        return 0
    fi
    if [ "$opt_no_modify_path" = 1 ]; then
        say "$bin_dir is not on PATH. Add it to your shell startup file:"
        say "  export PATH=\"$bin_dir:\$PATH\""
        return 0
    fi
    if [ "${GITHUB_ACTIONS:-}" = true ] && [ -n "${GITHUB_PATH:-}" ]; then
        if ! grep -Fxq "$bin_dir" "$GITHUB_PATH" 2>/dev/null; then
            printf '%s\n' "$bin_dir" >>"$GITHUB_PATH" && say "Added $bin_dir to \$GITHUB_PATH for the next steps."
        fi
    fi
    [ -n "$home" ] || {
        warn "HOME is not set: add $bin_dir to PATH yourself"
        return 0
    }
    sp_list=$(rc_files existing)
    set -f
    sp_ifs=$IFS
    IFS=$nl
    for sp_line in $sp_list; do
        IFS=$sp_ifs
        add_block "${sp_line%%	*}" "${sp_line#*	}"
    done
    IFS=$sp_ifs
    set +f
    if [ -n "$edited_files" ]; then
        say "Open a new terminal (or run: export PATH=\"$bin_dir:\$PATH\") to use mux."
    fi
}

# ---- commands -----------------------------------------------------------------------------

# source_from_environment: the feed to install from, into feed_source (empty: GitHub), and the
# variable that named it. MUX_UPDATE_SOURCE is the name mux reads too ("github" is GitHub);
# MUX_DOWNLOAD_URL, its older name, still works. Both, naming different sources: refused.
source_from_environment() {
    feed_source=${MUX_UPDATE_SOURCE:-} source_variable=MUX_UPDATE_SOURCE
    if [ -n "${MUX_DOWNLOAD_URL:-}" ]; then
        if [ -n "$feed_source" ] && [ "${feed_source%/}" != "${MUX_DOWNLOAD_URL%/}" ]; then
            usage_error "MUX_UPDATE_SOURCE and MUX_DOWNLOAD_URL (its older name) name different sources; set MUX_UPDATE_SOURCE alone"
        fi
        feed_source=$MUX_DOWNLOAD_URL
        [ -n "${MUX_UPDATE_SOURCE:-}" ] || source_variable=MUX_DOWNLOAD_URL
    fi
    [ "$feed_source" != github ] || feed_source=''
}

configure_source() {
    github_url=${MUX_GITHUB_URL:-https://github.com}
    github_url=${github_url%/}
    check_url_scheme "$github_url" || usage_error "MUX_GITHUB_URL=$github_url must be an https:// URL (plain http:// only to this machine: localhost, 127.x.x.x or [::1])"
    repo=${MUX_REPO:-$MUX_DEFAULT_REPO}
    feed_url=${feed_source%/}
    if [ -n "$feed_url" ]; then
        check_url_scheme "$feed_url" || usage_error "$source_variable=$feed_url must be an https:// URL (plain http:// only to this machine: localhost, 127.x.x.x or [::1])"
        source_label=$feed_url
    else
        case $repo in
            OWNER/* | '') die 1 "this copy of install.sh names no GitHub repository" "set MUX_REPO=owner/name (or MUX_UPDATE_SOURCE)" ;;
            */*) ;;
            *) usage_error "MUX_REPO=$repo is not of the form owner/name" ;;
        esac
        source_label=$github_url/$repo
        check_token
    fi
    requested_version=${opt_version:-${MUX_VERSION:-}}
    requested_version=${requested_version#v}
    if [ -n "$requested_version" ]; then
        is_version "$requested_version" || usage_error "'$requested_version' is not a version such as 0.2.0"
    fi
}

# Decide how SHA256SUMS is authenticated: with minisign and the embedded keys when both
# are there. Required for a feed (its release list is signed and nothing else vouches for
# it), with MUX_REQUIRE_SIGNATURE=1, and over BusyBox wget (which cannot promise TLS 1.2
# with certificate checks).
configure_signature() {
    verify_signature=0
    signature_status=
    cs_required=$opt_require_signature
    [ "${MUX_REQUIRE_SIGNATURE:-0}" = 0 ] || cs_required=1
    cs_why=
    if [ -z "$MUX_MINISIGN_KEYS" ]; then
        cs_why="this copy of install.sh carries no minisign keys"
    elif ! has minisign; then
        cs_why="minisign is not installed"
    fi
    if [ -z "$cs_why" ]; then
        verify_signature=1
        cs_count=0
        for _ in $MUX_MINISIGN_KEYS; do cs_count=$((cs_count + 1)); done
        signature_status="minisign with $cs_count trusted key(s)"
        return 0
    fi
    if [ -n "$feed_url" ]; then
        die 3 "a feed's signed release list and releases must be verified with minisign, but $cs_why" \
            "install minisign (apt-get install minisign, brew install minisign, apk add minisign) and use an install.sh from the mux release page"
    fi
    if [ "$cs_required" = 1 ]; then
        die 3 "a verified signature is required, but $cs_why" \
            "install minisign (apt-get install minisign, brew install minisign) and use an install.sh from the mux release page"
    fi
    if [ "$downloader" = busybox-wget ] && ! is_loopback_url "$github_url"; then
        die 1 "only BusyBox wget is available, which cannot promise TLS 1.2 with certificate checks, and $cs_why" \
            "install curl (apk add curl) or minisign, then run this again"
    fi
    signature_status="not checked ($cs_why; SHA256SUMS is trusted as served over HTTPS)"
}


# ---- the machine policy -------------------------------------------------------------------

# toml_settings FILE: the few TOML forms a policy uses, one line per value:
# "key<TAB>s<TAB>text" (a string), "key<TAB>b<TAB>true|false", "key<TAB>a<TAB>count" then
# "key<TAB>e<TAB>text" for each string of an array. Top-level settings only: a bare key,
# "=", then a basic string without escapes, a literal string, true, false, or an array of
# such strings (it may span lines); comments and blank lines anywhere TOML allows them.
# Anything else fails with "line N: why" on standard output: install.sh refuses a policy it
# cannot read rather than guess (mux, which reads all of TOML, agrees on every file this
# reads, and refuses the rest the same way). Like tomllib: the file is UTF-8 (checked byte
# by byte, as awk in the C locale sees bytes), holds no NUL (which some awks drop: checked
# before awk reads it) and no carriage return but before a line feed (one at the very end
# of a file included).
toml_settings() {
    ts_size=$(file_size "$1") || {
        printf 'its size cannot be read\n'
        return 1
    }
    ts_kept=$(tr -d '\000' <"$1" | wc -c | tr -d ' ')
    if [ "$ts_kept" != "$ts_size" ]; then
        printf 'a NUL byte\n'
        return 1
    fi
    ts_open=$(tail -c 1 "$1" | tr -d '\n' | wc -c | tr -d ' ')
    LC_ALL=C awk -v open_end="$ts_open" '
    BEGIN { for (i = 1; i < 256; i++) code[sprintf("%c", i)] = i }
    function fail(why) { printf "line %d: %s\n", line, why; bad = 1; exit 1 }
    function ch() { return substr(text, pos, 1) }
    function control(c,   k) { k = code[c] + 0; return (k < 32 && k != 9) || k == 127 }
    # Well-formed UTF-8 (RFC 3629: no overlong form, no surrogate, nothing past U+10FFFF).
    function utf8(   i, k, need, low, high) {
        line = 1
        for (i = 1; i <= n; i++) {
            k = code[substr(text, i, 1)] + 0
            if (k == 10) line++
            if (k < 128) continue
            low = 128; high = 191
            if (k >= 194 && k <= 223) need = 1
            else if (k >= 224 && k <= 239) { need = 2; if (k == 224) low = 160; if (k == 237) high = 159 }
            else if (k >= 240 && k <= 244) { need = 3; if (k == 240) low = 144; if (k == 244) high = 143 }
            else fail("a byte that is not UTF-8")
            for (; need > 0; need--) {
                k = code[substr(text, ++i, 1)] + 0
                if (k < low || k > high) fail("a byte that is not UTF-8")
                low = 128; high = 191
            }
        }
    }
    function blanks() { while (pos <= n && (ch() == " " || ch() == "\t")) pos++ }
    function comment() {
        if (ch() != "#") return
        for (pos++; pos <= n && ch() != "\n"; pos++) if (control(ch())) fail("a control character in a comment")
    }
    function spaces() {
        while (pos <= n) {
            c = ch()
            if (c == " " || c == "\t") pos++
            else if (c == "\n") { pos++; line++ }
            else if (c == "#") comment()
            else break
        }
    }
    function quoted(   q, start, c) {
        q = ch(); pos++; start = pos
        for (; pos <= n; pos++) {
            c = ch()
            if (c == q) { pos++; return substr(text, start, pos - 1 - start) }
            if (c == "\n") fail("a string must end on its line")
            if (q == "\"" && c == "\\") fail("escapes (\\) are not read here; write the value without one")
            if (control(c)) fail("a control character in a string")
        }
        fail("a string does not end")
    }
    { last_cr = sub(/\r$/, ""); text = text $0 "\n" }
    END {
        if (bad) exit 1
        n = length(text); line = NR
        if (open_end == 1 && last_cr) fail("a carriage return without a line feed")
        utf8()
        pos = 1; line = 1; out = ""
        while (1) {
            spaces()
            if (pos > n) break
            if (ch() !~ /[A-Za-z0-9_-]/) fail(ch() == "[" ? "a table ([...]): a policy has top-level settings only" : "a setting must start with its name")
            start = pos
            while (pos <= n && ch() ~ /[A-Za-z0-9_-]/) pos++
            key = substr(text, start, pos - start)
            blanks()
            if (ch() != "=") fail("expected = after " key)
            pos++
            blanks()
            if (key in seen) fail(key " is set twice")
            seen[key] = 1
            c = ch()
            if (c == "\"" || c == "\047") {
                out = out key "\ts\t" quoted() "\n"
            } else if (substr(text, pos, 4) == "true") {
                pos += 4; out = out key "\tb\ttrue\n"
            } else if (substr(text, pos, 5) == "false") {
                pos += 5; out = out key "\tb\tfalse\n"
            } else if (c == "[") {
                pos++; count = 0; items = ""
                while (1) {
                    spaces(); c = ch()
                    if (c == "]") { pos++; break }
                    if (c != "\"" && c != "\047") fail("the array of " key " may hold strings only")
                    items = items key "\te\t" quoted() "\n"; count++
                    spaces(); c = ch()
                    if (c == "]") { pos++; break }
                    if (c != ",") fail("expected , or ] in the array of " key)
                    pos++
                }
                out = out key "\ta\t" count "\n" items
            } else {
                fail("the value of " key " is not a string, true, false or an array of strings")
            }
            blanks()
            comment()
            if (pos <= n) {
                if (ch() != "\n") fail("unexpected text after the value of " key)
                pos++; line++
            }
        }
        printf "%s", out
    }' "$1"
}


# policy_writers PATH FOLDER(0|1): empty when only root can change PATH (the file, or a
# folder: a sticky one such as /tmp is fine), else why not.
policy_writers() {
    pw_ls=$(LC_ALL=C ls -ldnL -- "$1" 2>/dev/null) || {
        printf '%s cannot be examined' "$1"
        return 0
    }
    printf '%s\n' "$pw_ls" | LC_ALL=C awk -v path="$1" -v folder="$2" '{
        mode = $1; uid = $3
        if (uid != "0") { printf "%s is owned by uid %s, not by root", path, uid; exit }
        if (folder == 1 && substr(mode, 10, 1) ~ /[tT]/) exit
        if (substr(mode, 9, 1) == "w") printf "%s is writable by other users (chmod go-w %s)", path, path
        else if (substr(mode, 6, 1) == "w") printf "%s is writable by its group (chmod go-w %s)", path, path
    }'
}


# policy_folders_writers PATH: the same for every folder on the way to PATH (physical).
policy_folders_writers() {
    pf_dir=${1%/*}
    [ -n "$pf_dir" ] || pf_dir=/
    pf_dir=$(cd -P -- "$pf_dir" 2>/dev/null && pwd -P) || {
        printf '%s cannot be examined' "${1%/*}"
        return 0
    }
    while :; do
        pf_why=$(policy_writers "$pf_dir" 1)
        if [ -n "$pf_why" ]; then
            printf '%s' "$pf_why"
            return 0
        fi
        [ "$pf_dir" != / ] || return 0
        pf_dir=${pf_dir%/*}
        [ -n "$pf_dir" ] || pf_dir=/
    done
}


policy_unusable() {
    die 4 "the machine policy $policy_path cannot be used: $1; install.sh installs nothing until it is fixed" \
        "ask its administrator to fix or remove it"
}


policy_refuses() {
    die 4 "the machine policy $policy_path sets $1; $2" \
        "its administrator decides this for every mux on this machine"
}


# read_policy: the policy's settings into policy_* (policy_path empty: there is none).
read_policy() {
    policy_path='' policy_updates='' policy_source='' policy_github_url='' policy_api_url=''
    policy_repo=''
    policy_keys='' policy_allow_expired='' policy_hosts=''
    policy_pin='' policy_min_age='' policy_min_age_text=''
    rp_path=$MUX_POLICY_FILE_PATH
    [ -e "$rp_path" ] || [ -L "$rp_path" ] || return 0
    policy_path=$rp_path
    [ -e "$rp_path" ] || policy_unusable "it is a symbolic link to nothing"
    [ -f "$rp_path" ] || policy_unusable "it is not a regular file"
    [ -r "$rp_path" ] || policy_unusable "it cannot be read"
    rp_why=$(policy_writers "$rp_path" 0)
    [ -n "$rp_why" ] || rp_why=$(policy_folders_writers "$rp_path")
    rp_hop=$rp_path
    rp_hops=0
    while [ -z "$rp_why" ] && [ -L "$rp_hop" ]; do
        rp_link=$(readlink -- "$rp_hop") || policy_unusable "its link cannot be followed (no readlink)"
        case $rp_link in
            /*) rp_hop=$rp_link ;;
            *) rp_hop=${rp_hop%/*}/$rp_link ;;
        esac
        rp_hops=$((rp_hops + 1))
        [ "$rp_hops" -le 16 ] || policy_unusable "it is a chain of more than 16 links"
        rp_why=$(policy_folders_writers "$rp_hop")
    done
    [ -z "$rp_why" ] || policy_unusable "$rp_why"
    rp_size=$(file_size "$rp_path") || policy_unusable "its size cannot be read"
    [ "$rp_size" -le 65536 ] || policy_unusable "it is larger than 65536 bytes"
    rp_values=$(toml_settings "$rp_path") || policy_unusable "it is not TOML that install.sh reads (${rp_values:-unreadable})"
    rp_count=0
    rp_tab=$(printf '\t')
    rp_ifs=$IFS
    IFS=$nl
    set -f
    for rp_line in $rp_values; do
        IFS=$rp_ifs
        rp_key=${rp_line%%"$rp_tab"*}
        rp_rest=${rp_line#*"$rp_tab"}
        rp_type=${rp_rest%%"$rp_tab"*}
        rp_value=${rp_rest#*"$rp_tab"}
        case $rp_key:$rp_type in
            updates:s)
                case $rp_value in
                    enabled | check-only | disabled) policy_updates=$rp_value ;;
                    *) policy_unusable "updates = \"$rp_value\" is not \"enabled\" or \"check-only\" or \"disabled\"" ;;
                esac
                ;;
            source:s)
                case $rp_value in
                    github) ;;
                    http://* | https://*) check_url_scheme "$rp_value" || policy_unusable "source = \"$rp_value\": only https:// (plain http only to this machine)" ;;
                    /*) ;;
                    *) policy_unusable "source = \"$rp_value\" is not \"github\", an https:// feed URL or an absolute feed directory" ;;
                esac
                policy_source=${rp_value%/}
                ;;
            github_url:s | github_api_url:s)
                check_url_scheme "$rp_value" || policy_unusable "$rp_key = \"$rp_value\" is not an https:// URL"
                if [ "$rp_key" = github_url ]; then policy_github_url=${rp_value%/}; else policy_api_url=${rp_value%/}; fi
                ;;
            repo:s)
                case $rp_value in
                    */*/* | /* | ./* | ../* | */ | */. | */.. | *[!A-Za-z0-9_./-]*) policy_unusable "repo = \"$rp_value\" is not a GitHub repository (owner/name)" ;;
                    ?*/?*) policy_repo=$rp_value ;;
                    *) policy_unusable "repo = \"$rp_value\" is not a GitHub repository (owner/name)" ;;
                esac
                ;;
            allow_expired_feed:b) policy_allow_expired=$rp_value ;;
            # What a user's config.toml may set, fixed for everyone: automatic installs by a
            # server's background check, and their downloads on metered connections. They
            # change nothing for install.sh (an install someone runs by hand), but a policy
            # that holds them is read, and checked, as mux reads it.
            auto_install:s)
                case $rp_value in
                    off | download | compatible | all) ;;
                    *) policy_unusable "auto_install = \"$rp_value\" is not \"off\" or \"download\" or \"compatible\" or \"all\"" ;;
                esac
                ;;
            download_on_metered:b) ;;
            pin:s)
                case $rp_value in
                    '' | .* | *. | *..* | *[!0-9.]* | *.*.*.*) policy_unusable "pin = \"$rp_value\" is not a version prefix such as \"1.4\"" ;;
                esac
                policy_pin=$rp_value
                ;;
            minimum_release_age:s)
                rp_unit=1
                case $rp_value in
                    *s) rp_number=${rp_value%s} ;;
                    *m) rp_number=${rp_value%m} rp_unit=60 ;;
                    *h) rp_number=${rp_value%h} rp_unit=3600 ;;
                    *d) rp_number=${rp_value%d} rp_unit=86400 ;;
                    *w) rp_number=${rp_value%w} rp_unit=604800 ;;
                    *) rp_number=$rp_value ;;
                esac
                case $rp_number in
                    '' | *[!0-9]*) rp_number= ;;
                esac
                [ "${#rp_number}" -le 8 ] || rp_number=
                [ -n "$rp_number" ] && policy_min_age=$((rp_number * rp_unit))
                if [ -z "$rp_number" ] || [ "$policy_min_age" -le 0 ] || [ "$policy_min_age" -gt 31622400 ]; then
                    policy_unusable "minimum_release_age = \"$rp_value\" is not a duration such as \"72h\" (at most 366 days)"
                fi
                policy_min_age_text=$rp_value
                ;;
            ring:s)
                case $rp_value in
                    early | default | late) ;;  # a fresh install takes no staged place
                    *) policy_unusable "ring = \"$rp_value\" is not \"early\" or \"default\" or \"late\"" ;;
                esac
                ;;
            trusted_keys:a | download_hosts:a)
                rp_count=$rp_value
                [ "$rp_count" -le 16 ] || policy_unusable "$rp_key holds more than 16 entries"
                [ "$rp_key" != trusted_keys ] || [ "$rp_count" -le 8 ] || policy_unusable "trusted_keys holds more than 8 keys"
                ;;
            trusted_keys:e)
                # "Ed", a key id and an Ed25519 key: 42 bytes, 56 base64 characters.
                case $rp_value in
                    RW*[!A-Za-z0-9+/=]* | [!R]* | ?[!W]* | '') rp_key_ok=0 ;;
                    *) rp_key_ok=1 ;;
                esac
                [ "${#rp_value}" = 56 ] || rp_key_ok=0
                if [ "$rp_key_ok" = 0 ] || ! key_id_of "$rp_value" >/dev/null; then
                    policy_unusable "trusted_keys: \"$rp_value\" is not a minisign public key (its base64 line)"
                fi
                policy_keys="$policy_keys $rp_value"
                ;;
            download_hosts:e)
                case $rp_value in
                    '' | *[!A-Za-z0-9.:[\]-]* | *://* | *'*'*) policy_unusable "download_hosts: \"$rp_value\" is not an exact host name (host or host:port)" ;;
                esac
                policy_hosts="$policy_hosts $rp_value"
                ;;
            updates:* | source:* | github_url:* | github_api_url:* | repo:* | allow_expired_feed:* | trusted_keys:* | download_hosts:* | auto_install:* | download_on_metered:* | pin:* | minimum_release_age:* | ring:*)
                policy_unusable "$rp_key has a value of the wrong kind"
                ;;
            *) policy_unusable "'$rp_key' is not a setting mux knows (known: updates, source, github_url, github_api_url, repo, trusted_keys, allow_expired_feed, download_hosts, auto_install, download_on_metered, pin, minimum_release_age, ring)" ;;
        esac
    done
    set +f
    IFS=$rp_ifs
    if { [ -n "$policy_github_url" ] || [ -n "$policy_api_url" ] || [ -n "$policy_repo" ]; } && [ "$policy_source" != github ]; then
        policy_unusable "github_url, github_api_url and repo go with source = \"github\""
    fi
}


# obey_policy: what the policy sets wins; what would loosen it stops here (exit 4).
obey_policy() {
    read_policy
    [ -n "$policy_path" ] || return 0
    case $policy_updates in
        disabled | check-only)
            policy_refuses "updates = \"$policy_updates\"" "install.sh installs nothing on this machine"
            ;;
    esac
    if [ -n "$policy_source" ]; then
        op_setting="source = \"$policy_source\""
        case $policy_source in
            github)
                [ -z "$feed_source" ] || policy_refuses "$op_setting" "$source_variable cannot change it"
                op_web=${policy_github_url:-https://github.com}
                if [ -n "${MUX_GITHUB_URL:-}" ] && [ "${MUX_GITHUB_URL%/}" != "$op_web" ]; then
                    [ -z "$policy_github_url" ] || op_setting="github_url = \"$policy_github_url\""
                    policy_refuses "$op_setting" "MUX_GITHUB_URL cannot change it"
                fi
                if [ -n "$policy_repo" ]; then
                    if [ -n "${MUX_REPO:-}" ] && [ "$MUX_REPO" != "$policy_repo" ]; then
                        policy_refuses "repo = \"$policy_repo\"" "MUX_REPO cannot change it"
                    fi
                    MUX_REPO=$policy_repo
                fi
                case $MUX_DEFAULT_REPO in
                    OWNER/* | '') ;;
                    *)
                        if [ -n "${MUX_REPO:-}" ] && [ "$MUX_REPO" != "$MUX_DEFAULT_REPO" ] && [ -z "$policy_repo" ]; then
                            policy_refuses "$op_setting" "MUX_REPO cannot change it"
                        fi
                        ;;
                esac
                MUX_GITHUB_URL=$op_web
                ;;
            /*)
                policy_refuses "$op_setting" "install.sh installs from an https:// feed or GitHub, not from a folder (mux update does)"
                ;;
            *)
                if [ -n "$feed_source" ] && [ "${feed_source%/}" != "$policy_source" ]; then
                    policy_refuses "$op_setting" "$source_variable cannot change it"
                fi
                feed_source=$policy_source
                ;;
        esac
    fi
    case $policy_allow_expired in
        true) opt_allow_expired_feed=1 ;;
        false)
            [ "$opt_allow_expired_feed" = 0 ] ||
                policy_refuses "allow_expired_feed = false" "--allow-expired-feed (or MUX_ALLOW_EXPIRED_FEED) cannot accept an expired feed"
            ;;
    esac
    # Its keys join the script's: a mirror the administrator chose signs with them.
    [ -z "$policy_keys" ] || MUX_MINISIGN_KEYS="$MUX_MINISIGN_KEYS$policy_keys"
    verbose "machine policy $policy_path: updates ${policy_updates:-enabled}${policy_source:+, source $policy_source}${policy_keys:+, keys added}"
}


# seconds VARIABLE VALUE DEFAULT: a whole number of seconds from the environment (a
# fraction is dropped), at least 1.
seconds_setting() {
    ss_value=${2:-$3}
    ss_value=${ss_value%%.*}
    case $ss_value in
        '' | *[!0-9]*) usage_error "$1=$2 is not a number of seconds" ;;
    esac
    ss_value=$(strip_zeros "$ss_value")
    [ "$ss_value" != 0 ] || usage_error "$1=$2: at least 1 second"
    [ "${#ss_value}" -le 6 ] || usage_error "$1=$2 is more than 999999 seconds"
    printf '%s' "$ss_value"
}


# Every limit on what comes from the network (README, install.sh): the size of a small
# document, the archive's largest size, the deadline of a small document and the archive's
# minimum speed.
configure_limits() {
    doc_limit=1048576
    json_limit=$doc_limit
    archive_limit=2147483646
    http_deadline=$(seconds_setting MUX_HTTP_DEADLINE "${MUX_HTTP_DEADLINE:-}" 30)
    speed_window=$(seconds_setting MUX_HTTP_SPEED_WINDOW "${MUX_HTTP_SPEED_WINDOW:-}" 30)
    min_speed=${MUX_HTTP_MIN_SPEED:-1024}
    case $min_speed in
        '' | *[!0-9]*) usage_error "MUX_HTTP_MIN_SPEED=$min_speed is not a number of bytes per second (0: no minimum)" ;;
    esac
    min_speed=$(strip_zeros "$min_speed")
    [ "${#min_speed}" -le 9 ] || usage_error "MUX_HTTP_MIN_SPEED=$min_speed is too large"
    if [ -n "$feed_url" ]; then
        seq_file=$(state_dir)/feed-seq || die 1 "there is no state folder to keep the feed's sequence numbers in (HOME is not an absolute path)" \
            "set XDG_STATE_HOME to an absolute path"
    fi
}


print_plan() {
    headline "mux install plan (dry run: nothing will be changed)"
    say "  target:       $target"
    say "  source:       $source_label"
    say "  version:      $version"
    if [ -n "$feed_url" ]; then
        say "  release list: $feed_url/releases.json (+ .minisig: signed by a key in this script, not expired, seq not below the one seen: $seq_file)"
    fi
    say "  downloads:    $release_url/manifest.json"
    say "                $release_url/SHA256SUMS"
    [ "$verify_signature" != 1 ] || say "                $release_url/SHA256SUMS.minisig"
    say "                $release_url/mux-$target.tar.gz"
    say "  limits:       ${doc_limit} bytes and $http_deadline s for each small document; the archive at most its manifest's size, at least $min_speed bytes/s over $speed_window s"
    say "  checksum:     SHA-256 of the archive must match SHA256SUMS and manifest.json ($(hash_tool_name))"
    say "  signature:    $signature_status"
    say "  installs to:  $versions_dir/$version (staged in $versions_dir/$version.partial-*)"
    say "  link:         $link_path -> $versions_dir/$version/mux"
    say "  record:       $record_path"
    if bin_on_path; then
        say "  PATH:         $bin_dir is already on PATH; no files edited"
    elif [ "$opt_no_modify_path" = 1 ]; then
        say "  PATH:         not modified (--no-modify-path); you add $bin_dir yourself"
    else
        pp_list=$(rc_files existing)
        say "  PATH:         a '# >>> mux >>>' block in:"
        printf '%s\n' "$pp_list" | while IFS='	' read -r _ pp_file; do
            [ -z "$pp_file" ] || say "                $pp_file"
        done
        if [ "${GITHUB_ACTIONS:-}" = true ] && [ -n "${GITHUB_PATH:-}" ]; then
            say "                \$GITHUB_PATH ($GITHUB_PATH)"
        fi
    fi
}

print_manual_verification() {
    [ "$opt_verbose" = 1 ] || return 0
    mv_repo=$build_repo
    [ -n "$feed_url" ] || mv_repo=${build_repo:-$repo}
    say "To verify this release by hand:"
    say "  cd <folder with the release files>"
    for mv_key in $MUX_MINISIGN_KEYS; do
        say "  minisign -Vm SHA256SUMS -x SHA256SUMS.minisig -P $mv_key"
    done
    say "  sha256sum -c --ignore-missing SHA256SUMS"
    case $mv_repo in
        */*) say "  gh attestation verify $archive_name --repo $mv_repo --signer-workflow $mv_repo/.github/workflows/release.yml" ;;
    esac
}


cmd_install() {
    detect_target
    if [ "${MUX_INSTALL_PRINT:-}" = target ]; then
        printf '%s\n' "$target"
        return 0
    fi
    source_from_environment
    obey_policy
    configure_source
    configure_limits
    proxy_from_environment
    pick_downloader
    pick_hasher
    configure_signature
    verbose "target $target, downloader $downloader, checksums with $(hash_tool_name), signature: $signature_status"
    if [ "$opt_dry_run" = 1 ]; then
        # Read-only: a scratch folder for the small documents, removed on exit; the feed's
        # sequence number is checked, not recorded.
        work_dir=$(mktemp -d "${TMPDIR:-/tmp}/mux-install-plan.XXXXXX")
        resolve_release
        print_plan
        return 0
    fi

    installing=1
    make_dirs "$versions_dir" private
    take_lock
    remove_garbage
    work_dir=$(mktemp -d "$mux_home/.download-XXXXXX") ||
        die 1 "could not create a download folder in $mux_home" "check its free space and permissions"
    read_active
    read_record
    resolve_release
    say "Release: mux $version for $target from $source_label"
    archive=$work_dir/mux-$target.tar.gz
    want_archive=0
    if [ "$active_version" != "$version" ] && [ ! -d "$versions_dir/$version" ]; then
        want_archive=1
    fi
    fetch_release_documents
    verify_documents

    archive_sha256=$archive_expected
    if version_intact "$version"; then
        if [ "$active_version" = "$version" ]; then
            say "mux $version is already installed at $link_path; nothing to do."
            record_feed_seq
            setup_path
            flush_created
            return 0
        fi
        # The kept previous version is this very build: switch back to it, no download.
        say "Reusing the kept mux $version in $versions_dir/$version (its files are intact)."
    else
        if [ "$prefetch" = 1 ]; then
            dl_reason=$prefetch_reason
            download_finish "$prefetch_pid" "$prefetch_watch" "$prefetch_rc" "$archive" || archive_failed
            prefetch_pid=
            prefetch_watch=
        else
            download "$release_url/$archive_name" "$archive" "$asset_size" archive || archive_failed
        fi
        verify_archive
        unpack
        place_version
    fi

    if [ "$active_version" != "$version" ]; then
        previous_version=$active_version
    else
        # Repairing the active version: keep the recorded previous one.
        previous_version=$(json_get "$record_flat" previous)
        [ "$(json_type "$record_flat" previous)" = s ] && [ -d "$versions_dir/$previous_version" ] || previous_version=
    fi
    case $previous_version in */* | .* | '') previous_version= ;; esac
    make_dirs "$bin_dir"
    switch_link
    write_record
    rm -rf "$work_dir"
    work_dir=
    record_feed_seq

    if [ -n "$active_version" ] && [ "$active_version" != "$version" ]; then
        headline "Switched mux from $active_version to $version" " ($link_path); $active_version is kept for 'mux update --rollback'."
    else
        headline "Installed mux $version" " at $link_path"
    fi
    [ ! -f "$versions_dir/$version/THIRD_PARTY_NOTICES.md" ] || say "Third-party licences: $versions_dir/$version/THIRD_PARTY_NOTICES.md (mux version --notices)"
    setup_path
    flush_created
    prune_versions
    print_manual_verification
}


# The archive download failed: larger than the signed manifest says (verification, exit 3),
# or anything else (network, exit 1).
archive_failed() {
    if [ "$dl_too_large" = 1 ]; then
        die 3 "$release_url/$archive_name is larger than the $asset_size bytes its signed manifest says (the download was stopped there and removed)" \
            "the mirror serves something else than the release; do not install from it, and report it"
    fi
    die 1 "could not download the mux archive from $release_url/$archive_name: $dl_reason" \
        "check the network and proxy settings (HTTPS_PROXY, NO_PROXY) and that this release exists, then run again"
}

cmd_uninstall() {
    # The bin dir the install used, from its record, else the default.
    if [ -f "$record_path" ]; then
        un_flat=$(json_flatten "$record_path" 2>/dev/null) || un_flat=
        un_bin=$(printf '%s\n' "$un_flat" | awk -F '\t' '$1 == "bin_dir" && $2 == "s" { print $3; exit }')
        if [ -n "$un_bin" ]; then
            bin_dir=$(json_unescape "$un_bin")
            link_path=$bin_dir/mux
        fi
    fi
    un_seq=$(state_dir)/feed-seq || un_seq=
    un_link=
    if [ -L "$link_path" ]; then
        case $(readlink "$link_path") in
            "$versions_dir"/*) un_link=1 ;;
            *) warn "$link_path points elsewhere; leaving it alone" ;;
        esac
    fi
    un_blocks=$(rc_files all | while IFS='	' read -r _ uf; do
        [ -f "$uf" ] && grep -q '^# >>> mux >>>$' "$uf" && printf '%s\n' "$uf"
    done) || true
    if [ ! -d "$mux_home" ] && [ -z "$un_link" ] && [ -z "$un_blocks" ]; then
        say "mux is not installed (nothing in $mux_home, no link at $link_path, no PATH blocks)."
        return 0
    fi
    if [ "$opt_dry_run" = 1 ]; then
        headline "mux uninstall plan (dry run: nothing will be changed)"
        [ ! -d "$versions_dir" ] || say "  remove $versions_dir"
        [ ! -f "$record_path" ] || say "  remove $record_path"
        [ -z "$un_seq" ] || [ ! -f "$un_seq" ] || say "  remove $un_seq"
        [ ! -e "$mux_home/.lock" ] || say "  keep $mux_home/.lock (the install lock is never removed)"
        [ -z "$un_link" ] || say "  remove the link $link_path"
        printf '%s\n' "$un_blocks" | while IFS= read -r uf; do
            [ -z "$uf" ] || say "  remove the mux PATH block from $uf"
        done
        return 0
    fi
    if [ -d "$mux_home" ]; then
        take_lock
    fi
    if [ -n "$un_link" ]; then
        rm -f "$link_path"
        say "Removed $link_path"
    fi
    # Which files and directories install.sh created (to remove them when left empty).
    un_created=
    [ ! -f "$created_record" ] || un_created=$(cat "$created_record")
    printf '%s\n' "$un_blocks" | while IFS= read -r uf; do
        [ -n "$uf" ] || continue
        if [ "$(block_state "$uf")" = broken ]; then
            warn "$uf has an unmatched '# >>> mux >>>' marker; remove the mux lines by hand"
            continue
        fi
        un_noeol=0
        printf '%s\n' "$un_created" | grep -Fxq "noeol	$uf" && un_noeol=1
        strip_block "$uf" "$un_noeol" | rewrite_file "$uf" || warn "could not edit $uf"
        say "Removed the mux PATH block from $uf"
        if printf '%s\n' "$un_created" | grep -Fxq "file	$uf" && ! grep -q '[^[:space:]]' "$uf"; then
            rm -f "$uf"
        fi
    done
    rm -rf "$versions_dir" "$record_path" "$mux_home"/.download-* "$mux_home"/.install.json-* "$mux_home"/.mux-rc-* "$created_record"
    if [ -n "$un_seq" ] && [ -f "$un_seq" ]; then
        rm -f "$un_seq" "${un_seq%/*}"/.feed-seq.*
        rmdir "${un_seq%/*}" 2>/dev/null || :
    fi
    # The lock file stays (a run waiting on it must keep the only lock there is); the
    # folder goes when nothing else is in it.
    un_left=$(cd "$mux_home" 2>/dev/null && printf '%s\n' * .[!.]* ..?* | grep -v -x -e '\*' -e '\.\[!\.\]\*' -e '\.\.?\*' -e '\.lock') || un_left=
    if [ -n "$un_left" ]; then
        warn "$mux_home still holds files this script did not install; left in place"
    elif [ -e "$mux_home/.lock" ]; then
        verbose "kept $mux_home/.lock: the install lock is never removed"
    else
        rmdir "$mux_home" 2>/dev/null || :
    fi
    # Directories the installs created, deepest first, when empty.
    printf '%s\n' "$un_created" | awk -F '\t' '$1 == "dir" { print $2 }' | sort -r |
        while IFS= read -r ud; do
            [ "$ud" = "$mux_home" ] || rmdir "$ud" 2>/dev/null || true
        done
    say "mux is uninstalled."
}

parse_args() {
    opt_quiet=0 opt_verbose=0 opt_dry_run=0 opt_uninstall=0 opt_no_modify_path=0
    opt_require_signature=0 opt_version='' opt_allow_expired_feed=0 opt_allow_downgrade=0
    [ "${MUX_NO_MODIFY_PATH:-0}" = 0 ] || opt_no_modify_path=1
    # Only "1", as for mux: a bypass is never turned on by "false", "no" or a typo.
    [ "${MUX_ALLOW_EXPIRED_FEED:-}" != 1 ] || opt_allow_expired_feed=1
    while [ $# -gt 0 ]; do
        case $1 in
            -h | --help) usage; exit 0 ;;
            -q | --quiet) opt_quiet=1 ;;
            -v | --verbose) opt_verbose=1 ;;
            --dry-run) opt_dry_run=1 ;;
            --uninstall) opt_uninstall=1 ;;
            --no-modify-path) opt_no_modify_path=1 ;;
            --require-signature) opt_require_signature=1 ;;
            --allow-expired-feed) opt_allow_expired_feed=1 ;;
            --allow-downgrade) opt_allow_downgrade=1 ;;
            --version)
                [ $# -ge 2 ] || usage_error "--version needs a value, e.g. --version 0.2.0"
                opt_version=$2
                shift
                ;;
            --version=*) opt_version=${1#--version=} ;;
            -y | --yes) ;; # never prompts anyway; accepted for muscle memory
            *) usage_error "unknown option: $1" ;;
        esac
        shift
    done
}

main() {
    # Never read standard input: when piped, it is this script. Nothing run below may
    # read the rest of it either.
    exec </dev/null
    umask 022
    nl=$(printf '\n_')
    nl=${nl%_}
    prefetch=0 prefetch_pid='' prefetch_watch='' prefetch_rc=0 prefetch_reason=''
    work_dir='' partial_dir='' tmp_link='' tmp_record='' tmp_state='' created='' installing=0
    lock_path='' build_repo='' c_red='' c_yellow='' c_bold='' c_reset=''
    index_key_id='' index_seq='' seq_file='' signed_at='' want_archive=0 dl_too_large=0
    opt_quiet=0 opt_verbose=0
    trap on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    setup_colours
    parse_args ${1+"$@"}
    resolve_paths
    if [ "$(id -u 2>/dev/null || echo 1)" = 0 ] && [ -n "${SUDO_USER:-}" ]; then
        warn "running as root through sudo: installing into root's home ($mux_home), not $SUDO_USER's. mux needs no root; run this without sudo."
    fi
    if [ "$opt_uninstall" = 1 ]; then
        cmd_uninstall
    else
        cmd_install
    fi
}

# The call stands alone in a brace group: a download cut short before the final "}" is a
# syntax error, so not even "main" without its arguments can run. ${1+"$@"}: posh (and old
# shells) treat a bare "$@" without arguments as an unset parameter under set -u.
{ main ${1+"$@"}; }
