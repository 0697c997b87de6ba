#!/bin/sh
# Publish a release folder as the GitHub release TAG: the release workflow's `publish` step, a
# script so that what it decides can be run here against a stand-in `gh` (tests).
#
#   release/publish.sh TAG RELEASE_DIR
#
# Draft first, upload, then publish: nobody sees a release with missing files, and an immutable
# release is only locked once it is complete. A re-run after a partial failure reuses the draft,
# or finds the release already published with these files (and stops), or with other files
# (and fails). "Latest" only for the highest stable version (mux-release publish-flags): a fix
# on an older line must not become what /releases/latest, and so install.sh, serves.
#
# Environment: what gh reads (GH_TOKEN, GH_REPO); MUX_RELEASE, the command that runs
# mux-release (default "uv run --no-sync python -m release", run from the checkout).
set -eu

if [ "$#" -ne 2 ]; then
    echo "usage: release/publish.sh TAG RELEASE_DIR" >&2
    exit 2
fi
tag=$1
release_dir=$2
version=${tag#v}
mux_release=${MUX_RELEASE:-uv run --no-sync python -m release}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

# The published releases, written by a command of its own so that a failing gh (a 502, a rate
# limit) stops the script here: read as an empty list it would make any tag "latest".
gh release list --exclude-drafts --limit 1000 --json tagName >"$work/published.json"
# shellcheck disable=SC2086 # MUX_RELEASE is a command with its arguments
flags=$($mux_release publish-flags --tag "$tag" --published "$work/published.json")
echo "publish: $tag with $flags"

if draft=$(gh release view "$tag" --json isDraft --jq .isDraft 2>/dev/null); then
    if [ "$draft" != true ]; then
        gh release download "$tag" --pattern SHA256SUMS --output "$work/published-SHA256SUMS"
        if cmp -s "$work/published-SHA256SUMS" "$release_dir/SHA256SUMS"; then
            echo "publish: $tag is already published with these files; nothing to do"
            exit 0
        fi
        echo "publish: $tag is already published with other files; publish a new tag" >&2
        exit 1
    fi
    echo "publish: reusing the draft release $tag"
else
    # shellcheck disable=SC2086 # the flags are single words (--latest=..., --prerelease)
    gh release create "$tag" --draft --verify-tag --generate-notes --title "mux $version" $flags
fi
gh release upload "$tag" "$release_dir"/* --clobber
# shellcheck disable=SC2086 # the flags are single words
gh release edit "$tag" --draft=false $flags
echo "publish: $tag is published"
