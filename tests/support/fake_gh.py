"""A stand-in for the `gh release` commands release/publish.sh runs, over a JSON state file.

GitHub cannot be reached from the tests, so this plays it: the state file
(``FAKE_GH_STATE``) holds the releases (``{"tag": {"draft": bool, "latest": bool,
"prerelease": bool, "files": {name: sha256}}}``), the commands run (``calls``) and which
commands fail (``fail``: a list of subcommands, e.g. ``["list"]``, answered like a 502).
Only what the script uses is implemented; anything else exits 2, so a new call is noticed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any


def _flags(args: list[str]) -> dict[str, str | bool]:
    found: dict[str, str | bool] = {}
    for arg in args:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            found[name] = value if value else True
    return found


def main(argv: list[str]) -> int:
    state_path = Path(os.environ["FAKE_GH_STATE"])
    state: dict[str, Any] = json.loads(state_path.read_text())
    state["calls"].append(argv)
    releases: dict[str, Any] = state["releases"]
    try:
        if argv[:1] != ["release"] or len(argv) < 2:
            return 2
        command, args = argv[1], argv[2:]
        if command in state.get("fail", []):
            print("HTTP 502: Bad Gateway (https://api.github.com/graphql)", file=sys.stderr)
            return 1
        if command == "list":
            assert "--exclude-drafts" in args and args[args.index("--json") + 1] == "tagName"
            published = [{"tagName": t} for t, r in releases.items() if not r["draft"]]
            print(json.dumps(published))
            return 0
        tag = args[0]
        if command == "view":
            if tag not in releases:
                print("release not found", file=sys.stderr)
                return 1
            print("true" if releases[tag]["draft"] else "false")
            return 0
        if command == "download":
            output = Path(args[args.index("--output") + 1])
            name = args[args.index("--pattern") + 1]
            output.write_text(releases[tag]["contents"][name])
            return 0
        if command == "create":
            if tag in releases:
                print(f"a release with tag {tag} already exists", file=sys.stderr)
                return 1
            flags = _flags(args)
            releases[tag] = {
                "draft": bool(flags.get("draft")),
                "latest": flags.get("latest") == "true",
                "prerelease": bool(flags.get("prerelease")),
                "files": {},
                "contents": {},
            }
            return 0
        if command == "upload":
            assert "--clobber" in args
            for name in args[1:]:
                if name.startswith("--"):
                    continue
                data = Path(name).read_bytes()
                releases[tag]["files"][Path(name).name] = hashlib.sha256(data).hexdigest()
                if Path(name).name == "SHA256SUMS":
                    releases[tag].setdefault("contents", {})["SHA256SUMS"] = data.decode()
            return 0
        if command == "edit":
            flags = _flags(args)
            if flags.get("draft") == "false":
                releases[tag]["draft"] = False
            if "latest" in flags:
                releases[tag]["latest"] = flags["latest"] == "true"
                if releases[tag]["latest"]:
                    for other, release in releases.items():
                        release["latest"] = other == tag
            releases[tag]["prerelease"] = bool(flags.get("prerelease"))
            return 0
        return 2
    finally:
        state_path.write_text(json.dumps(state))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
