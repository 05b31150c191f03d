"""``python -m edgehub``."""

from edgehub import cli

if __name__ == "__main__":
    cli.main()
