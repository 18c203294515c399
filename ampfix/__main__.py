"""`ampfix` and `python -m ampfix`.

`ampfix check FILES` and `ampfix rewrite FILES` without a flag (what a pre-commit hook runs) take
the fast path of `ampfix.cli.console`, before typer is imported; everything else goes to the typer
app in `ampfix.cli.app`.
"""

import sys


def main() -> None:
    from ampfix.cli.console import fast_path

    code = fast_path(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from ampfix.cli.app import app

    app()


if __name__ == "__main__":
    main()
