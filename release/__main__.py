"""``python -m release``: the same as the ``mux-release`` command."""

from release.cli import main

if __name__ == "__main__":
    main()
