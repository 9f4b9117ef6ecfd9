"""``python -m streams``: the ``traintrace`` command."""

from streams.cli.main import main

if __name__ == "__main__":
    main()
