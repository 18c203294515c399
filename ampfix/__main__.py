"""`python -m ampfix`: the same as the `ampfix` command."""

from ampfix.cli import main

if __name__ == "__main__":
    main()
